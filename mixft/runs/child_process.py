"""Call a function in a fresh Python process: nothing it builds and frees stays in this one.

A process's resident set only remembers: pages the allocator freed stay counted, so work done
before a run (a probe's models, another precision's run) moves that run's peak-RSS figure.
Work that must not, runs here: ``call_in_fresh_process("mixft.runs.probe:probe", cfg, ...)``
starts a new interpreter (``python -m mixft.runs.child_process``: not a fork of this one, and not
multiprocessing's spawn, which re-runs the parent's ``__main__`` script in the child: a user's
script without an ``if __name__ == "__main__"`` guard would become a second run), hands it the
function's name and its pickled arguments on stdin, and reads the pickled return value on stdout.
The child imports the function's module with the parent's ``sys.path``; library output goes to
its stderr, whose last line is the cause when it dies. Ctrl-C is left to the parent: the child
ignores SIGINT, and the parent ends the child when it is interrupted.

Usage::

    try:
        value = call_in_fresh_process("mixft.runs.fresh_process:train_steps", cfg, None, precision, "cpu", 0, 3)
    except ChildFailed as e:
        print(e)   # one line: what the child raised, or its last stderr line
"""

from __future__ import annotations

import importlib
import os
import pickle
import subprocess
import sys
from typing import Any

from mixft.errors import first_line

__all__ = ["ArgumentsDoNotPickle", "ChildFailed", "call_in_fresh_process"]

TIMEOUT_S = 600.0


class ChildFailed(RuntimeError):
    """The fresh process could not return a value: its error, in one line."""


class ArgumentsDoNotPickle(ChildFailed):
    """The call could not be handed to a child (nothing was started)."""


def call_in_fresh_process(function: str, *args: Any, timeout_s: float = TIMEOUT_S, **kwargs: Any) -> Any:
    """``module:function(*args, **kwargs)`` in a fresh Python; its return value (pickled back).

    Raises ChildFailed (one line) when the call raised, the child died or ``timeout_s`` passed, and
    its ArgumentsDoNotPickle before starting anything; KeyboardInterrupt ends the child and is raised again.
    """
    try:
        payload = pickle.dumps((function, args, kwargs))
    except Exception as e:  # noqa: BLE001 - said in one line, like any other failure
        raise ArgumentsDoNotPickle(f"its arguments do not pickle ({first_line(e) or type(e).__name__})") from None
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # the parent's mixft, recipes
    child = subprocess.Popen(
        [sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    try:
        out, err = child.communicate(payload, timeout=timeout_s)
    except BaseException as e:
        child.kill()
        child.wait()
        if not isinstance(e, Exception):
            raise  # KeyboardInterrupt: the child is gone, the parent handles it
        raise ChildFailed(first_line(e) or type(e).__name__) from None
    try:
        answer = pickle.loads(out)
    except Exception:  # noqa: BLE001 - it died before answering: its last stderr line says why
        lines = err.decode(errors="replace").strip().splitlines()
        raise ChildFailed(lines[-1] if lines else f"exit code {child.returncode}") from None
    if "error" in answer:
        raise ChildFailed(answer["error"])
    return answer["value"]


def _child_main() -> None:
    """The fresh process: read the pickled call on stdin, write the pickled answer on stdout."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the parent, which ends this child
    stdout = sys.stdout.buffer
    sys.stdout = sys.stderr  # library prints must not corrupt the answer
    try:
        function, args, kwargs = pickle.load(sys.stdin.buffer)
        module, _, name = function.partition(":")
        answer = {"value": getattr(importlib.import_module(module), name)(*args, **kwargs)}
    except BaseException as e:  # noqa: BLE001 - every failure goes back as one line
        answer = {"error": first_line(e) or type(e).__name__}
    stdout.write(pickle.dumps(answer))
    stdout.flush()


if __name__ == "__main__":
    _child_main()
