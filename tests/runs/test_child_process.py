"""runs/child_process.py: a function called in a fresh Python, its value or its error in one line."""

from __future__ import annotations

import os

import pytest

from mixft.runs.child_process import ArgumentsDoNotPickle, ChildFailed, call_in_fresh_process


def test_the_call_runs_in_another_process_and_its_value_comes_back():
    assert call_in_fresh_process("os:getpid") != os.getpid()
    assert call_in_fresh_process("builtins:divmod", 17, 5) == (3, 2)
    assert call_in_fresh_process("builtins:sorted", [3, 1, 2], reverse=True) == [3, 2, 1]  # keyword arguments too


def test_what_the_child_raised_is_one_line():
    with pytest.raises(ChildFailed, match=r"^math domain error$"):
        call_in_fresh_process("math:sqrt", -1)


def test_a_child_that_dies_before_answering_is_named_by_its_exit_code():
    with pytest.raises(ChildFailed, match=r"^exit code 3$"):
        call_in_fresh_process("os:_exit", 3)


def test_arguments_that_do_not_pickle_start_nothing():
    with pytest.raises(ArgumentsDoNotPickle, match=r"^its arguments do not pickle \(Can't pickle"):
        call_in_fresh_process("builtins:len", lambda: 0)
