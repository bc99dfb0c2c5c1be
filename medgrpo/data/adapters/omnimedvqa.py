"""OmniMedVQA (Hu et al., 2024, CVPR): multiple-choice medical VQA built from 73 classification datasets.

Published layout: ``QA_information/Open-access/<dataset>.json`` (and ``Restricted-access/``), each a JSON list
of items with ``dataset``, ``question_id``, ``question_type`` (``Modality Recognition``, ``Anatomy
Identification``, ``Disease Diagnosis``, ``Lesion Grading``, ``Other Biological Attributes``), ``question``,
``gt_answer`` (the option text), ``option_A`` ... ``option_D`` (two to four present), ``image_path`` (relative to
the release root, e.g. ``Images/<dataset>/...``) and ``modality_type``. It is an evaluation benchmark: every
row goes to the ``test`` split. Quirks read as published: some files name the modality ``modality`` (``Chest CT
Scan.json``); ``gt_answer`` can differ from its option by case or a trailing full stop; the Restricted-access files
give image paths relative to the original dataset, found under ``Images/<dataset>/`` once it is placed there.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from medgrpo.data.adapters.base import Adapter, AdapterError, ImageRef, SourceRow, letter_of

_TASKS = {"modality recognition": "modality_classification", "anatomy identification": "anatomy_identification",
          "disease diagnosis": "pathology_characterization", "lesion grading": "pathology_characterization"}


def read(path: Path, mapping: dict[str, Any] | None = None) -> Iterator[SourceRow]:
    files = sorted((path / "QA_information").glob("*/*.json"))
    if not files:
        raise AdapterError(f"{path}: no QA_information/*/*.json (expected the OmniMedVQA release folder)")
    for file in files:
        try:
            items = json.loads(file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise AdapterError(f"{file}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        for i, item in enumerate(items):
            where = f"{file}:item {i}"
            missing = [k for k in ("question_id", "question", "gt_answer", "image_path") if k not in item]
            if missing:
                yield SourceRow(where, drop=f"field '{missing[0]}': missing")
                continue
            options = [str(item[f"option_{c}"]).strip() for c in "ABCD" if str(item.get(f"option_{c}") or "").strip()]
            answer = letter_of(options, str(item["gt_answer"]))
            if answer is None:
                yield SourceRow(where, drop=f"field 'gt_answer': '{item['gt_answer']}' is not among the options")
                continue
            record = {
                "id": f"omnimedvqa-{item['question_id']}",
                "task": _TASKS.get(str(item.get("question_type", "")).strip().lower(), "other"),
                "modality": item.get("modality_type") or item.get("modality") or None,
                "question": item["question"],
                "options": options,
                "answer": answer,
            }
            name = str(item["image_path"])
            image = path / name
            if not image.is_file() and item.get("dataset"):  # Restricted-access: relative to the original dataset
                image = path / "Images" / str(item["dataset"]) / name
                name = f"Images/{item['dataset']}/{name}"
            yield SourceRow(where, "test", record, [ImageRef(name, path=image)])


ADAPTER = Adapter(
    name="omnimedvqa",
    source="OmniMedVQA",
    licence="per source dataset (Open-access subset; see the OmniMedVQA release)",
    homepage="https://huggingface.co/datasets/foreverbeliever/OmniMedVQA",
    layout="the release folder with QA_information/*/*.json and Images/",
    read=read,
)
