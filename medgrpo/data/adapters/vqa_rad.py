"""VQA-RAD (Lau et al., 2018, Scientific Data): radiology VQA, open and closed questions.

Published layout (OSF release): ``VQA_RAD Dataset Public.json``, a JSON list of objects with ``qid``,
``image_name``, ``image_organ``, ``question``, ``answer`` (string or number), ``answer_type`` (``CLOSED``/``OPEN``),
``question_type`` (``MODALITY``, ``ORGAN``, ``PRES``, ``ABN``, ``POS``, ... possibly comma-joined) and
``phrase_type`` (``freeform``/``para`` = train, ``test_freeform``/``test_para`` = test), beside the folder
``VQA_RAD Image Folder/`` holding the images. The same table is published as ``VQA_RAD Dataset Public.xml`` (one
element per question, its fields as child elements) and ``.xlsx`` (one row per question under a header of the
field names; read with ``openpyxl``, the ``xlsx`` extra). The Hub's copy (``flaviagiammarino/vqa-rad``:
``data/<split>-*.parquet`` or ``default/<split>/*.parquet``, columns ``image``, ``question``, ``answer``) is
read too; it has no question types, so its rows are open or yes/no questions of task ``other``.
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


HUB_MAPPING = {"columns": {"images": "image", "question": "question", "answer": "answer"}, "task": "other",
               "_file": "<vqa_rad hub mapping>"}
_FIELDS = ("qid", "image_name", "question", "answer")


def _items_xml(file: Path) -> list[dict[str, Any]]:
    """The questions of the XML release: every element whose children name a question's fields."""
    import xml.etree.ElementTree as ET

    try:
        root = ET.parse(file).getroot()
    except ET.ParseError as exc:
        raise AdapterError(f"{file}: not valid XML ({exc})") from None
    items = []
    for element in root.iter():
        children = {child.tag: (child.text or "").strip() for child in element}
        if {"qid", "question"} <= set(children):
            items.append(children)
    return items


def _items_xlsx(file: Path) -> list[dict[str, Any]]:
    """The questions of the spreadsheet release: one row each under a header row of field names."""
    try:
        import openpyxl
    except ImportError:
        raise AdapterError(f"{file}: reading .xlsx needs openpyxl (pip install 'medgrpo[xlsx]'), or convert the "
                           f"release's .json or .xml") from None
    book = openpyxl.load_workbook(file, read_only=True)  # read-only books hold the file open until closed
    try:
        rows = list(book.active.iter_rows(values_only=True))
    finally:
        book.close()
    header = [str(h).strip() if h is not None else "" for h in (rows[0] if rows else [])]
    return [dict(zip(header, row, strict=False)) for row in rows[1:] if any(v is not None for v in row)]


def _annotations(path: Path) -> Path | None:
    if not path.is_dir():
        return path
    for suffix in (".json", ".xml", ".xlsx"):
        if (path / ANNOTATIONS).with_suffix(suffix).is_file():
            return (path / ANNOTATIONS).with_suffix(suffix)
    return None


def read(path: Path, mapping: dict[str, Any] | None = None) -> Iterator[SourceRow]:
    file = _annotations(path)
    if file is None and path.is_dir() and any(path.rglob("*.parquet")):  # the Hub's copy
        from medgrpo.data.adapters import hf

        for row in hf.read(path, mapping or HUB_MAPPING):
            if not row.drop:
                row.record["id"] = f"vqa_rad-{row.record['id']}"
            yield row
        return
    if file is None or not file.is_file():
        raise AdapterError(f"{path}: no '{ANNOTATIONS}' (.json, .xml or .xlsx) and no parquet files (expected "
                           "the VQA-RAD release folder or the Hub's copy)")
    if file.suffix == ".xml":
        items = _items_xml(file)
    elif file.suffix == ".xlsx":
        items = _items_xlsx(file)
    else:
        try:
            items = json.loads(file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise AdapterError(f"{file}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(items, list):
        raise AdapterError(f"{file}: expected a JSON list of questions")
    images = file.parent / IMAGE_FOLDER
    for i, item in enumerate(items):
        where = f"{file}:item {i}"
        missing = [f for f in _FIELDS if not isinstance(item, dict) or item.get(f) in (None, "")]
        if missing:
            yield SourceRow(where, drop=f"field '{missing[0]}': missing")
            continue
        qid, image, question, answer = (item[f] for f in _FIELDS)
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
    layout=f"a folder with '{ANNOTATIONS}' (or its .xml / .xlsx) and '{IMAGE_FOLDER}/', or the Hub's parquet copy",
    read=read,
)
