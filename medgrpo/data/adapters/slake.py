"""SLAKE (Liu et al., 2021, ISBI): bilingual radiology VQA with semantic labels; English questions are kept.

Published layout (Slake1.0): ``train.json``, ``validate.json``, ``test.json`` (JSON lists) and ``imgs/``. Each
item has ``qid``, ``img_name`` (e.g. ``xmlab0/source.jpg``, relative to ``imgs/``), ``question``, ``answer``,
``q_lang`` (``en``/``zh``), ``location`` (body region), ``modality`` (``CT``/``MRI``/``X-Ray``),
``answer_type`` (``OPEN``/``CLOSED``), ``content_type`` (``Modality``, ``Organ``, ``Abnormality``, ``Position``,
...), ``base_type`` and ``triple``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from medgrpo.data.adapters.base import Adapter, AdapterError, ImageRef, SourceRow, closed_or_open

FILES = {"train.json": "train", "validate.json": "validation", "test.json": "test"}
_TASKS = {"modality": "modality_classification", "organ": "anatomy_identification",
          "abnormality": "anomaly_detection"}


def read(path: Path, mapping: dict[str, Any] | None = None) -> Iterator[SourceRow]:
    files = [(path / name, split) for name, split in FILES.items() if (path / name).is_file()]
    if not path.is_dir() or not files:
        raise AdapterError(f"{path}: no {', '.join(FILES)} (expected the SLAKE release folder)")
    for file, split in files:
        try:
            items = json.loads(file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise AdapterError(f"{file}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        for i, item in enumerate(items):
            where = f"{file}:item {i}"
            if not isinstance(item, dict) or any(k not in item for k in ("qid", "img_name", "question", "answer")):
                yield SourceRow(where, drop="field 'qid/img_name/question/answer': missing")
                continue
            if str(item.get("q_lang", "en")).lower() != "en":
                yield SourceRow(where, drop=f"field 'q_lang': '{item.get('q_lang')}' (English questions only)")
                continue
            closed = {"CLOSED": True, "OPEN": False}.get(str(item.get("answer_type", "")).upper())
            record = {
                "id": f"slake-{item['qid']}",
                "task": _TASKS.get(str(item.get("content_type", "")).lower(), "other"),
                "modality": item.get("modality") or None,
                "anatomy": str(item["location"]).lower() if item.get("location") else None,
                **closed_or_open(item["question"], item["answer"], closed),
            }
            name = str(item["img_name"])
            yield SourceRow(where, split, record, [ImageRef(name, path=path / "imgs" / name)])


ADAPTER = Adapter(
    name="slake",
    source="SLAKE",
    licence="CC BY 4.0 (as published with Slake1.0)",
    homepage="https://www.med-vqa.com/slake/",
    layout="a folder with train.json / validate.json / test.json and imgs/",
    read=read,
)
