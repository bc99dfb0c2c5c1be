"""Benchmark: evaluation generation, batched (left padding) against one sample at a time, same outputs.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python eval/bench_generation.py [--model DIR] [--n 32]

Builds the demo tiny model and a small MedAD-Synth split in a temporary folder unless --model/--data are given,
runs greedy generation over the same records one at a time and then at each batch size, and prints samples/s,
the speedup over the one-at-a-time loop and how many completions are identical to it. The target is >= 4x on
2 CPU cores. Model-free work (image preparation) is done once, outside the timed region.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="model folder (default: build the demo tiny Qwen2.5-VL)")
    p.add_argument("--arch", default="qwen2_5_vl")
    p.add_argument("--data", help="dataset folder (default: generate a small MedAD-Synth)")
    p.add_argument("--n", type=int, default=64, help="records to generate for")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--batch-sizes", default="8,16,32,64")
    p.add_argument("--repeats", type=int, default=2, help="timed repeats per setting; the best is reported")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="medgrpo-bench-") as tmp:
        bench(args, Path(tmp))


def bench(args: argparse.Namespace, tmp: Path) -> None:
    import torch

    from medgrpo.data import load_records
    from medgrpo.data.preprocess import prepare_images
    from medgrpo.eval.generate import Prompt, TransformersGenerator
    from medgrpo.prompts import build_prompt

    if args.model:
        model = Path(args.model)
    else:
        from medgrpo.models.tiny import build_tiny_model

        model = build_tiny_model(args.arch, "demo", out_dir=tmp / "model")
    if args.data:
        data = Path(args.data)
    else:
        from medgrpo.data.synth import generate_synth

        data = generate_synth(tmp / "synth", n_train=8, n_test=args.n, seed=0)
    gen = TransformersGenerator(model)
    records = load_records(data, split="test")[: args.n]
    prompts = []
    for r in records:
        images, frame = prepare_images(r, data, gen.grid)
        prompts.append(Prompt(build_prompt(r, frame), images))

    def run(batch_size: int) -> tuple[float, list[str]]:
        best, texts = float("inf"), []
        for _ in range(args.repeats):
            start = time.perf_counter()
            texts = []
            for i in range(0, len(prompts), batch_size):
                texts += [c[0].text for c in gen.generate(prompts[i:i + batch_size], max_new_tokens=args.max_new_tokens)]
            best = min(best, time.perf_counter() - start)
        return best, texts

    run(4)  # warm-up: first-call allocations and lazy imports stay out of the figures
    base_time, base_texts = run(1)
    print(f"model {model} ({args.arch}), {len(prompts)} records, max_new_tokens {args.max_new_tokens}, "
          f"torch threads {torch.get_num_threads()}")
    print(f"{'batch':>6} {'samples/s':>10} {'speedup':>8} {'identical':>10}")
    print(f"{1:>6} {len(prompts) / base_time:>10.2f} {1.0:>8.2f} {len(prompts):>5}/{len(prompts)}")
    best = (1, 1.0)
    for bs in (int(b) for b in args.batch_sizes.split(",")):
        t, texts = run(bs)
        same = sum(a == b for a, b in zip(texts, base_texts, strict=True))
        speedup = base_time / t
        print(f"{bs:>6} {len(prompts) / t:>10.2f} {speedup:>8.2f} {same:>5}/{len(prompts)}")
        if speedup > best[1] and same == len(prompts):
            best = (bs, speedup)
    print(f"best batch size with identical outputs: {best[0]} ({best[1]:.2f}x)")


if __name__ == "__main__":
    main()
