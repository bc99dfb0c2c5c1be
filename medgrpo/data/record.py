"""The MedAD record: one validated VQA item, and the loader that reads a dataset folder of them.

Every source (JSONL, public-dataset adapters, MedAD-Synth, the data builder) ends up as a list of
:class:`MedADRecord`. Validation happens here, once, so that everything downstream can trust the fields.
Errors name the file, the line and the field, in one line.
"""

from __future__ import annotations

import json
import math
import string
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

TASKS: tuple[str, ...] = (
    "anatomy_identification",
    "modality_classification",
    "anomaly_detection",
    "pathology_characterization",
    "lesion_localization",
    "other",
)
"""MedAD-38K's five task families, plus ``other`` for general medical VQA."""

LETTERS = string.ascii_uppercase[:10]
"""Option letters: 2 to 10 options, lettered A, B, C, ..."""

EVIDENCE_KEYS = ("abnormal", "finding", "location", "laterality", "appearance", "modality", "anatomy", "size")


class RecordError(ValueError):
    """A record (or a dataset file) is invalid. The message is one line: ``file:line: field 'x': reason``."""


@dataclass
class MedADRecord:
    """One MedAD VQA item. See the field table in the README ("The record").

    ``bbox`` and any ``<box>`` inside ``cot`` are in ORIGINAL image pixel coordinates of ``images[0]``;
    the model's own convention is applied only when prompts/targets are built (:mod:`medgrpo.prompts`).
    An open-ended question has ``options == []`` and a free-text ``answer``.
    """

    id: str
    images: list[str]
    question: str
    options: list[str]
    answer: str
    task: str
    modality: str | None = None
    anatomy: str | None = None
    evidence: dict[str, Any] | None = None
    bbox: list[list[float]] | None = None
    cot: str | None = None
    source: str = ""

    @property
    def is_mcq(self) -> bool:
        return len(self.options) > 0

    @property
    def letters(self) -> str:
        """The valid option letters of this record (``""`` when open-ended)."""
        return LETTERS[: len(self.options)]

    def answer_text(self) -> str:
        """The correct option's text (or the free-text answer)."""
        if self.is_mcq:
            return self.options[LETTERS.index(self.answer)]
        return self.answer

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_FIELDS = {f.name for f in MedADRecord.__dataclass_fields__.values()}  # type: ignore[attr-defined]
_REQUIRED = ("id", "images", "question", "options", "answer", "task")


def _fail(where: str, fieldname: str, reason: str) -> RecordError:
    return RecordError(f"{where}: field '{fieldname}': {reason}")


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def record_from_dict(
    row: Any,
    where: str = "<record>",
    root: Path | None = None,
    check_images: bool = False,
) -> MedADRecord:
    """Validate one raw row and build a :class:`MedADRecord`.

    Args:
        row: the parsed JSON object.
        where: ``file:line`` used in error messages.
        root: dataset root; image paths must resolve (symlinks followed) inside it.
        check_images: also check that every image exists and that boxes lie inside ``images[0]``.

    Raises:
        RecordError: one line naming ``where``, the field and the reason.
    """
    if not isinstance(row, dict):
        raise RecordError(f"{where}: row is not a JSON object")
    unknown = sorted(set(row) - _FIELDS)
    if unknown:
        raise _fail(where, unknown[0], "unknown field (allowed: " + ", ".join(sorted(_FIELDS)) + ")")
    for name in _REQUIRED:
        if name not in row or row[name] is None:
            raise _fail(where, name, "missing")

    rid = row["id"]
    if not isinstance(rid, str | int) or isinstance(rid, bool) or str(rid).strip() == "":
        raise _fail(where, "id", "must be a non-empty string")
    images = row["images"]
    if isinstance(images, str):
        images = [images]
    if not isinstance(images, list) or not images or not all(isinstance(p, str) and p for p in images):
        raise _fail(where, "images", "must be a non-empty list of relative paths")
    question = row["question"]
    if not isinstance(question, str) or not question.strip():
        raise _fail(where, "question", "must be a non-empty string")
    options = row["options"]
    if not isinstance(options, list) or not all(isinstance(o, str) and o.strip() for o in options):
        raise _fail(where, "options", "must be a list of non-empty strings")
    if len(options) == 1 or len(options) > len(LETTERS):
        raise _fail(where, "options", f"must hold 2 to {len(LETTERS)} options (or none for open-ended)")
    if len({o.strip().lower() for o in options}) != len(options):
        raise _fail(where, "options", "duplicate option text")
    answer = row["answer"]
    if not isinstance(answer, str) or not answer.strip():
        raise _fail(where, "answer", "must be a non-empty string")
    if options and answer not in LETTERS[: len(options)]:
        raise _fail(where, "answer", f"'{answer}' is not among the option letters {LETTERS[: len(options)]}")
    task = row["task"]
    if task not in TASKS:
        raise _fail(where, "task", f"unknown task '{task}' (one of: {', '.join(TASKS)})")
    for name in ("modality", "anatomy", "cot", "source"):
        value = row.get(name)
        if value is not None and not isinstance(value, str):
            raise _fail(where, name, "must be a string or null")

    evidence = row.get("evidence")
    if evidence is not None:
        if not isinstance(evidence, dict):
            raise _fail(where, "evidence", "must be an object or null")
        if not isinstance(evidence.get("abnormal"), bool):
            raise _fail(where, "evidence", "must hold 'abnormal' as true/false")
        bad = sorted(set(evidence) - set(EVIDENCE_KEYS))
        if bad:
            raise _fail(where, "evidence", f"unknown key '{bad[0]}' (allowed: {', '.join(EVIDENCE_KEYS)})")
        appearance = evidence.get("appearance")
        if appearance is not None and not (
            isinstance(appearance, list) and all(isinstance(a, str) for a in appearance)
        ):
            raise _fail(where, "evidence", "'appearance' must be a list of strings")

    bbox = row.get("bbox")
    if bbox is not None:
        if bbox and _is_number(bbox[0]):  # a single box written flat
            bbox = [bbox]
        if not isinstance(bbox, list) or not bbox:
            raise _fail(where, "bbox", "must be a non-empty list of [x1, y1, x2, y2] boxes or null")
        for box in bbox:
            if not (isinstance(box, list) and len(box) == 4 and all(_is_number(v) for v in box)):
                raise _fail(where, "bbox", f"{box!r} is not [x1, y1, x2, y2] of finite numbers")
            x1, y1, x2, y2 = box
            if x1 < 0 or y1 < 0 or x2 <= x1 or y2 <= y1:
                raise _fail(where, "bbox", f"{box!r} needs 0 <= x1 < x2 and 0 <= y1 < y2")
        bbox = [[float(v) for v in box] for box in bbox]

    if root is not None:
        root_resolved = root.resolve()
        for p in images:
            if Path(p).is_absolute():
                raise _fail(where, "images", f"'{p}' is absolute; paths are relative to the dataset root")
            full = (root / p).resolve()
            if not full.is_relative_to(root_resolved):
                raise _fail(where, "images", f"'{p}' resolves outside the dataset root")
            if check_images and not full.is_file():
                raise _fail(where, "images", f"'{p}' does not exist")
        if check_images and bbox:
            from medgrpo.data.images import image_size

            try:
                width, height = image_size(root / images[0])
            except Exception as exc:  # unreadable header: report as this row's image error
                raise _fail(where, "images", f"'{images[0]}' cannot be read: {exc}") from None
            for box in bbox:
                if box[2] > width or box[3] > height:
                    raise _fail(where, "bbox", f"{box!r} lies outside the {width}x{height} image")

    return MedADRecord(
        id=str(rid),
        images=list(images),
        question=question,
        options=list(options),
        answer=answer,
        task=task,
        modality=row.get("modality"),
        anatomy=row.get("anatomy"),
        evidence=evidence,
        bbox=bbox,
        cot=row.get("cot"),
        source=row.get("source") or "",
    )


@dataclass
class LoadReport:
    """What :func:`load_records` kept and what it skipped (``on_bad_record="skip"``)."""

    path: str
    kept: int = 0
    skipped: list[str] = field(default_factory=list)  # one error line per skipped row


def _jsonl_files(path: Path, split: str | None) -> tuple[Path, list[Path]]:
    if path.is_dir():
        names = [f"{split}.jsonl"] if split else ["train.jsonl", "test.jsonl"]
        files = [path / n for n in names if (path / n).is_file()]
        if not files:
            raise RecordError(f"{path}: no {' or '.join(names)} in this dataset folder")
        return path, files
    if path.is_file():
        return path.parent, [path]
    raise RecordError(f"{path}: no such dataset file or folder")


def load_records(
    path: str | Path,
    split: str | None = None,
    on_bad_record: Literal["error", "skip"] = "error",
    check_images: bool = True,
    report: LoadReport | None = None,
) -> list[MedADRecord]:
    """Read and validate a dataset folder (``train.jsonl``/``test.jsonl`` + ``images/``) or one JSONL file.

    Args:
        path: a dataset folder or a ``.jsonl`` file (image paths are relative to the folder holding it).
        split: ``"train"`` or ``"test"`` (or any ``<split>.jsonl``) when ``path`` is a folder; both when None.
        on_bad_record: ``"error"`` raises on the first bad row; ``"skip"`` drops it and counts it in ``report``.
        check_images: check that images exist and boxes lie inside them.
        report: filled with counts and the skipped rows' error lines.

    Raises:
        RecordError: ``file:line: field 'x': reason`` (also for duplicate ids).
    """
    if on_bad_record not in ("error", "skip"):
        raise RecordError(f"on_bad_record must be 'error' or 'skip', not {on_bad_record!r}")
    root, files = _jsonl_files(Path(path), split)
    report = report if report is not None else LoadReport(path=str(path))
    records: list[MedADRecord] = []
    seen: dict[str, str] = {}
    for file in files:
        with open(file, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                where = f"{file}:{lineno}"
                try:
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise RecordError(f"{where}: not valid JSON ({exc.msg})") from None
                    record = record_from_dict(row, where=where, root=root, check_images=check_images)
                    if record.id in seen:
                        raise _fail(where, "id", f"duplicate id '{record.id}' (first at {seen[record.id]})")
                except RecordError as exc:
                    if on_bad_record == "error":
                        raise
                    report.skipped.append(str(exc))
                    continue
                seen[record.id] = where
                records.append(record)
    report.kept = len(records)
    return records


def validate_dataset(path: str | Path) -> tuple[int, list[str]]:
    """Validate every row of a dataset; returns (number of valid rows, every error line)."""
    report = LoadReport(path=str(path))
    records = load_records(path, on_bad_record="skip", report=report)
    return len(records), report.skipped


def write_records(records: list[MedADRecord], path: str | Path) -> None:
    """Write records as JSONL atomically (a temporary file renamed into place: never half-written)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record.to_dict(), ensure_ascii=False) + "\n")
    tmp.replace(path)
