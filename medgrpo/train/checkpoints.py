"""Checkpoints of a training stage: which one to resume from, and resuming with the weights really restored."""

from __future__ import annotations

import json
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

from accelerate import PartialState  # .print: once per machine, not once per rank


def _safetensors_problem(path: Path) -> str | None:
    """Why a safetensors file is unusable, or None: ``safetensors.safe_open`` reads its header and checks that the
    file holds every byte range it states (a short file is "not fully covered"), without loading a tensor."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt"):
            return None
    except SafetensorError as exc:
        return f"{path.name} is truncated or corrupt ({str(exc).removeprefix('Error while deserializing header: ')})"


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
            PartialState().print(f"medgrpo: resuming from {child}", file=sys.stderr)
            return str(child)
        PartialState().print(f"medgrpo: skipping incomplete {child}: {problem}", file=sys.stderr)
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
