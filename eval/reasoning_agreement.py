"""How well the rule verifiers read reasoning as real models write it: agreement with a careful reader's labels.

    OMP_NUM_THREADS=1 .venv/bin/python eval/reasoning_agreement.py [--split dev|val|test|all] [--show] [--json OUT]

The labelled set lives in ``eval/reasoning_set/{dev,val,test}.jsonl`` (format: ``eval/reasoning_set/README.md``):
completions written in the styles of real VLMs (Qwen2.5-VL, Qwen3-VL, GPT-4o, MedGemma, LLaVA-Med), each labelled
with what its reasoning concludes, whether that is the answer it gives (``consistent``) and whether it is the gold
answer (``reasoning_correct``). Tune on ``dev``; ``val`` chooses between versions; ``test`` is read only to
report.

Consistency: the verifier *pays* a completion when it scores 1.0 (``agree``); it agrees with the reader when it
pays exactly the completions labelled consistent. A false negative is a consistent completion not paid (the
``< 0.5`` column counts those scored below 0.5: punished like a contradiction or a missing conclusion); a false
positive is an inconsistent, hedged or conclusion-less completion paid in full. ``reasoning_accuracy`` agrees when
it is 1.0 exactly for the completions labelled ``reasoning_correct``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from medgrpo.data.record import MedADRecord
from medgrpo.rewards.verify import verify

SET_DIR = Path(__file__).parent / "reasoning_set"


def load_items(split: str) -> list[dict[str, Any]]:
    """The labelled items of one split (``dev``, ``val`` or ``test``)."""
    path = SET_DIR / f"{split}.jsonl"
    items = []
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                items.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise SystemExit(f"{path}:{line_no}: not JSON: {err.msg}") from None
    return items


def record_of(item: dict[str, Any]) -> MedADRecord:
    """The record a labelled item's completion answers (no image: the verifiers read text)."""
    return MedADRecord(
        id=item["id"], images=[], question=item["question"], options=item["options"], answer=item["answer"],
        task=item["task"], modality=item.get("modality"),
    )


def score(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each item with the verifiers' ``consistency`` and ``reasoning_accuracy`` beside its labels."""
    rows = []
    for item in items:
        scores = verify(item["completion"], record_of(item))
        rows.append({**item, "score": scores["consistency"], "reasoned": scores["reasoning_accuracy"]})
    return rows


def tally(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Agreement, false positives and false negatives of consistency and reasoning accuracy over ``rows``."""
    paid = [r["score"] == 1.0 for r in rows]
    cons = [r["consistent"] for r in rows]
    right = [(r["reasoned"] or 0.0) == 1.0 for r in rows]
    gold = [r["reasoning_correct"] for r in rows]
    return {
        "n": len(rows),
        "consistency_agree": sum(p == c for p, c in zip(paid, cons, strict=True)),
        "consistency_fp": sum(p and not c for p, c in zip(paid, cons, strict=True)),
        "consistency_fn": sum(c and not p for p, c in zip(paid, cons, strict=True)),
        "consistent_below_half": sum(r["consistent"] and r["score"] < 0.5 for r in rows),
        "n_consistent": sum(cons),
        "reasoning_agree": sum(p == g for p, g in zip(right, gold, strict=True)),
        "reasoning_fp": sum(p and not g for p, g in zip(right, gold, strict=True)),
        "reasoning_fn": sum(g and not p for p, g in zip(right, gold, strict=True)),
    }


def _pct(k: int, n: int) -> str:
    return f"{100 * k / n:5.1f}%" if n else "    -"


def table(title: str, groups: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Markdown rows of :func:`tally` per group."""
    lines = [
        f"| {title} | n | consistency agree | FP | FN | consistent < 0.5 | reasoning acc. agree | FP | FN |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, rows in groups.items():
        t = tally(rows)
        lines.append(
            f"| {name} | {t['n']} | {t['consistency_agree']} ({_pct(t['consistency_agree'], t['n']).strip()}) "
            f"| {t['consistency_fp']} | {t['consistency_fn']} "
            f"| {t['consistent_below_half']}/{t['n_consistent']} ({_pct(t['consistent_below_half'], t['n_consistent']).strip()}) "
            f"| {t['reasoning_agree']} ({_pct(t['reasoning_agree'], t['n']).strip()}) "
            f"| {t['reasoning_fp']} | {t['reasoning_fn']} |"
        )
    return lines


def report(split: str, rows: list[dict[str, Any]], show: bool) -> list[str]:
    """The markdown report of one split: overall, per style, per class, per task; the misreads with ``show``."""
    by_style: dict[str, list] = defaultdict(list)
    by_class: dict[str, list] = defaultdict(list)
    by_task: dict[str, list] = defaultdict(list)
    for r in rows:
        by_style[r["style"]].append(r)
        by_task[r["task"]].append(r)
        for c in r["classes"]:
            by_class[c].append(r)
    lines = [f"## {split}", ""]
    lines += table("split", {split: rows}) + [""]
    lines += table("style", dict(sorted(by_style.items()))) + [""]
    lines += table("class", dict(sorted(by_class.items()))) + [""]
    lines += table("task", dict(sorted(by_task.items()))) + [""]
    if show:
        for r in rows:
            wrong_c = (r["score"] == 1.0) != r["consistent"]
            wrong_r = ((r["reasoned"] or 0.0) == 1.0) != r["reasoning_correct"]
            if wrong_c or wrong_r:
                lines.append(
                    f"- {r['id']} [{', '.join(r['classes'])}] consistency {r['score']} (label "
                    f"{r['consistent']}), reasoning {r['reasoned']} (label {r['reasoning_correct']}); concludes "
                    f"{r['concludes']}; answer {r['answer']}"
                )
        lines.append("")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=("dev", "val", "test", "all"), default="dev")
    parser.add_argument("--show", action="store_true", help="list every misread item (dev only)")
    parser.add_argument("--json", type=Path, help="also write the tallies as JSON here")
    args = parser.parse_args()
    splits = ("dev", "val", "test") if args.split == "all" else (args.split,)
    out: dict[str, Any] = {}
    for split in splits:
        items = load_items(split)
        start = time.perf_counter()
        rows = score(items)
        seconds = time.perf_counter() - start
        print("\n".join(report(split, rows, args.show and split == "dev")))
        print(f"{len(rows)} completions scored in {seconds:.2f} s\n")
        out[split] = {"overall": tally(rows), "by_style": {}, "by_class": {}}
        for key, field in (("by_style", "style"), ("by_class", "classes")):
            groups: dict[str, list] = defaultdict(list)
            for r in rows:
                for name in r[field] if isinstance(r[field], list) else [r[field]]:
                    groups[name].append(r)
            out[split][key] = {name: tally(g) for name, g in sorted(groups.items())}
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
