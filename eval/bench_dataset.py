"""Host memory and time of building a training dataset at the GPU recipes' image size, side by side: the
builders' streamed, memory-mapped rows (``to_grpo_dataset``) against the same rows held in memory
(``datasets.Dataset.from_list`` of PIL images, how the builders worked before).

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python eval/bench_dataset.py [--n 100 400] [--side 640]

Each build runs in its own process, so its peak resident set size (RSS) is its own. The images are noisy
``side`` x ``side`` grayscale PNGs (noise compresses badly: the worst case for bytes per image), resized to the
recipes' ``max_pixels`` (401,408). Printed per build: records, peak RSS, its growth over the process before the
build, seconds per record.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

MAX_PIXELS = 401408  # recipes/qwen2.5-vl-*/sft.yaml


def make_source(folder: Path, n: int, side: int) -> None:
    """``n`` distinct noisy PNGs and a ``train.jsonl`` of modality questions about them."""
    import numpy as np
    from PIL import Image

    (folder / "images").mkdir(parents=True)
    base = np.random.default_rng(0).integers(0, 256, size=(side, side), dtype=np.uint8)
    rows = []
    for i in range(n):
        Image.fromarray(np.roll(base, i, axis=0)).save(folder / "images" / f"{i}.png")
        rows.append({"id": f"r{i}", "images": [f"images/{i}.png"], "question": "Which imaging modality is this?",
                     "options": ["CT", "MRI", "X-ray", "ultrasound"], "answer": "A",
                     "task": "modality_classification", "modality": "CT"})
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def build(folder: str, mode: str) -> None:
    """One build in this process; prints a JSON line of figures."""
    import resource
    import time

    import datasets

    from medgrpo.data import load_records, to_grpo_dataset
    from medgrpo.data.boxes import ImageGrid
    from medgrpo.data.builders import GRPO_FEATURES, grpo_columns
    from medgrpo.data.preprocess import prepare_images
    from medgrpo.prompts import build_prompt

    records = load_records(folder, split="train")
    grid = ImageGrid("abs", 28, 3136, MAX_PIXELS)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    if mode == "streamed":
        dataset = to_grpo_dataset(records, folder, grid)
    else:
        rows = []
        for record in records:
            images, frame = prepare_images(record, folder, grid)
            rows.append({"prompt": build_prompt(record, frame), "images": images, **grpo_columns(record, frame)})
        dataset = datasets.Dataset.from_list(rows, features=GRPO_FEATURES)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert len(dataset) == len(records)
    print(json.dumps({"n": len(records), "peak_mb": peak, "growth_mb": peak - before, "s_per_record": seconds / len(records)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[100, 400], help="records per build")
    parser.add_argument("--side", type=int, default=640, help="source image side in pixels")
    args = parser.parse_args()
    print(f"{'build':<44} {'records':>8} {'peak RSS':>10} {'growth':>10} {'s/record':>9}")
    for n in args.n:
        with tempfile.TemporaryDirectory(prefix="bench-dataset-") as tmp:
            make_source(Path(tmp), n, args.side)
            for mode, label in (("memory", "in memory (Dataset.from_list of PIL rows)"),
                                ("streamed", "streamed, memory-mapped (to_grpo_dataset)")):
                out = subprocess.run([sys.executable, __file__, "--build", tmp, mode], capture_output=True,
                                     text=True, check=True).stdout.strip().splitlines()[-1]
                r = json.loads(out)
                print(f"{label:<44} {r['n']:>8} {r['peak_mb']:>7.0f} MB {r['growth_mb']:>7.0f} MB "
                      f"{r['s_per_record']:>9.3f}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--build":
        build(sys.argv[2], sys.argv[3])
    else:
        main()
