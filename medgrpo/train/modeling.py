"""Loading a Qwen-VL model and its processor for training: one place for the rules every stage shares.

* weights load through :func:`medgrpo.models.loading.load_model` (safetensors only; a LoRA output folder is put on
  its base and merged, so stage 2 starts from the stage-1 weights whether stage 1 trained LoRA or the full model);
  ``trust_remote_code`` only when a recipe asks for it;
* the processor's pixel limits are set from the recipe, and the :class:`~medgrpo.data.boxes.ImageGrid` that the data
  pipeline resizes to is read back from that same processor.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from medgrpo.data.boxes import BOX_FORMATS, ImageGrid
from medgrpo.models.loading import check_model_dir, load_model, set_pixel_limits
from medgrpo.models.loading import load_processor as load_run_processor
from medgrpo.train.args import DataArguments, MedModelConfig


def check_model_path(path: str | None) -> None:
    """Fail early, in one line, when a model path is neither a local folder nor a hub id that can be fetched."""
    if not path:
        raise ValueError("model_name_or_path is not set: name a model folder or a hub id in the recipe")
    if os.path.exists(path):
        check_model_dir(Path(path))
        return
    looks_like_hub_id = path.count("/") == 1 and not path.startswith((".", "/", "~"))
    if not looks_like_hub_id:
        raise ValueError(f"model_name_or_path '{path}' does not exist")
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        from huggingface_hub import try_to_load_from_cache

        if not isinstance(try_to_load_from_cache(path, "config.json"), str):
            raise ValueError(f"model '{path}' is not in the local hub cache and HF_HUB_OFFLINE=1: download it first")


def load_processor(path: str, data_args: DataArguments, trust_remote_code: bool = False):
    """The run's processor (:func:`medgrpo.models.loading.load_processor`) with the recipe's pixel limits on top,
    left-padded as generation needs."""
    processor = load_run_processor(path, trust_remote_code=trust_remote_code)
    set_pixel_limits(processor, data_args.min_pixels, data_args.max_pixels)
    processor.tokenizer.padding_side = "left"
    return processor


def image_grid(processor: Any, model_type: str) -> ImageGrid:
    if model_type not in BOX_FORMATS:
        raise ValueError(f"unsupported model_type '{model_type}' (medgrpo supports: {', '.join(BOX_FORMATS)})")
    return ImageGrid.from_processor(processor, model_type)


def freeze_vision_tower(model: torch.nn.Module) -> int:
    """Freeze the vision encoder of a Qwen-VL model; returns how many parameters were frozen."""
    frozen = 0
    for name, param in model.named_parameters():
        if ".visual." in f".{name}" or name.startswith("visual."):
            param.requires_grad_(False)
            frozen += param.numel()
    if frozen == 0:
        raise ValueError("freeze_vision_tower: found no vision tower parameters ('visual.*') in this model")
    return frozen


def load_for_training(model_args: MedModelConfig, data_args: DataArguments, trust_remote_code: bool = False):
    """Model, processor and image grid for a training stage, from the recipe's model and data arguments."""
    path = model_args.model_name_or_path
    processor = load_processor(path, data_args, trust_remote_code=trust_remote_code)  # cheap checks first
    model = load_model(
        path,
        dtype=model_args.dtype or "auto",
        trust_remote_code=trust_remote_code,
        attn_implementation=model_args.attn_implementation,
    )
    if model_args.freeze_vision_tower:
        freeze_vision_tower(model)
    return model, processor, image_grid(processor, model.config.model_type)
