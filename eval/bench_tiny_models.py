"""Tiny-model factory figures: build time, parameters, disk size, image tokens and generation speed per arch x preset.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python eval/bench_tiny_models.py [--out DIR]

Each build runs in this one process; the first also trains the shared BPE tokenizer (timed separately).
Generation: greedy, 32 new tokens from a 128x128 image through the chat template, after one warm-up call.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor
from trl.data_utils import prepare_multimodal_messages

from medgrpo.models.corpus import train_bpe
from medgrpo.models.tiny import BPE_VOCAB_SIZE, MODEL_CLASSES, PRESETS, build_tiny_model, parameter_counts
from medgrpo.prompts import SYSTEM_PROMPT


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="where to build (default: a temporary folder)")
    args = parser.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="tiny-bench-"))
    start = time.perf_counter()
    train_bpe(BPE_VOCAB_SIZE)
    print(f"tokenizer training: {time.perf_counter() - start:.2f} s")
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (128, 128, 3), dtype=np.uint8))
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "Which organ is shown?"},
    ]
    header = f"{'arch':<11} {'preset':<6} {'params':>10} {'vision':>9} {'language':>9} {'disk MB':>8} "
    print(header + f"{'build s':>8} {'img tok':>8} {'gen tok/s':>10}")
    for preset in PRESETS:
        for arch in MODEL_CLASSES:
            start = time.perf_counter()
            folder = build_tiny_model(arch, preset, root / f"{arch}-{preset}")
            build_s = time.perf_counter() - start
            counts = parameter_counts(folder)
            disk = sum(p.stat().st_size for p in folder.iterdir()) / 1e6
            processor = AutoProcessor.from_pretrained(folder)
            model = AutoModelForImageTextToText.from_pretrained(folder).eval()
            text = processor.apply_chat_template(
                prepare_multimodal_messages(messages, [image]), tokenize=False, add_generation_prompt=True
            )
            inputs = processor(text=[text], images=[image], return_tensors="pt")
            n_image = int((inputs["input_ids"] == model.config.image_token_id).sum())
            kwargs = {"max_new_tokens": 32, "min_new_tokens": 32, "do_sample": False}
            with torch.inference_mode():
                model.generate(**inputs, **kwargs)
                start = time.perf_counter()
                model.generate(**inputs, **kwargs)
                tok_s = 32 / (time.perf_counter() - start)
            print(
                f"{arch:<11} {preset:<6} {counts['total']:>10,} {counts['vision']:>9,} {counts['language']:>9,} "
                f"{disk:>8.2f} {build_s:>8.2f} {n_image:>8} {tok_s:>10.0f}"
            )


if __name__ == "__main__":
    main()
