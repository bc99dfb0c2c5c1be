"""The predictions file of an evaluation run: streamed one JSON line per record, read back tolerating a torn last
line, and every other output file written atomically. Shared by :mod:`evaluate` (writes) and :mod:`report` (reads)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

PREDICTIONS = "predictions.jsonl"


class EvalError(ValueError):
    """The evaluation cannot run as asked (one line: what, where, and what to do)."""


def write_atomic(path: Path, text: str) -> None:
    """Write a file through a temporary name in the same folder, then rename: never half-written."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def read_predictions(path: Path) -> list[dict[str, Any]]:
    """Every complete row of a predictions file; a torn last line (the run was killed mid-write) is dropped."""
    if not path.is_file():
        return []
    rows = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                break  # only the last line can be torn: rows are written whole, in order
    return rows
