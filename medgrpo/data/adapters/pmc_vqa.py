"""PMC-VQA (Zhang et al., 2023): multiple-choice VQA over PubMed Central figures.

Published layout: ``train.csv`` / ``test.csv`` (version 2: ``train_2.csv`` / ``test_2.csv``) with columns
``Figure_path`` (file name under ``images/``), ``Question``, ``Answer`` (option text), ``Choice A`` ... ``Choice D``
(written as ``"A:text"``) and ``Answer_label`` (the letter), beside ``images/`` (from ``images.zip``).
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from medgrpo.data.adapters.base import Adapter, AdapterError, ImageRef, SourceRow, letter_of

FILES = {"train.csv": "train", "train_2.csv": "train", "test.csv": "test", "test_2.csv": "test"}
COLUMNS = ("Figure_path", "Question", "Choice A", "Choice B")
_PREFIX = re.compile(r"^\s*[A-D]\s*[:.)]\s*")


def read(path: Path, mapping: dict[str, Any] | None = None) -> Iterator[SourceRow]:
    files = [(path / n, s) for n, s in FILES.items() if (path / n).is_file()] if path.is_dir() else [(path, "train")]
    if not files or not files[0][0].is_file():
        raise AdapterError(f"{path}: no {' / '.join(FILES)} (expected the PMC-VQA release folder)")
    for file, split in files:
        images = file.parent / "images"
        with open(file, encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise AdapterError(f"{file}: column '{missing[0]}' missing (columns: {reader.fieldnames})")
            for line, item in enumerate(reader, start=2):
                where = f"{file}:{line}"
                options = [_PREFIX.sub("", item[f"Choice {c}"] or "").strip() for c in "ABCD"
                           if (item.get(f"Choice {c}") or "").strip()]
                label = (item.get("Answer_label") or "").strip()
                answer = letter_of(options, label) if label else letter_of(options, item.get("Answer") or "")
                if answer is None:
                    yield SourceRow(where, drop=f"field 'Answer_label': '{label}' is not among the choices")
                    continue
                record = {"id": f"pmc_vqa-{split}-{line - 1}", "task": "other", "question": item["Question"],
                          "options": options, "answer": answer}
                name = item["Figure_path"].strip()
                yield SourceRow(where, split, record, [ImageRef(name, path=images / name)])


ADAPTER = Adapter(
    name="pmc_vqa",
    source="PMC-VQA",
    licence="CC BY-SA 4.0 (as published on the dataset card)",
    homepage="https://github.com/xiaoman-zhang/PMC-VQA",
    layout="a folder with train.csv / test.csv (or *_2.csv) and images/",
    read=read,
)
