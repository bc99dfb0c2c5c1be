"""Rebuilding records and box frames from the GRPO dataset's columns (what TRL passes reward functions).

The dataset builders (:func:`medgrpo.data.to_grpo_dataset`) flatten each record into Arrow-friendly columns:
strings are ``""`` rather than None, ``evidence`` and ``bbox`` are JSON strings, the box frame is
``box_format`` + ``image_size`` + ``model_image_size``. This module undoes that, once per distinct row
(cached: TRL calls every reward function with the same columns), and never raises: a malformed value reads as
absent.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from itertools import chain
from typing import Any

from medgrpo.data.boxes import BoxFrame
from medgrpo.data.record import MedADRecord
from medgrpo.rewards.facts import RecordFacts, facts_of

_FIELDS = (
    "id",
    "question",
    "options",
    "answer",
    "task",
    "modality",
    "anatomy",
    "evidence",
    "bbox",
    "cot",
    "source",
    "box_format",
    "image_size",
    "model_image_size",
)


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _json(value: Any) -> Any:
    if isinstance(value, dict | list):
        return value
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return None


def _size(value: Any) -> tuple[int, int] | None:
    if isinstance(value, list | tuple) and len(value) == 2:
        try:
            w, h = (int(v) for v in value)
        except (TypeError, ValueError, OverflowError):
            return None
        if w > 0 and h > 0:
            return w, h
    return None


def _frame(box_format: Any, image_size: Any, model_image_size: Any) -> BoxFrame | None:
    size, model_size = _size(image_size), _size(model_image_size)
    if box_format not in ("abs", "rel1000") or size is None or model_size is None:
        return None
    return BoxFrame.from_columns(box_format, list(size), list(model_size))


def _bbox(value: Any) -> list[list[float]] | None:
    boxes = _json(value)
    if not isinstance(boxes, list) or not boxes:
        return None
    if len(boxes) == 4 and all(isinstance(v, int | float) for v in boxes):
        boxes = [boxes]
    out = []
    for box in boxes:
        if isinstance(box, list) and len(box) == 4 and all(isinstance(v, int | float) for v in box):
            b = [float(v) for v in box]
            if all(math.isfinite(v) for v in b) and b[2] > b[0] and b[3] > b[1]:
                out.append(b)
    return out or None


@lru_cache(maxsize=1 << 14)
def _row(key: tuple) -> tuple[MedADRecord, BoxFrame | None, RecordFacts]:
    v = dict(zip(_FIELDS, key, strict=True))
    options = v["options"]
    options = [o for o in options if isinstance(o, str)] if isinstance(options, tuple) else []
    evidence = _json(v["evidence"])
    record = MedADRecord(
        id=_str(v["id"]) or str(v["id"]),
        images=[],
        question=_str(v["question"]),
        options=options,
        answer=_str(v["answer"]),
        task=_str(v["task"]) or "other",
        modality=_str(v["modality"]) or None,
        anatomy=_str(v["anatomy"]) or None,
        evidence=evidence if isinstance(evidence, dict) else None,
        bbox=_bbox(v["bbox"]),
        cot=_str(v["cot"]) or None,
        source=_str(v["source"]),
    )
    return record, _frame(v["box_format"], v["image_size"], v["model_image_size"]), facts_of(record)


_SCALARS = {str, int, float}
_STR_OR_NONE = {str, type(None)}


def _freeze(value: Any) -> Any:
    if value is None or type(value) is str:
        return value
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, default=str)
    if isinstance(value, str | int | float):
        return value
    return repr(value)  # anything else cannot be a valid field: keep the key hashable


def _frozen(column: list | tuple, n: int) -> list:
    """The first ``n`` values of a column as hashable key parts (None past its end). The common columns take
    a fast path: strings pass as they are, lists of strings or numbers (options, sizes) become tuples."""
    values = list(column[:n]) + [None] * (n - len(column))
    types = set(map(type, values))
    if types <= _STR_OR_NONE:
        return values
    if types == {list} and set(map(type, chain.from_iterable(values))) <= _SCALARS:
        return [tuple(v) for v in values]
    return [_freeze(v) for v in values]


def rows_from_columns(
    columns: dict[str, Any], n: int, memo: list[Any] | None = None
) -> list[tuple[MedADRecord, BoxFrame | None, RecordFacts]]:
    """``n`` rows of (record, frame, facts) from TRL's reward kwargs; missing columns read as empty.

    ``memo`` (a two-item list the caller owns, e.g. :class:`~medgrpo.rewards.registry.BatchCache`'s) holds the
    column lists of the last call and its rows: TRL hands every reward function the very same column lists in one
    step, so when they are the same objects again (identity; the lists are held, so their ids cannot be reused) the
    rows are reused instead of rebuilt.
    """
    cols = [columns.get(name) for name in _FIELDS]
    cols = [c if isinstance(c, list | tuple) else () for c in cols]
    if memo is not None:
        held, rows = memo
        if (rows is not None and len(rows) == n and len(held) == len(cols)
                and all(a is b for a, b in zip(held, cols, strict=True))):
            return rows
    rows = [_row(key) for key in zip(*(_frozen(c, n) for c in cols), strict=True)]
    if memo is not None:
        memo[:] = [cols, rows]
    return rows


def records_from_columns(columns: dict[str, Any]) -> list[tuple[MedADRecord, BoxFrame | None]]:
    """Rebuild (record, box frame) per row from the GRPO dataset columns (``id``, ``question``, ``options``,
    ``answer``, ``task``, ``modality``, ``anatomy``, ``evidence`` and ``bbox`` as JSON strings, ``cot``,
    ``source``, ``box_format``, ``image_size``, ``model_image_size``). The frame is None when the size columns
    are missing or invalid. The number of rows is the length of the ``id`` column (else of ``answer``).
    Records rebuilt here have no ``images`` (scoring never reads pixels)."""
    n = 0
    for name in ("id", "answer"):
        if isinstance(columns.get(name), list | tuple):
            n = len(columns[name])
            break
    return [(record, frame) for record, frame, _ in rows_from_columns(columns, n)]
