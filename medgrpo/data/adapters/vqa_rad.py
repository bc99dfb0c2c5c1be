"""VQA-RAD (Lau et al., 2018, Scientific Data): radiology VQA, open and closed questions.

Published layout (OSF release): ``VQA_RAD Dataset Public.json``, a JSON list of objects with ``qid``,
``image_name``, ``image_organ``, ``question``, ``answer`` (string or number), ``answer_type`` (``CLOSED``/``OPEN``),
``question_type`` (``MODALITY``, ``ORGAN``, ``PRES``, ``ABN``, ``POS``, ... possibly comma-joined) and
``phrase_type`` (``freeform``/``para`` = train, ``test_freeform``/``test_para`` = test), beside the folder
``VQA_RAD Image Folder/`` holding the images.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from medgrpo.data.adapters.base import Adapter, AdapterError, ImageRef, SourceRow, closed_or_open

ANNOTATIONS = "VQA_RAD Dataset Public.json"
IMAGE_FOLDER = "VQA_RAD Image Folder"
_TASKS = {"MODALITY": "modality_classification", "ORGAN": "anatomy_identification",
          "PRES": "anomaly_detection", "ABN": "anomaly_detection"}
_ORGANS = {"HEAD": "brain", "CHEST": "chest", "ABD": "abdomen"}


def task_of(question_type: str) -> str:
    """The first of the (comma-joined) question types that maps to a MedAD task family, else ``other``."""
    for qt in str(question_type).upper().replace(" ", "").split(","):
        if qt in _TASKS:
            return _TASKS[qt]
    return "other"


def read(path: Path, mapping: dict[str, Any] | None = None) -> Iterator[SourceRow]:
    file = path / ANNOTATIONS if path.is_dir() else path
    if not file.is_file():
        raise AdapterError(f"{path}: no '{ANNOTATIONS}' (expected the VQA-RAD release folder)")
    try:
        items = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise AdapterError(f"{file}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(items, list):
        raise AdapterError(f"{file}: expected a JSON list of questions")
    images = file.parent / IMAGE_FOLDER
    for i, item in enumerate(items):
        where = f"{file}:item {i}"
        try:
            qid, image, question, answer = item["qid"], item["image_name"], item["question"], item["answer"]
        except (KeyError, TypeError) as exc:
            yield SourceRow(where, drop=f"field {exc}: missing")
            continue
        split = "test" if str(item.get("phrase_type", "")).startswith("test") else "train"
        closed = {"CLOSED": True, "OPEN": False}.get(str(item.get("answer_type", "")).strip().upper())
        record = {
            "id": f"vqa_rad-{qid}",
            "task": task_of(item.get("question_type", "")),
            "anatomy": _ORGANS.get(str(item.get("image_organ", "")).upper()),
            **closed_or_open(question, answer, closed),
        }
        yield SourceRow(where, split, record, [ImageRef(str(image), path=images / str(image))])


ADAPTER = Adapter(
    name="vqa_rad",
    source="VQA-RAD",
    licence="CC0 1.0 (as published on OSF)",
    homepage="https://osf.io/89kps/",
    layout=f"a folder with '{ANNOTATIONS}' and '{IMAGE_FOLDER}/'",
    read=read,
)
