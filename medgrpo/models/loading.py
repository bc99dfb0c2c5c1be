"""Loading a checkpoint that medgrpo (or anyone) saved: full weights or a LoRA adapter, safetensors only.

One loader for every stage that reads a model back: stage 2 starting from stage 1, evaluation and export.

* Weights load as safetensors only: a pickle checkpoint (``pytorch_model.bin``) can run arbitrary code on load,
  so it is refused; convert it with ``save_pretrained(..., safe_serialization=True)`` first.
* A LoRA adapter folder is put on its base model and, by default, merged. The base is the one the run's
  ``medgrpo_run.json`` names: a stage-2 LoRA trained on a merged stage-1 LoRA records the *original* base in its
  ``adapter_config.json`` (peft reads it from the merged model's config), while the weights it belongs on are the
  stage-1 output. Adapters can stack (each base may itself be an adapter folder).
* Names recorded by a run are paths relative to where it ran; :func:`locate` finds them from anywhere as long as
  the run folders stay together.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from medgrpo.prompts import SYSTEM_PROMPT, THINK_OPEN

ADAPTER_CONFIG = "adapter_config.json"
RUN_INFO = "medgrpo_run.json"
"""Provenance every medgrpo training stage writes next to its weights (stage, base model, data, recipe)."""
PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json")
MAX_ADAPTER_DEPTH = 8


class ModelLoadError(ValueError):
    """A model folder cannot be loaded (one line: which folder, and why)."""


def is_local_path(value: str) -> bool:
    """True for an absolute path, a home-relative path or a Windows drive path."""
    return value.startswith(("/", "~", "\\")) or bool(re.match(r"^[A-Za-z]:[\\/]", value))


def locate(name: str, near: Path | None = None) -> Path | None:
    """The local folder a recorded model/dataset name refers to, or None (then it is a Hub id).

    Training records paths as given on its command line, relative to where it ran; when the name does not
    resolve from here, the folders above ``near`` (the run folder) are tried, so ``runs/sft`` recorded by a run
    in ``project/`` is found from anywhere as long as the runs stay together.
    """
    candidates = [Path(name).expanduser()]
    if near is not None and not is_local_path(name):
        candidates += [parent / name for parent in Path(near).resolve().parents]
    return next((c for c in candidates if c.exists()), None)


def resolve_name(name: str, near: Path | None = None) -> str:
    """A recorded model name as something ``from_pretrained`` can open: the local folder, else the Hub id."""
    folder = locate(name, near)
    return str(folder) if folder is not None else name


def read_run_info(run_dir: Path) -> dict[str, Any] | None:
    """The stage's ``medgrpo_run.json`` (a ``checkpoint-N`` folder takes its run's), or None when absent."""
    path = run_dir / RUN_INFO
    if not path.is_file() and re.fullmatch(r"checkpoint-\d+", run_dir.name):
        path = run_dir.parent / RUN_INFO
    if not path.is_file():
        return None
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelLoadError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(info, dict):
        raise ModelLoadError(f"{path}: expected a JSON object, got {type(info).__name__}")
    return info


def trained_completion_length(info: dict[str, Any] | None) -> int | None:
    """The completion budget a stage trained with (its recipe's ``max_completion_length``), from its run info;
    None when it recorded none (an SFT stage, or no run info)."""
    recipe = (info or {}).get("recipe")
    value = recipe.get("max_completion_length") if isinstance(recipe, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def trained_system_prompt(info: dict[str, Any] | None) -> str | None:
    """The system turn a stage trained with, from its run info (:func:`read_run_info`): its data
    ``system_prompt`` (None = medgrpo's default, ``""`` = no system turn); the default without run info."""
    data = (info or {}).get("data")
    prompt = data.get("system_prompt") if isinstance(data, dict) else None
    if prompt is None:
        return SYSTEM_PROMPT
    return prompt if isinstance(prompt, str) and prompt else None


def adapter_base(run_dir: Path) -> str | None:
    """The model a PEFT adapter folder was trained on top of, or None when ``run_dir`` is not an adapter."""
    path = run_dir / ADAPTER_CONFIG
    if not path.is_file():
        return None
    info = read_run_info(run_dir)
    if info and isinstance(info.get("base_model"), str) and info["base_model"]:
        return info["base_model"]
    try:
        base = json.loads(path.read_text(encoding="utf-8")).get("base_model_name_or_path")
    except (OSError, json.JSONDecodeError, AttributeError) as e:
        raise ModelLoadError(f"{path}: not a valid adapter config ({e})") from None
    if not isinstance(base, str) or not base:
        raise ModelLoadError(f"{path}: field 'base_model_name_or_path' is missing: cannot find the base model")
    return base


def check_model_dir(path: Path) -> None:
    """A local model folder holds a config or an adapter, and no pickle-only weights."""
    if not path.is_dir():
        raise ModelLoadError(f"{path}: no such model folder")
    if not (path / "config.json").is_file() and not (path / ADAPTER_CONFIG).is_file():
        checkpoints = sorted((p for p in path.glob("checkpoint-*") if p.name[11:].isdigit()),
                             key=lambda p: int(p.name[11:]))
        hint = f" (pass one of its checkpoints, e.g. {checkpoints[-1]})" if checkpoints else ""
        raise ModelLoadError(f"{path}: no config.json or {ADAPTER_CONFIG}: not a model folder{hint}")
    has_safetensors = any(path.glob("*.safetensors"))
    if not has_safetensors and any(path.glob("*.bin")) and not (path / ADAPTER_CONFIG).is_file():
        raise ModelLoadError(f"{path}: weights are pickle files (*.bin), which medgrpo does not load; re-save them "
                             "with save_pretrained(..., safe_serialization=True)")


def load_model(
    path: str | Path,
    merge: bool = True,
    dtype: Any = "auto",
    trust_remote_code: bool = False,
    _depth: int = 0,
    **kwargs: Any,
) -> Any:
    """A model folder or Hub id as an ``AutoModelForImageTextToText``; an adapter folder goes onto its base.

    Args:
        path: a local folder (full weights or LoRA adapter) or a Hub id (offline: from the local cache).
        merge: merge an adapter into plain weights (else return the ``PeftModel``).
        dtype: as for ``from_pretrained`` (``"auto"``, a ``torch.dtype`` or its name).
        trust_remote_code: only when a recipe asks for it explicitly.
        **kwargs: passed to ``from_pretrained`` (e.g. ``attn_implementation``).
    """
    from transformers import AutoModelForImageTextToText

    if isinstance(dtype, str) and dtype != "auto":
        import torch

        dtype = getattr(torch, dtype)
    local = Path(path)
    if local.exists():
        check_model_dir(local)
    base = adapter_base(local) if local.is_dir() else None
    if base is None:
        return AutoModelForImageTextToText.from_pretrained(
            path, dtype=dtype, trust_remote_code=trust_remote_code, use_safetensors=True, **kwargs
        )
    if _depth >= MAX_ADAPTER_DEPTH:
        raise ModelLoadError(f"{path}: more than {MAX_ADAPTER_DEPTH} nested adapters: is base_model circular?")
    from peft import PeftModel

    base_model = load_model(resolve_name(base, local), True, dtype, trust_remote_code, _depth + 1, **kwargs)
    model = PeftModel.from_pretrained(base_model, path)
    return model.merge_and_unload() if merge else model


def processor_source(run_dir: Path) -> str:
    """Where a run's processor lives: the run folder (the trainer saves the one it used), else its base model."""
    if any((run_dir / name).is_file() for name in PROCESSOR_FILES):
        return str(run_dir)
    base = adapter_base(run_dir)
    if base is None:
        raise ModelLoadError(f"{run_dir}: no processor (processor_config.json); save it beside the weights with "
                             "processor.save_pretrained(...)")
    return processor_source(Path(resolve_name(base, run_dir))) if locate(base, run_dir) else base


def set_pixel_limits(processor: Any, min_pixels: int | None, max_pixels: int | None) -> None:
    """Set the image processor's pixel limits (its ``size`` dict); None keeps the current value."""
    size = dict(processor.image_processor.size)
    if min_pixels is not None:
        size["shortest_edge"] = int(min_pixels)
    if max_pixels is not None:
        size["longest_edge"] = int(max_pixels)
    processor.image_processor.size = size


def load_processor(path: str | Path, trust_remote_code: bool = False) -> Any:
    """The processor a run trained with: its own (or its base's), with the run's recorded pixel limits."""
    from transformers import AutoProcessor

    local = Path(path)
    source = processor_source(local) if local.is_dir() else str(path)
    processor = AutoProcessor.from_pretrained(source, trust_remote_code=trust_remote_code)
    check_generation_prompt(processor, source)
    data = ((read_run_info(local) if local.is_dir() else None) or {}).get("data") or {}
    set_pixel_limits(processor, data.get("min_pixels"), data.get("max_pixels"))
    return processor


def check_generation_prompt(processor: Any, source: str | Path) -> None:
    """Stop, in one line, on a chat template whose generation prompt already opens the reasoning (Qwen3-VL
    *Thinking* checkpoints pre-fill ``<think>``): completions would lack the opening tag the grammar needs, format
    would fail on every one and every reward would be zero, with nothing saying why."""
    template = getattr(processor, "chat_template", None) or getattr(getattr(processor, "tokenizer", None),
                                                                    "chat_template", None)
    if not isinstance(template, str):
        return
    messages = [{"role": "user", "content": "x"}]
    try:
        prompt = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    except Exception:  # a template that cannot render this is reported where it is used
        return
    if prompt.rstrip().endswith(THINK_OPEN):
        raise ModelLoadError(
            f"{source}: its chat template pre-fills '{THINK_OPEN}' in the generation prompt (a Qwen3-VL Thinking "
            f"checkpoint?), so completions would lack the opening tag medgrpo's grammar needs; use the Instruct "
            f"checkpoint, or save a chat template without the pre-filled tag in the model folder"
        )
