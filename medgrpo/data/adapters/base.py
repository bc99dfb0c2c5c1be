"""What every adapter shares: the row type adapters yield, answer normalisation, and the atomic folder writer.

An adapter only reads its source layout and yields :class:`SourceRow` objects (record fields + where the images
come from). :func:`write_dataset` copies the images (DICOM de-identified: pixel tags only), validates every row with the record schema, drops bad rows
with the reason, and writes ``<split>.jsonl`` + ``images/`` + a ``README.md`` dataset card into a temporary folder
that is renamed into place only when complete (never a half-written dataset).
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medgrpo.data.dicom import DicomError, deidentify_dicom
from medgrpo.data.images import is_dicom
from medgrpo.data.record import LETTERS, RecordError, record_from_dict

SPLITS = ("train", "validation", "test")
_SPLIT_ALIASES = {"val": "validation", "valid": "validation", "validate": "validation", "dev": "validation"}


class AdapterError(ValueError):
    """The source cannot be converted at all (wrong layout, bad mapping). One line naming file and field."""


@dataclass
class ImageRef:
    """One image of a source row: a file to copy, or encoded bytes (parquet / HF ``Image`` columns).

    ``name`` is the path it gets under the output's ``images/`` folder.
    """

    name: str
    path: Path | None = None
    data: bytes | None = None


@dataclass
class SourceRow:
    """One source item: MedADRecord fields in ``record`` (``images`` as :class:`ImageRef`), or a ``drop`` reason."""

    where: str
    split: str = "train"
    record: dict[str, Any] = field(default_factory=dict)
    images: list[ImageRef] = field(default_factory=list)
    drop: str | None = None


@dataclass
class Adapter:
    """A source format: how to read it, and what its dataset card says about it."""

    name: str
    source: str
    licence: str
    homepage: str
    layout: str
    read: Callable[..., Iterator[SourceRow]]  # (path, mapping[, version]) -> rows
    versions: tuple[str, ...] = ()  # releases published in several versions (``--version``)


def norm_split(name: str) -> str:
    split = _SPLIT_ALIASES.get(name.strip().lower(), name.strip().lower())
    if split not in SPLITS:
        raise AdapterError(f"unknown split '{name}' (one of: {', '.join(SPLITS)})")
    return split


def split_files(files: Iterable[Path]) -> list[Path]:
    """Files named for their split, in split order (train, validation, test): duplicates are reported in the
    later split, and an unknown file name is an error naming the file."""
    return sorted(files, key=lambda p: (SPLITS.index(norm_split(p.stem)), p.name))


def safe_name(text: str) -> str:
    """A relative path safe to create under ``images/``: no ``..``, no absolute root, tame characters."""
    parts = [re.sub(r"[^A-Za-z0-9._-]+", "_", p) for p in re.split(r"[\\/]+", text) if p not in ("", ".", "..")]
    return "/".join(p for p in parts if p) or "image"


def closed_or_open(question: str, answer: Any, closed: bool | None = None) -> dict[str, Any]:
    """Options and answer for a VQA pair: yes/no becomes a 2-option MCQ (``Yes``/``No``, in that order);
    anything else stays open-ended (``options: []``, free-text ``answer``).

    ``closed`` is the source's own closed/open flag where it has one; a closed question whose answer is not
    yes/no (e.g. "left or right?") has no option list to build, so it is kept open-ended.
    """
    text = str(answer).strip()
    if text.lower() in ("yes", "no") and closed is not False:
        return {"question": question, "options": ["Yes", "No"], "answer": "A" if text.lower() == "yes" else "B"}
    return {"question": question, "options": [], "answer": text}


def _plain(text: str) -> str:
    return " ".join(text.strip().rstrip(".").lower().split())


def letter_of(options: list[str], answer: str) -> str | None:
    """The letter of ``answer`` among ``options``: a letter itself, or the option text, compared without case,
    surrounding or repeated spaces, or a trailing full stop (releases differ from their own options so)."""
    answer = answer.strip()
    if len(answer) == 1 and answer.upper() in LETTERS[: len(options)]:
        return answer.upper()
    plain = [_plain(o) for o in options]
    return LETTERS[plain.index(_plain(answer))] if _plain(answer) in plain else None


def _materialise(ref: ImageRef, images_dir: Path, done: dict[str, str], input_root: Path) -> str:
    if ref.path is not None and not ref.path.resolve().is_relative_to(input_root):
        raise RecordError(f"field 'images': '{ref.name}' resolves outside the input folder {input_root}")
    rel = "images/" + safe_name(ref.name)
    key = str(ref.path) if ref.path is not None else rel
    if key in done:
        return done[key]
    target = images_dir.parent / rel
    if target.exists():  # two different sources with one name: keep both
        stem, dot, ext = rel.rpartition(".")
        rel = f"{stem}_{len(done)}.{ext}" if dot else f"{rel}_{len(done)}"
        target = images_dir.parent / rel
    if ref.data is None and (ref.path is None or not ref.path.is_file()):
        raise RecordError(f"field 'images': source image '{ref.path or ref.name}' does not exist")
    target.parent.mkdir(parents=True, exist_ok=True)
    if ref.data is not None:
        target.write_bytes(ref.data)
    elif is_dicom(ref.path):
        try:
            deidentify_dicom(ref.path, target)  # only pixel-relevant tags travel (PHI safety)
        except DicomError as exc:
            raise RecordError(f"field 'images': {exc}") from None
    else:
        shutil.copyfile(ref.path, target)
    done[key] = rel
    return rel


@dataclass
class ConvertReport:
    """Counts of a conversion, written into the dataset card."""

    kept: Counter = field(default_factory=Counter)  # per split
    dropped: list[tuple[str, str]] = field(default_factory=list)  # (where, reason)
    tasks: Counter = field(default_factory=Counter)
    modalities: Counter = field(default_factory=Counter)
    open_ended: int = 0


def _card(adapter: Adapter, input_path: Path, report: ConvertReport, mapping: dict[str, Any] | None) -> str:
    licence = (mapping or {}).get("licence", adapter.licence)
    source = (mapping or {}).get("source", adapter.source)
    total = sum(report.kept.values())
    lines = [
        f"# {source} (converted by medgrpo)", "",
        f"- source: {source}",
        f"- adapter: `{adapter.name}`",
        f"- homepage: {adapter.homepage}",
        f"- licence: {licence}",
        f"- input: `{input_path.name}`",
        f"- records: {total} ({', '.join(f'{s}: {n}' for s, n in sorted(report.kept.items()))})",
        f"- open-ended (options: []): {report.open_ended}; multiple choice: {total - report.open_ended}",
        f"- dropped rows: {len(report.dropped)}",
        "- DICOM images are stored de-identified: only pixel-relevant tags are kept, UIDs are new", "",
        "## Counts per task", "", *(f"- {k}: {v}" for k, v in sorted(report.tasks.items())), "",
        "## Counts per modality", "", *(f"- {k or 'unknown'}: {v}" for k, v in sorted(report.modalities.items())),
        "", "## Dropped rows", "",
    ]
    root = str((input_path if input_path.is_dir() else input_path.parent).resolve()) + "/"
    dropped = [(where.replace(root, ""), reason.replace(root, "")) for where, reason in report.dropped]
    kinds = (reason.partition(": ") for _, reason in dropped)  # group by field and kind, not by value
    reasons = Counter(field + ": " + re.sub(r"'[^']*'", "'...'", rest) for field, _, rest in kinds)
    lines += [f"- {n} x {reason}" for reason, n in reasons.most_common()] or ["none"]
    lines += ["", "Per row (paths relative to the input):", ""] + [f"- {w}: {r}" for w, r in dropped[:500]]
    if len(report.dropped) > 500:
        lines.append(f"- ... and {len(report.dropped) - 500} more")
    return "\n".join(lines) + "\n"


def write_dataset(
    adapter: Adapter, rows: Iterable[SourceRow], input_path: Path, out: Path, mapping: dict[str, Any] | None = None
) -> ConvertReport:
    """Validate and write ``rows`` as a dataset folder at ``out`` (which must not exist or be empty).

    Raises:
        AdapterError: ``out`` is not empty, or no row survived validation.
    """
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise AdapterError(f"{out}: output folder exists and is not empty")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        report = ConvertReport()
        by_split: dict[str, list[str]] = {}
        seen: dict[str, str] = {}
        done: dict[str, str] = {}
        input_root = (input_path if input_path.is_dir() else input_path.parent).resolve()
        for row in rows:
            if row.drop:
                report.dropped.append((row.where, row.drop))
                continue
            try:
                fields = dict(row.record)
                fields["images"] = [_materialise(ref, tmp / "images", done, input_root) for ref in row.images]
                fields.setdefault("source", (mapping or {}).get("source", adapter.source))
                record = record_from_dict(fields, where=row.where, root=tmp, check_images=True)
                if record.id in seen:
                    raise RecordError(f"{row.where}: field 'id': duplicate id '{record.id}' (first at {seen[record.id]})")
            except RecordError as exc:
                report.dropped.append((row.where, str(exc).removeprefix(f"{row.where}: ")))
                continue
            seen[record.id] = row.where
            by_split.setdefault(row.split, []).append(json.dumps(record.to_dict(), ensure_ascii=False))
            report.kept[row.split] += 1
            report.tasks[record.task] += 1
            report.modalities[record.modality or ""] += 1
            report.open_ended += not record.is_mcq
        if not by_split:
            first = report.dropped[0] if report.dropped else ("", "the input holds no rows")
            raise AdapterError(f"{input_path}: no usable rows ({len(report.dropped)} dropped; first: "
                               f"{first[0]}: {first[1]})")
        for split, lines in by_split.items():
            (tmp / f"{split}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (tmp / "README.md").write_text(_card(adapter, input_path, report, mapping), encoding="utf-8")
        tmp.chmod(0o755)  # mkdtemp makes it private; the dataset is meant to be shared
        if out.exists():
            out.rmdir()
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return report
