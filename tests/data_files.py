"""Small data files the tests write (the user's side of the data path)."""

from __future__ import annotations

import csv
from pathlib import Path


def write_csv(path: Path, header, rows) -> Path:
    """``path`` as a UTF-8 CSV: ``header`` then ``rows``, quoted where csv needs it."""
    with Path(path).open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return Path(path)
