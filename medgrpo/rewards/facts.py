"""What a record lets the verifiers check, read once per record and cached: its options as claims, the
polarity each option stands for, and its structured evidence as lexicon concepts.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from medgrpo.data.record import LETTERS, MedADRecord
from medgrpo.rewards.claims import read
from medgrpo.rewards.lexicon import CATEGORY

Box = tuple[float, float, float, float]

_YES = {"yes", "present", "true", "positive"}
_NO = {"no", "absent", "false", "negative"}
_WORD_RE = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True, eq=False)
class RecordFacts:
    """The checkable content of one record (all concept sets are lexicon concepts).

    Compared and hashed by identity: :func:`facts_of` returns one shared object per distinct record content,
    so caches keyed on it cost a pointer hash instead of hashing every field.
    """

    id: str
    task: str
    answer: str
    options: tuple[str, ...]
    letters: str
    option_concepts: tuple[frozenset[str], ...]  # concepts each option text asserts
    option_literal: tuple[str, ...]  # lower-cased option text, for options the lexicon cannot read
    option_polarity: tuple[str | None, ...]  # "normal" / "abnormal" / None
    question_low: str
    abnormal: bool | None
    modality: frozenset[str]
    anatomy: frozenset[str]
    finding: frozenset[str]  # finding + generic concepts of evidence["finding"]
    laterality: frozenset[str]
    location: frozenset[str]
    appearance: frozenset[str]  # appearance + size descriptors
    gold_boxes: tuple[Box, ...]
    open_answer: str  # lower-cased free-text answer ("" for MCQ)
    is_mcq: bool  # it has options (a field, not a property: the verifiers ask several times per completion)

    def descriptors(self) -> frozenset[str]:
        """Every finding descriptor the record knows (laterality, location, appearance, size)."""
        return self.laterality | self.location | self.appearance


def _concepts(value: Any, categories: tuple[str, ...]) -> frozenset[str]:
    if isinstance(value, list | tuple):
        value = " , ".join(v for v in value if isinstance(v, str))
    if not isinstance(value, str) or not value:
        return frozenset()
    return frozenset(c for c in read(value).asserted if CATEGORY[c] in categories)


def _question_yes_polarity(question: str) -> str | None:
    """What "yes" means for a yes/no question: "abnormal" for "is there a lesion?", "normal" for "is it
    normal?".
    """
    reading = read(question)
    if reading.asserted & {"normal"} and not any(
        CATEGORY[c] in ("finding", "generic") for c in reading.asserted
    ):
        return "normal"
    if any(CATEGORY[c] in ("finding", "generic") for c in reading.asserted):
        return "abnormal"
    return None


def option_polarity(option: str, question: str) -> str | None:
    """The polarity an option text stands for ("Normal", "No lesion", "Tumour present", "Yes" to "is
    there..").
    """
    words = _WORD_RE.findall(option.lower())
    if len(words) == 1 and words[0] in _YES | _NO:
        yes = _question_yes_polarity(question)
        if yes is None:
            return None
        return yes if words[0] in _YES else ("normal" if yes == "abnormal" else "abnormal")
    polarity = read(option).polarity
    return next(iter(polarity)) if len(polarity) == 1 else None


def _polarities(options: tuple[str, ...], question: str) -> tuple[str | None, ...]:
    """Each option's polarity, kept only when the options disagree on it (four lesion types are all
    "abnormal": then polarity does not tell them apart and is dropped)."""
    polarities = tuple(option_polarity(o, question) for o in options)
    return polarities if len(set(polarities) - {None}) == 2 else (None,) * len(options)


def _boxes(bbox: Any) -> tuple[Box, ...]:
    out: list[Box] = []
    if not isinstance(bbox, list | tuple):
        return ()
    if len(bbox) == 4 and all(isinstance(v, int | float) for v in bbox):
        bbox = [bbox]
    for box in bbox:
        if isinstance(box, list | tuple) and len(box) == 4:
            try:
                b = tuple(float(v) for v in box)
            except (TypeError, ValueError):
                continue
            if all(math.isfinite(v) for v in b) and b[2] > b[0] and b[3] > b[1]:
                out.append(b)  # type: ignore[arg-type]
    return tuple(out)


_KEY_FIELDS = ("id", "question", "options", "answer", "task", "modality", "anatomy", "evidence", "bbox")


@lru_cache(maxsize=1 << 14)
def _facts(key: str) -> RecordFacts:
    row = json.loads(key)
    ev = row["evidence"] if isinstance(row["evidence"], dict) else {}
    options = (
        tuple(o for o in row["options"] if isinstance(o, str)) if isinstance(row["options"], list) else ()
    )
    question = row["question"] if isinstance(row["question"], str) else ""
    answer = row["answer"] if isinstance(row["answer"], str) else ""
    abnormal = ev.get("abnormal")
    appearance = ev.get("appearance") if isinstance(ev.get("appearance"), list) else []
    return RecordFacts(
        id=str(row["id"]),
        task=str(row["task"]),
        answer=answer,
        options=options,
        letters=LETTERS[: len(options)],
        option_concepts=tuple(read(o).asserted for o in options),
        option_literal=tuple(" ".join(_WORD_RE.findall(o.lower())) for o in options),
        option_polarity=_polarities(options, question),
        question_low=question.lower(),
        abnormal=abnormal if isinstance(abnormal, bool) else None,
        modality=_concepts(ev.get("modality") or row["modality"], ("modality",)),
        anatomy=_concepts(ev.get("anatomy") or row["anatomy"], ("anatomy",)),
        finding=_concepts(ev.get("finding"), ("finding", "generic")),
        laterality=_concepts(ev.get("laterality"), ("laterality",)),
        location=_concepts(ev.get("location"), ("location", "laterality")),
        appearance=_concepts([*appearance, ev.get("size")], ("appearance", "size")),
        gold_boxes=_boxes(row["bbox"]),
        open_answer="" if options else " ".join(_WORD_RE.findall(answer.lower())),
        is_mcq=bool(options),
    )


def facts_of(record: MedADRecord) -> RecordFacts:
    """The cached :class:`RecordFacts` of a record (keyed by content: equal records share one entry)."""
    return _facts(json.dumps({name: getattr(record, name, None) for name in _KEY_FIELDS}, default=str))
