"""Host memory over a long Con-GRPO run: resident set size (RSS) per optimizer step on the ci tiny model, the fitted
growth (MB/step) and how many decoded PIL images are alive, so that a leak (images, completions, logs, reward
caches kept across steps) shows up as a slope long before it kills a multi-day GPU run.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python eval/bench_memory.py [--steps 200] [--out rss.json]

Unless --model/--data are given, builds in a temporary folder the ci Qwen2.5-VL tiny model and a small MedAD-Synth
whose gold reasoning is the one-sentence form (no ``cot``), and fine-tunes the model on it for a few SFT steps (a
separate process): the policy then writes well-formed 24-token completions most of the time, so every reward
parses real reasoning, its caches fill, and the advantages and gradients are not all zero, as they would be for a
random model. Con-GRPO then runs with the tiny recipe (all five rewards, 4 prompts x 4 generations) through the
same building blocks as ``medgrpo grpo``, plus a callback that samples RSS after every step. Two slopes, both
least-squares lines over the steps after a warm-up (allocator pools and lazily built caches fill first): over every
sample, and over the lowest RSS of each window of steps. The allocator's arenas make RSS a sawtooth of a few
hundred MB between steps; a leak lifts the floor of that sawtooth, which the second slope tracks.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]


def rss_mb() -> float:
    """Current resident set size of this process (Linux ``/proc/self/statm``)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def live_pil_images() -> int:
    """Decoded images still referenced anywhere in the process (bounded if images are released after use)."""
    import warnings

    from PIL import Image

    with warnings.catch_warnings():  # isinstance() on torch's deprecated module attributes warns
        warnings.simplefilter("ignore")
        return sum(isinstance(obj, Image.Image) for obj in gc.get_objects())


def reward_caches() -> list:
    """The reward verifiers' bounded LRU caches (sentences, record facts and checks): they fill with every new
    sentence until their ``maxsize``, a growth that is expected and stops."""
    return [fn for name, module in list(sys.modules.items()) if name.startswith("medgrpo.rewards")
            for fn in vars(module).values() if hasattr(fn, "cache_info")]


def clear_reward_caches() -> None:
    from medgrpo.rewards.claims import _SETS
    from medgrpo.rewards.consistency import clear_contents

    for fn in reward_caches():
        fn.cache_clear()
    clear_contents()  # the per-record content commitments (a bounded dict, not an LRU cache)
    _SETS.clear()  # the shared claim sets (bounded too)


def reward_cache_entries() -> int:
    from medgrpo.rewards import consistency

    return sum(fn.cache_info().currsize for fn in reward_caches()) + consistency._content_size[0]


def fit_slope(steps: list[int], values: list[float]) -> float:
    """Least-squares slope of ``values`` against ``steps``."""
    n = len(steps)
    mx, my = sum(steps) / n, sum(values) / n
    sxx = sum((x - mx) ** 2 for x in steps)
    return sum((x - mx) * (y - my) for x, y in zip(steps, values, strict=True)) / sxx


def run(model: Path, data: Path, out: Path, steps: int, image_every: int, clear_caches: bool) -> list[dict]:
    from transformers import TrainerCallback

    from medgrpo.data import to_grpo_dataset
    from medgrpo.train.args import DataArguments, MedModelConfig
    from medgrpo.train.con_grpo_config import ConGRPOConfig
    from medgrpo.train.con_grpo_trainer import ConGRPOTrainer
    from medgrpo.train.modeling import load_for_training
    from medgrpo.train.run import load_training_records, parse_args

    data_args, args, model_args = parse_args((DataArguments, ConGRPOConfig, MedModelConfig), [
        "--config", str(REPO / "recipes/tiny/con_grpo.yaml"), "--model_name_or_path", str(model),
        "--dataset_path", str(data), "--output_dir", str(out), "--max_steps", str(steps),
        "--max_completion_length", "24", "--report_to", "none", "--save_strategy", "no",
        "--logging_steps", "10", "--disable_tqdm", "true"], "bench_memory")
    samples: list[dict] = []

    class RSS(TrainerCallback):
        def on_step_end(self, _args, state, control, **kwargs):
            if clear_caches:
                clear_reward_caches()
            row = {"step": state.global_step, "rss_mb": rss_mb(), "time_s": time.perf_counter() - start}
            if state.global_step % image_every == 0 or state.global_step in (1, steps):
                row["pil_images"] = live_pil_images()
                row["reward_cache_entries"] = reward_cache_entries()
            samples.append(row)

    model_obj, processor, grid = load_for_training(model_args, data_args, args.trust_remote_code)
    dataset = to_grpo_dataset(load_training_records(data_args), data_args.root, grid,
                              settings=data_args.image_settings(), system_prompt=data_args.system_prompt_text())
    trainer = ConGRPOTrainer(model=model_obj, args=args, train_dataset=dataset, processing_class=processor,
                             callbacks=[RSS()])
    samples.append({"step": 0, "rss_mb": rss_mb(), "time_s": 0.0, "pil_images": live_pil_images(),
                    "reward_cache_entries": reward_cache_entries()})
    start = time.perf_counter()
    trainer.train()
    return samples


def short_reasoning_data(synth: Path, out: Path) -> Path:
    """A copy of ``synth`` whose records have no ``cot``: gold completions of 12-20 tokens."""
    from medgrpo.data import load_records, write_records

    records = load_records(synth, split="train")
    for record in records:
        record.cot = None
    (out / "images").mkdir(parents=True)
    for image in sorted({path for record in records for path in record.images}):
        (out / image).write_bytes((synth / image).read_bytes())
    write_records(records, out / "train.jsonl")
    return out


def sft(model: Path, data: Path, out: Path, steps: int) -> Path:
    """A few SFT steps in a child process, so that the measured process holds nothing of them."""
    subprocess.run([sys.executable, "-m", "medgrpo.train", "sft", "--config", str(REPO / "recipes/tiny/sft.yaml"),
                    "--model_name_or_path", str(model), "--dataset_path", str(data), "--output_dir", str(out),
                    "--max_steps", str(steps), "--per_device_train_batch_size", "4", "--learning_rate", "1e-2",
                    "--warmup_steps", "0", "--report_to", "none", "--save_strategy", "no", "--disable_tqdm", "true"],
                   check=True, stdout=subprocess.DEVNULL)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20, help="steps left out of the fitted slope")
    p.add_argument("--model", type=Path, help="a model folder (default: build the ci qwen2_5_vl tiny model)")
    p.add_argument("--data", type=Path, help="a MedAD dataset folder (default: a 60-record MedAD-Synth, short CoT)")
    p.add_argument("--sft-steps", type=int, default=80, help="SFT steps before GRPO on the built model (0: none)")
    p.add_argument("--window", type=int, default=20, help="steps per window of the floor slope")
    p.add_argument("--image-every", type=int, default=50, help="count live PIL images every N steps (slow)")
    p.add_argument("--clear-reward-caches", action="store_true",
                   help="empty the reward caches after every step (the control that attributes growth to them)")
    p.add_argument("--out", type=Path, help="write the per-step samples and the fit as JSON")
    a = p.parse_args(argv)
    if a.steps <= a.warmup + 1:
        print(f"medgrpo: --steps ({a.steps}) must exceed --warmup ({a.warmup}) + 1", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        model, data = a.model, a.data
        if data is None:
            from medgrpo.data.synth import generate_synth

            synth = generate_synth(Path(tmp) / "synth", n_train=60, n_test=4, seed=0)
            data = short_reasoning_data(synth, Path(tmp) / "short")
        if model is None:
            from medgrpo.models.tiny import build_tiny_model

            model = build_tiny_model("qwen2_5_vl", "ci", Path(tmp) / "tiny", seed=0)
            if a.sft_steps:
                model = sft(model, data, Path(tmp) / "sft", a.sft_steps)
        samples = run(model, data, Path(tmp) / "run", a.steps, a.image_every, a.clear_reward_caches)

    fitted = [s for s in samples if s["step"] > a.warmup]
    slope = fit_slope([s["step"] for s in fitted], [s["rss_mb"] for s in fitted])
    windows = [fitted[i:i + a.window] for i in range(0, len(fitted), a.window)]
    floors = [(w[-1]["step"], min(s["rss_mb"] for s in w)) for w in windows if len(w) == a.window]
    floor_slope = fit_slope([f[0] for f in floors], [f[1] for f in floors]) if len(floors) > 1 else float("nan")
    last = samples[-1]
    summary = {
        "steps": last["step"],
        "rss_start_mb": samples[0]["rss_mb"],
        "rss_after_warmup_mb": fitted[0]["rss_mb"],
        "rss_end_mb": last["rss_mb"],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "slope_mb_per_step": slope,
        "floor_slope_mb_per_step": floor_slope,
        "window_floors_mb": floors,
        "projected_floor_mb_per_10k_steps": floor_slope * 10_000,
        "pil_images": {s["step"]: s["pil_images"] for s in samples if "pil_images" in s},
        "reward_cache_entries": {s["step"]: s["reward_cache_entries"] for s in samples if "pil_images" in s},
        "seconds_per_step": last["time_s"] / max(last["step"], 1),
    }
    print(f"{'step':>6} {'RSS MB':>9} {'PIL images':>11} {'reward cache entries':>21}")
    for s in samples:
        if "pil_images" in s:
            print(f"{s['step']:>6} {s['rss_mb']:>9.1f} {s['pil_images']:>11} {s['reward_cache_entries']:>21}")
    print(f"\nRSS: start {summary['rss_start_mb']:.1f} MB, after warm-up (step {fitted[0]['step']}) "
          f"{summary['rss_after_warmup_mb']:.1f} MB, end {summary['rss_end_mb']:.1f} MB, peak "
          f"{summary['peak_rss_mb']:.1f} MB")
    print("window floors (last step, min RSS MB): " + ", ".join(f"{step} {mb:.0f}" for step, mb in floors))
    print(f"slope over steps {fitted[0]['step']}-{last['step']}: every sample {slope:+.4f} MB/step, window floors "
          f"{floor_slope:+.4f} MB/step ({summary['projected_floor_mb_per_10k_steps']:+.0f} MB per 10k steps); "
          f"{summary['seconds_per_step']:.2f} s/step")
    if a.out:
        tmp_out = a.out.with_suffix(a.out.suffix + ".tmp")
        tmp_out.write_text(json.dumps({"summary": summary, "samples": samples}, indent=1))
        tmp_out.replace(a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
