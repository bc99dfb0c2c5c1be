"""A MedAD-38K-style multiple-choice layout (the five MedAD task families).

MedAD-38K itself is gated; this is the layout its dataset card describes in words (image, question, lettered
options, answer letter, task family, modality, region), written as: ``train.jsonl`` / ``test.jsonl`` (or
``.json`` lists) beside the images, one object per question with ``id``, ``image`` (or ``images``), ``question``,
``options`` (a list, or an object ``{"A": ..., "B": ...}``), ``answer`` (letter or option text), ``task`` (a
family name in any spelling, e.g. ``Anomaly Detection``), ``modality``, ``region`` (or ``anatomy``), and optional
``bbox`` (original pixels), ``cot`` and ``evidence``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from medgrpo.data.adapters.base import (
    Adapter,
    AdapterError,
    ImageRef,
    SourceRow,
    letter_of,
    norm_split,
    split_files,
)
from medgrpo.data.record import TASKS

_ALIASES = {"modality_recognition": "modality_classification", "anatomy_recognition": "anatomy_identification",
            "anomaly_classification": "anomaly_detection", "lesion_detection": "lesion_localization",
            "pathology_classification": "pathology_characterization"}


def task_name(text: str) -> str:
    """``"Anomaly Detection"`` / ``"anomaly-detection"`` -> ``anomaly_detection``; unknown names pass through
    unchanged so that validation reports them."""
    key = re.sub(r"[^a-z]+", "_", str(text).lower()).strip("_")
    key = _ALIASES.get(key, key)
    return key if key in TASKS else str(text)


def _rows(file: Path) -> Iterator[tuple[str, Any]]:
    if file.suffix == ".json":
        try:
            items = json.loads(file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise AdapterError(f"{file}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        yield from ((f"{file}:item {i}", item) for i, item in enumerate(items))
        return
    with open(file, encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, start=1):
            if line.strip():
                try:
                    yield f"{file}:{line_no}", json.loads(line)
                except json.JSONDecodeError as exc:
                    yield f"{file}:{line_no}", f"not valid JSON ({exc.msg})"


def read(path: Path, mapping: dict[str, Any] | None = None) -> Iterator[SourceRow]:
    if path.is_dir():
        files = split_files(p for p in path.glob("*.json*") if p.suffix in (".json", ".jsonl"))
    else:
        files = [path]
    if not files or not files[0].is_file():
        raise AdapterError(f"{path}: no train/test .jsonl or .json files")
    for file in files:
        split = norm_split(file.stem)
        for where, item in _rows(file):
            if not isinstance(item, dict):
                yield SourceRow(where, drop=item if isinstance(item, str) else "row is not a JSON object")
                continue
            options = item.get("options") or []
            if isinstance(options, dict):
                options = [options[k] for k in sorted(options)]
            answer = letter_of(options, str(item.get("answer", ""))) if options else None
            images = item.get("images") or ([item["image"]] if item.get("image") else [])
            record = {
                "id": str(item.get("id", "")),
                "question": item.get("question"),
                "options": options,
                "answer": answer or item.get("answer"),  # not a letter: validation names it
                "task": task_name(item.get("task", "")),
                "modality": item.get("modality"),
                "anatomy": item.get("region") or item.get("anatomy"),
                **{k: item[k] for k in ("bbox", "cot", "evidence") if item.get(k) is not None},
            }
            yield SourceRow(where, split, record, [ImageRef(str(p), path=file.parent / str(p)) for p in images])


ADAPTER = Adapter(
    name="medad_mcq",
    source="MedAD-38K-style MCQ",
    licence="as stated by the data owner (MedAD-38K: gated, research use)",
    homepage="https://huggingface.co/datasets/zhtstar/MedAD-38K",
    layout="a folder with train.jsonl / test.jsonl (or .json) and the images they name",
    read=read,
)
