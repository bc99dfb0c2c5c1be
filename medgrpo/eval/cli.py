"""``medgrpo eval``: score a model on a suite, or compare finished evaluation runs.

    medgrpo eval --model OUT/con_grpo --suite eval/suites/medad-synth.yaml --out OUT/eval
    medgrpo eval --compare OUT/eval_sft OUT/eval_grpo
"""

from __future__ import annotations

import argparse
import sys

from medgrpo.data.record import RecordError
from medgrpo.eval.evaluate import EvalError, evaluate
from medgrpo.eval.generate import ModelLoadError
from medgrpo.eval.report import cell, compare
from medgrpo.eval.suites import SuiteError
from medgrpo.rewards.settings import JudgeSettings, RewardSettings, RewardSettingsError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="medgrpo eval", description="Score a model on a suite of datasets, or compare finished evaluation runs.")
    p.add_argument("--model", help="model folder (weights, config and processor)")
    p.add_argument("--suite", help="suite YAML (eval/suites/*.yaml), a dataset folder or a JSONL file")
    p.add_argument("--out", help="output folder: predictions.jsonl, metrics.json, report.md, plots")
    p.add_argument("--compare", nargs="+", metavar="RUN",
                   help="evaluation folders to compare (deltas with paired 95%% CIs against the first)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--backend", choices=("transformers", "vllm"), default="transformers")
    p.add_argument("--num-samples", type=int, default=1,
                   help="k > 1 adds k sampled completions per prompt (pass@k, self-consistency)")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (with --num-samples)")
    p.add_argument("--limit", type=int, help="score at most N records per dataset")
    p.add_argument("--max-new-tokens", type=int, help="override the suite's generation budget")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--evidence-backend", choices=("rule", "judge"), default="rule",
                   help="how the five evidence criteria are scored (judge: a model scores MedAD-R1's rubric)")
    p.add_argument("--judge-transport", choices=("http", "local"), default="http",
                   help="judge: an OpenAI-compatible endpoint (e.g. a vLLM server) or a local transformers model")
    p.add_argument("--judge-url", default="http://127.0.0.1:8000/v1", help="judge endpoint root (http)")
    p.add_argument("--judge-model", default="", help="judge: served model name (http) or model folder (local)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.compare:
            if len(args.compare) < 2:
                parser.error("--compare needs at least two evaluation folders")
            print(compare(args.compare))
            return 0
        missing = [f"--{n}" for n in ("model", "suite", "out") if not getattr(args, n)]
        if missing:
            parser.error(f"missing {', '.join(missing)} (or use --compare RUN_A RUN_B)")
        settings = RewardSettings(evidence_backend=args.evidence_backend, judge=JudgeSettings(
            transport=args.judge_transport, base_url=args.judge_url, model=args.judge_model))
        metrics = evaluate(args.model, args.suite, args.out, batch_size=args.batch_size, backend=args.backend,
                           num_samples=args.num_samples, temperature=args.temperature, limit=args.limit,
                           max_new_tokens=args.max_new_tokens, seed=args.seed, reward_settings=settings,
                           progress=not args.no_progress)
    except (EvalError, SuiteError, RecordError, ModelLoadError, RewardSettingsError) as exc:
        print(f"medgrpo: {exc}", file=sys.stderr)
        return 2
    for name, ds in metrics["datasets"].items():
        ov = ds["overall"]
        print(f"{name}: {ov['n']} records, accuracy {cell(ov.get('accuracy'))}, format failures "
              f"{cell(ov.get('format_failure_rate'))}, chance {cell({'value': ds['baselines']['random_option']['accuracy']})} (%)")
    print(f"wrote {args.out}/metrics.json and {args.out}/report.md")
    return 0
