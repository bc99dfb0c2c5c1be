"""Human-readable outputs of an evaluation: metrics.json, report.md, PNG plots, and run-to-run comparison.

Plots use matplotlib's Agg backend (no display): per-task accuracy bars with 95% intervals and chance lines,
a confusion matrix per classification task family, and a reliability diagram for anomaly detection.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from medgrpo.eval.aggregate import EVIDENCE_CRITERIA, HEADLINE, row_metrics
from medgrpo.eval.metrics import paired_delta_ci
from medgrpo.eval.predictions import PREDICTIONS, EvalError, read_predictions, write_atomic

_LABELS = {
    "accuracy": "accuracy", "format_failure_rate": "format failures", "consistency": "consistency",
    "reasoning_accuracy": "reasoning accuracy",
    "evidence": "evidence", "grounding_iou": "grounding IoU", "grounding_acc50": "grounding Acc@0.5",
    "completion_tokens": "completion tokens",
}
_TABLE_COLS = ("accuracy", "format_failure_rate", "consistency", "reasoning_accuracy", "evidence", "grounding_iou",
               "grounding_acc50", "completion_tokens")


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f}"


def cell(s: dict[str, Any] | None, scale: bool = True) -> str:
    """``62.5 [50.0, 75.0]`` (percent) for a STAT cell; ``–`` when it does not apply."""
    if not s or s.get("value") is None:
        return "–"
    if not scale:
        return f"{s['value']:.1f}"
    if s.get("ci_low") is None:
        return _pct(s["value"])
    return f"{_pct(s['value'])} [{_pct(s['ci_low'])}, {_pct(s['ci_high'])}]"


def _group_table(title: str, groups: dict[str, Any]) -> list[str]:
    head = (f"| {title} | n | " + " | ".join(_LABELS[c] for c in _TABLE_COLS)
            + " | chance: random option | chance: majority answer |")
    lines = [head, "|" + "---|" * (len(_TABLE_COLS) + 4)]
    for name, g in groups.items():
        cells = [cell(g.get(c), scale=c != "completion_tokens") for c in _TABLE_COLS]
        chance = g.get("chance") or {}
        cells += [_pct(chance.get("random_option")), _pct(chance.get("majority_answer"))]
        lines.append(f"| {name} | {g['n']} | " + " | ".join(cells) + " |")
    return lines


def render_markdown(metrics: dict[str, Any], plots: dict[str, list[str]]) -> str:
    """report.md: headline with chance, then per task / modality / source, evidence, classification, anomaly."""
    gen = metrics["generation"]
    lines = [f"# Evaluation of `{metrics['model']}`", "",
             f"Suite `{metrics['suite']}`, {metrics['created']}, backend {gen['backend']}, "
             f"max_new_tokens {gen['max_new_tokens']}, samples {gen['num_samples']}. "
             "Values in percent with percentile-bootstrap 95% intervals; a completion without a valid answer "
             "counts as wrong and as a format failure.", ""]
    for name, ds in metrics["datasets"].items():
        ov, base = ds["overall"], ds["baselines"]
        lines += [f"## {name}", "", f"`{ds['path']}` split `{ds['split']}`, {ov['n']} records"
                  + (f", {ds['skipped_records']} skipped as invalid" if ds["skipped_records"] else "") + ".", "",
                  "| metric | value [95% CI] |", "|---|---|"]
        lines += [f"| {_LABELS[m]} | {cell(ov.get(m))} |" for m in HEADLINE]
        lines += [f"| mean completion tokens | {cell(ov.get('completion_tokens'), scale=False)} |",
                  f"| chance: random option | {_pct(base['random_option']['accuracy'])} |",
                  f"| chance: majority answer (fit on {base['majority_answer']['fit_on']}) | "
                  f"{_pct(base['majority_answer']['accuracy'])} |", ""]
        for key, title in (("by_task", "task family"), ("by_modality", "modality"), ("by_source", "source")):
            lines += _group_table(title, ds[key]) + [""]
        lines += ["| evidence criterion | value [95% CI] |", "|---|---|"]
        lines += [f"| {c} | {cell(ov.get(f'evidence/{c}'))} |" for c in EVIDENCE_CRITERIA] + [""]
        if ds["classification"]:
            lines += ["| task family | macro-F1 | classes |", "|---|---|---|"]
            lines += [f"| {t} | {_pct(c['macro_f1'])} | {len(c['labels'])} |" for t, c in ds["classification"].items()]
            lines.append("")
        an = ds["anomaly"]
        if an:
            auroc = "–" if an["auroc"] is None else f"{an['auroc']:.3f}"
            ece = "–" if an["ece"] is None else f"{an['ece']:.3f}"
            lines += ["Anomaly detection: sensitivity " + cell(an["sensitivity"]) + ", specificity "
                      + cell(an["specificity"]) + f", AUROC {auroc}, ECE {ece} "
                      f"({an['n_scored']} scored from option-letter probabilities).", ""]
        sm = ds["sampling"]
        if sm:
            lines += [f"Sampling (k={sm['k']}): pass@1 {cell(sm['pass@1'])}, pass@{sm['k']} {cell(sm['pass@k'])}, "
                      f"self-consistency {cell(sm['self_consistency'])}.", ""]
        lines += [f"![{p}]({p})" for p in plots.get(name, [])] + [""]
    return "\n".join(lines)


def _save(fig: Any, path: Path) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".png")
    os.close(fd)
    fig.savefig(tmp, dpi=100, bbox_inches="tight")
    os.replace(tmp, path)


def write_plots(metrics: dict[str, Any], out: Path) -> dict[str, list[str]]:
    """Per dataset: per-task bars, confusion matrices, reliability diagram. Returns the file names written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: dict[str, list[str]] = {}
    for name, ds in metrics["datasets"].items():
        files = written.setdefault(name, [])
        tasks = list(ds["by_task"])
        acc = [ds["by_task"][t]["accuracy"] for t in tasks]
        if tasks:
            fig, ax = plt.subplots(figsize=(1.4 * len(tasks) + 2, 3.5))
            vals = [a["value"] for a in acc]
            err = [[v - (a["ci_low"] if a["ci_low"] is not None else v) for v, a in zip(vals, acc, strict=True)],
                   [(a["ci_high"] if a["ci_high"] is not None else v) - v for v, a in zip(vals, acc, strict=True)]]
            ax.bar(range(len(tasks)), vals, yerr=err, capsize=4, color="#4C72B0")
            for key, label, style in (("random_option", "chance: random option", "--"),
                                      ("majority_answer", "chance: majority answer", ":")):
                xs = [(i, ds["by_task"][t]["chance"][key]) for i, t in enumerate(tasks)]
                xs = [(i, v) for i, v in xs if v is not None]
                if xs:  # chance of each task family, drawn across its own bar
                    ax.hlines([v for _, v in xs], [i - 0.45 for i, _ in xs], [i + 0.45 for i, _ in xs],
                              colors="black", linestyles=style, label=label)
            ax.set_xticks(range(len(tasks)), [t.replace("_", "\n") for t in tasks], fontsize=8)
            ax.set_ylim(0, 1)
            ax.set_ylabel("accuracy (95% CI)")
            ax.set_title(f"{name}: accuracy per task family")
            ax.legend(fontsize=8)
            files.append(f"per_task_{name}.png")
            _save(fig, out / files[-1])
            plt.close(fig)
        for task, c in ds["classification"].items():
            n = len(c["labels"])
            fig, ax = plt.subplots(figsize=(0.6 * n + 3, 0.6 * n + 2.5))
            ax.imshow(c["confusion"], cmap="Blues")
            top = max(max(row) for row in c["confusion"]) or 1
            for i, row in enumerate(c["confusion"]):
                for j, v in enumerate(row):
                    ax.text(j, i, str(v), ha="center", va="center", fontsize=7,
                            color="white" if v > top / 2 else "black")
            ax.set_xticks(range(n), c["labels"], rotation=60, ha="right", fontsize=7)
            ax.set_yticks(range(n), c["labels"], fontsize=7)
            ax.set_xlabel("predicted")
            ax.set_ylabel("gold")
            ax.set_title(f"{name}: {task} (macro-F1 {c['macro_f1']:.2f})", fontsize=9)
            files.append(f"confusion_{name}_{task}.png")
            _save(fig, out / files[-1])
            plt.close(fig)
        an = ds["anomaly"]
        if an and an["n_scored"]:
            bins = [b for b in an["reliability"] if b["count"]]
            fig, ax = plt.subplots(figsize=(4, 4))
            ax.plot([0, 1], [0, 1], color="gray", linestyle="--", label="perfect calibration")
            ax.plot([b["mean_prob"] for b in bins], [b["frac_positive"] for b in bins], marker="o",
                    label=f"model (ECE {an['ece']:.3f})")
            ax.set_xlabel("predicted P(abnormal)")
            ax.set_ylabel("fraction abnormal")
            ax.set_title(f"{name}: anomaly detection reliability", fontsize=9)
            ax.legend(fontsize=8)
            files.append(f"reliability_{name}.png")
            _save(fig, out / files[-1])
            plt.close(fig)
    return written


def write_report(metrics: dict[str, Any], out: str | Path) -> None:
    """metrics.json, the PNG plots and report.md under ``out`` (each written whole, then renamed into place)."""

    out = Path(out)
    write_atomic(out / "metrics.json", json.dumps(metrics, indent=2, ensure_ascii=False) + "\n")
    plots = write_plots(metrics, out)
    write_atomic(out / "report.md", render_markdown(metrics, plots))


Extra = dict[str, Callable[[dict[str, Any]], float | None]]
"""Further per-row metrics for :func:`paired_deltas`: name -> a function of a prediction row's ``scores``."""


def _scored(run_dir: Path, extra: Extra, task: str | None = None) -> dict[tuple[str, str], dict[str, float | None]]:
    if not (run_dir / "metrics.json").is_file() or not (run_dir / PREDICTIONS).is_file():
        raise EvalError(f"{run_dir}: not an evaluation folder (no metrics.json / {PREDICTIONS}); run medgrpo eval first")
    return {(r["dataset"], r["id"]): {**row_metrics(r), **{m: f(r["scores"]) for m, f in extra.items()}}
            for r in read_predictions(run_dir / PREDICTIONS) if task is None or r.get("task") == task}


def paired_deltas(base_dir: str | Path, run_dir: str | Path, n_boot: int = 1000,
                  extra: Extra | None = None, task: str | None = None) -> list[dict[str, Any]]:
    """Per dataset and headline metric (and each ``extra`` one, e.g. a recipe's total reward), ``{"dataset",
    "metric", "baseline", "run", "delta", "ci_low", "ci_high", "n"}``: the run's change over the baseline on the
    records both scored (matched by dataset and id; only those of task family ``task`` when given), with a paired
    percentile-bootstrap 95% interval, so the two are compared item by item."""
    extra = extra or {}
    base, rows = _scored(Path(base_dir), extra, task), _scored(Path(run_dir), extra, task)
    out = []
    for ds in sorted({k[0] for k in rows} & {k[0] for k in base}):
        keys = sorted(k for k in rows.keys() & base.keys() if k[0] == ds)
        for m in (*HEADLINE, *extra):
            pairs = [(base[k][m], rows[k][m]) for k in keys if base[k][m] is not None and rows[k][m] is not None]
            if not pairs:
                continue
            a, b = [p[0] for p in pairs], [p[1] for p in pairs]
            delta, lo, hi = paired_delta_ci(a, b, n_boot=n_boot)
            out.append({"dataset": ds, "metric": m, "baseline": sum(a) / len(a), "run": sum(b) / len(b),
                        "delta": delta, "ci_low": lo, "ci_high": hi, "n": len(pairs)})
    return out


def compare(run_dirs: list[str | Path], n_boot: int = 1000) -> str:
    """Headline metrics of several evaluation folders side by side, with paired deltas against the first
    (:func:`paired_deltas`)."""

    base_dir = Path(run_dirs[0])
    _scored(base_dir, {})  # a wrong baseline folder fails first, even when it is the only one
    lines = [f"baseline: {base_dir}"]
    for d in map(Path, run_dirs[1:]):
        lines += ["", f"{d} vs {base_dir} (delta = run - baseline, percentage points, paired 95% CI)",
                  f"{'dataset':<16} {'metric':<22} {'baseline':>9} {'run':>9} {'delta':>8}  95% CI          n"]
        deltas = paired_deltas(base_dir, d, n_boot=n_boot)
        for r in deltas:
            lines.append(f"{r['dataset']:<16} {_LABELS[r['metric']]:<22} {_pct(r['baseline']):>9} "
                         f"{_pct(r['run']):>9} {100 * r['delta']:>+8.1f}  "
                         f"[{100 * r['ci_low']:+.1f}, {100 * r['ci_high']:+.1f}]  {r['n']}")
        if not deltas:
            lines.append("(no dataset in common)")
    return "\n".join(lines)
