"""``medgrpo ablate``: the same SFT checkpoint through Con-GRPO once per variant and seed, each evaluated on the held-out
split, summarised as a table (markdown + JSON) and a learning-curve PNG.

    medgrpo ablate --config recipes/tiny/con_grpo.yaml --sft runs/tiny/sft --dataset data/medad-synth \\
        --variants baseline,hadw,equal_right --seeds 3 --max-steps 30 --eval-limit 100 --out runs/ablate

Each variant is a named set of :class:`~medgrpo.train.con_grpo_config.ConGRPOConfig` fields (:data:`VARIANTS`), so a
row of the table differs from ``baseline`` in exactly those fields. Finished runs (their ``medgrpo_run.json`` and
``metrics.json`` exist) are reused, so an interrupted ablation continues where it stopped (``--finished-only``
tabulates the finished ones without training). The table gives mean +- std over seeds and, per metric, the change
over ``baseline``: for accuracy, consistency, evidence and Acc@0.5 paired record by record with the same seed's
baseline run and pooled over seeds, with its 95% interval; for rollouts and time the difference of the means with its
standard error.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

VARIANTS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "norm_batch": {"scale_rewards": "batch"},
    "norm_none": {"scale_rewards": "none"},
    "gdpo": {"multi_objective_aggregation": "normalize_then_sum"},
    "equal_right": {"advantage_estimator": "equal_right"},
    "taros": {"advantage_estimator": "taros", "taros_sparsity": 0.25},
    "ips": {"ips_scaling": True},
    "hadw": {"hadw": True},
    "drpo": {"drpo_scaling": True},
    "gcpo": {"golden_injection": True},
    "david": {"gold_seed_steps": 5},
    "ar3po": {"response_reuse": True},
    "dapo_resample": {"dynamic_sampling_tries": 2},
    "dapo_skip": {"dynamic_sampling_tries": 2, "skip_zero_variance": True},
    "tic": {"trajectory_ratio": True},
    "scope": {"scope_coef": 0.05, "scope_temperature_range": [0.35, 0.75]},  # 0.7x-1.5x the tiny recipe's 0.5
    "care": {"care_bonus": 0.5},
}
"""Variant name -> ConGRPOConfig fields it changes relative to the recipe."""

METRICS = ("accuracy", "consistency", "evidence", "grounding_iou", "grounding_acc50", "format_failure_rate")
TRAIN_METRICS = ("rollouts", "train_seconds")


class AblationError(ValueError):
    """A bad ablation request (unknown variant, missing checkpoint or dataset)."""


def _flag_values(value: Any) -> list[str]:
    if isinstance(value, bool):
        return ["true" if value else "false"]
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return [str(value)]


def variant_argv(variant: str, config: str, sft: str, dataset: str, out: Path, seed: int, max_steps: int | None,
                 extra: list[str]) -> list[str]:
    """The ``medgrpo grpo`` arguments of one run: the recipe, the shared checkpoint and data, the variant's fields."""
    argv = ["--config", config, "--model_name_or_path", sft, "--dataset_path", dataset, "--output_dir", str(out),
            "--seed", str(seed), "--save_strategy", "no", "--report_to", "none", "--logging_steps", "1"]
    if max_steps is not None:
        argv += ["--max_steps", str(max_steps)]
    # The variant's fields come last, so a flag given to every run (``-- --golden_injection false``) cannot undo
    # the one field a row is about.
    argv += extra
    for name, value in VARIANTS[variant].items():
        argv += [f"--{name}", *_flag_values(value)]
    return argv


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _trained(run_dir: Path) -> bool:
    """The run finished training (its checkpoint's run record and the ablation's training summary exist)."""
    from medgrpo.models.loading import RUN_INFO

    return (run_dir / RUN_INFO).is_file() and (run_dir / "ablate_train.json").is_file()


def train_run(argv: list[str], out: Path) -> dict[str, Any]:
    """Train one variant/seed unless it already finished; returns its training log figures."""
    from medgrpo.train.con_grpo import train_con_grpo
    from medgrpo.train.run import parse_args

    summary_path = out / "ablate_train.json"
    if _trained(out):
        return json.loads(summary_path.read_text())
    from medgrpo.train.args import DataArguments, MedModelConfig
    from medgrpo.train.con_grpo_config import ConGRPOConfig

    data_args, training_args, model_args = parse_args((DataArguments, ConGRPOConfig, MedModelConfig), argv, "ablate")
    start = time.perf_counter()
    train_con_grpo(data_args, training_args, model_args)
    seconds = time.perf_counter() - start
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    steps = [e for e in history if "reward" in e]
    per_generation = training_args.per_device_train_batch_size * training_args.steps_per_generation
    rollouts = sum(e.get("variants/rollouts", per_generation) for e in steps)
    summary = {"rollouts": rollouts, "train_seconds": seconds,
               "reward_curve": [e["reward"] for e in steps],
               "accuracy_curve": [e.get("rewards/accuracy/mean") for e in steps]}
    _write_atomic(summary_path, json.dumps(summary))
    return summary


def eval_run(model_dir: Path, dataset: str, out: Path, limit: int | None, max_new_tokens: int | None) -> dict[str, Any]:
    """Greedy evaluation on the held-out split; returns the overall metric values."""
    from medgrpo.eval.evaluate import evaluate
    from medgrpo.eval.suites import suite_for_path

    metrics_path = out / "metrics.json"
    if metrics_path.is_file():
        metrics = json.loads(metrics_path.read_text())
    else:
        metrics = evaluate(model_dir, suite_for_path(dataset, split="test", limit=limit), out,
                           max_new_tokens=max_new_tokens, n_boot=200, progress=False)
    return {name: metrics["overall"][name]["value"] for name in METRICS}


def _mean_std(values: list[float | None]) -> tuple[float | None, float | None, int]:
    kept = [v for v in values if v is not None]
    if not kept:
        return None, None, 0
    mean = sum(kept) / len(kept)
    std = math.sqrt(sum((v - mean) ** 2 for v in kept) / (len(kept) - 1)) if len(kept) > 1 else 0.0
    return mean, std, len(kept)


PAIRED = ("accuracy", "consistency", "evidence", "grounding_acc50")
"""Metrics compared with the baseline record by record (same seed, same held-out records)."""


def paired_changes(evals: dict[str, dict[int, Path]]) -> dict[str, dict[str, Any]]:
    """Per variant and :data:`PAIRED` metric: its change over ``baseline`` on the records both scored, paired per
    seed (a percentile bootstrap over records) and pooled over the seeds both finished
    (:func:`medgrpo.demo.pool_changes`). ``evals``: variant -> seed -> evaluation folder."""
    from medgrpo.demo import pool_changes
    from medgrpo.eval.report import paired_deltas

    base = evals.get("baseline", {})
    changes: dict[str, dict[str, Any]] = {}
    for variant, seeds in evals.items():
        per_seed = []
        for seed in sorted(seeds.keys() & base.keys()):
            rows = {r["metric"]: r for r in paired_deltas(base[seed], seeds[seed], n_boot=1000)}
            per_seed.append({m: rows[m] for m in PAIRED if m in rows})
        if variant != "baseline" and per_seed and all(set(c) == set(per_seed[0]) for c in per_seed):
            changes[variant] = pool_changes(per_seed)
    return changes


def summarise(results: dict[str, list[dict[str, Any]]],
              paired: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Per variant and metric: mean and std over seeds; against baseline, the paired change of ``paired`` (its
    95% interval; inside the noise when it holds 0) or, for a metric not compared record by record (rollouts,
    time), the difference of the means with its standard error (inside the noise within two of them)."""
    paired = paired or {}
    table: dict[str, Any] = {}
    for variant, runs in results.items():
        row: dict[str, Any] = {}
        for name in (*METRICS, *TRAIN_METRICS):
            mean, std, n = _mean_std([r[name] for r in runs])
            row[name] = {"mean": mean, "std": std, "n": n, "seeds": [r[name] for r in runs]}
        table[variant] = row
    if "baseline" in table:
        base = table["baseline"]
        for variant, row in table.items():
            for name, cell in row.items():
                b = base[name]
                if variant == "baseline" or cell["mean"] is None or b["mean"] is None:
                    continue
                change = paired.get(variant, {}).get(name)
                if change is not None:
                    cell.update(delta=change["delta"], ci_low=change["ci_low"], ci_high=change["ci_high"],
                                inside_noise=change["ci_low"] <= 0.0 <= change["ci_high"])
                    continue
                se = math.sqrt(cell["std"] ** 2 / max(cell["n"], 1) + b["std"] ** 2 / max(b["n"], 1))
                delta = cell["mean"] - b["mean"]
                # one seed has no spread to judge a difference by: reported, not judged (None)
                noise = abs(delta) < 2 * se or se == 0.0 and delta == 0 if min(cell["n"], b["n"]) > 1 else None
                cell.update(delta=delta, delta_se=se, inside_noise=noise)
    return table


def _cell(cell: dict[str, Any], pct: bool) -> str:
    if cell["mean"] is None:
        return "n/a"
    scale = 100.0 if pct else 1.0
    text = f"{cell['mean'] * scale:.1f} ± {cell['std'] * scale:.1f}"
    if "delta" in cell:
        mark = " *" if cell["inside_noise"] is False else ""
        interval = (f" [{cell['ci_low'] * scale:+.1f}, {cell['ci_high'] * scale:+.1f}]" if "ci_low" in cell else "")
        text += f" ({cell['delta'] * scale:+.1f}{interval}{mark})"
    return text


def render_markdown(table: dict[str, Any], header: dict[str, Any]) -> str:
    cols = [("accuracy", True), ("consistency", True), ("evidence", True), ("grounding_iou", True),
            ("grounding_acc50", True), ("format_failure_rate", True), ("rollouts", False), ("train_seconds", False)]
    steps = f"{header['max_steps']} GRPO steps" if header["max_steps"] else "the recipe's GRPO steps"
    lines = [
        f"# Con-GRPO variant ablation ({header['seeds']} seeds, {steps} per run)",
        "",
        f"Model: `{header['sft']}` (SFT checkpoint, shared by every run). Data: `{header['dataset']}`; evaluation: "
        f"greedy, held-out `test` split, {header['eval_limit'] or 'all'} records. Command:",
        "",
        "```",
        header["command"],
        "```",
        "",
        "Cells: mean ± std over seeds (metrics in %), then (change over baseline): for accuracy, consistency, "
        "evidence and Acc@0.5 paired record by record with each seed's baseline run, pooled over seeds, with its "
        "95% interval; for the others the difference of the means. `*` marks a change beyond the noise (an "
        "interval without 0; for the others, more than two standard errors, judged from two seeds on). Seeds "
        "finished per variant: the `n` of each cell in `ablation.json`.",
        "",
        "| variant | fields | " + " | ".join(name for name, _ in cols) + " |",
        "|---|---|" + "---|" * len(cols),
    ]
    for variant, row in table.items():
        fields = ", ".join(f"{k}={v}" for k, v in VARIANTS[variant].items()) or "(recipe)"
        lines.append(f"| {variant} | {fields} | " + " | ".join(_cell(row[n], pct) for n, pct in cols) + " |")
    return "\n".join(lines) + "\n"


def plot_curves(results: dict[str, list[dict[str, Any]]], path: Path) -> None:
    """Training reward per step (mean over seeds) for every variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for variant, runs in results.items():
        for ax, key in zip(axes, ("reward_curve", "accuracy_curve"), strict=True):
            curves = [[v for v in r[key]] for r in runs if r.get(key)]
            if not curves:
                continue
            length = min(len(c) for c in curves)
            mean = [sum(c[i] or 0.0 for c in curves) / len(curves) for i in range(length)]
            ax.plot(range(1, length + 1), mean, label=variant)
    axes[0].set_title("training reward (weighted sum), mean over seeds")
    axes[1].set_title("training accuracy reward, mean over seeds")
    for ax in axes:
        ax.set_xlabel("GRPO step")
    if results:
        axes[1].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)


def run_ablation(config: str, sft: str, dataset: str, variants: list[str], seeds: int, out: Path,
                 max_steps: int | None = None, eval_limit: int | None = None, max_new_tokens: int | None = None,
                 extra: list[str] | None = None, command: str = "", finished_only: bool = False) -> dict[str, Any]:
    """Train and evaluate every (variant, seed); write ``ablation.md``, ``ablation.json``, ``learning_curves.png``.
    ``finished_only``: train nothing, tabulate the runs that finished (an ablation still under way, or stopped)."""
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise AblationError(f"unknown variant '{unknown[0]}' (available: {', '.join(VARIANTS)})")
    for label, path in (("--config", config), ("--sft", sft), ("--dataset", dataset)):
        if not Path(path).exists():
            raise AblationError(f"{label} {path}: no such file or folder")
    if seeds < 1:
        raise AblationError(f"--seeds must be at least 1, got {seeds}")
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict[str, Any]]] = {variant: [] for variant in variants}
    evals: dict[str, dict[int, Path]] = {variant: {} for variant in variants}
    # Seed-major: an ablation stopped part-way has every variant at the same number of seeds.
    for seed in range(seeds):
        for variant in variants:
            run_dir = out / "runs" / variant / f"seed{seed}"
            if finished_only and not (_trained(run_dir) and (run_dir / "eval" / "metrics.json").is_file()):
                continue
            argv = variant_argv(variant, config, sft, dataset, run_dir, seed, max_steps, extra or [])
            print(f"medgrpo ablate: {variant} seed {seed}", file=sys.stderr, flush=True)
            figures = train_run(argv, run_dir)
            figures.update(eval_run(run_dir, dataset, run_dir / "eval", eval_limit, max_new_tokens))
            results[variant].append(figures)
            evals[variant][seed] = run_dir / "eval"
    results = {variant: runs for variant, runs in results.items() if runs}
    table = summarise(results, paired_changes({v: e for v, e in evals.items() if e}))
    header = {"config": config, "sft": sft, "dataset": dataset, "seeds": seeds, "max_steps": max_steps,
              "eval_limit": eval_limit, "command": command, "variants": {v: VARIANTS[v] for v in variants}}
    _write_atomic(out / "ablation.json", json.dumps({"header": header, "table": table, "runs": results}, indent=2))
    _write_atomic(out / "ablation.md", render_markdown(table, header))
    plot_curves(results, out / "learning_curves.png")
    return table


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="medgrpo ablate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="Con-GRPO recipe YAML (e.g. recipes/tiny/con_grpo.yaml)")
    parser.add_argument("--sft", required=True, help="the stage-1 checkpoint every run starts from")
    parser.add_argument("--dataset", required=True, help="MedAD dataset folder with train and test splits")
    parser.add_argument("--variants", default="baseline", help=f"comma-separated, from: {', '.join(VARIANTS)}")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per variant (0, 1, ...)")
    parser.add_argument("--out", required=True, help="output folder (runs/, ablation.md/.json, learning_curves.png)")
    parser.add_argument("--max-steps", type=int, default=None, help="GRPO steps per run (default: the recipe's)")
    parser.add_argument("--eval-limit", type=int, default=None, help="evaluate on the first N test records")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="evaluation generation limit")
    parser.add_argument("--finished-only", action="store_true",
                        help="train nothing: tabulate the runs that finished (an ablation under way or stopped)")
    parser.add_argument("extra", nargs=argparse.REMAINDER,
                        help="after --: further ConGRPOConfig flags applied to every run (e.g. -- --num_generations 4)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    extra = args.extra[1:] if args.extra[:1] == ["--"] else args.extra
    command = "medgrpo ablate " + " ".join(sys.argv[1:] if argv is None else argv)
    try:
        run_ablation(args.config, args.sft, args.dataset, [v for v in args.variants.split(",") if v], args.seeds,
                     Path(args.out), args.max_steps, args.eval_limit, args.max_new_tokens, extra, command,
                     args.finished_only)
    except (ValueError, FileNotFoundError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"medgrpo: {message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
