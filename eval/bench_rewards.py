"""Reward speed: the full rule-based stack on realistic ~300-token completions on one core, side by side with
one GRPO step of the demo tiny model (and the rewards' share of that step), and the judge backend's throughput
against a local tiny model.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python eval/bench_rewards.py [--n 4000] [--skip-step]

Completions are MedAD-Synth gold targets padded with extra reasoning sentences to about 300 tokens and varied
(wrong letters, missing boxes, hedges) so that every completion is distinct. Two figures: sentences shared
between completions as in a GRPO group (the claim reader caches sentences), and every sentence new (the worst
case). The five reward functions are called the way TRL calls them, one after the other on the same batch, so
the figures include the sharing that lets four of them reuse the first one's results. Every cache (sentences,
records, results) starts empty for each run, and a garbage collection before it leaves no set-up garbage to
collect inside the timing (the collections the rewards' own objects cause are timed: a full one takes tens of
ms, so a run moves by tens of percent with whether one falls inside it). Each figure is the median of
``--repeats`` cold runs, the two cases interleaved, with the best run beside it. Times are CPU time of this
process, so other load on the machine does not count (it still slows the process down: compare figures
measured side by side).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import re
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

EXTRA = [
    "The image quality is adequate for interpretation and there is no significant motion artefact.",
    "Window and level settings appear standard for this kind of study.",
    "The borders of the field of view are free of any relevant structure.",
    "Comparison with prior studies is not available, so the assessment relies on this image alone.",
    "The surrounding tissue is otherwise unremarkable and the overall symmetry is preserved.",
    "Attention is paid to the periphery of the image, where small findings are easily missed.",
    "The contrast between the structures is sufficient to separate them from the background.",
    "No foreign body, line or tube projects over the region of interest.",
    "The finding is assessed for its size, margins and internal texture before a conclusion is drawn.",
    "Each option is weighed against the visual evidence described above.",
]


def completions_for(
    records, frames, n: int, seed: int = 0, novel: bool = False
) -> tuple[list[str], list[int]]:
    """``n`` distinct, realistic completions and the index of the record each answers. ``novel``: tag every
    sentence with a unique number too, so that no sentence repeats (the claim reader's worst case)."""
    from medgrpo.prompts import build_target

    rng = random.Random(seed)
    texts, rows = [], []
    for i in range(n):
        j = rng.randrange(len(records))
        record, frame = records[j], frames[j]
        target = build_target(record, frame)
        think, answer = target.split("</think>")
        extra = rng.sample(EXTRA, 6)
        think = think + " " + " ".join(extra) + f" The scan was reviewed in {100 + i} seconds."
        roll = rng.random()
        if roll < 0.2:  # a wrong letter
            answer = answer.replace(f"<answer>{record.answer}<", f"<answer>{rng.choice(record.letters)}<")
        elif roll < 0.3:  # no box
            think = think.split("<box>")[0] + "." if "<box>" in think else think
        elif roll < 0.4:  # a hedge
            think += f" It could also be option {rng.choice(record.letters)}."
        if novel:
            think = re.sub(r"\.(?=\s)", lambda m, i=i: f" (note {i}-{m.start()}).", think)
        texts.append(think + "</think>" + answer)
        rows.append(j)
    return texts, rows


def columns_for(records, frames, rows) -> dict[str, list]:
    """The GRPO dataset columns of ``rows``, exactly as the dataset builder writes them (no images)."""
    from medgrpo.data.builders import grpo_columns

    per_row = [grpo_columns(records[j], frames[j]) for j in rows]
    return {k: [row[k] for row in per_row] for k in per_row[0]}


def clear_caches() -> None:
    from medgrpo.rewards.claims import _SETS, read, read_sentence
    from medgrpo.rewards.columns import _row
    from medgrpo.rewards.consistency import clear_contents
    from medgrpo.rewards.evidence import _checks
    from medgrpo.rewards.facts import _facts
    from medgrpo.rewards.parsing import _box_in

    clear_contents()
    _SETS.clear()
    for fn in (read, read_sentence, _box_in, _row, _facts, _checks):
        fn.cache_clear()


def rule_stack_seconds(records, frames, texts, rows, batch: int) -> tuple[float, float]:
    """CPU seconds of the five rewards called TRL-style on batches of ``batch``, from empty caches: (the first
    reward of each batch, the four others)."""
    from medgrpo.rewards import REWARDS

    clear_caches()
    gc.collect()  # no garbage from the set-up: the collections timed are the ones the rewards cause
    funcs = list(REWARDS.values())
    first = rest = 0.0  # CPU seconds of this process: the figure for one core, whatever else the machine runs
    for i in range(0, len(texts), batch):
        chunk = texts[i : i + batch]
        cols = columns_for(records, frames, rows[i : i + batch])
        start = time.process_time()
        funcs[0](prompts=None, completions=chunk, **cols)
        mid = time.process_time()
        for f in funcs[1:]:
            f(prompts=None, completions=chunk, **cols, log_metric=lambda k, v: None)
        rest += time.process_time() - mid
        first += mid - start
    return first, rest


def bench_rule_stack(records, frames, n: int, batch: int, repeats: int) -> dict[bool, float]:
    """Completions/s of the rule stack, sentences shared and every sentence new, ``repeats`` cold runs of each
    interleaved; prints the median and the best run. Returns the median CPU seconds per completion, keyed by
    ``novel`` (False: sentences shared as in a GRPO group; True: every sentence new)."""
    cases = {novel: completions_for(records, frames, n, novel=novel) for novel in (False, True)}
    runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for _ in range(repeats):
        for novel, (texts, rows) in cases.items():
            runs[novel].append(rule_stack_seconds(records, frames, texts, rows, batch))
    for novel, times in runs.items():
        totals = sorted(first + rest for first, rest in times)
        median = totals[len(totals) // 2]
        label = "every sentence new" if novel else "sentences shared as in a GRPO group"
        print(
            f"{'full rule stack, ' + label:<52} {n / median:>9,.0f} completions/s {median / n * 1e6:>6.0f} us each"
            f"   (best of {repeats}: {n / totals[0]:,.0f}/s)"
        )
        middle = sorted(times, key=sum)[len(times) // 2]
        print(f"{'  first reward of a batch (parse + all verifiers)':<52} {middle[0] / n * 1e6:>32.0f} us each")
        print(f"{'  the four other rewards (cache hits)':<52} {middle[1] / n * 1e6:>32.0f} us each")
    return {novel: sorted(first + rest for first, rest in times)[repeats // 2] / n for novel, times in runs.items()}


def describe(records, frames, n: int) -> None:
    from medgrpo.models.tiny import build_tokenizer

    texts, _ = completions_for(records, frames, min(n, 500))
    tok = build_tokenizer()
    n_tokens = sum(len(tok(t)["input_ids"]) for t in texts) / len(texts)
    print(
        f"completions: {n} distinct per run, mean {n_tokens:.0f} tokens (tiny BPE), "
        f"{sum(map(len, texts)) / len(texts):.0f} characters; CPU time of one process (one core)"
    )


def bench_grpo_step(synth: Path, records, per_completion_s: float, steps: int) -> None:
    import datasets  # noqa: F401  (imported before trl for a clean start-up order)
    from transformers import AutoProcessor, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from medgrpo.data.boxes import ImageGrid
    from medgrpo.data.builders import to_grpo_dataset
    from medgrpo.models.tiny import build_tiny_model
    from medgrpo.rewards import build_reward_funcs

    model_dir = build_tiny_model("qwen2_5_vl", "demo", synth.parent / "demo-model")
    processor = AutoProcessor.from_pretrained(model_dir)
    grid = ImageGrid.from_processor(processor, "qwen2_5_vl")
    dataset = to_grpo_dataset(records[:32], synth, grid)
    reward_time = [0.0]

    def timed(func):
        def call(*args, **kwargs):
            start = time.perf_counter()
            out = func(*args, **kwargs)
            reward_time[0] += time.perf_counter() - start
            return out

        call.__name__ = func.__name__
        return call

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times, self.start = [], 0.0

        def on_step_begin(self, args, state, control, **kw):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.times.append(time.perf_counter() - self.start)

    out = tempfile.mkdtemp(prefix="bench-grpo-")
    config = GRPOConfig(
        output_dir=out,
        bf16=False,
        gradient_checkpointing=False,
        num_generations=4,
        per_device_train_batch_size=16,
        max_completion_length=128,
        learning_rate=5e-4,
        beta=0.0,
        max_steps=steps,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=0,
        use_cpu=True,
        dataloader_num_workers=0,
    )
    timer = StepTimer()
    funcs = [
        timed(f) for f in build_reward_funcs(["format", "accuracy", "consistency", "evidence", "grounding"])
    ]
    trainer = GRPOTrainer(
        model=str(model_dir),
        reward_funcs=funcs,
        args=config,
        train_dataset=dataset,
        processing_class=processor,
        callbacks=[timer],
    )
    trainer.train()
    step = sum(timer.times[1:]) / max(1, len(timer.times) - 1)
    per_step_rewards = reward_time[0] / len(timer.times)
    print(f"{'GRPO step, demo qwen2_5_vl (16 completions x 128 tok)':<48} {step:>10.2f} s")
    print(
        f"{'  rewards measured inside those steps':<48} {per_step_rewards * 1e3:>10.2f} ms "
        f"({per_step_rewards / step:.2%} of the step)"
    )
    print(
        f"{'  16 completions at the benchmark rate':<48} {16 * per_completion_s * 1e3:>10.2f} ms "
        f"({16 * per_completion_s / step:.3%} of the step)"
    )


def bench_judge(synth: Path, records, frames, n: int) -> None:
    from medgrpo.models.tiny import build_tiny_model
    from medgrpo.rewards.judge import JudgeClient
    from medgrpo.rewards.settings import JudgeSettings

    model_dir = build_tiny_model("qwen2_5_vl", "ci", synth.parent / "ci-model")
    texts, rows = completions_for(records, frames, n, seed=1)
    for batch_size in (1, 8):
        client = JudgeClient(
            JudgeSettings(transport="local", model=str(model_dir), max_new_tokens=32, batch_size=batch_size)
        )
        client.score([(texts[0] + "warm-up", records[rows[0]])])
        start = time.perf_counter()
        client.score([(t, records[j]) for t, j in zip(texts, rows, strict=True)])
        elapsed = time.perf_counter() - start
        label = f"judge, local ci tiny model, batch {batch_size}, 32 new tok"
        print(
            f"{label:<52} {n / elapsed:>9.1f} completions/s (unparsed criteria: {client.stats['unparsed']})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4000, help="completions for the rule-stack figure")
    parser.add_argument("--batch", type=int, default=64, help="completions per TRL-style call")
    parser.add_argument("--repeats", type=int, default=5, help="cold runs of each rule-stack figure (median, best)")
    parser.add_argument("--steps", type=int, default=4, help="GRPO steps to time (the first is warm-up)")
    parser.add_argument("--judge-n", type=int, default=32, help="completions for the judge figure")
    parser.add_argument("--skip-step", action="store_true", help="skip the GRPO step measurement")
    parser.add_argument("--skip-judge", action="store_true", help="skip the judge measurement")
    args = parser.parse_args()

    from medgrpo.data import load_records
    from medgrpo.data.boxes import ImageGrid
    from medgrpo.data.synth import generate_synth

    synth = generate_synth(Path(tempfile.mkdtemp(prefix="bench-rewards-")) / "synth", n_train=100, n_test=10)
    records = load_records(synth, split="train")
    grid = ImageGrid("abs", 28, 56 * 56, 112 * 112)
    frames = [grid.frame(128, 128) for _ in records]
    per_completion = bench_rule_stack(records, frames, args.n, args.batch, args.repeats)[False]
    describe(records, frames, args.n)  # after the timing: tokenizer threads would count in this process's CPU
    if not args.skip_step:
        bench_grpo_step(synth, records, per_completion, args.steps)
    if not args.skip_judge:
        bench_judge(synth, records, frames, args.judge_n)


if __name__ == "__main__":
    main()
