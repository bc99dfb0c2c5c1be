"""OmniMedVQA (Hu et al., 2024, CVPR): multiple-choice medical VQA built from 73 classification datasets.

Published layout: ``QA_information/Open-access/<dataset>.json`` (and ``Restricted-access/``), each a JSON list
of items with ``dataset``, ``question_id``, ``question_type`` (``Modality Recognition``, ``Anatomy
Identification``, ``Disease Diagnosis``, ``Lesion Grading``, ``Other Biological Attributes``), ``question``,
``gt_answer`` (the option text), ``option_A`` ... ``option_D`` (two to four present), ``image_path`` (relative to
the release root, e.g. ``Images/<dataset>/...``) and ``modality_type``. It is an evaluation benchmark: every
row goes to the ``test`` split. Quirks read as published: some files name the modality ``modality`` (``Chest CT
Scan.json``); ``gt_answer`` can differ from its option by case or a trailing full stop; the Restricted-access files
give image paths relative to the original dataset, found under ``Images/<dataset>/`` once it is placed there.

The Hub publishes the release as one ``OmniMedVQA.zip`` (its dataset viewer is off, so there is no parquet
export); the zip is read as it is, without unpacking its 10 GB, or the folder it unpacks to.
"""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from medgrpo.data.adapters.base import Adapter, AdapterError, ImageRef, SourceRow, letter_of

_TASKS = {"modality recognition": "modality_classification", "anatomy identification": "anatomy_identification",
          "disease diagnosis": "pathology_characterization", "lesion grading": "pathology_characterization"}


_QA = re.compile(r"^(.*/)?QA_information/[^/]+/[^/]+\.json$")


def _folder(path: Path) -> Iterator[tuple[str, bytes, Callable[[str, str], ImageRef]]]:
    files = sorted((path / "QA_information").glob("*/*.json"))
    if not files:
        raise AdapterError(f"{path}: no QA_information/*/*.json (expected the OmniMedVQA release folder or zip)")

    def image(name: str, dataset: str) -> ImageRef:
        if not (path / name).is_file() and dataset:  # Restricted-access: relative to the original dataset
            name = f"Images/{dataset}/{name}"
        return ImageRef(name, path=path / name)

    for file in files:
        yield str(file), file.read_bytes(), image


def _zip(path: Path) -> Iterator[tuple[str, bytes, Callable[[str, str], ImageRef]]]:
    with zipfile.ZipFile(path) as zf:
        members = set(zf.namelist())
        tables = sorted((m, match.group(1) or "") for m in members if (match := _QA.match(m)))
        if not tables:
            raise AdapterError(f"{path}: no QA_information/*/*.json inside (expected the Hub's OmniMedVQA.zip)")

        for member, root in tables:
            def image(name: str, dataset: str, root: str = root) -> ImageRef:
                if root + name not in members and dataset:
                    name = f"Images/{dataset}/{name}"
                return ImageRef(name, data=zf.read(root + name) if root + name in members else None)

            yield f"{path}:{member}", zf.read(member), image


def read(path: Path, mapping: dict[str, Any] | None = None) -> Iterator[SourceRow]:
    tables = _zip(path) if path.is_file() and zipfile.is_zipfile(path) else _folder(path)
    for file, text, image in tables:
        try:
            items = json.loads(text.decode("utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise AdapterError(f"{file}: not valid JSON ({getattr(exc, 'msg', exc)})") from None
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
            yield SourceRow(where, "test", record, [image(str(item["image_path"]), str(item.get("dataset") or ""))])


ADAPTER = Adapter(
    name="omnimedvqa",
    source="OmniMedVQA",
    licence="per source dataset (Open-access subset; see the OmniMedVQA release)",
    homepage="https://huggingface.co/datasets/foreverbeliever/OmniMedVQA",
    layout="the Hub's OmniMedVQA.zip, or the folder it unpacks to: QA_information/*/*.json and Images/",
    read=read,
)
