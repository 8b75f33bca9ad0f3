"""The names the CLI offers without torch (mixft.amp.precision_names) are the precision table's rows, in order."""

from mixft.amp.precision import PRECISIONS
from mixft.amp.precision_names import PRECISION_NAMES


def test_the_names_are_the_tables_rows_in_order():
    assert tuple(PRECISIONS) == PRECISION_NAMES


def test_the_cli_offers_every_row_and_nothing_else():
    from mixft.cli.main import build_parser

    (action,) = [a for a in build_parser()._actions if "--precision" in a.option_strings]
    assert tuple(action.choices) == tuple(PRECISIONS)
