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
        counts: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0])
        letters: dict[str, Counter] = defaultdict(Counter)
        for row in read_predictions(eval_dir / PREDICTIONS):
            record = records.get(row["id"])
            if record is None or not record.options:
                continue
            if row["task"] == args.letters:
                letters[record.options[record.letters.index(record.answer)]][row["pred"]] += 1
            reasoning = verify(row["completion"], record)["reasoning_accuracy"] or 0.0
            for key in (row["task"], "overall"):
                c = counts[key]
                c[0] += 1
                c[1] += row["pred"] == record.answer
                c[2] += reasoning
        print(f"{eval_dir}")
        print(f"  {'task':<28} {'n':>4} {'letter right':>13} {'reasoning right':>16}")
        for task in sorted(counts, key=lambda t: (t == "overall", t)):
            n, letter, content = counts[task]
            print(f"  {task:<28} {n:>4} {letter / n:>13.3f} {content / n:>16.3f}")
        if args.letters:
            print(f"  {args.letters}: letter given per gold option (the gold letter varies with the options shown)")
            if not letters:
                print(f"    no predictions for task '{args.letters}' (tasks: {', '.join(sorted(set(counts) - {'overall'}))})")
            for gold, given in sorted(letters.items()):
                print(f"    {gold:<28} " + "  ".join(f"{k}:{v}" for k, v in sorted(given.items(), key=str)))


if __name__ == "__main__":
    main()
