"""Does the reasoning name the right option while the answer letter is wrong? Per task family, from an evaluation's
predictions: the accuracy of the answer letter, and the verifiers' ``reasoning_accuracy`` (the reasoning points to
the gold option alone by content: the option's words, concepts or polarity; by letter only when it names no
option's content). The gap between the two is what reasoning-answer consistency training can recover without
seeing the images any better; the evaluation reports both, this script adds the per-option letter tally.

    HF_HUB_OFFLINE=1 .venv/bin/python eval/conclusion_vs_letter.py DATASET EVAL_DIR [EVAL_DIR ...] [--letters TASK]

DATASET is the folder the evaluation ran on (e.g. runs/demo/data); each EVAL_DIR holds a predictions.jsonl.
``--letters TASK`` also prints, for that task, which letter was given for each gold option's text: a policy whose
letter is a function of the class (not of the option list) shows one letter per class, and a collapse shows one
letter for everything.
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from pathlib import Path

from medgrpo.data import load_records
from medgrpo.eval.predictions import PREDICTIONS, read_predictions
from medgrpo.rewards import verify


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("eval_dirs", type=Path, nargs="+")
    parser.add_argument("--letters", metavar="TASK", help="tally the letter given per gold option of this task")
    args = parser.parse_args()
    records = {}
    for split in ("train", "test"):
        if (args.dataset / f"{split}.jsonl").is_file():
            records.update({r.id: r for r in load_records(args.dataset, split=split, check_images=False)})
    for eval_dir in args.eval_dirs:
        # per task: (task/gold option text, gold letter, predicted letter, reasoning accuracy) of each record
        scored: dict[str, list[tuple[str, str, str, float]]] = defaultdict(list)
        letters: dict[str, Counter] = defaultdict(Counter)
        for row in read_predictions(eval_dir / PREDICTIONS):
            record = records.get(row["id"])
            if record is None or not record.options:
                continue
            gold_text = record.options[record.letters.index(record.answer)]
            if row["task"] == args.letters:
                letters[gold_text][row["pred"]] += 1
            reasoning = verify(row["completion"], record)["reasoning_accuracy"] or 0.0
            for key in (row["task"], "overall"):
                scored[key].append((f"{row['task']}/{gold_text}", record.answer, row["pred"], reasoning))
        print(f"{eval_dir}")
        print(f"  {'task':<28} {'n':>4} {'letter right':>13} {'reasoning right':>16} {'class table':>12} {'off-table':>10}")
        for task in sorted(scored, key=lambda t: (t == "overall", t)):
            rows = scored[task]
            n = len(rows)
            by_class: dict[str, Counter] = defaultdict(Counter)
            for cls, gold, _, _ in rows:
                by_class[cls][gold] += 1
            table = {cls: golds.most_common(1)[0][0] for cls, golds in by_class.items()}
            off = [pred == gold for cls, gold, pred, reasoning in rows if reasoning == 1.0 and gold != table[cls]]
            print(f"  {task:<28} {n:>4} {sum(g == p for _, g, p, _ in rows) / n:>13.3f}"
                  f" {sum(r for *_, r in rows) / n:>16.3f}"
                  f" {sum(max(golds.values()) for golds in by_class.values()) / n:>12.3f}"
                  f" {f'{sum(off) / len(off):.3f}' if off else '-':>10}")
        if args.letters:
            print(f"  {args.letters}: letter given per gold option (the gold letter varies with the options shown)")
            if not letters:
                print(f"    no predictions for task '{args.letters}' (tasks: {', '.join(sorted(set(scored) - {'overall'}))})")
            for gold, given in sorted(letters.items()):
                print(f"    {gold:<28} " + "  ".join(f"{k}:{v}" for k, v in sorted(given.items(), key=str)))


if __name__ == "__main__":
    main()
