"""Zero-signal group mechanisms: the edit plan on hand-made groups, the reuse buffer, and (on the ci tiny model)
a stub generation that yields all-wrong groups, checked end to end through the trainer."""

import pytest

from medgrpo.train.group_edits import (
    ReuseBuffer,
    all_wrong_groups,
    group_slices,
    is_correct,
    plan_edits,
    remember_correct,
    zero_variance_groups,
)

GOLD = ([7, 8, 9], "<think>gold</think>\n<answer>A</answer>")


def test_group_queries():
    correct = is_correct([1.0, 0.0, 0.0, None, 1.0, 1.0, 0.4, 0.6])
    assert correct == [True, False, False, False, True, True, False, True]
    assert zero_variance_groups(correct, 2) == [1, 2]
    assert all_wrong_groups(correct, 2) == [1]
    with pytest.raises(ValueError, match="groups"):
        group_slices(5, 2)


def test_gold_injection_only_in_all_wrong_groups():
    correct = [False, False, True, False]
    plan = plan_edits(correct, ["a", "a", "b", "b"], [GOLD] * 4, 2, inject_gold=True)
    assert [(r.index, r.source, r.ids) for r in plan.replacements] == [(1, "gold", [7, 8, 9])]
    assert plan.counts == {"gold_seeded": 0, "reused": 0, "gold_injected": 1}
    # no gold target for the record: nothing to inject
    assert plan_edits(correct, ["a", "a", "b", "b"], [None] * 4, 2, inject_gold=True).replacements == []


def test_seeding_fills_every_group_and_takes_priority():
    plan = plan_edits([True, True, False, False], ["a", "a", "b", "b"], [GOLD] * 4, 2, seed_gold=True,
                      inject_gold=True)
    assert [r.index for r in plan.replacements] == [1, 3]
    assert plan.counts["gold_seeded"] == 2 and plan.counts["gold_injected"] == 0


def test_reuse_before_gold_and_buffer_bounds():
    buffer = ReuseBuffer(max_per_prompt=2, max_prompts=2)
    stored = remember_correct(buffer, [True, False, True], ["a", "a", "b"], [[1], [2], [3]], ["x", "y", "z"])
    assert stored == 2 and buffer.get("a") == ([1], "x")
    plan = plan_edits([False, False, False, False], ["a", "a", "c", "c"], [GOLD] * 4, 2, reuse=buffer,
                      inject_gold=True)
    # group "a" reuses its own past success; group "c" has none buffered and falls back to the gold answer
    assert [(r.index, r.source, r.text) for r in plan.replacements] == [(1, "reuse", "x"), (3, "gold", GOLD[1])]
    assert plan.counts == {"gold_seeded": 0, "reused": 1, "gold_injected": 1}
    buffer.add("a", [4], "w")
    buffer.add("a", [5], "v")  # keeps the 2 most recent for "a"
    assert buffer.get("a") == ([5], "v")
    buffer.add("d", [6], "u")  # a third prompt evicts the least recently updated ("b")
    assert len(buffer) == 2 and buffer.get("b") is None
    restored = ReuseBuffer()
    restored.load_state_dict(buffer.state_dict())
    assert restored.get("a") == ([5], "v") and restored.get("d") == ([6], "u")
