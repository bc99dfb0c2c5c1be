"""Column mappings (YAML) for generic tables: which source column feeds which record field.

::

    source: My dataset            # dataset card: source name
    licence: CC BY 4.0            # dataset card: licence field
    columns:                      # record field -> source column
      images: image               # required: a path, a list of paths, or an HF image {bytes, path}
      question: question          # required
      answer: answer              # required: a letter, an option text, a 0-based index, or free text
      id: qid                     # optional (default: row number)
      options: choices            # optional list column ...
      option_columns: [A, B, C, D]  # ... or one column per option
      task: q_type                # optional, values mapped through task_map
      modality: modality
      anatomy: organ
      split: split                # optional (default: the file name, else ``split:`` below)
      bbox: box
      cot: rationale
    task: other                   # the task when there is no task column
    task_map: {Modality: modality_classification}
    split: train

Without options, yes/no answers become 2-option MCQs and anything else stays open-ended.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from medgrpo.data.adapters.base import (
    AdapterError,
    ImageRef,
    SourceRow,
    closed_or_open,
    letter_of,
    norm_split,
    safe_name,
)
from medgrpo.data.adapters.medad_mcq import task_name
from medgrpo.data.record import LETTERS
from medgrpo.data.yaml_config import read_yaml_mapping

REQUIRED = ("images", "question", "answer")
OPTIONAL = ("id", "options", "option_columns", "task", "modality", "anatomy", "split", "bbox", "cot", "evidence")
_TOP = ("source", "licence", "columns", "task", "task_map", "split")


def load_mapping(path: str | Path | None, default_columns: dict[str, Any] | None = None) -> dict[str, Any]:
    """Read and check a mapping YAML (structure only; columns are checked against the data by
    :func:`check_columns`). ``default_columns`` is used when ``path`` is None."""
    if path is None:
        return {"columns": dict(default_columns or {}), "_file": "<default mapping>"}
    path = Path(path)
    data = read_yaml_mapping(path, _TOP, AdapterError, "column mapping file")
    if not isinstance(data.get("columns"), dict):
        raise AdapterError(f"{path}: field 'columns': missing (a mapping of record field -> source column)")
    bad = sorted(set(data["columns"]) - set(REQUIRED) - set(OPTIONAL))
    if bad:
        raise AdapterError(f"{path}: field 'columns.{bad[0]}': not a record field "
                           f"(allowed: {', '.join(REQUIRED + OPTIONAL)})")
    for name in REQUIRED:
        if name not in data["columns"]:
            raise AdapterError(f"{path}: field 'columns.{name}': missing")
    return {**data, "_file": str(path)}


def check_columns(mapping: dict[str, Any], available: Iterable[str], where: str) -> None:
    """Every column the mapping names must exist in the data; the error names mapping field and column."""
    available = sorted(map(str, available))
    for field, column in mapping["columns"].items():
        for col in column if isinstance(column, list) else [column]:
            if col not in available:
                raise AdapterError(f"{mapping['_file']}: field 'columns.{field}': column '{col}' is not in {where} "
                                   f"(columns: {', '.join(available)})")


def _image_refs(value: Any, base: Path, row_id: str) -> list[ImageRef]:
    values = value if isinstance(value, list) else [value]
    refs = []
    for k, v in enumerate(values):
        if isinstance(v, dict):  # HF Image feature (decode=False): {"bytes": ..., "path": ...}
            name = safe_name(str(v.get("path") or f"{row_id}_{k}.png"))
            refs.append(ImageRef(name, data=v["bytes"]) if v.get("bytes") else ImageRef(name, path=base / name))
        elif isinstance(v, str) and v:
            refs.append(ImageRef(v, path=base / v))
    return refs


def rows_from_table(
    items: Iterable[dict[str, Any]], mapping: dict[str, Any], where: str, base: Path, split: str | None,
    label: str | None = None,
) -> Iterator[SourceRow]:
    """Apply a mapping to table rows. ``base`` is the folder image paths are relative to; rows without an id
    column are numbered under ``label`` (default: the stem of ``where``)."""
    cols = mapping["columns"]
    for i, item in enumerate(items):
        at = f"{where}:{i + 1}"

        def get(name: str, item: dict[str, Any] = item) -> Any:
            return item.get(cols[name]) if name in cols else None

        row_id = str(get("id") if get("id") is not None else f"{label or Path(where).stem}-{i}")
        if "option_columns" in cols:
            options = [str(item[c]).strip() for c in cols["option_columns"] if str(item.get(c) or "").strip()]
        else:
            options = [str(o) for o in (get("options") or [])]
        answer = get("answer")
        if options:
            letter = LETTERS[answer] if isinstance(answer, int) and 0 <= answer < len(options) else None
            qa = {"question": get("question"), "options": options,
                  "answer": letter or letter_of(options, str(answer)) or str(answer)}
        else:
            qa = closed_or_open(get("question"), "" if answer is None else answer)
        task = get("task")
        task = mapping.get("task_map", {}).get(task, task_name(task)) if task is not None else mapping.get("task", "other")
        record = {"id": row_id, "task": task, **qa,
                  **{k: get(k) for k in ("modality", "anatomy", "bbox", "cot", "evidence") if get(k) is not None}}
        row_split = norm_split(str(get("split") or split or mapping.get("split", "train")))
        yield SourceRow(at, row_split, record, _image_refs(get("images"), base, row_id))
