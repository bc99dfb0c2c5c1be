"""Pool `medgrpo demo` runs of several seeds: each run's overall change over its SFT model, the changes of all runs
together (:func:`medgrpo.demo.pool_changes`), and the pooled change per task family, as markdown tables. One
seed's 2,000 held-out records give a paired interval of about +-2.4 accuracy points; a change smaller than that
needs the seeds together.

    python eval/demo_seeds.py runs/demo-s42 runs/demo-s1 runs/demo-s2

Each folder holds the demo_report.json of a finished `medgrpo demo --out DIR --seed S [--n-test N]`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from medgrpo.demo import TITLES, format_change, pool_changes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", help="demo output folders")
    args = parser.parse_args()
    reports = []
    for run in args.runs:
        path = run / "demo_report.json"
        if not path.is_file():
            print(f"demo_seeds: {path}: no demo report (run medgrpo demo --out {run} first)", file=sys.stderr)
            return 2
        reports.append(json.loads(path.read_text()))
    pooled = pool_changes([r["change"] for r in reports])
    metrics = list(pooled)
    print("| run | seed | records | accuracy after SFT | " + " | ".join(TITLES[m] for m in metrics) + " |")
    print("|---|---|---|---|" + "---|" * len(metrics))
    for run, report in zip(args.runs, reports, strict=True):
        n = max(c["n"] for c in report["change"].values())
        sft = report["after_sft"]["overall"]["accuracy"]
        print(f"| {run} | {report['seed']} | {n} | {100 * sft:.1f} | "
              + " | ".join(format_change(report["change"][m], m) for m in metrics) + " |")
    n = max(c["n"] for c in pooled.values())
    print(f"| pooled | {len(reports)} seeds | {n} | | " + " | ".join(format_change(pooled[m], m) for m in metrics)
          + " |")
    if all("change_by_task" in r for r in reports):
        print("\nPooled per task family:\n")
        print("| task | records | " + " | ".join(TITLES[m] for m in metrics) + " |")
        print("|---|---|" + "---|" * len(metrics))
        for task in reports[0]["change_by_task"]:
            by_task = pool_changes([r["change_by_task"][task] for r in reports])
            n = max(c["n"] for c in by_task.values())
            print(f"| {task} | {n} | " + " | ".join(format_change(by_task[m], m) if m in by_task else "-"
                                                   for m in metrics) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
