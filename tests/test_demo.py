"""`medgrpo demo` chains every stage through the public functions; a few steps of each on the demo model."""

import json

import pytest
import yaml

from medgrpo.data import load_records
from medgrpo.demo import METRICS, REPO_RECIPES, report_markdown, run_demo
from medgrpo.eval.predictions import read_predictions
from medgrpo.models.loading import load_model
from medgrpo.rewards import RewardSettings, total_reward


def test_demo_runs_every_stage_and_reports_side_by_side(tmp_path):
    quick = {"max_steps": 2, "save_strategy": "no", "report_to": "none", "per_device_train_batch_size": 4}
    report = run_demo(
        tmp_path / "demo", n_train=20, n_test=10, seed=1, max_new_tokens=16,
        sft_overrides=quick, grpo_overrides={**quick, "num_generations": 2, "max_completion_length": 16},
    )
    out = tmp_path / "demo"
    saved = json.loads((out / "demo_report.json").read_text())
    assert saved["after_sft"].keys() == saved["after_con_grpo"].keys()
    assert "overall" in saved["after_sft"] and len(saved["after_sft"]) > 1  # overall + every task family present
    for row in saved["after_sft"].values():
        assert set(row) == set(METRICS)
    assert (out / "demo_report.md").read_text() == report_markdown(report)
    # The overall change comes with a paired interval, and it is the difference of the two tables' cells.
    for change in saved["change"].values():
        assert change["ci_low"] <= change["delta"] <= change["ci_high"] and 0 < change["n"] <= 10
    for metric in ("accuracy", "consistency"):  # scored on every record, so the same rows as the tables
        delta = saved["after_con_grpo"]["overall"][metric] - saved["after_sft"]["overall"][metric]
        assert abs(saved["change"][metric]["delta"] - delta) < 1e-9 and saved["change"][metric]["n"] == 10
    assert "paired bootstrap 95% interval" in (out / "demo_report.md").read_text()
    # Per task family too: the families' records add up to the whole, each change the difference of its cells.
    by_task = saved["change_by_task"]
    assert set(by_task) == set(saved["after_sft"]) - {"overall"}
    assert sum(c["accuracy"]["n"] for c in by_task.values()) == 10
    for task, c in by_task.items():
        delta = saved["after_con_grpo"][task]["accuracy"] - saved["after_sft"][task]["accuracy"]
        assert abs(c["accuracy"]["delta"] - delta) < 1e-9 and c["accuracy"]["ci_low"] <= c["accuracy"]["delta"]
    assert "per task family" in (out / "demo_report.md").read_text()
    # The held-out reward is the recipe's objective on each greedy completion, re-derived here from the rows.
    recipe = yaml.safe_load((REPO_RECIPES / "con_grpo.yaml").read_text())
    names, weights = recipe["reward_funcs"], recipe["reward_weights"]
    shaping = RewardSettings(gate_on_correct=recipe["gate_on_correct"],
                             zero_on_format_failure=recipe["zero_on_format_failure"])
    for stage, key in (("eval_sft", "baseline"), ("eval_con_grpo", "run")):
        rewards = [total_reward(r["scores"], names, weights, shaping)
                   for r in read_predictions(out / stage / "predictions.jsonl")]
        assert abs(saved["change"]["reward"][key] - sum(rewards) / len(rewards)) < 1e-9
    reward = saved["change"]["reward"]
    assert abs(reward["delta"] - (reward["run"] - reward["baseline"])) < 1e-9 and reward["n"] == 10
    assert f"SFT {reward['baseline']:.3f} -> Con-GRPO {reward['run']:.3f}" in (out / "demo_report.md").read_text()
    assert (out / "eval_sft" / "metrics.json").is_file() and (out / "eval_con_grpo" / "metrics.json").is_file()
    assert (out / "export" / "README.md").is_file()
    card = (out / "data" / "README.md").read_text()
    assert "--option-order fixed" in card and "--cot-style brief" in card and "--setting visible" in card
    assert saved["cot_style"] == "brief" and "(visible lesions, brief reasoning, options in fixed order)" in \
        report_markdown(report)
    records = load_records(out / "data", split="test")
    assert abs(saved["chance"] - sum(1 / len(r.options) for r in records) / len(records)) < 1e-12
    assert load_model(out / "export").config.model_type == "qwen2_5_vl"
    # A second run into the same folder reuses every finished stage instead of training again.
    again = run_demo(out, n_train=20, n_test=10, seed=1, max_new_tokens=16)
    assert again["after_con_grpo"] == report["after_con_grpo"]


def test_demo_overrides_reach_the_recipe_parser_lists_included(tmp_path):
    from medgrpo.demo import _stage_args
    from medgrpo.train.args import DataArguments, MedModelConfig
    from medgrpo.train.con_grpo_config import ConGRPOConfig
    from medgrpo.train.run import parse_args

    overrides = {"reward_funcs": ["format", "accuracy"], "reward_weights": [0.5, 1.0], "learning_rate": 1e-4,
                 "output_dir": tmp_path / "out"}
    argv = _stage_args(REPO_RECIPES / "con_grpo.yaml", overrides)
    _, config, _ = parse_args((DataArguments, ConGRPOConfig, MedModelConfig), argv, "test")
    assert config.reward_funcs == ["format", "accuracy"] and config.reward_weights == [0.5, 1.0]
    assert config.learning_rate == 1e-4 and config.max_steps == 150  # the rest still comes from the recipe


def test_pool_changes_weights_runs_by_records_and_narrows_the_interval():
    from medgrpo.demo import pool_changes

    def report(delta, half, n):
        return {"accuracy": {"delta": delta, "ci_low": delta - half, "ci_high": delta + half, "n": n}}

    one = pool_changes([report(0.02, 0.024, 2000)])["accuracy"]
    assert abs(one["ci_low"] - (0.02 - 0.024)) < 1e-12  # one run: its own interval back
    three = pool_changes([report(0.018, 0.024, 2000), report(0.005, 0.023, 2000), report(0.035, 0.023, 2000)])
    acc = three["accuracy"]
    assert abs(acc["delta"] - (0.018 + 0.005 + 0.035) / 3) < 1e-12 and acc["n"] == 6000 and acc["runs"] == 3
    assert acc["ci_low"] > 0 and acc["ci_high"] - acc["ci_low"] < 0.03  # about 1/sqrt(3) of one run's width
    weighted = pool_changes([report(0.0, 0.02, 1000), report(0.03, 0.02, 3000)])["accuracy"]
    assert abs(weighted["delta"] - 0.0225) < 1e-12
    with pytest.raises(ValueError, match="missing"):
        pool_changes([report(0.0, 0.02, 1000), {}])
