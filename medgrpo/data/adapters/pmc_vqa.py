"""PMC-VQA (Zhang et al., 2023): multiple-choice VQA over PubMed Central figures.

The release (``xmcmic/PMC-VQA`` on the Hub) publishes two versions side by side, chosen with ``--version`` when
both are present:

* version 1: ``train.csv``, ``test.csv`` and ``test_clean.csv`` (the 2,000-question test set the paper reports,
  written as split ``test_clean``), columns ``Figure_path`` (file name under ``images/``, from ``images.zip``),
  ``Question``, ``Answer`` (the option text; empty in some ``train.csv`` rows), ``Choice A`` ... ``Choice D``
  (written as ``" A:text"``) and ``Answer_label`` (the letter; ``Anwser_label`` as the dataset card spells it);
* version 2: ``train_2.csv`` and ``test_2.csv`` (``train2.csv`` / ``test2.csv`` as the card names them), columns
  ``index``, ``Figure_path`` (under ``images_2/`` or ``images2/``, from ``images_2.zip``, else ``images/``),
  ``Caption``, ``Question``, ``Choice A`` ... ``Choice D``, ``Answer`` (the letter) and ``split``.

The same tables as parquet files (the Hub's parquet conversion of the CSVs, ``default/<split>/0000.parquet``, or
any ``*.parquet`` named for its table) are read when the folder holds no CSV: the version from their columns
(``Answer_label`` is version 1), the split from the file or folder name.

Ids carry the version and split (``pmc_vqa-v2-test-<index>``), so the two versions never collide. A row whose
answer names no choice is dropped and counted with its file, line and field.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from medgrpo.data.adapters.base import Adapter, AdapterError, ImageRef, SourceRow, letter_of
from medgrpo.data.adapters.hf import split_of

VERSIONS = {
    "1": {"train.csv": "train", "test.csv": "test", "test_clean.csv": "test_clean"},
    "2": {"train_2.csv": "train", "test_2.csv": "test", "train2.csv": "train", "test2.csv": "test"},
}
IMAGES = {"1": ("images",), "2": ("images_2", "images2", "images")}
COLUMNS = ("Figure_path", "Question", "Choice A", "Choice B")
LABELS = ("Answer_label", "Anwser_label")  # the card's explanation spells it the second way
_PREFIX = re.compile(r"^\s*[A-D]\s*[:.)]\s*")


def _chosen(path: Path, present: set[str], version: str | None) -> str:
    if version is not None:
        if version not in VERSIONS:
            raise AdapterError(f"PMC-VQA --version must be 1 or 2, not '{version}'")
        if version not in present:
            raise AdapterError(f"{path}: no version-{version} tables ({' / '.join(VERSIONS[version])})")
        return version
    if not present:
        raise AdapterError(f"{path}: no {' / '.join(f for fs in VERSIONS.values() for f in fs)} or parquet copy "
                           "of them (expected the PMC-VQA release folder)")
    if len(present) > 1:
        raise AdapterError(f"{path}: holds both PMC-VQA versions (train.csv and train_2.csv): choose one with "
                           "--version 1 or --version 2")
    return present.pop()


def _parquet_version(file: Path) -> str:
    import pyarrow.parquet as pq

    try:
        columns = pq.read_schema(file).names
    except Exception as exc:  # pyarrow raises several types for a broken file
        raise AdapterError(f"{file}: not a readable parquet file ({type(exc).__name__})") from None
    return "1" if any(label in columns for label in LABELS) else "2"


def _tables(path: Path, version: str | None) -> tuple[str, list[tuple[Path, str]]]:
    """The chosen version and its tables as (file, split)."""
    if path.is_file():
        chosen = _parquet_version(path) if path.suffix == ".parquet" else "2" if path.stem.endswith("2") else "1"
        return chosen, [(path, VERSIONS[chosen].get(path.name, "train"))]
    csvs = {v: [(path / n, s) for n, s in files.items() if (path / n).is_file()] for v, files in VERSIONS.items()}
    if any(csvs.values()):
        chosen = _chosen(path, {v for v, found in csvs.items() if found}, version)
        return chosen, csvs[chosen]
    by_version: dict[str, list[tuple[Path, str]]] = {}
    for file in sorted(path.rglob("*.parquet")):
        names = (file.stem, *(p.name for p in file.relative_to(path).parents if p.name))
        split = "test_clean" if any(n.startswith("test_clean") for n in names) else split_of(file, path) or "train"
        by_version.setdefault(_parquet_version(file), []).append((file, split))
    chosen = _chosen(path, set(by_version), version)
    return chosen, by_version[chosen]


def _rows(file: Path) -> tuple[list[str], Iterable[dict[str, Any]], int]:
    """The table's columns, its rows, and the line number of its first row (2 under a CSV header)."""
    if file.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(file)
        return table.column_names, table.to_pylist(), 1
    with open(file, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader), 2


def read(path: Path, mapping: dict[str, Any] | None = None, version: str | None = None) -> Iterator[SourceRow]:
    chosen, files = _tables(path, version)
    numbers: dict[str, int] = {}  # rows numbered per split in file order (a CSV's line - 1), shards continuing
    for file, split in files:
        base = path if path.is_dir() else file.parent
        images = next((base / d for d in IMAGES[chosen] if (base / d).is_dir()), base / IMAGES[chosen][-1])
        columns, rows, first = _rows(file)
        missing = [c for c in COLUMNS if c not in columns]
        if missing:
            raise AdapterError(f"{file}: column '{missing[0]}' missing (columns: {columns})")
        label_column = next((c for c in LABELS if c in columns), LABELS[0])
        for line, item in enumerate(rows, start=first):
            where = f"{file}:{'row ' if first == 1 else ''}{line}"
            numbers[split] = numbers.get(split, 0) + 1
            options = [_PREFIX.sub("", str(item[f"Choice {c}"] or "")).strip() for c in "ABCD"
                       if str(item.get(f"Choice {c}") or "").strip()]
            label = str(item.get(label_column) or "").strip()
            answer_text = str(item.get("Answer") or "").strip()
            answer = letter_of(options, label) if label else None
            answer = answer or (letter_of(options, _PREFIX.sub("", answer_text) if len(answer_text) > 1
                                          else answer_text) if answer_text else None)
            if answer is None:
                field = label_column if label else "Answer"
                yield SourceRow(where, drop=f"field '{field}': '{label or answer_text}' is not among the choices")
                continue
            number = str(item.get("index") or "").strip() or str(numbers[split])
            record = {"id": f"pmc_vqa-v{chosen}-{split}-{number}", "task": "other",
                      "question": item["Question"], "options": options, "answer": answer}
            name = str(item["Figure_path"]).strip()
            yield SourceRow(where, split, record, [ImageRef(name, path=images / name)])


ADAPTER = Adapter(
    name="pmc_vqa",
    source="PMC-VQA",
    licence="CC BY-SA 4.0 (as published on the dataset card)",
    homepage="https://huggingface.co/datasets/xmcmic/PMC-VQA",
    layout="version 1: train.csv / test.csv / test_clean.csv + images/; version 2: train_2.csv / test_2.csv "
           "(or train2.csv / test2.csv) + images_2/ (--version 1|2 when both are present); or parquet copies of "
           "those tables",
    read=read,
    versions=tuple(VERSIONS),
)
