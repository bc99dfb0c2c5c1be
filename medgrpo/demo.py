"""``medgrpo demo --out DIR``: the whole two-stage pipeline on the embedded default, offline, on CPU.

build the demo tiny model -> generate MedAD-Synth -> SFT (recipes/tiny/sft.yaml) -> evaluate -> Con-GRPO
(recipes/tiny/con_grpo.yaml) -> evaluate again on the held-out split -> export -> a side-by-side table.

Every step calls the same public function the CLI and the recipes use; nothing here is a demo-only shortcut.
The demo's data is MedAD-Synth in its ``visible`` setting (large, contrasted lesions at one place per quadrant) with
brief reasoning and ``--option-order fixed`` (every class of the family listed, in class order): a 1.5M-parameter
model trained for minutes does not learn to look its conclusion up in a shuffled option list (measured: held-out
accuracy stayed at chance after 900 SFT steps), which real checkpoints do.
A finished step is reused when the demo is run again into the same folder (``--overwrite`` starts afresh).
Writes ``DIR/demo_report.json`` and ``DIR/demo_report.md``: the tables, and each overall change with a paired
95% interval, the held-out mean reward (:func:`held_out_reward`, the recipe's objective) first.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_RECIPES = Path(__file__).resolve().parents[1] / "recipes" / "tiny"
METRICS = ("accuracy", "format_rate", "consistency", "reasoning_accuracy", "evidence", "grounding_iou",
           "grounding_acc50")
METRICS_CHANGED = ("reward", "accuracy", "consistency", "reasoning_accuracy", "evidence", "grounding_iou")
"""The overall changes the report gives with a paired 95% interval (``reward``: :func:`held_out_reward`)."""
TITLES = {"reward": "reward", "accuracy": "accuracy", "format_rate": "format", "consistency": "consistency",
          "reasoning_accuracy": "reasoning acc.", "evidence": "evidence", "grounding_iou": "IoU",
          "grounding_acc50": "Acc@0.5"}


def _step(title: str) -> float:
    print(f"\n== medgrpo demo: {title}", file=sys.stderr, flush=True)
    return time.perf_counter()


def _done(start: float, timings: dict[str, float], key: str) -> None:
    timings[key] = round(time.perf_counter() - start, 1)
    print(f"   ({timings[key]} s)", file=sys.stderr, flush=True)


def _stage_args(recipe: Path, overrides: dict[str, Any]) -> list[str]:
    argv = ["--config", str(recipe)]
    for key, value in overrides.items():  # a list is several values after one flag, as HfArgumentParser reads it
        argv += [f"--{key}", *map(str, value if isinstance(value, list) else [value])]
    return argv


def _summary(metrics: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """``{"overall" | task: {metric: value}}`` from a ``metrics.json`` (format rate = 1 - failure rate)."""
    (dataset,) = metrics["datasets"].values()

    def pick(group: dict[str, Any]) -> dict[str, float | None]:
        row: dict[str, float | None] = {}
        for name in METRICS:
            key = "format_failure_rate" if name == "format_rate" else name
            value = group.get(key, {}).get("value")
            row[name] = (1.0 - value if name == "format_rate" else value) if value is not None else None
        return row

    out = {"overall": pick(dataset["overall"])}
    out.update({task: pick(group) for task, group in sorted(dataset["by_task"].items())})
    return out


def held_out_reward(config: Any) -> Callable[[dict[str, float | None]], float | None]:
    """The Con-GRPO config's own objective as a per-record metric: its weighted, shaped rewards
    (:func:`medgrpo.rewards.total_reward`) on an evaluation row's scores, i.e. what training would have paid the
    greedy completion (with the evidence and IoU as the evaluation scored them)."""
    from medgrpo.rewards import total_reward
    from medgrpo.train.con_grpo_trainer import reward_settings_from_config

    settings = reward_settings_from_config(config)
    return lambda scores: total_reward(scores, config.reward_funcs, config.reward_weights, settings)


def _change(sft_eval: Path, grpo_eval: Path, reward: Callable, task: str | None = None
            ) -> dict[str, dict[str, float | int]]:
    """``{metric: {baseline, run, delta, ci_low, ci_high, n}}`` of Con-GRPO over SFT, overall or on one task
    family, paired item by item on the held-out split: with a few hundred records a change of a few points can be
    noise, and the interval says so."""
    from medgrpo.eval.report import paired_deltas

    rows = paired_deltas(sft_eval, grpo_eval, extra={"reward": reward}, task=task)
    by_metric = {row["metric"]: row for row in rows}
    return {m: {k: by_metric[m][k] for k in ("baseline", "run", "delta", "ci_low", "ci_high", "n")}
            for m in METRICS_CHANGED if m in by_metric}


def pool_changes(changes: list[dict[str, dict[str, float | int]]]) -> dict[str, dict[str, float | int]]:
    """Several demo runs' changes (e.g. one per seed: each report's ``change``, or its ``change_by_task[task]``)
    pooled: per metric, the mean of the runs' changes weighted by their record counts, with a 95% interval from
    each run's paired interval read as a normal one (standard error = width / 3.92) and the runs taken as
    independent samples. Three seeds of 2,000 records judge a 2-point change that one seed's interval (about
    +-2.4 points) cannot.

    Raises:
        ValueError: no run, or a metric some run lacks.
    """
    if not changes:
        raise ValueError("pool_changes needs at least one run's changes")
    pooled = {}
    for metric in changes[0]:
        runs = [c.get(metric) for c in changes]
        if any(c is None for c in runs):
            raise ValueError(f"metric '{metric}' is missing from a run's changes")
        n = sum(c["n"] for c in runs)
        delta = sum(c["n"] * c["delta"] for c in runs) / n
        se = sum((c["n"] / n * (c["ci_high"] - c["ci_low"]) / 3.92) ** 2 for c in runs) ** 0.5
        pooled[metric] = {"delta": delta, "ci_low": delta - 1.96 * se, "ci_high": delta + 1.96 * se, "n": n,
                          "runs": len(runs)}
    return pooled


def _points(value: float, metric: str) -> str:
    """A change in percentage points, the reward (a weighted sum, not a rate) in its own units."""
    return f"{value:+.3f}" if metric == "reward" else f"{100 * value:+.1f}"


def format_change(change: dict[str, float | int], metric: str) -> str:
    """``+1.8 [-0.5, +4.3]``: a change and its 95% interval, in points (the reward in its own units)."""
    lo, hi = _points(change["ci_low"], metric), _points(change["ci_high"], metric)
    return f"{_points(change['delta'], metric)} [{lo}, {hi}]"


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def report_markdown(report: dict[str, Any]) -> str:
    """The side-by-side table: every metric after SFT and after Con-GRPO, per task family and overall."""
    sft, grpo = report["after_sft"], report["after_con_grpo"]
    header = "| task | " + " | ".join(f"{TITLES[m]} SFT | {TITLES[m]} Con-GRPO" for m in METRICS) + " |"
    lines = [
        "# medgrpo demo report",
        "",
        f"Model: tiny `{report['arch']}` (demo preset, random init), MedAD-Synth {report['n_train']} train / "
        f"{report['n_test']} held-out test records ({report.get('setting', 'realistic')} lesions, "
        f"{report['cot_style']} reasoning, options in {report['option_order']} order), "
        f"seed {report['seed']}. Chance accuracy is {report.get('chance', 0.25):.3f} (one over the options shown).",
        f"Mean training reward: first {report['grpo_reward_first']:.3f} -> last {report['grpo_reward_last']:.3f} "
        "(Con-GRPO, averaged over the first and last 20% of logged steps).",
        *([f"Mean reward on the held-out split (the Con-GRPO recipe's weighted rewards on each greedy "
           f"completion): SFT {report['change']['reward']['baseline']:.3f} -> Con-GRPO "
           f"{report['change']['reward']['run']:.3f}."] if "reward" in report["change"] else []),
        "",
        header,
        "|" + "---|" * (1 + 2 * len(METRICS)),
    ]
    for task in sft:
        cells = [f"{_fmt(sft[task][m])} | {_fmt(grpo.get(task, {}).get(m))}" for m in METRICS]
        lines.append(f"| {task} | " + " | ".join(cells) + " |")
    change = report["change"]
    if change:
        cells = [f"{TITLES[m]} {format_change(c, m)}" for m, c in change.items()]
        n = max(c["n"] for c in change.values())
        lines += ["", f"Change after Con-GRPO, overall, in points with a paired bootstrap 95% interval over the "
                  f"{n} held-out records (the reward in its own units; an interval that spans 0 is not a change "
                  "beyond noise): "
                  + "; ".join(cells) + "."]
    by_task = report.get("change_by_task") or {}
    if by_task:
        metrics = list(change)
        lines += ["", "Change after Con-GRPO per task family (paired bootstrap 95% intervals over its records):", "",
                  "| task | n | " + " | ".join(TITLES[m] for m in metrics) + " |", "|---|---|" + "---|" * len(metrics)]
        for task, c in by_task.items():
            n = max((x["n"] for x in c.values()), default=0)
            lines.append(f"| {task} | {n} | " + " | ".join(format_change(c[m], m) if m in c else "-" for m in metrics)
                         + " |")
    lines += ["", "Timings (s): " + ", ".join(f"{k} {v}" for k, v in report["timings"].items()), ""]
    return "\n".join(lines)


def _chance(data: Path) -> float:
    """What guessing scores on the held-out split: the mean of one over each record's number of options."""
    from medgrpo.data import load_records

    records = load_records(data, split="test")
    return sum(1 / len(r.options) for r in records) / len(records)


def _mean_reward(run_dir: Path) -> tuple[float, float]:
    history = json.loads((run_dir / "trainer_state.json").read_text())["log_history"]
    rewards = [entry["reward"] for entry in history if "reward" in entry]
    k = max(1, len(rewards) // 5)
    return sum(rewards[:k]) / k, sum(rewards[-k:]) / k


def run_demo(
    out: str | Path,
    arch: str = "qwen2_5_vl",
    seed: int = 42,
    n_train: int = 1500,
    n_test: int = 1000,
    recipes: str | Path = REPO_RECIPES,
    sft_overrides: dict[str, Any] | None = None,
    grpo_overrides: dict[str, Any] | None = None,
    max_new_tokens: int = 128,
    overwrite: bool = False,
    option_order: str = "fixed",
    cot_style: str = "brief",
    setting: str = "visible",
) -> dict[str, Any]:
    """Run the whole pipeline into ``out`` and return the report (also written as JSON and Markdown)."""
    from medgrpo.data.synth import generate_synth
    from medgrpo.eval.evaluate import evaluate
    from medgrpo.export import export_model
    from medgrpo.models.tiny import build_tiny_model
    from medgrpo.train.args import DataArguments, MedModelConfig
    from medgrpo.train.con_grpo import train_con_grpo
    from medgrpo.train.con_grpo_config import ConGRPOConfig
    from medgrpo.train.run import parse_args
    from medgrpo.train.sft import train_sft
    from medgrpo.train.sft_config import MedSFTConfig

    out = Path(out)
    recipes = Path(recipes)
    for name in ("sft.yaml", "con_grpo.yaml"):
        if not (recipes / name).is_file():
            raise FileNotFoundError(f"{recipes / name}: recipe not found (run the demo from a medgrpo checkout)")
    if overwrite and out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    paths = {name: out / name for name in ("model", "data", "sft", "eval_sft", "con_grpo", "eval_con_grpo",
                                           "export")}

    t = _step(f"build the demo tiny model ({arch})")
    if not (paths["model"] / "config.json").is_file():
        build_tiny_model(arch, "demo", paths["model"], seed=seed)
    _done(t, timings, "model")

    t = _step(f"generate MedAD-Synth ({n_train} train / {n_test} test)")
    if not (paths["data"] / "test.jsonl").is_file():
        generate_synth(paths["data"], n_train=n_train, n_test=n_test, seed=seed, cot_style=cot_style,
                       option_order=option_order, setting=setting)
    _done(t, timings, "data")

    common = {"dataset_path": paths["data"], "seed": seed}
    # Greedy evaluation with the same completion budget Con-GRPO samples with; batch 32 was fastest on 2 cores.
    eval_kwargs = {"batch_size": 32, "max_new_tokens": max_new_tokens}
    t = _step("stage 1: SFT cognitive injection")
    if not (paths["sft"] / "medgrpo_run.json").is_file():
        argv = _stage_args(recipes / "sft.yaml", {**common, "model_name_or_path": paths["model"],
                                                  "output_dir": paths["sft"], **(sft_overrides or {})})
        train_sft(*parse_args((DataArguments, MedSFTConfig, MedModelConfig), argv, "medgrpo demo"))
    _done(t, timings, "sft")

    t = _step("evaluate the SFT model on the held-out split")
    sft_metrics = evaluate(paths["sft"], paths["data"], paths["eval_sft"], seed=seed, **eval_kwargs)
    _done(t, timings, "eval_sft")

    t = _step("stage 2: Con-GRPO")
    argv = _stage_args(recipes / "con_grpo.yaml", {**common, "model_name_or_path": paths["sft"],
                                                   "output_dir": paths["con_grpo"], **(grpo_overrides or {})})
    grpo_args = parse_args((DataArguments, ConGRPOConfig, MedModelConfig), argv, "medgrpo demo")
    if not (paths["con_grpo"] / "medgrpo_run.json").is_file():
        train_con_grpo(*grpo_args)
    _done(t, timings, "con_grpo")

    t = _step("evaluate the Con-GRPO model on the held-out split")
    grpo_metrics = evaluate(paths["con_grpo"], paths["data"], paths["eval_con_grpo"], seed=seed, **eval_kwargs)
    _done(t, timings, "eval_con_grpo")

    t = _step("export to the Hugging Face Hub format")
    export_model(paths["con_grpo"], paths["export"], metrics=paths["eval_con_grpo"] / "metrics.json",
                 overwrite=True)
    _done(t, timings, "export")

    first, last = _mean_reward(paths["con_grpo"])
    reward = held_out_reward(grpo_args[1])
    report = {
        "arch": arch, "seed": seed, "n_train": n_train, "n_test": n_test, "option_order": option_order,
        "cot_style": cot_style, "setting": setting, "chance": _chance(paths["data"]),
        "after_sft": _summary(sft_metrics), "after_con_grpo": _summary(grpo_metrics),
        "change": _change(paths["eval_sft"], paths["eval_con_grpo"], reward),
        "change_by_task": {task: _change(paths["eval_sft"], paths["eval_con_grpo"], reward, task)
                           for task in _summary(sft_metrics) if task != "overall"},
        "grpo_reward_first": first, "grpo_reward_last": last,
        "timings": timings, "total_seconds": round(sum(timings.values()), 1),
        "paths": {k: str(v) for k, v in paths.items()},
    }
    (out / "demo_report.json").write_text(json.dumps(report, indent=2))
    (out / "demo_report.md").write_text(report_markdown(report))
    return report


def main(argv: list[str] | None = None) -> int:
    from medgrpo.data.synth import COT_STYLES, OPTION_ORDERS
    from medgrpo.data.synth_draw import SETTINGS

    parser = argparse.ArgumentParser(prog="medgrpo demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/demo", help="output folder (default: runs/demo)")
    parser.add_argument("--arch", default="qwen2_5_vl", choices=["qwen2_5_vl", "qwen2_vl", "qwen3_vl"])
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--n-train", type=int, default=1500)
    parser.add_argument("--n-test", type=int, default=1000,
                        help="held-out records (default 1000: 250 give intervals too wide to judge a 3-point change)")
    parser.add_argument("--recipes", default=str(REPO_RECIPES), help="folder holding sft.yaml and con_grpo.yaml")
    parser.add_argument("--option-order", choices=list(OPTION_ORDERS), default="fixed",
                        help="MedAD-Synth option order (default fixed: every class of the family, in class order)")
    parser.add_argument("--cot-style", choices=list(COT_STYLES), default="brief",
                        help="MedAD-Synth gold reasoning (default brief: fits the tiny model's generation budget)")
    parser.add_argument("--setting", choices=list(SETTINGS), default="visible",
                        help="MedAD-Synth lesions: visible (default) or realistic (the harder research setting)")
    parser.add_argument("--overwrite", action="store_true", help="delete --out first instead of reusing steps")
    args = parser.parse_args(argv)
    try:
        report = run_demo(args.out, arch=args.arch, seed=args.seed, n_train=args.n_train, n_test=args.n_test,
                          recipes=args.recipes, overwrite=args.overwrite, option_order=args.option_order,
                          cot_style=args.cot_style, setting=args.setting)
    except (ValueError, FileNotFoundError) as exc:
        print(f"medgrpo: {str(exc).strip().splitlines()[0]}", file=sys.stderr)
        return 2
    print(report_markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
