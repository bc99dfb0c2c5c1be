"""The paper's claim, measured: from the same SFT checkpoint, Con-GRPO against plain GRPO (format and accuracy
rewards only, the same recipe otherwise: steps, sampling, learning rate), paired over the held-out records.

For each seed: `medgrpo demo` (model, MedAD-Synth, SFT, Con-GRPO and both evaluations; a finished step is reused),
then plain GRPO from the demo's SFT checkpoint and its evaluation on the same held-out split. Writes
``OUT/con_grpo_vs_grpo.json`` (per seed and ``pooled``: per metric ``delta`` = Con-GRPO - GRPO, ``ci_low``,
``ci_high``, ``n``; paired bootstrap per seed, pooled with :func:`medgrpo.demo.pool_changes`) and
``OUT/con_grpo_vs_grpo.md``:

    OMP_NUM_THREADS=2 HF_HUB_OFFLINE=1 python eval/con_grpo_vs_grpo.py --out runs/con-vs-grpo --seeds 42 1 2
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from medgrpo.demo import REPO_RECIPES, format_change, pool_changes, run_demo

METRICS = ("accuracy", "consistency", "evidence", "grounding_acc50", "reasoning_accuracy")
PLAIN_GRPO = {"reward_funcs": ["format", "accuracy"], "reward_weights": [0.5, 1.0]}
"""What makes the recipe plain GRPO: the R1 rewards only, at the recipe's own weights."""


def plain_grpo(run: Path, seed: int) -> Path:
    """Plain GRPO from ``run``'s SFT checkpoint with the Con-GRPO recipe's settings, evaluated like the demo."""
    from medgrpo.eval.evaluate import evaluate
    from medgrpo.train.args import DataArguments, MedModelConfig
    from medgrpo.train.con_grpo import train_con_grpo
    from medgrpo.train.con_grpo_config import ConGRPOConfig
    from medgrpo.train.run import parse_args

    out, evaluation = run / "grpo", run / "eval_grpo"
    if not (out / "medgrpo_run.json").is_file():
        argv = ["--config", str(REPO_RECIPES / "con_grpo.yaml"), "--model_name_or_path", str(run / "sft"),
                "--dataset_path", str(run / "data"), "--output_dir", str(out), "--seed", str(seed)]
        for key, value in PLAIN_GRPO.items():
            argv += [f"--{key}", *map(str, value)]
        train_con_grpo(*parse_args((DataArguments, ConGRPOConfig, MedModelConfig), argv, "con_grpo_vs_grpo"))
    if not (evaluation / "metrics.json").is_file():
        evaluate(out, run / "data", evaluation, seed=seed, batch_size=32, max_new_tokens=128)
    return evaluation


def compare(grpo_eval: Path, con_eval: Path) -> dict[str, dict[str, float | int]]:
    """Per metric: Con-GRPO's change over plain GRPO on the records both scored, with a paired 95% interval."""
    from medgrpo.eval.report import paired_deltas

    rows = {row["metric"]: row for row in paired_deltas(grpo_eval, con_eval)}
    return {m: {k: rows[m][k] for k in ("baseline", "run", "delta", "ci_low", "ci_high", "n")}
            for m in METRICS if m in rows}


def markdown(result: dict[str, Any]) -> str:
    metrics = list(result["pooled"])
    lines = ["# Con-GRPO against plain GRPO from the same SFT checkpoint", "",
             f"Command: `{result['command']}`", "",
             "Change = Con-GRPO - plain GRPO on the held-out records, in points with a paired bootstrap 95% "
             "interval (pooled over seeds from each seed's interval).", "",
             "| seed | " + " | ".join(f"{m} GRPO | {m} Con-GRPO | change" for m in metrics) + " |",
             "|---|" + "---|---|---|" * len(metrics)]
    for seed, change in result["seeds"].items():
        lines.append(f"| {seed} | " + " | ".join(
            f"{change[m]['baseline']:.3f} | {change[m]['run']:.3f} | {format_change(change[m], m)}" for m in metrics)
            + " |")
    lines.append("| pooled | " + " | ".join(f"| | {format_change(result['pooled'][m], m)}" for m in metrics) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="one demo folder per seed goes here")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 1, 2])
    parser.add_argument("--n-test", type=int, default=1000)
    args = parser.parse_args()
    seeds = {}
    for seed in args.seeds:
        run = args.out / f"seed-{seed}"
        run_demo(run, seed=seed, n_test=args.n_test)
        seeds[str(seed)] = compare(plain_grpo(run, seed), run / "eval_con_grpo")
    pooled = pool_changes([{m: c[m] for m in METRICS} for c in seeds.values()])
    result = {"command": "python eval/con_grpo_vs_grpo.py " + " ".join(sys.argv[1:]), "seeds": seeds,
              "pooled": {m: {k: pooled[m][k] for k in ("delta", "ci_low", "ci_high", "n")} for m in METRICS}}
    (args.out / "con_grpo_vs_grpo.json").write_text(json.dumps(result, indent=2))
    (args.out / "con_grpo_vs_grpo.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
