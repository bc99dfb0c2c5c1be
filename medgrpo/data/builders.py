"""Records -> ``datasets.Dataset`` for TRL: prompt/completion rows for SFTTrainer, and GRPO rows with every
field the rewards need as flat columns.

Every image is decoded and resized up front (through :func:`~medgrpo.data.preprocess.prepare_images`), so a
missing or corrupt image is found before training starts and can never crash a run midway. The
``on_bad_record`` policy decides what happens then: ``error`` stops with the row named, ``skip`` drops it, counts
it in a :class:`BuildReport` and logs the count and ids at the end.

Rows are streamed, one record at a time, into an Arrow file under the ``datasets`` cache
(``HF_DATASETS_CACHE``, a ``medgrpo-rows-*`` folder that :func:`release_rows` removes when a training stage ends,
and an exit hook otherwise) and the dataset is memory-mapped from it, so host memory does not grow with the dataset (``eval/bench_dataset.py``: at the GPU
recipes' ``max_pixels``, 400 records held in memory grew the process by 2.9 GB, streamed by 0.2 GB, flat in the
number of records). Images are stored as PNG at zlib level 1: lossless like the default level 6, several times
faster to write, and of similar size for medical images.
"""

from __future__ import annotations

import atexit
import io
import json
import logging
import os
import shutil
import socket
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import datasets
from datasets.arrow_writer import ArrowWriter
from PIL import Image

from medgrpo.data.boxes import BoxFrame, ImageGrid
from medgrpo.data.preprocess import ImageSettings, prepare_images
from medgrpo.data.record import MedADRecord, RecordError
from medgrpo.prompts import BOX_RE, SYSTEM_PROMPT, build_prompt, build_target

logger = logging.getLogger(__name__)

_MESSAGES = [{"role": datasets.Value("string"), "content": datasets.Value("string")}]
_STR = datasets.Value("string")

SFT_FEATURES = datasets.Features({"prompt": _MESSAGES, "completion": _MESSAGES, "images": [datasets.Image()]})
GRPO_FEATURES = datasets.Features({
    "prompt": _MESSAGES,
    "images": [datasets.Image()],
    **{name: _STR for name in ("id", "question")},
    "options": [_STR],
    **{name: _STR for name in ("answer", "task", "modality", "anatomy", "evidence", "bbox", "cot", "source",
                               "box_format")},
    "image_size": [datasets.Value("int32")],
    "model_image_size": [datasets.Value("int32")],
    "target": _STR,
})
"""Fixed Arrow types: strings are ``""`` rather than None so that shards and splits always concatenate."""


ROWS_PREFIX = "medgrpo-rows-"
"""Name prefix of the folders the builders write their rows to, in the ``datasets`` cache."""


@dataclass
class BuildReport:
    """What a builder kept and what it skipped (``on_bad_record="skip"``): ``(id, reason)`` per dropped row."""

    kept: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)


def _check_boxes(record: MedADRecord, frame: BoxFrame) -> None:
    """Boxes (the ``bbox`` field and any ``<box>`` cited in ``cot``) must lie inside ``images[0]``."""
    boxes = list(record.bbox or [])
    boxes += [[float(g) for g in m.groups()] for m in BOX_RE.finditer(record.cot or "")]
    for box in boxes:
        x1, y1, x2, y2 = box
        if not (0 <= x1 < x2 <= frame.width and 0 <= y1 < y2 <= frame.height):
            where = "bbox" if record.bbox and box in record.bbox else "cot"
            raise RecordError(f"field '{where}': box {box} is not inside the {frame.width}x{frame.height} image")


def _prepared(
    records: list[MedADRecord],
    root: str | Path,
    grid: ImageGrid,
    settings: ImageSettings | None,
    on_bad_record: str,
    report: BuildReport,
) -> Iterator[tuple[MedADRecord, list[Image.Image], BoxFrame]]:
    """Prepare each record's images, one record at a time; apply the ``on_bad_record`` policy to failures."""
    if on_bad_record not in ("error", "skip"):
        raise RecordError(f"on_bad_record must be 'error' or 'skip', not {on_bad_record!r}")
    seen: set[str] = set()
    for row, record in enumerate(records, start=1):
        try:
            if record.id in seen:
                raise RecordError(f"field 'id': duplicate id '{record.id}'")
            seen.add(record.id)
            images, frame = prepare_images(record, root, grid, settings)
            _check_boxes(record, frame)
        except Exception as exc:  # any decoder failure must surface here, before training, as one line
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            message = f"{root}: row {row} (id '{record.id}'): {reason}"
            if on_bad_record == "error":
                raise RecordError(message) from None
            report.skipped.append((record.id, message))
            continue
        report.kept += 1
        yield record, images, frame
    if report.skipped:
        ids = ", ".join(rid for rid, _ in report.skipped)
        logger.warning("skipped %d bad record(s) under %s: %s", len(report.skipped), root, ids)
    if not report.kept:
        raise RecordError(f"{root}: no usable records ({len(report.skipped)} skipped)")


def _png(image: Image.Image) -> dict[str, Any]:
    """An image as the ``datasets.Image`` feature stores it: PNG bytes (zlib level 1, see the module docstring)."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=1)
    return {"bytes": buffer.getvalue(), "path": None}


def _remove(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def release_rows(dataset: datasets.Dataset) -> None:
    """Remove the rows folder behind a dataset these builders made, once nothing reads it any more. The training
    stages call it when they finish, so an in-process sweep (``medgrpo ablate``) does not pile up one copy of
    the resized images per run until it exits; other folders (any dataset not made here) are left alone."""
    for entry in dataset.cache_files:
        folder = Path(entry["filename"]).parent
        if folder.name.startswith(ROWS_PREFIX):
            _remove(str(folder))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _sweep_stale(cache: Path) -> None:
    """Remove the rows folders of this host's processes that died without cleaning up (kill -9, the OOM killer):
    their names carry host and pid. Other hosts' folders (a shared cache) are never touched; a reused pid keeps
    its folder, which errs on the safe side."""
    mine = f"{ROWS_PREFIX}{socket.gethostname()}-"
    for folder in cache.glob(f"{mine}*"):
        pid = folder.name[len(mine):].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            _remove(str(folder))


def _write_dataset(rows: Iterable[dict[str, Any]], features: datasets.Features) -> datasets.Dataset:
    """Stream ``rows`` into an Arrow file in a fresh ``medgrpo-rows-<host>-<pid>-*`` folder of the ``datasets``
    cache and memory-map it. The folder goes with :func:`release_rows` or when the process exits, at once when a
    row fails (nothing half-written is left behind), and, should the process be killed, with the next build on
    this host (:func:`_sweep_stale`)."""
    cache = Path(datasets.config.HF_DATASETS_CACHE)
    try:
        cache.mkdir(parents=True, exist_ok=True)
        _sweep_stale(cache)
        folder = tempfile.mkdtemp(prefix=f"{ROWS_PREFIX}{socket.gethostname()}-{os.getpid()}-", dir=cache)
    except OSError as exc:
        raise RecordError(f"HF_DATASETS_CACHE {cache}: cannot hold the training rows ({exc.strerror or exc})") from None
    path = str(Path(folder) / "rows.arrow")
    try:
        with ArrowWriter(features=features, path=path) as writer:
            for row in rows:  # a bad record raises RecordError here, from _prepared
                writer.write(features.encode_example(row))
            writer.finalize()
        dataset = datasets.Dataset.from_file(path)
    except OSError as exc:  # the disk filled up, or the folder went away, while writing
        _remove(folder)
        raise RecordError(f"HF_DATASETS_CACHE {cache}: cannot hold the training rows ({exc.strerror or exc}); "
                          "point it at a disk with room") from None
    except BaseException:
        _remove(folder)
        raise
    atexit.register(_remove, folder)
    return dataset


def to_sft_dataset(
    records: list[MedADRecord],
    root: str | Path,
    grid: ImageGrid,
    settings: ImageSettings | None = None,
    system_prompt: str | None = SYSTEM_PROMPT,
    on_bad_record: Literal["error", "skip"] = "error",
    report: BuildReport | None = None,
) -> datasets.Dataset:
    """Conversational prompt/completion rows with ``images`` for TRL's SFTTrainer (completion-only loss).

    Args:
        records: validated records; image paths are relative to ``root``.
        root: the dataset folder.
        grid: the processor's resize rule and box convention (``ImageGrid.from_processor``).
        settings: DICOM windowing, frames, cache (defaults: auto window, middle frame, no cache).
        system_prompt: the system turn, or None.
        on_bad_record: ``error`` raises :class:`RecordError` naming the row; ``skip`` drops and reports it.
        report: filled with kept/skipped counts and the skipped ids.
    """
    report = report if report is not None else BuildReport()
    rows = (
        {
            "prompt": build_prompt(record, frame, system_prompt),
            "completion": [{"role": "assistant", "content": build_target(record, frame)}],
            "images": [_png(image) for image in images],
        }
        for record, images, frame in _prepared(records, root, grid, settings, on_bad_record, report)
    )
    return _write_dataset(rows, SFT_FEATURES)


def _json_or_empty(value: Any) -> str:
    return "" if value is None else json.dumps(value, ensure_ascii=False)


def grpo_columns(record: MedADRecord, frame: BoxFrame) -> dict[str, Any]:
    """The GRPO row of one record, without prompt and images: what the reward functions read back with
    :func:`medgrpo.rewards.records_from_columns` (missing values are ``""`` so Arrow types stay stable)."""
    return {
        "id": record.id,
        "question": record.question,
        "options": list(record.options),
        "answer": record.answer,
        "task": record.task,
        "modality": record.modality or "",
        "anatomy": record.anatomy or "",
        "evidence": _json_or_empty(record.evidence),
        "bbox": _json_or_empty(record.bbox),
        "cot": record.cot or "",
        "source": record.source,
        **frame.to_columns(),
        "target": build_target(record, frame),
    }


def to_grpo_dataset(
    records: list[MedADRecord],
    root: str | Path,
    grid: ImageGrid,
    settings: ImageSettings | None = None,
    system_prompt: str | None = SYSTEM_PROMPT,
    on_bad_record: Literal["error", "skip"] = "error",
    report: BuildReport | None = None,
) -> datasets.Dataset:
    """GRPO rows: conversational ``prompt``, ``images`` and the record's fields as flat columns.

    Columns: ``prompt``, ``images``, ``id``, ``question``, ``options``, ``answer``, ``task``, ``modality``,
    ``anatomy``, ``evidence`` (JSON), ``bbox`` (JSON, original pixels), ``cot``, ``source``, ``box_format``,
    ``image_size``, ``model_image_size`` and ``target`` (the gold completion, for golden-answer injection).
    Missing values are ``""``. Arguments as in :func:`to_sft_dataset`.
    """
    report = report if report is not None else BuildReport()
    rows = (
        {
            "prompt": build_prompt(record, frame, system_prompt),
            "images": [_png(image) for image in images],
            **grpo_columns(record, frame),
        }
        for record, images, frame in _prepared(records, root, grid, settings, on_bad_record, report)
    )
    return _write_dataset(rows, GRPO_FEATURES)
