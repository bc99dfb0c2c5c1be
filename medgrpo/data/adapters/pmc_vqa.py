"""PMC-VQA (Zhang et al., 2023): multiple-choice VQA over PubMed Central figures.

The release publishes two versions side by side, chosen with ``--version`` when both are present:

* version 1: ``train.csv``, ``test.csv`` and ``test_clean.csv`` (the 2,000-question test set the paper reports,
  written as split ``test_clean``), columns ``Figure_path`` (file name under ``images/``, from ``images.zip``),
  ``Question``, ``Answer`` (the option text; empty in some ``train.csv`` rows), ``Choice A`` ... ``Choice D``
  (written as ``" A:text"``) and ``Answer_label`` (the letter);
* version 2: ``train_2.csv`` and ``test_2.csv``, columns ``index``, ``Figure_path`` (under ``images_2/``, from
  ``images_2.zip``, else ``images/``), ``Caption``, ``Question``, ``Choice A`` ... ``Choice D``, ``Answer`` (the
  letter) and ``split``.

Ids carry the version and split (``pmc_vqa-v2-test-<index>``), so the two versions never collide. A row whose
answer names no choice is dropped and counted with its file, line and field.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from medgrpo.data.adapters.base import Adapter, AdapterError, ImageRef, SourceRow, letter_of

VERSIONS = {
    "1": {"train.csv": "train", "test.csv": "test", "test_clean.csv": "test_clean"},
    "2": {"train_2.csv": "train", "test_2.csv": "test"},
}
COLUMNS = ("Figure_path", "Question", "Choice A", "Choice B")
_PREFIX = re.compile(r"^\s*[A-D]\s*[:.)]\s*")


def _version(path: Path, version: str | None) -> str:
    present = [v for v, files in VERSIONS.items() if any((path / f).is_file() for f in files)]
    if version is not None:
        if version not in VERSIONS:
            raise AdapterError(f"PMC-VQA --version must be 1 or 2, not '{version}'")
        if version not in present:
            raise AdapterError(f"{path}: no version-{version} files ({' / '.join(VERSIONS[version])})")
        return version
    if not present:
        raise AdapterError(f"{path}: no {' / '.join(f for fs in VERSIONS.values() for f in fs)} "
                           "(expected the PMC-VQA release folder)")
    if len(present) > 1:
        raise AdapterError(f"{path}: holds both PMC-VQA versions (train.csv and train_2.csv): choose one with "
                           "--version 1 or --version 2")
    return present[0]


def read(path: Path, mapping: dict[str, Any] | None = None, version: str | None = None) -> Iterator[SourceRow]:
    if path.is_dir():
        chosen = _version(path, version)
        files = [(path / name, split) for name, split in VERSIONS[chosen].items() if (path / name).is_file()]
    else:
        chosen = "2" if path.stem.endswith("_2") else "1"
        files = [(path, VERSIONS[chosen].get(path.name, "train"))]
    for file, split in files:
        images = file.parent / ("images_2" if chosen == "2" and (file.parent / "images_2").is_dir() else "images")
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
                answer_text = (item.get("Answer") or "").strip()
                answer = letter_of(options, label) if label else None
                answer = answer or (letter_of(options, _PREFIX.sub("", answer_text) if len(answer_text) > 1
                                              else answer_text) if answer_text else None)
                if answer is None:
                    field = "Answer_label" if label else "Answer"
                    yield SourceRow(where, drop=f"field '{field}': '{label or answer_text}' is not among the choices")
                    continue
                number = (item.get("index") or "").strip() or str(line - 1)
                record = {"id": f"pmc_vqa-v{chosen}-{split}-{number}", "task": "other",
                          "question": item["Question"], "options": options, "answer": answer}
                name = item["Figure_path"].strip()
                yield SourceRow(where, split, record, [ImageRef(name, path=images / name)])


ADAPTER = Adapter(
    name="pmc_vqa",
    source="PMC-VQA",
    licence="CC BY-SA 4.0 (as published on the dataset card)",
    homepage="https://github.com/xiaoman-zhang/PMC-VQA",
    layout="version 1: train.csv / test.csv / test_clean.csv + images/; version 2: train_2.csv / test_2.csv + "
           "images_2/ (--version 1|2 when both are present)",
    read=read,
    versions=tuple(VERSIONS),
)
