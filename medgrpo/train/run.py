"""Plumbing shared by the stage scripts: parsing, data loading, resume, run metadata, one-line errors."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml
from trl import TrlParser

from medgrpo.data import LoadReport, MedADRecord, RecordError, load_records
from medgrpo.models.loading import MAX_ADAPTER_DEPTH, adapter_base, locate
from medgrpo.train.args import DataArguments

RUN_INFO = "medgrpo_run.json"


def parse_args(dataclass_types: tuple[type, ...], argv: list[str] | None, prog: str) -> tuple[Any, ...]:
    """Parse ``--config recipe.yaml`` plus CLI overrides into the given dataclasses (TRL's ``TrlParser``).

    The output folder is checked here too (:func:`check_output_dir`), so a run that could never save fails in one
    line before any data or model loads rather than after hours of training.
    """
    parser = TrlParser(dataclass_types, prog=prog)
    parsed = parser.parse_args_and_config(args=argv)
    training = next((a for a in parsed if hasattr(a, "output_dir") and hasattr(a, "save_strategy")), None)
    model = next((a for a in parsed if hasattr(a, "model_name_or_path")), None)
    if training is not None and training.output_dir:
        check_output_dir(training, getattr(model, "model_name_or_path", None), getattr(model, "use_peft", False))
    return parsed


class OutputDirError(ValueError):
    """The output folder cannot take the run (not a folder, not writable, or too little free space)."""


def _existing_ancestor(path: Path) -> Path:
    path = path.absolute()
    while not path.exists():
        path = path.parent
    return path


def weights_bytes(model_path: str | None, _depth: int = 0) -> int:
    """Bytes of the ``*.safetensors`` weights a local model folder trains as (0 when unknown, e.g. a Hub id).

    A LoRA folder is merged into its base on load, so its base's weights are what training holds and saves.
    """
    if not model_path or not Path(model_path).is_dir() or _depth > MAX_ADAPTER_DEPTH:
        return 0
    folder = Path(model_path)
    base = adapter_base(folder)
    if base is not None:
        return weights_bytes(str(locate(base, folder) or ""), _depth + 1)
    return sum(f.stat().st_size for f in folder.glob("*.safetensors"))


def disk_estimate(training_args: Any, model_bytes: int, use_peft: bool = False) -> int:
    """Bytes a run writes at its peak: the checkpoints kept at once plus the final weights.

    A full-weight checkpoint holds the weights and AdamW's two moment buffers of the same size (3x); while a new
    one is written before the oldest is rotated out, ``save_total_limit + 1`` exist. A LoRA run saves adapters
    whose size is unknown before the model loads, so only the final merged-or-adapter weights are counted for it.
    """
    if use_peft:
        return 0
    strategy = getattr(training_args.save_strategy, "value", training_args.save_strategy)
    if strategy == "no":
        return model_bytes
    max_steps, save_steps = training_args.max_steps, training_args.save_steps
    saves = int(max_steps // save_steps) if max_steps > 0 and save_steps >= 1 else 1
    limit = training_args.save_total_limit
    kept = min(saves, limit + 1) if limit else saves
    per_checkpoint = 1 if training_args.save_only_model else 3
    return model_bytes * (1 + per_checkpoint * kept)


def check_output_dir(training_args: Any, model_path: str | None = None, use_peft: bool = False) -> None:
    """Refuse, in one line, an output folder that is not a folder, not writable, or on a disk too full.

    Nothing is created: writability is probed with a temporary file in the nearest existing folder (as root,
    permission bits say nothing, so only a real write tells). Free space is compared with :func:`disk_estimate`.
    """
    out = Path(training_args.output_dir)
    if out.exists() and not out.is_dir():
        raise OutputDirError(f"output_dir {out}: exists and is not a folder")
    anchor = _existing_ancestor(out)
    if not anchor.is_dir():
        raise OutputDirError(f"output_dir {out}: {anchor} is a file, not a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".medgrpo-write-probe-", dir=anchor)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise OutputDirError(f"output_dir {out}: {anchor} is not writable ({e.strerror or e})") from None
    needed = disk_estimate(training_args, weights_bytes(model_path), use_peft)
    free = shutil.disk_usage(anchor).free
    if needed > free:
        raise OutputDirError(f"output_dir {out}: needs about {needed / 2**30:.2f} GiB for checkpoints and weights, "
                             f"{free / 2**30:.2f} GiB free on that disk (lower save_total_limit or free space)")


def check_dataset_path(data_args: DataArguments) -> None:
    path = Path(data_args.dataset_path)
    if not path.exists():
        raise RecordError(f"{path}: no such dataset folder or file (make one with medgrpo synth / data convert)")


def load_training_records(data_args: DataArguments) -> list[MedADRecord]:
    """The training split, validated; bad rows stop the run or are skipped and reported, per ``on_bad_record``."""
    report = LoadReport(path=data_args.dataset_path)
    records = load_records(
        data_args.dataset_path,
        split=data_args.train_split if Path(data_args.dataset_path).is_dir() else None,
        on_bad_record=data_args.on_bad_record,  # type: ignore[arg-type]
        report=report,
    )
    if report.skipped:
        print(f"medgrpo: skipped {len(report.skipped)} bad record(s); first: {report.skipped[0]}", file=sys.stderr)
    if data_args.max_train_samples is not None:
        records = records[: data_args.max_train_samples]
    if not records:
        raise RecordError(f"{data_args.dataset_path}: no usable training records")
    return records


def _safetensors_problem(path: Path) -> str | None:
    """Why a safetensors file is unusable (truncated, bad header), or None: its header states every byte range."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            return f"{path.name} is truncated"
        (header_len,) = struct.unpack("<Q", head)
        if 8 + header_len > size:
            return f"{path.name} is truncated"
        try:
            header = json.loads(fh.read(header_len))
        except (json.JSONDecodeError, UnicodeDecodeError):
            return f"{path.name} has a corrupt header"
    ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"]
    if 8 + header_len + max(ends, default=0) != size:
        return f"{path.name} is truncated ({size} bytes, header says {8 + header_len + max(ends, default=0)})"
    return None


def checkpoint_problem(folder: Path) -> str | None:
    """Why a ``checkpoint-N`` folder cannot be resumed from, or None when every file in it is whole.

    The Trainer writes ``trainer_state.json`` last, but a kill or a full disk can still leave a folder with that
    file and a short weight or optimizer file (rewriting a step's folder, or writes never flushed), so each file is
    checked against its own format: JSON parses, safetensors sizes match their headers, and ``torch.save`` files
    (zip archives: ``optimizer.pt``, ``scheduler.pt``, ``rng_state.pth``) have an intact central directory. This
    reads headers only, never the tensors, so it stays instant on a 7B checkpoint.
    """
    state_path = folder / "trainer_state.json"
    if not state_path.is_file():
        return "no trainer_state.json (saving was interrupted)"
    for path in sorted(folder.iterdir()):
        if not path.is_file():
            continue
        if path.suffix == ".json":
            try:
                json.loads(path.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError):
                return f"{path.name} is not valid JSON"
        elif path.suffix == ".safetensors":
            problem = _safetensors_problem(path)
            if problem:
                return problem
        elif path.suffix in (".pt", ".pth", ".bin"):
            try:
                with zipfile.ZipFile(path):
                    pass
            except (zipfile.BadZipFile, OSError):
                return f"{path.name} is truncated or not a torch.save archive"
    step = json.loads(state_path.read_text(encoding="utf-8")).get("global_step")
    if f"checkpoint-{step}" != folder.name:
        return f"trainer_state.json says step {step}"
    if not any(folder.glob("*.safetensors")):
        return "no weights (*.safetensors)"
    return None


def resume_checkpoint(output_dir: str, explicit: str | bool | None) -> str | None:
    """The checkpoint to resume from: the one named, else the last complete one in ``output_dir``, else None.

    Restarting a killed run with the same command therefore continues it. Each candidate is validated by
    :func:`checkpoint_problem`, newest first; a folder half-written by a kill during saving is named on stderr
    and passed over, never picked up. A named checkpoint that fails validation is an error.
    """
    if isinstance(explicit, str) and explicit:
        problem = checkpoint_problem(Path(explicit)) if Path(explicit).is_dir() else "no such folder"
        if problem:
            raise ValueError(f"resume_from_checkpoint {explicit}: {problem}")
        return explicit
    if explicit is False or not Path(output_dir).is_dir():
        return None
    steps = []
    for child in Path(output_dir).iterdir():
        match = re.fullmatch(r"checkpoint-(\d+)", child.name)
        if match and child.is_dir():
            steps.append((int(match.group(1)), child))
    for _, child in sorted(steps, reverse=True):
        problem = checkpoint_problem(child)
        if problem is None:
            print(f"medgrpo: resuming from {child}", file=sys.stderr)
            return str(child)
        print(f"medgrpo: skipping incomplete {child}: {problem}", file=sys.stderr)
    return None


def load_checkpoint_weights(model: Any, checkpoint: str) -> None:
    """Load a full-weight ``checkpoint-N`` into ``model`` in place, with the key renaming ``from_pretrained`` does.

    transformers 5 saves Qwen-VL weights under their original Hub names (``visual.*``, ``model.embed_tokens``),
    and ``Trainer._load_from_checkpoint`` loads that file with ``load_state_dict(strict=False)``: no key matches,
    a warning is logged, and a "resumed" run goes on from the weights it started with (measured: all 57 tensors of
    the tiny Qwen2.5-VL). Loading through ``from_pretrained`` applies the same conversion as every other load, and
    the strict copy turns any leftover mismatch into an error instead of a warning.
    """
    fresh = type(model).from_pretrained(checkpoint, dtype=model.dtype, use_safetensors=True)
    model.load_state_dict(fresh.state_dict(), strict=True)


class ResumeWeightsMixin:
    """Put before a TRL trainer class so resuming restores the weights (see :func:`load_checkpoint_weights`).

    PEFT adapters (loaded by name, unaffected) and FSDP/DeepSpeed checkpoints (their own formats) keep the
    Trainer's own path.
    """

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        model = self.model if model is None else model
        full = (Path(resume_from_checkpoint) / "model.safetensors").is_file() or (
            Path(resume_from_checkpoint) / "model.safetensors.index.json").is_file()
        if not full or hasattr(model, "peft_config") or self.is_fsdp_enabled or self.is_deepspeed_enabled:
            super()._load_from_checkpoint(resume_from_checkpoint, model)  # type: ignore[misc]
            return
        load_checkpoint_weights(self.accelerator.unwrap_model(model), resume_from_checkpoint)


def write_run_info(output_dir: str, stage: str, model_args: Any, training_args: Any, data_args: DataArguments) -> None:
    """``medgrpo_run.json``: the stage, base model, dataset and recipe, read by the exporter's model card."""
    recipe = {k: v for k, v in training_args.to_dict().items() if not k.startswith("_") and "token" not in k}
    info = {
        "stage": stage,
        "base_model": model_args.model_name_or_path,
        "datasets": [data_args.dataset_path],
        "data": asdict(data_args),
        "model": {k: v for k, v in asdict(model_args).items() if k != "model_name_or_path"},
        "recipe": recipe,
    }
    path = Path(output_dir) / RUN_INFO
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(info, indent=2, default=str))
    tmp.replace(path)


def cli(run: Callable[[list[str] | None], Any], argv: list[str] | None) -> int:
    """Run a stage, turning configuration and data errors into one line on stderr and exit code 2."""
    try:
        run(argv)
    except yaml.YAMLError as exc:  # a recipe that is not plain YAML (syntax, or a tag such as !!python/object)
        mark = getattr(exc, "problem_mark", None)
        where = f"{mark.name}:{mark.line + 1}" if mark is not None else "recipe"
        print(f"medgrpo: {where}: not a plain YAML recipe ({getattr(exc, 'problem', None) or exc})", file=sys.stderr)
        return 2
    except (ValueError, RecordError, FileNotFoundError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"medgrpo: {message}", file=sys.stderr)
        return 2
    return 0
