"""The dataset card (``README.md``) of a built folder: where the data came from, how it was split, what was
asked, how the CoT was made and what quality control kept or dropped."""

from __future__ import annotations

from collections import Counter
from typing import Any

from medgrpo.data.record import MedADRecord


def _table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(v) for v in row) + " |" for row in rows]


def render_card(
    config: dict[str, Any],
    records: dict[str, list[MedADRecord]],
    groups: dict[str, int],
    qc_counts: Counter,
    skipped: Counter,
    seed: int,
    cot: str,
    command: str,
) -> str:
    """Markdown card: provenance, split sizes, per-task and per-letter counts, QC counts and the command."""
    source = config["source"]
    splits = list(records)
    tasks = sorted({r.task for rs in records.values() for r in rs})
    lines = [
        f"# {source} (MedAD-style, built by medgrpo)", "",
        f"Built from the `{config['layout']}` layout of `{config['root']}` with seed {seed} and `{cot}` CoT.",
        f"Modality: {config.get('modality') or 'unknown'}; anatomy: {config.get('anatomy') or 'unknown'}; "
        f"left/right: {config.get('laterality', 'image')} convention.", "",
        "Command:", "", f"    {command}", "",
        "## Splits", "",
        "Groups (patient, lesion, else image) never cross splits; the build checks this before writing.", "",
    ]
    lines += _table(("split", "records", "images", "groups"),
                    [(s, len(records[s]), len({r.images[0] for r in records[s]}), groups[s]) for s in splits])
    lines += ["", "## Questions per task", ""]
    per_task = {s: Counter(r.task for r in records[s]) for s in splits}
    lines += _table(("task", *splits), [(t, *(per_task[s][t] for s in splits)) for t in tasks])
    lines += ["", "## Correct letter per task (all splits)", ""]
    letters = sorted({r.answer for rs in records.values() for r in rs})
    per_letter = {t: Counter(r.answer for rs in records.values() for r in rs if r.task == t) for t in tasks}
    lines += _table(("task", *letters), [(t, *(per_letter[t][x] for x in letters)) for t in tasks])
    lines += ["", "## Chain-of-thought quality control", "",
              "Every CoT is scored by the project's verifiers (format, consistency, rule evidence criteria) on "
              "`build_target(record)`, and must still state every evidence claim and box of its record. "
              "Failing templates are regenerated with other phrasings, rejected teacher rewrites fall back to "
              "the template, and what still fails is dropped.", ""]
    lines += _table(("outcome", "count"), sorted(qc_counts.items()))
    if skipped:
        lines += ["", "## Not asked", "", "Questions a task could not ask of an image (missing label, region "
                  "or metadata), and items skipped by the reader:", ""]
        lines += _table(("reason", "count"), sorted(skipped.items()))
    return "\n".join(lines) + "\n"
