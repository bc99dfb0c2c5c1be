"""Zero-signal group mechanisms: what to put into a group whose rollouts carry no learning signal.

A GRPO group whose G rollouts are all wrong (or all right) has zero reward variance, hence zero advantage: the prompt
costs G generations and teaches nothing. The literature's fixes, all decided here from per-completion correctness:

* GCPO golden-answer injection: when every rollout is wrong, one member is replaced by the record's gold completion
  (the ``target`` column, :func:`medgrpo.prompts.build_target`), which then earns a positive advantage;
* DAVID-GRPO gold seeding: during the first ``gold_seed_steps`` steps every group gets the gold completion;
* AR3PO response reuse: a per-prompt buffer of past correct completions; an all-wrong group reuses one of them
  (the policy's own earlier success, closer to on-policy than the gold text);
* DAPO dynamic sampling / GDEPO resampling: groups whose correctness does not vary are regenerated up to K times,
  and optionally skipped (advantage 0) when they still do not vary.

The trainer (``ConGRPOTrainer._generate``) applies the plan to the token ids before TRL computes log-probs and
rewards, so the edited completions are scored and trained on exactly like sampled ones. Replaced members are the
LAST members of a group (rollouts are i.i.d., so which one is arbitrary; the last is deterministic).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

CORRECT = 0.5
"""Accuracy at or above which a completion counts as correct (MCQ accuracy is 0/1; open-ended is token F1)."""


@dataclass
class Replacement:
    """Put ``ids`` (token ids, EOS included) / ``text`` at completion ``index``; ``source`` is gold or reuse."""

    index: int
    ids: list[int]
    text: str
    source: str


def group_slices(n: int, num_generations: int) -> list[range]:
    """The index ranges of consecutive groups of ``num_generations`` completions."""
    if n % num_generations:
        raise ValueError(f"{n} completions do not split into groups of num_generations={num_generations}")
    return [range(start, start + num_generations) for start in range(0, n, num_generations)]


def is_correct(accuracy: list[float | None]) -> list[bool]:
    return [a is not None and a >= CORRECT for a in accuracy]


def zero_variance_groups(correct: list[bool], num_generations: int) -> list[int]:
    """Indices of groups where every member is right or every member is wrong (no accuracy signal)."""
    return [g for g, rows in enumerate(group_slices(len(correct), num_generations))
            if len({correct[i] for i in rows}) == 1]


def all_wrong_groups(correct: list[bool], num_generations: int) -> list[int]:
    return [g for g, rows in enumerate(group_slices(len(correct), num_generations))
            if not any(correct[i] for i in rows)]


class ReuseBuffer:
    """AR3PO's per-prompt store of past correct completions (most recent last), bounded per prompt and in prompts.

    Keys are record ids. ``max_per_prompt`` correct answers are kept per prompt and at most ``max_prompts`` prompts
    (least recently updated dropped first), so memory stays bounded on large datasets.
    """

    def __init__(self, max_per_prompt: int = 2, max_prompts: int = 10000) -> None:
        self.max_per_prompt = max_per_prompt
        self.max_prompts = max_prompts
        self._store: OrderedDict[str, list[tuple[list[int], str]]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._store)

    def add(self, key: str, ids: list[int], text: str) -> None:
        entries = self._store.pop(key, [])
        entries = [e for e in entries if e[0] != ids] + [(list(ids), text)]
        self._store[key] = entries[-self.max_per_prompt:]
        while len(self._store) > self.max_prompts:
            self._store.popitem(last=False)

    def get(self, key: str) -> tuple[list[int], str] | None:
        entries = self._store.get(key)
        return entries[-1] if entries else None

    def state_dict(self) -> dict[str, Any]:
        return {"max_per_prompt": self.max_per_prompt, "max_prompts": self.max_prompts,
                "store": [[k, [[ids, text] for ids, text in v]] for k, v in self._store.items()]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.max_per_prompt, self.max_prompts = state["max_per_prompt"], state["max_prompts"]
        self._store = OrderedDict((k, [(list(ids), text) for ids, text in v]) for k, v in state["store"])


@dataclass
class EditPlan:
    """The replacements for one batch and how many groups each mechanism touched."""

    replacements: list[Replacement] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: {"gold_seeded": 0, "reused": 0, "gold_injected": 0})


def plan_edits(
    correct: list[bool],
    keys: list[str],
    gold: list[tuple[list[int], str] | None],
    num_generations: int,
    *,
    seed_gold: bool = False,
    reuse: ReuseBuffer | None = None,
    inject_gold: bool = False,
) -> EditPlan:
    """Decide, group by group, which member to replace and with what.

    Args:
        correct: per completion, whether it is correct (:func:`is_correct`).
        keys: per completion, its prompt's key (record id); equal within a group.
        gold: per completion, the gold completion of its record as ``(ids, text)``, None where it has none.
        seed_gold: DAVID-GRPO warm-up: every group with a gold completion gets it in one member, whatever the
            group's correctness.
        reuse: AR3PO buffer; an all-wrong group takes the prompt's latest buffered correct completion.
        inject_gold: GCPO; an all-wrong group that reuse did not fill takes the gold completion.

    The priority is seeding, then reuse, then gold injection; a group gets at most one replacement. Groups whose
    members are all correct are left alone except under seeding, where the gold text still anchors the grammar.
    """
    plan = EditPlan()
    for rows in group_slices(len(correct), num_generations):
        last = rows[-1]
        wrong = not any(correct[i] for i in rows)
        if seed_gold and gold[last] is not None:
            ids, text = gold[last]
            plan.replacements.append(Replacement(last, list(ids), text, "gold"))
            plan.counts["gold_seeded"] += 1
            continue
        if not wrong:
            continue
        buffered = reuse.get(keys[last]) if reuse is not None else None
        if buffered is not None:
            plan.replacements.append(Replacement(last, list(buffered[0]), buffered[1], "reuse"))
            plan.counts["reused"] += 1
        elif inject_gold and gold[last] is not None:
            ids, text = gold[last]
            plan.replacements.append(Replacement(last, list(ids), text, "gold"))
            plan.counts["gold_injected"] += 1
    return plan


def remember_correct(buffer: ReuseBuffer, correct: list[bool], keys: list[str], ids: list[list[int]],
                     texts: list[str]) -> int:
    """Store every correct completion of the batch in the AR3PO buffer; returns how many were stored."""
    stored = 0
    for ok, key, completion_ids, text in zip(correct, keys, ids, texts, strict=True):
        if ok:
            buffer.add(key, completion_ids, text)
            stored += 1
    return stored
