"""medgrpo's benchmark suite: one table of figures measured side by side in one run, each with its command.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python eval/bench.py [--quick] [--only trainer,scaling]
        [--preset ci|demo] [--out eval/results/bench.md]      (make bench)

Sections (``--only``):

* ``trainer``: ConGRPOTrainer (the recipe's five rewards) against plain ``trl.GRPOTrainer`` (format + accuracy),
  and ConGRPOTrainer with the same two rewards, on the same model, data and seed; stepped in turn, one step each
  per round, so that machine load hits all of them alike; the median over rounds of the per-round step-time
  ratio, with a bootstrap 95% interval.
  Also the share of a Con-GRPO step spent computing rewards and advantages.
* ``rewards``: the rule reward stack's throughput (eval/bench_rewards.py's measurement).
* ``images``: PNG, DICOM and cached image pipeline throughput (eval/bench_images.py's measurement).
* ``eval``: batched against per-sample generation (eval/bench_generation.py).
* ``scaling``: Con-GRPO step time against num_generations (2, 4, 8, 16) and max_completion_length (32, 64, 128),
  with the exponent of a least-squares power-law fit (1.0 = linear).
* ``memory``: host RSS slope over the steps of a longer Con-GRPO run (a leak shows as a positive slope).

Step times are CPU seconds of this process (one thread), so other load on a shared machine does not count; an
untrained tiny policy never stops early, so every completion has max_completion_length tokens.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import datetime
import gc
import io
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the per-area benchmark scripts beside this one

SECTIONS = ("trainer", "rewards", "images", "eval", "scaling", "memory")


@dataclass
class Row:
    name: str
    value: str
    target: str
    section: str


@dataclass
class Setup:
    """What every section shares: a tiny model, a small MedAD-Synth, the GRPO dataset built from it."""

    tmp: Path
    model: Path
    synth: Path
    quick: bool
    preset: str
    repeats: int = 240
    _dataset: object = None
    _processor: object = None

    def grpo_inputs(self):
        """(dataset, processor): built once; every trainer gets a freshly loaded model but the same data."""
        if self._dataset is None:
            from medgrpo.data import load_records, to_grpo_dataset
            from medgrpo.train.args import DataArguments, MedModelConfig
            from medgrpo.train.modeling import load_for_training

            data_args = DataArguments(dataset_path=str(self.synth))
            _, self._processor, grid = load_for_training(MedModelConfig(model_name_or_path=str(self.model)), data_args)
            self._dataset = to_grpo_dataset(load_records(self.synth, split="train"), self.synth, grid)
        return self._dataset, self._processor


def _cpu_step_times(trainer) -> list[float]:
    """Attach a callback timing each optimizer step in CPU seconds of this process; returns its list."""
    from transformers import TrainerCallback

    times: list[float] = []

    class StepTimer(TrainerCallback):
        start = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            StepTimer.start = time.process_time()

        def on_step_end(self, args, state, control, **kwargs):
            times.append(time.process_time() - StepTimer.start)

    trainer.add_callback(StepTimer())
    return times


def make_trainer(setup: Setup, kind: str, steps: int, generations: int = 4, length: int = 32):
    """A trainer on a freshly loaded model, the same data and seed.

    kind: ``con`` (ConGRPOTrainer, the recipe's rewards), ``con2`` (ConGRPOTrainer, format + accuracy) or
    ``trl`` (trl.GRPOTrainer, format + accuracy).
    """
    from trl import GRPOConfig, GRPOTrainer

    from medgrpo.models.loading import load_model
    from medgrpo.rewards import build_reward_funcs
    from medgrpo.train import con_grpo_trainer
    from medgrpo.train.con_grpo_config import ConGRPOConfig

    dataset, processor = setup.grpo_inputs()
    common = dict(output_dir=str(setup.tmp / f"run-{kind}"), bf16=False, gradient_checkpointing=False,
                  num_generations=generations, per_device_train_batch_size=2 * generations,
                  max_completion_length=length, learning_rate=5e-4, beta=0.0, temperature=1.0, max_steps=steps,
                  logging_steps=1, save_strategy="no", report_to=[], seed=0, use_cpu=True,
                  dataloader_num_workers=0, disable_tqdm=True)
    model = load_model(setup.model, dtype="float32")
    two = ["format", "accuracy"]
    if kind == "trl":
        return GRPOTrainer(model=model, reward_funcs=build_reward_funcs(two), args=GRPOConfig(**common),
                           train_dataset=dataset, processing_class=processor)
    config = ConGRPOConfig(**common) if kind == "con" else ConGRPOConfig(
        **common, reward_funcs=two, reward_weights=[1.0, 1.0])
    return con_grpo_trainer.ConGRPOTrainer(model=model, args=config, train_dataset=dataset,
                                           processing_class=processor)


def grpo_run(setup: Setup, kind: str, steps: int, generations: int = 4, length: int = 32,
             on_step: Callable[[], None] | None = None) -> list[float]:
    """Train ``steps`` steps with :func:`make_trainer`'s ``kind``; returns each step's CPU seconds."""
    from transformers import TrainerCallback

    trainer = make_trainer(setup, kind, steps, generations, length)
    times = _cpu_step_times(trainer)
    if on_step is not None:
        class Probe(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                on_step()

        trainer.add_callback(Probe())
    with contextlib.redirect_stdout(io.StringIO()):  # the Trainer prints every log dict
        trainer.train()
    return times


class _Stepper:
    """One trainer driven a step at a time through ``training_step`` (generation, rewards, advantages, loss,
    backward: everything ConGRPOTrainer overrides). The optimizer step and the Trainer's loop around it are the
    same code for both trainers and are left out; no weights change, so every step does the same work."""

    def __init__(self, trainer) -> None:
        self.trainer = trainer
        trainer.model.train()
        trainer.current_gradient_accumulation_steps = 1  # what the Trainer's loop sets before each step
        self.batches = iter(())

    def step(self) -> float:
        """One training step's CPU seconds of this process."""
        inputs = next(self.batches, None)
        if inputs is None:
            self.batches = iter(self.trainer.get_train_dataloader())
            inputs = next(self.batches)
        start = time.process_time()
        with contextlib.redirect_stdout(io.StringIO()):
            self.trainer.training_step(self.trainer.model, inputs, None)
        spent = time.process_time() - start
        self.trainer.model.zero_grad(set_to_none=True)
        return spent


def _steady(times: list[float]) -> float:
    """Median step time without the first step (allocations, lazy imports)."""
    return statistics.median(times[1:])


def median_interval(values: list[float], n_boot: int = 4000, seed: int = 0) -> tuple[float, float, float]:
    """The median of ``values`` with a percentile-bootstrap 95% interval (resampling the repeats)."""
    rng = np.random.default_rng(seed)
    data = np.asarray(values, float)
    boots = np.median(rng.choice(data, size=(n_boot, len(data)), replace=True), axis=1)
    return float(np.median(data)), float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))


def bench_trainer(setup: Setup) -> list[Row]:
    """The trainer's own overhead: ConGRPOTrainer against ``trl.GRPOTrainer`` with the same two rewards (and
    with the recipe's five), each built once, stepped in turn (the order rotating every round, so load and
    cache state hit all alike); per round the ratio of the two step times; the median ratio with a bootstrap 95%
    interval over the rounds. Whole runs timed one after another differ by more than their steps do (single runs
    gave 0.74-1.39), which hid a few percent; pairing adjacent steps of trainers that are both warm does not."""
    from medgrpo.train import con_grpo_trainer

    rounds = 6 if setup.quick else setup.repeats
    kinds = ("con", "con2", "trl")
    steppers = {kind: _Stepper(make_trainer(setup, kind, 1)) for kind in kinds}
    spent = {"rewards": 0.0, "advantages": 0.0}
    con = steppers["con"].trainer
    real_rewards, real_advantages = con._calculate_rewards, con_grpo_trainer.compute_advantages

    def timed(key: str, func: Callable) -> Callable:
        def call(*args, **kwargs):
            start = time.process_time()
            try:
                return func(*args, **kwargs)
            finally:
                spent[key] += time.process_time() - start

        return call

    con._calculate_rewards = timed("rewards", real_rewards)
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    try:
        con_grpo_trainer.compute_advantages = timed("advantages", real_advantages)
        for kind in kinds:  # warm-up: lazy imports, first allocations, the first batch's caches
            for _ in range(2):
                steppers[kind].step()
        spent.update(rewards=0.0, advantages=0.0)
        for r in range(rounds):
            for kind in kinds[r % 3:] + kinds[: r % 3]:
                times[kind].append(steppers[kind].step())
    finally:
        con_grpo_trainer.compute_advantages = real_advantages
    ratios = [c / t for c, t in zip(times["con"], times["trl"], strict=True)]
    ratios2 = [c / t for c, t in zip(times["con2"], times["trl"], strict=True)]
    ratio, ratio2 = median_interval(ratios), median_interval(ratios2)
    shape = f"{setup.preset} qwen2_5_vl, 2 prompts x 4 gen x 32 tok, {rounds} rounds of one step each"
    con_total = sum(times["con"])
    return [
        Row(f"ConGRPOTrainer (5 rewards) / trl.GRPOTrainer (format+accuracy) step time ({shape})",
            f"{ratio[0]:.3f} [{ratio[1]:.3f}, {ratio[2]:.3f}] ({statistics.median(times['con']):.3f} s / "
            f"{statistics.median(times['trl']):.3f} s)",
            "", "trainer"),
        Row("ConGRPOTrainer / trl.GRPOTrainer, both format+accuracy (trainer machinery alone), median with a "
            "bootstrap 95% interval over the rounds",
            f"{ratio2[0]:.3f} [{ratio2[1]:.3f}, {ratio2[2]:.3f}], single rounds {min(ratios2):.2f}-{max(ratios2):.2f}",
            "<= 1.03, interval within +-0.02", "trainer"),
        Row("share of a Con-GRPO step computing the five rewards", f"{spent['rewards'] / con_total:.1%}", "",
            "trainer"),
        Row("share of a Con-GRPO step computing advantages", f"{spent['advantages'] / con_total:.2%}", "",
            "trainer"),
    ]


def bench_rewards_section(setup: Setup) -> list[Row]:
    import bench_rewards

    from medgrpo.data import load_records
    from medgrpo.data.boxes import ImageGrid

    records = load_records(setup.synth, split="train")
    grid = ImageGrid("abs", 28, 56 * 56, 112 * 112)
    frames = [grid.frame(128, 128) for _ in records]
    n = 500 if setup.quick else 4000
    with contextlib.redirect_stdout(io.StringIO()):
        seconds = bench_rewards.bench_rule_stack(records, frames, n, 64, repeats=1 if setup.quick else 5)
    shared, novel = seconds[False], seconds[True]
    return [Row("rule reward stack (5 rewards, ~300-token completions), sentences shared as in a group",
                f"{1 / shared:,.0f} completions/CPU-s", "", "rewards"),
            Row("rule reward stack, every sentence new / shared (cache benefit)",
                f"{1 / novel:,.0f} completions/CPU-s ({novel / shared:.2f}x slower)", "", "rewards")]


def bench_images_section(setup: Setup) -> list[Row]:
    from bench_images import _ct_slice, _rate
    from PIL import Image

    from medgrpo.data.boxes import ImageGrid
    from medgrpo.data.dicom import write_dicom
    from medgrpo.data.preprocess import ImageSettings

    n = 40 if setup.quick else 200
    grid = ImageGrid("abs", 28, 56 * 56, 28 * 28 * 1280)
    rng = np.random.default_rng(0)
    root = setup.tmp / "images"
    root.mkdir()
    pngs, dicoms = [], []
    for i in range(n):
        Image.fromarray(rng.integers(0, 256, (512, 512, 3), dtype=np.uint8)).save(root / f"{i}.png")
        pngs.append(root / f"{i}.png")
        dicoms.append(write_dicom(root / f"{i}.dcm", _ct_slice(rng), rescale=(1.0, -1024.0), window=(40, 400)))
    cached = ImageSettings(window="lung", cache_dir=str(root / "cache"))
    png = _rate(pngs, grid, ImageSettings())[0]
    dicom = _rate(dicoms, grid, ImageSettings(window="lung"))[0]
    _rate(dicoms, grid, cached)  # fills the cache
    hit = _rate(dicoms, grid, cached)[0]
    return [Row("image pipeline, PNG 512x512 RGB load + resize", f"{png:,.0f} img/CPU-s", "", "images"),
            Row("image pipeline, DICOM 512x512 CT decode + window + resize (vs PNG)",
                f"{dicom:,.0f} img/CPU-s ({dicom / png:.2f}x PNG)", ">= 200 img/s", "images"),
            Row("image pipeline, cached re-read / DICOM decode", f"{hit / dicom:.1f}x ({hit:,.0f} img/CPU-s)",
                ">= 20x", "images")]


def bench_eval_section(setup: Setup) -> list[Row]:
    import bench_generation

    n = 8 if setup.quick else 16
    args = argparse.Namespace(model=str(setup.model), arch="qwen2_5_vl", data=str(setup.synth), n=n,
                              max_new_tokens=32, batch_sizes=str(n), repeats=1 if setup.quick else 2)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        bench_generation.bench(args, setup.tmp)
    line = re.search(rf"^\s*{n}\s+(\S+)\s+(\S+)\s+(\d+)/(\d+)$", out.getvalue(), re.M)
    speedup, same, total = float(line.group(2)), int(line.group(3)), int(line.group(4))
    return [Row(f"eval generation, batch {n} / one at a time ({setup.preset} model, 32 new tokens, wall)",
                f"{speedup:.2f}x, {same}/{total} outputs identical", ">= 4x", "eval")]


def _exponent(xs: list[int], ys: list[float]) -> float:
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def bench_scaling(setup: Setup) -> list[Row]:
    steps = 3 if setup.quick else 5
    gens, lengths = [2, 4, 8, 16], [32, 64, 128]
    by_gen = [_steady(grpo_run(setup, "con", steps, generations=g)) for g in gens]
    by_len = [_steady(grpo_run(setup, "con", steps, length=n)) for n in lengths]
    fmt = " / ".join
    return [Row(f"Con-GRPO step vs num_generations {gens} (2 prompts/step, 32 tok): exponent",
                f"{_exponent(gens, by_gen):.2f} ({fmt(f'{t:.2f}' for t in by_gen)} s)", "~1 (linear)", "scaling"),
            Row(f"Con-GRPO step vs max_completion_length {lengths} (2 prompts x 4 gen): exponent",
                f"{_exponent(lengths, by_len):.2f} ({fmt(f'{t:.2f}' for t in by_len)} s)", "~1 (linear)",
                "scaling")]


def bench_memory(setup: Setup) -> list[Row]:
    """RSS slope of Con-GRPO beside plain TRL on the same steps: growth both share is TRL's/torch's, not ours."""
    import psutil

    steps = 16 if setup.quick else 60
    process = psutil.Process()
    libc = ctypes.CDLL(ctypes.util.find_library("c")) if sys.platform == "linux" else None

    def retained() -> float:
        """RSS after a GC pass and glibc's trim: memory still held, not freed pages the allocator kept."""
        gc.collect()
        if libc is not None:
            libc.malloc_trim(0)
        return process.memory_info().rss / 2**20

    rows = []
    for kind, label in (("con", "ConGRPOTrainer (5 rewards)"), ("trl", "trl.GRPOTrainer (format+accuracy)")):
        rss: list[float] = []
        grpo_run(setup, kind, steps, on_step=lambda rss=rss: rss.append(retained()))
        half = rss[len(rss) // 2:]
        slope = float(np.polyfit(np.arange(len(half)), half, 1)[0])
        rows.append(Row(f"host RSS slope, {label}, over the last {len(half)} of {steps} steps",
                        f"{slope * 100:+.1f} MiB per 100 steps (RSS {rss[-1]:,.0f} MiB)", "~0 (no leak)", "memory"))
    return rows


RUNNERS: dict[str, Callable[[Setup], list[Row]]] = {
    "trainer": bench_trainer, "rewards": bench_rewards_section, "images": bench_images_section,
    "eval": bench_eval_section, "scaling": bench_scaling, "memory": bench_memory,
}


def machine() -> str:
    import torch
    import transformers
    import trl

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    return (f"{cpu}, {os.cpu_count()} cores visible, torch {torch.__version__} ({torch.get_num_threads()} thread), "
            f"transformers {transformers.__version__}, trl {trl.__version__}, Python {platform.python_version()}, "
            f"{platform.system()} {platform.release()}")


def table(rows: list[Row], quick: bool, preset: str) -> str:
    flags = (" --quick" if quick else "") + (f" --preset {preset}" if preset != "ci" else "")
    lines = ["| figure | measured | target | reproduce |", "|---|---|---|---|"]
    for row in rows:
        command = f"`.venv/bin/python eval/bench.py --only {row.section}{flags}`"
        lines.append(f"| {row.name} | {row.value} | {row.target} | {command} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats and steps (a smoke run)")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections: {', '.join(SECTIONS)}")
    parser.add_argument("--preset", default="ci", choices=["ci", "demo"], help="tiny model size for training rows")
    parser.add_argument("--repeats", type=int, default=240,
                        help="trainer section: rounds of one step per trainer (240 keep the ratio's 95%% interval "
                             "within +-0.02 on a 2-core host)")
    parser.add_argument("--out", type=Path, default=None,
                        help="write the table here (default: eval/results/bench.md on a full run, nowhere otherwise)")
    args = parser.parse_args(argv)
    sections = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        print(f"medgrpo: --only: unknown section(s) {', '.join(unknown)} (known: {', '.join(SECTIONS)})",
              file=sys.stderr)
        return 2
    out = args.out or (HERE / "results/bench.md" if set(sections) == set(SECTIONS) and not args.quick else None)

    from medgrpo.data.synth import generate_synth
    from medgrpo.models.tiny import build_tiny_model

    started = time.perf_counter()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="medgrpo-bench-") as tmp:
        tmp_path = Path(tmp)
        with contextlib.redirect_stderr(io.StringIO()):
            model = build_tiny_model("qwen2_5_vl", args.preset, tmp_path / "model", seed=0)
        synth = generate_synth(tmp_path / "synth", n_train=64, n_test=16, seed=0)
        setup = Setup(tmp_path, model, synth, args.quick, args.preset, args.repeats)
        for section in sections:
            section_start = time.perf_counter()
            rows += RUNNERS[section](setup)
            print(f"[{section}: {time.perf_counter() - section_start:.0f} s]", file=sys.stderr)
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    report = (f"# medgrpo benchmark\n\n{when}; {time.perf_counter() - started:.0f} s wall for the whole run.\n\n"
              f"Machine: {machine()}.\n\n{table(rows, args.quick, args.preset)}\n")
    print(report)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp_out = out.with_suffix(".tmp")
        tmp_out.write_text(report)
        tmp_out.replace(out)
        print(f"written to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
