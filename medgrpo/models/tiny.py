"""Tiny random-init Qwen-VL models of the real architectures, built offline (``medgrpo tiny-model``).

No checkpoint can be downloaded on the CI and demo machines, yet the pipeline must run the very code paths a real
Qwen2-VL / Qwen2.5-VL / Qwen3-VL checkpoint takes. So we instantiate the real transformers classes through their
config classes at a tiny size, with a byte-level BPE trained on a generated medical corpus
(:mod:`medgrpo.models.corpus`) with Qwen2's pre-tokenizer, Qwen's special tokens, and what the real checkpoints ship
where the code makes assumptions (:data:`REAL`): the chat template (read from TRL's wheel), the grammar tokenized
as plain text, the EOS list, the sampling defaults of ``generation_config.json`` and the context length; and
Qwen's image/video processors with small pixel limits. The folder is written with ``save_pretrained`` and reloads offline with ``AutoProcessor`` +
``AutoModelForImageTextToText``. The same arch, preset and seed give byte-identical files.
"""

from __future__ import annotations

import argparse
import importlib.resources
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from tokenizers import AddedToken
from transformers import (
    GenerationConfig,
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2_5_VLProcessor,
    Qwen2Tokenizer,
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
    Qwen2VLImageProcessor,
    Qwen2VLProcessor,
    Qwen2VLVideoProcessor,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
    Qwen3VLProcessor,
    Qwen3VLVideoProcessor,
)

from medgrpo.models.corpus import train_bpe
from medgrpo.prompts import THINK_CLOSE, THINK_OPEN

PRESETS: dict[str, dict[str, Any]] = {
    # ci: the smallest shape that still exercises every code path (GQA, several layers so layer-indexed options
    # such as Qwen2.5-VL's full-attention blocks and Qwen3-VL's deepstack are real, 2x2 merged vision patches).
    # About 0.3M parameters: a build takes ~1 s and a CPU GRPO step well under a second.
    "ci": {
        "hidden_size": 64,  # 4 heads x head_dim 16: 8 rotary frequencies, split t:h:w as 2:3:3 (Qwen3: 4:2:2)
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,  # GQA as in every real Qwen-VL
        "intermediate_size": 128,
        "vision_hidden_size": 32,
        "vision_depth": 2,
        "vision_num_heads": 2,
        "vision_intermediate_size": 64,
        # merged image tokens per image (min, max): 56x56..112x112 px for Qwen2/2.5 (factor 28), 64..128 px for
        # Qwen3 (factor 32); a 128x128 original becomes 16 tokens, a tiny one is upscaled to 4.
        "image_tokens": (4, 16),
    },
    # demo: large enough to learn MedAD-Synth on CPU in minutes (the research brief measured 1.6M-5.1M params at
    # 1.1-1.5 s per GRPO step), small enough that SFT + GRPO fit in a few minutes on 2 cores. About 1.5M params.
    "demo": {
        "hidden_size": 128,  # head_dim 32: 16 rotary frequencies, split t:h:w as 4:6:6 (Qwen3: 6:5:5)
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 512,
        "vision_hidden_size": 64,
        "vision_depth": 2,
        "vision_num_heads": 2,
        "vision_intermediate_size": 256,
        # 16 tokens: a 128x128 synth image becomes 112x112 (Qwen2/2.5) or 128x128 (Qwen3), enough to see a lesion
        "image_tokens": (4, 16),
    },
}
"""Model and image sizes per preset; every number is shared by the three architectures."""

BPE_VOCAB_SIZE = 4096
"""Upper bound on learned BPE tokens; training stops earlier once every corpus word is one token (~1.5k)."""

SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
    "<|video_pad|>",
)  # fmt: skip
"""Qwen's special tokens, in Qwen's order, appended after the learned vocabulary as Qwen does."""

REAL: dict[str, dict[str, Any]] = {
    # What the real checkpoints ship, where the code makes an assumption (their config.json,
    # generation_config.json and tokenizer_config.json): context length, the EOS list generation stops at, the
    # sampling defaults generate() inherits, and the chat template TRL ships byte for byte.
    "qwen2_vl": {
        "template": "qwen2_5_vl.jinja",  # Qwen2-VL and Qwen2.5-VL share one template
        "max_position_embeddings": 32768,
        "model_max_length": 32768,
        "sampling": {"do_sample": True, "temperature": 0.01, "top_p": 0.001, "top_k": 1, "repetition_penalty": 1.0},
    },
    "qwen2_5_vl": {
        "template": "qwen2_5_vl.jinja",
        "max_position_embeddings": 128000,
        "model_max_length": 131072,
        "sampling": {"do_sample": True, "temperature": 0.1, "top_p": 0.001, "top_k": 1, "repetition_penalty": 1.05},
    },
    "qwen3_vl": {
        "template": "qwen3_vl.jinja",
        "max_position_embeddings": 262144,
        "model_max_length": 262144,
        "sampling": {"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.0},
    },
}
"""The real checkpoints' facts per architecture (Qwen2-VL-2B/7B-Instruct, Qwen2.5-VL-3B/7B-Instruct,
Qwen3-VL-4B-Instruct): a tiny model carries them so that every assumption the code makes about a checkpoint is
exercised offline."""


def chat_template(arch: str) -> str:
    """The real chat template of ``arch``, read from TRL's wheel (``trl/chat_templates/``), which TRL's CI checks
    byte for byte against the Hub's. It inserts Qwen's default system turn when there is none, renders images as
    ``<|vision_start|><|image_pad|><|vision_end|>``, and has no ``{% generation %}`` markers (TRL's
    ``get_training_chat_template`` supplies them for ``assistant_only_loss``)."""
    return (importlib.resources.files("trl") / "chat_templates" / REAL[arch]["template"]).read_text(encoding="utf-8")


class TinyModelError(ValueError):
    """A tiny-model request that cannot be built (unknown arch/preset, unusable output folder)."""


def _mrope_section(arch: str, head_dim: int) -> list[int]:
    """Split the rotary half-dimension into (temporal, height, width) frequencies, in the real models' ratios:
    Qwen2-VL / Qwen2.5-VL 16:24:24 (of 64), Qwen3-VL 24:20:20 interleaved. Sums to ``head_dim // 2``."""
    half = head_dim // 2
    hw = half * (20 if arch == "qwen3_vl" else 24) // 64
    return [half - 2 * hw, hw, hw]


def _config(arch: str, preset: dict[str, Any], ids: dict[str, int]) -> Any:
    """The real config class of ``arch`` at the preset's size, with every token id pointing at our tokenizer."""
    head_dim = preset["hidden_size"] // preset["num_attention_heads"]
    rope: dict[str, Any] = {"rope_type": "default", "mrope_section": _mrope_section(arch, head_dim)}
    text = {
        "vocab_size": ids["vocab_size"],
        "hidden_size": preset["hidden_size"],
        "intermediate_size": preset["intermediate_size"],
        "num_hidden_layers": preset["num_hidden_layers"],
        "num_attention_heads": preset["num_attention_heads"],
        "num_key_value_heads": preset["num_key_value_heads"],
        "max_position_embeddings": REAL[arch]["max_position_embeddings"],
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"],
    }
    vision: dict[str, Any] = {"depth": preset["vision_depth"], "num_heads": preset["vision_num_heads"]}
    if arch == "qwen2_vl":
        cls = Qwen2VLConfig
        rope["rope_theta"] = 1e6
        vision |= {
            "embed_dim": preset["vision_hidden_size"],
            "hidden_size": preset["hidden_size"],  # Qwen2-VL's name for the merger's output width
            "mlp_ratio": preset["vision_intermediate_size"] // preset["vision_hidden_size"],
        }
    elif arch == "qwen2_5_vl":
        cls = Qwen2_5_VLConfig
        rope["rope_theta"] = 1e6
        vision |= {
            "hidden_size": preset["vision_hidden_size"],
            "intermediate_size": preset["vision_intermediate_size"],
            "out_hidden_size": preset["hidden_size"],
            # windows of 2x2 merged tokens (real: 4x4 of a much larger image), full attention in the last block
            "window_size": 56,
            "fullatt_block_indexes": [preset["vision_depth"] - 1],
        }
    else:
        cls = Qwen3VLConfig
        rope["rope_theta"] = 5e6
        # as the real config says (transformers always interleaves Qwen3-VL; vLLM reads the flag)
        rope["mrope_interleaved"] = True
        text["head_dim"] = head_dim
        vision |= {
            "hidden_size": preset["vision_hidden_size"],
            "intermediate_size": preset["vision_intermediate_size"],
            "out_hidden_size": preset["hidden_size"],
            "num_position_embeddings": 64,  # an 8x8 grid of 16 px patches = the 128 px images it sees
            "deepstack_visual_indexes": [0],
        }
    text["rope_parameters"] = rope
    return cls(
        text_config=text,
        vision_config=vision,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,  # as the small real checkpoints (Qwen2-VL-2B, Qwen2.5-VL-3B, Qwen3-VL-2B)
    )


def build_tokenizer(arch: str = "qwen2_5_vl") -> Qwen2Tokenizer:
    """Qwen2's tokenizer class over our trained BPE, with Qwen's special tokens and, as the real checkpoints have
    them, the grammar of :mod:`medgrpo.prompts` as plain text (Qwen2-VL and Qwen2.5-VL split ``<answer>A`` into
    ``<``, ``answer``, ``>A``), except Qwen3-VL's ``<think>``/``</think>``, added non-special tokens there."""
    bpe = json.loads(train_bpe(BPE_VOCAB_SIZE))["model"]
    tokenizer = Qwen2Tokenizer(
        vocab=bpe["vocab"],
        merges=[tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in bpe["merges"]],
        unk_token=None,
        eos_token=None,
        pad_token=None,
    )
    tokenizer.add_tokens(
        [AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS], special_tokens=True
    )
    if arch == "qwen3_vl":
        tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in (THINK_OPEN, THINK_CLOSE)])
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.pad_token = "<|endoftext|>"
    tokenizer.chat_template = chat_template(arch)
    tokenizer.model_max_length = REAL[arch]["model_max_length"]
    return tokenizer


def _processor(arch: str, preset: dict[str, Any], tokenizer: Qwen2Tokenizer) -> Any:
    """Qwen's image + video processors with the preset's pixel limits (the ``size`` dict, in pixels)."""
    patch = 16 if arch == "qwen3_vl" else 14
    factor = patch * 2
    lo, hi = preset["image_tokens"]
    size = {"shortest_edge": lo * factor * factor, "longest_edge": hi * factor * factor}
    # Qwen3-VL normalises to [-1, 1]; Qwen2/2.5-VL keep the CLIP statistics (the processor defaults)
    norm = {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]} if arch == "qwen3_vl" else {}
    image_processor = Qwen2VLImageProcessor(
        size=size, patch_size=patch, merge_size=2, temporal_patch_size=2, **norm
    )
    video_cls = Qwen3VLVideoProcessor if arch == "qwen3_vl" else Qwen2VLVideoProcessor
    video_processor = video_cls(size=size, patch_size=patch, merge_size=2, temporal_patch_size=2, **norm)
    processor_cls = {
        "qwen2_vl": Qwen2VLProcessor,
        "qwen2_5_vl": Qwen2_5_VLProcessor,
        "qwen3_vl": Qwen3VLProcessor,
    }
    return processor_cls[arch](
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=chat_template(arch),
    )


MODEL_CLASSES = {
    "qwen2_vl": Qwen2VLForConditionalGeneration,
    "qwen2_5_vl": Qwen2_5_VLForConditionalGeneration,
    "qwen3_vl": Qwen3VLForConditionalGeneration,
}
"""The real transformers class of each supported architecture (``config.model_type``)."""


def build_tiny_model(
    arch: str, preset: str = "ci", out_dir: str | Path = "models/tiny", seed: int = 0
) -> Path:
    """Build a random-init ``arch`` model at ``preset`` size with its processor, and save it to ``out_dir``.

    The folder is assembled under a temporary name next to ``out_dir`` and renamed into place, so an interrupted
    build never leaves a half-written model. An existing tiny-model folder at ``out_dir`` is replaced; any other
    non-empty folder (a trained checkpoint, say) is refused.

    Returns:
        ``out_dir`` as a Path.

    Raises:
        TinyModelError: unknown ``arch``/``preset``, or ``out_dir`` is a file or a non-empty folder that this
            factory did not build.
    """
    if arch not in MODEL_CLASSES:
        raise TinyModelError(f"unknown arch '{arch}' (one of: {', '.join(MODEL_CLASSES)})")
    if preset not in PRESETS:
        raise TinyModelError(f"unknown preset '{preset}' (one of: {', '.join(PRESETS)})")
    out = Path(out_dir)
    if out.exists() and not (out.is_dir() and (not any(out.iterdir()) or _is_tiny_model(out))):
        raise TinyModelError(f"{out}: exists and is not a tiny-model folder; refusing to overwrite it")
    sizes = PRESETS[preset]

    tokenizer = build_tokenizer(arch)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS} | {"vocab_size": len(tokenizer)}
    config = _config(arch, sizes, ids)
    with torch.random.fork_rng(devices=[]):  # seed the init without disturbing the caller's RNG
        torch.manual_seed(seed)
        model = MODEL_CLASSES[arch](config).eval()
    # the real EOS list (<|im_end|>, then <|endoftext|>) and sampling defaults: code that generates must not
    # inherit them unknowingly (evaluation sets its own decoding)
    model.generation_config = GenerationConfig(
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
        pad_token_id=ids["<|endoftext|>"],
        **REAL[arch]["sampling"],
    )
    processor = _processor(arch, sizes, tokenizer)

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save_pretrained(tmp)
        processor.save_pretrained(tmp)
        (tmp / "README.md").write_text(_card(arch, preset, seed, tmp))
        _ordinary_permissions(tmp)
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
            os.replace(out, old / out.name)
            os.replace(tmp, out)
            shutil.rmtree(old)
        else:
            os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return out


_CARD_TITLE = "# Tiny random-init "


def _is_tiny_model(folder: Path) -> bool:
    """True for a folder this factory wrote (its model card says so)."""
    card = folder / "README.md"
    return card.is_file() and card.read_text().startswith(_CARD_TITLE)


def _ordinary_permissions(folder: Path) -> None:
    """Give the folder and its files the caller's usual modes: ``mkdtemp`` (and the safetensors writer) make
    private ones, which other users of a shared model folder could not read."""
    umask = os.umask(0)
    os.umask(umask)
    folder.chmod(0o777 & ~umask)
    for path in folder.iterdir():
        path.chmod(0o666 & ~umask)


def parameter_counts(model_dir: str | Path) -> dict[str, int]:
    """Parameters of a saved model, read from its safetensors headers (tied weights counted once):
    ``total``, ``vision`` (encoder + merger) and ``language`` (embeddings, decoder, head)."""
    counts = {"total": 0, "vision": 0, "language": 0}
    for path in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(path, framework="pt") as f:
            for name in f.keys():
                n = 1
                for d in f.get_slice(name).get_shape():
                    n *= d
                counts["total"] += n
                counts["vision" if ".visual." in f".{name}" else "language"] += n
    return counts


def _card(arch: str, preset: str, seed: int, folder: Path) -> str:
    c = parameter_counts(folder)
    return (
        f"{_CARD_TITLE}{arch} ({preset} preset)\n\n"
        f"Built offline by `medgrpo tiny-model --arch {arch} --preset {preset} --seed {seed}`: the real transformers "
        f"architecture at a tiny size with RANDOM weights, a BPE tokenizer trained on a generated medical corpus, "
        f"Qwen's chat format and processors. For tests and CPU demos; it knows nothing until trained.\n\n"
        f"Parameters: {c['total']:,} (vision {c['vision']:,}, language {c['language']:,}).\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="medgrpo tiny-model",
        description="Build a tiny random-init Qwen-VL model + processor offline and save it with save_pretrained.",
    )
    parser.add_argument("--arch", required=True, choices=list(MODEL_CLASSES))
    parser.add_argument(
        "--preset", default="ci", choices=list(PRESETS), help="ci: smallest, for tests; demo: learns"
    )
    parser.add_argument(
        "--out", required=True, type=Path, help="output folder (replaced if it holds a model)"
    )
    parser.add_argument("--seed", type=int, default=0, help="init seed; the same seed gives identical files")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        out = build_tiny_model(args.arch, args.preset, args.out, args.seed)
    except (TinyModelError, OSError) as exc:
        print(f"medgrpo: {exc}", file=sys.stderr)
        return 2
    c = parameter_counts(out)
    print(
        f"{args.arch} ({args.preset}, seed {args.seed}) -> {out} in {time.perf_counter() - start:.1f} s\n"
        f"parameters: {c['total']:,} total (vision {c['vision']:,}, language {c['language']:,})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
