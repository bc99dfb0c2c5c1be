"""Per-GPU memory of a GPU recipe, by arithmetic: will it start on an 80 GB card?

An estimate, not a measurement: bf16 weights, the reference model when ``beta > 0``, gradients and AdamW state by
ZeRO stage (DeepSpeed keeps fp32 master weights and two fp32 moments, 12 bytes per trainable parameter,
partitioned over the GPUs from ZeRO-1 on; DDP and FSDP keep the moments in the parameters' dtype), activations
with gradient checkpointing (one hidden state per layer per token, one layer recomputed, the completion logits in
fp32), and for colocated vLLM its share of the card (``vllm_gpu_memory_utilization``), which must hold its own
copy of the weights and the KV cache of one sequence of ``vllm_max_model_length`` tokens (vLLM refuses to start
otherwise; without the cap it reserves the model's whole context: 128,000 tokens for Qwen2.5-VL, 262,144 for
Qwen3-VL). The shapes are the real checkpoints' ``config.json`` values.

    python -m medgrpo.train.memory      # the table for every GPU recipe under its documented accelerate config
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

GB = 1024**3
GPU_GB = 80.0
"""The card the recipes are written for (A100/H100 80 GB)."""


@dataclass(frozen=True)
class Shape:
    """What memory depends on, from a real checkpoint's ``config.json``."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    vision_depth: int
    vision_hidden: int
    vision_intermediate: int
    context: int  # max_position_embeddings: what vLLM reserves without a cap
    pixels_per_token: int  # pixels of one merged image token: 28 x 28 (Qwen2.x-VL), 32 x 32 (Qwen3-VL)

    def language_params(self) -> int:
        attention = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        mlp = 3 * self.hidden * self.intermediate
        return self.layers * (attention + mlp) + self.vocab * self.hidden * (1 if self.tied else 2)

    def vision_params(self) -> int:
        block = 4 * self.vision_hidden**2 + 3 * self.vision_hidden * self.vision_intermediate
        merger = (4 * self.vision_hidden) ** 2 + 4 * self.vision_hidden * self.hidden
        return self.vision_depth * block + merger

    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * 2  # K and V, bf16


SHAPES: dict[str, Shape] = {
    "Qwen/Qwen2.5-VL-3B-Instruct": Shape(36, 2048, 11008, 16, 2, 128, 151936, True, 32, 1280, 3420, 128000, 784),
    "Qwen/Qwen2.5-VL-7B-Instruct": Shape(28, 3584, 18944, 28, 4, 128, 152064, False, 32, 1280, 3420, 128000, 784),
    "Qwen/Qwen3-VL-4B-Instruct": Shape(36, 2560, 9728, 32, 8, 128, 151936, True, 24, 1024, 4096, 262144, 1024),
}
"""The GPU recipes' checkpoints (a stage-1 folder has its base model's shape)."""

RECIPE_MODELS = {"qwen2.5-vl-3b": "Qwen/Qwen2.5-VL-3B-Instruct", "qwen2.5-vl-7b": "Qwen/Qwen2.5-VL-7B-Instruct",
                 "qwen3-vl-4b": "Qwen/Qwen3-VL-4B-Instruct"}
"""Recipe folder -> its checkpoint."""


def zero_stage(accelerate: dict[str, Any]) -> tuple[str, int]:
    """("deepspeed", stage), ("fsdp", 3) or ("ddp", 0) from an accelerate config."""
    if accelerate.get("distributed_type") == "DEEPSPEED":
        return "deepspeed", int((accelerate.get("deepspeed_config") or {}).get("zero_stage", 0))
    if accelerate.get("distributed_type") == "FSDP":
        return "fsdp", 3
    return "ddp", 0


def estimate(recipe: dict[str, Any], shape: Shape, accelerate: dict[str, Any], gpus: int) -> dict[str, float]:
    """GB per GPU for each part, and ``total``. ``recipe`` is a stage's YAML (SFT or Con-GRPO)."""
    engine, stage = zero_stage(accelerate)
    shard = gpus if stage == 3 else 1  # parameters split across GPUs (ZeRO-3, FSDP)
    params = shape.language_params() + shape.vision_params()
    trainable = params - (shape.vision_params() if recipe.get("freeze_vision_tower") else 0)
    if recipe.get("use_peft"):
        trainable = int(0.01 * params)  # LoRA adapters: about 1% of the weights at r=64 on every projection
    out = {"weights": 2 * params / shard / GB}
    if float(recipe.get("beta", 0.0) or 0.0) > 0 and "num_generations" in recipe:
        out["reference model"] = 2 * params / shard / GB
    out["gradients"] = 2 * trainable / (gpus if stage >= 2 else 1) / GB
    optimizer_bytes = 12 if engine == "deepspeed" else 4  # fp32 master + 2 fp32 moments, or 2 bf16 moments
    out["optimizer"] = optimizer_bytes * trainable / (gpus if stage >= 1 else 1) / GB
    # tokens of one sequence: the image's merged tokens, the prompt text, the completion (or the SFT target)
    image_tokens = int(recipe.get("max_pixels", 401408)) // shape.pixels_per_token
    completion = int(recipe.get("max_completion_length") or 512)
    tokens = image_tokens + 300 + completion
    batch = int(recipe.get("per_device_train_batch_size", 1))
    checkpointed = batch * tokens * shape.hidden * 2 * shape.layers
    one_layer = batch * tokens * (10 * shape.hidden + 4 * shape.intermediate) * 2
    logits = batch * completion * shape.vocab * 4 * 2  # fp32 logits and their softmax
    out["activations"] = (checkpointed + one_layer + logits) / GB
    if recipe.get("use_vllm") and recipe.get("vllm_mode", "colocate") == "colocate":
        out["vLLM (colocated)"] = float(recipe.get("vllm_gpu_memory_utilization", 0.9)) * GPU_GB
    out["total"] = sum(out.values()) + 2.0  # CUDA context, allocator fragmentation, NCCL buffers
    return out


def vllm_kv_fits(recipe: dict[str, Any], shape: Shape, gpus: int) -> tuple[bool, float, float]:
    """Whether colocated vLLM's share holds its weights and one sequence of the capped length:
    (fits, GB the KV cache needs, GB left for it)."""
    length = int(recipe.get("vllm_max_model_length") or shape.context)
    tp = int(recipe.get("vllm_tensor_parallel_size", 1) or 1)
    share = float(recipe.get("vllm_gpu_memory_utilization", 0.9)) * GPU_GB
    weights = 2 * (shape.language_params() + shape.vision_params()) / tp / GB
    need = length * shape.kv_bytes_per_token() / tp / GB
    left = share - weights - 2.0  # activations of vLLM's profiling run and its CUDA graphs
    return need <= left, need, left


def check_recipe(path: Path, accelerate_path: Path, gpus: int = 8) -> list[str]:
    """What keeps a GPU recipe from starting on ``gpus`` cards of 80 GB under that accelerate config (empty when
    it fits)."""
    recipe = yaml.safe_load(path.read_text(encoding="utf-8"))
    accelerate = yaml.safe_load(accelerate_path.read_text(encoding="utf-8"))
    shape = SHAPES[RECIPE_MODELS[path.parent.name]]
    problems = []
    parts = estimate(recipe, shape, accelerate, gpus)
    if parts["total"] > GPU_GB:
        problems.append(f"{path}: about {parts['total']:.0f} GB per GPU under {accelerate_path.name} "
                        f"(over {GPU_GB:.0f} GB)")
    if recipe.get("use_vllm"):
        if not recipe.get("vllm_max_model_length"):
            problems.append(f"{path}: use_vllm without vllm_max_model_length: vLLM reserves the whole "
                            f"{shape.context:,}-token context")
        fits, need, left = vllm_kv_fits(recipe, shape, gpus)
        if not fits:
            problems.append(f"{path}: vLLM's KV cache for one {recipe.get('vllm_max_model_length') or shape.context:,}"
                            f"-token sequence needs {need:.1f} GB, its share leaves {left:.1f} GB")
    return problems


def launch_config(path: Path) -> str:
    """The accelerate config a recipe's header documents (``--config_file recipes/accelerate_configs/X.yaml``;
    ``ddp.yaml`` when it names none: one GPU, or plain data parallelism)."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if "--config_file" in line:
            return line.split("--config_file", 1)[1].split()[0].rsplit("/", 1)[-1]
    return "ddp.yaml"


def table(root: Path, gpus: int = 8) -> str:
    """A markdown table of every GPU recipe's estimate."""
    rows = ["| recipe | accelerate config | weights | ref. model | grads | optimizer | activations | vLLM | "
            "total GB/GPU | vLLM KV need / room GB |", "|---|---|---|---|---|---|---|---|---|---|"]
    for folder in sorted(RECIPE_MODELS):
        shape = SHAPES[RECIPE_MODELS[folder]]
        for stage in ("sft", "con_grpo", "con_grpo_zero"):
            path = root / "recipes" / folder / f"{stage}.yaml"
            config = launch_config(path)
            recipe = yaml.safe_load(path.read_text(encoding="utf-8"))
            accelerate = yaml.safe_load((root / "recipes/accelerate_configs" / config).read_text(encoding="utf-8"))
            p = estimate(recipe, shape, accelerate, gpus)
            kv = "-"
            if recipe.get("use_vllm"):
                _, need, left = vllm_kv_fits(recipe, shape, gpus)
                kv = f"{need:.1f} / {left:.1f}"
            rows.append(
                f"| {folder}/{stage} | {config} | {p['weights']:.1f} | {p.get('reference model', 0):.1f} | "
                f"{p['gradients']:.1f} | {p['optimizer']:.1f} | {p['activations']:.1f} | "
                f"{p.get('vLLM (colocated)', 0):.0f} | {math.ceil(p['total'])} | {kv} |"
            )
    return "\n".join(rows)


if __name__ == "__main__":
    print(table(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".")))
