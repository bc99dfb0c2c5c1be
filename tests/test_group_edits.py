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


# ---- stub generation through the real trainer (ci tiny model) ----------------------------------------------------


def _stub_trainer(tiny_model_dirs, synth_dir, tmp_path, correct_from_call=None, **overrides):
    """A trainer whose sampler answers every prompt wrongly (from call ``correct_from_call`` on, the first member
    of each group answers right); returns the trainer and the list of scored batches it produced."""
    from test_variants_train import make_trainer

    trainer = make_trainer(tiny_model_dirs["qwen2_5_vl"], synth_dir, tmp_path, samples=2, **overrides)
    calls, batches = [0], []

    def completion(letter):
        ids = trainer._tokenizer(f"<think>nothing</think>\n<answer>{letter}</answer>", add_special_tokens=False)
        return list(ids["input_ids"]) + [trainer.eos_token_ids[0]]

    def fake_generate(prompt_ids, images, multimodal_fields, num_generations):
        n = len(prompt_ids)
        # the rows being (re)sampled are the first n of the batch's inputs that share these prompts
        answers = [row["answer"] for row in trainer._variant_inputs][:n] if n == len(trainer._variant_inputs) \
            else [trainer._variant_inputs[0]["answer"]] * n
        right = correct_from_call is not None and calls[0] >= correct_from_call
        calls[0] += 1
        out = []
        for i, answer in enumerate(answers):
            wrong = "B" if answer == "A" else "A"
            out.append(completion(answer if right and i % num_generations == 0 else wrong))
        return out, None

    original = trainer._generate_and_score_completions

    def recording(inputs):
        output = original(inputs)
        batches.append((inputs, output))
        return output

    trainer._generate_single_turn = fake_generate
    trainer._generate_and_score_completions = recording
    return trainer, batches


def _rows(trainer, output):
    ids = output["completion_ids"].tolist()
    mask = output["completion_mask"].tolist()
    return [[t for t, m in zip(row, keep, strict=True) if m] for row, keep in zip(ids, mask, strict=True)]


def test_stub_all_wrong_groups_get_the_gold_answer(tiny_model_dirs, synth_dir, tmp_path):
    import math

    trainer, batches = _stub_trainer(tiny_model_dirs, synth_dir, tmp_path, golden_injection=True)
    trainer.train()
    for inputs, output in batches:
        rows, adv = _rows(trainer, output), output["advantages"].tolist()
        for start in range(0, len(rows), 2):
            gold_ids, _ = trainer._gold(inputs[start + 1])
            assert rows[start + 1] == gold_ids  # the last member of each all-wrong group is the gold completion
            assert adv[start + 1] > 0 > adv[start]
    assert [v for e in trainer.state.log_history for k, v in e.items() if k == "variants/gold_injected_groups"] \
        == [2.0, 2.0]
    assert all(math.isfinite(e["loss"]) for e in trainer.state.log_history if "loss" in e)


def test_stub_reuse_puts_a_past_correct_answer_back(tiny_model_dirs, synth_dir, tmp_path):
    # call 0: one correct member per group (stored in the AR3PO buffer); call 1: all wrong -> reuse it
    trainer, batches = _stub_trainer(tiny_model_dirs, synth_dir, tmp_path, correct_from_call=0, max_steps=1,
                                     response_reuse=True)
    trainer.train()
    first_inputs, first = batches[0]
    stored = {row["id"]: ids for row, ids in zip(first_inputs, _rows(trainer, first), strict=True)
              if trainer._reuse.get(row["id"]) and trainer._reuse.get(row["id"])[0] == ids}
    assert len(stored) == 2  # each prompt's correct completion is buffered
    trainer2, batches2 = _stub_trainer(tiny_model_dirs, synth_dir, tmp_path / "b", max_steps=1, response_reuse=True)
    trainer2._reuse.load_state_dict(trainer._reuse.state_dict())
    trainer2.train()
    inputs, output = batches2[0]
    rows, adv = _rows(trainer2, output), output["advantages"].tolist()
    for start in range(0, len(rows), 2):
        assert rows[start + 1] == stored[inputs[start + 1]["id"]]
        assert adv[start + 1] > 0 > adv[start]


def test_stub_dynamic_sampling_resamples_zero_variance_groups(tiny_model_dirs, synth_dir, tmp_path):
    # the first generation is all wrong, the resample has one right member per group
    trainer, batches = _stub_trainer(tiny_model_dirs, synth_dir, tmp_path, correct_from_call=1, max_steps=1,
                                     dynamic_sampling_tries=2, skip_zero_variance=True)
    trainer.train()
    inputs, output = batches[0]
    adv = output["advantages"].tolist()
    assert adv[0] > 0 > adv[1] and adv[2] > 0 > adv[3]
    history = trainer.state.log_history[0]
    assert history["variants/rollouts"] == 8.0  # 4 sampled + 4 resampled; the second try finds nothing to do
    assert history["variants/skipped_groups"] == 0.0


def test_stub_skip_zeroes_groups_that_stay_uniform(tiny_model_dirs, synth_dir, tmp_path):
    trainer, batches = _stub_trainer(tiny_model_dirs, synth_dir, tmp_path, max_steps=1, dynamic_sampling_tries=1,
                                     skip_zero_variance=True, advantage_estimator="equal_right")
    trainer.train()
    # equal-right would give every wrong answer -margin; skipping zero-variance groups removes them
    assert batches[0][1]["advantages"].abs().sum().item() == 0.0
    assert trainer.state.log_history[0]["variants/skipped_groups"] == 2.0


def test_stub_gold_goes_to_the_paid_families_only(tiny_model_dirs, synth_dir, tmp_path):
    trainer, batches = _stub_trainer(tiny_model_dirs, synth_dir, tmp_path, golden_injection=True)
    paid = trainer.train_dataset[0]["task"]
    trainer.args.accuracy_tasks = [paid]
    trainer.train()
    seen = {True: 0, False: 0}
    for inputs, output in batches:
        rows = _rows(trainer, output)
        for start in range(0, len(rows), 2):
            row = inputs[start + 1]
            target = trainer._tokenizer(row["target"], add_special_tokens=False)["input_ids"]
            injected = rows[start + 1] == list(target) + [trainer.eos_token_ids[0]]
            assert injected == (row["task"] == paid)  # every group is all wrong; only the paid ones get gold
            seen[injected] += 1
    assert seen[True] and seen[False]
    logged = [v for e in trainer.state.log_history for k, v in e.items() if k == "variants/gold_injected_groups"]
    assert sum(logged) == seen[True]


def test_stub_dynamic_sampling_resamples_as_many_groups_on_every_rank(tiny_model_dirs, synth_dir, tmp_path):
    """Another rank with more zero-variance groups (simulated: the global maximum is 3, this rank has 2): this
    rank resamples 3 groups too, so a vLLM server slicing its results by process_index * len(prompts) hands every
    rank its own completions, and the padded group's completions are discarded."""
    trainer, batches = _stub_trainer(tiny_model_dirs, synth_dir, tmp_path, correct_from_call=1, max_steps=1,
                                     dynamic_sampling_tries=1, skip_zero_variance=True)
    sizes = []
    resample = trainer._resample
    trainer._global_max = lambda value: max(value, 3) if value else 0
    trainer._resample = lambda prompts: (sizes.append(len(prompts)), resample(prompts))[1]
    trainer.train()
    assert sizes == [6]  # 3 groups of 2, not this rank's 2
    adv = batches[0][1]["advantages"].tolist()
    assert adv[0] > 0 > adv[1]  # its first group took its resampled completions (the stub answers it right)
    assert trainer.state.log_history[0]["variants/rollouts"] == 10.0  # 4 sampled + 6 resampled
