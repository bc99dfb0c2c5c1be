"""Generic JSONL: one object per line, columns mapped to record fields by a YAML mapping
(:mod:`medgrpo.data.adapters.mapping`). Without a mapping the columns are already named like the record.
Image paths are relative to the folder holding the JSONL file; a folder input converts every ``*.jsonl`` in it,
each file named for its split.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from medgrpo.data.adapters.base import Adapter, AdapterError, SourceRow, norm_split, split_files
from medgrpo.data.adapters.mapping import check_columns, load_mapping, rows_from_table

IDENTITY = {name: name for name in ("id", "images", "question", "options", "answer", "task", "modality", "anatomy",
                                    "bbox", "cot", "evidence")}


def _read_lines(file: Path) -> list[dict[str, Any]]:
    items = []
    with open(file, encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise AdapterError(f"{file}:{line_no}: not valid JSON ({exc.msg})") from None
            if not isinstance(item, dict):
                raise AdapterError(f"{file}:{line_no}: row is not a JSON object")
            items.append(item)
    return items


def read(path: Path, mapping: dict[str, Any] | None = None) -> Iterator[SourceRow]:
    mapping = mapping or load_mapping(None, IDENTITY)
    files = split_files(path.glob("*.jsonl")) if path.is_dir() else [path]
    if not files or not files[0].is_file():
        raise AdapterError(f"{path}: no .jsonl file")
    for file in files:
        items = _read_lines(file)
        if mapping["_file"] != "<default mapping>" and items:
            check_columns(mapping, set().union(*(item.keys() for item in items)), str(file))
        split = norm_split(file.stem) if path.is_dir() else None
        yield from rows_from_table(items, mapping, str(file), file.parent, split)


ADAPTER = Adapter(
    name="jsonl",
    source="JSONL",
    licence="unspecified (set 'licence' in the mapping)",
    homepage="-",
    layout="a .jsonl file (or a folder of <split>.jsonl) with image paths relative to it; --mapping YAML",
    read=read,
)
