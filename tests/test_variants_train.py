"""Loss-side variants on hand-computed numbers, then every variant for a few real steps on the ci tiny model."""

import math

import pytest
import torch

from medgrpo.train.losses import (
    AdaptiveTemperature,
    answer_logp,
    answer_mask,
    care_bonus,
    ema_copy,
    positive_nll,
    trajectory_ratio_loss,
)


def test_trajectory_ratio_sums_log_ratios_and_clips():
    logps = torch.tensor([[-1.0, -1.0], [-2.0, -2.0]], requires_grad=True)
    old = torch.tensor([[-1.5, -1.0], [-2.0, -2.1]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    # row 0: log-ratio sum 0.5 -> r = e^0.5 > 1.2, A = +1 -> clipped to 1.2; row 1: masked token ignored -> r = 1
    loss, stats = trajectory_ratio_loss(logps, old, torch.tensor([1.0, -1.0]), mask, 0.2, 0.2, log_ratio_clamp=5.0)
    assert loss.item() == pytest.approx(-(1.2 - 1.0) / 2)
    assert stats["clip_ratio"] == 0.5
    loss.backward()
    assert torch.isfinite(logps.grad).all()
    # negative advantage: -min(-r, -1.2) = r, and the clamp caps the log-sum: e^0.3 instead of e^0.5
    loss, _ = trajectory_ratio_loss(logps, old, torch.tensor([-1.0, 0.0]), mask, 0.2, 0.2, log_ratio_clamp=5.0)
    assert loss.item() == pytest.approx(math.exp(0.5) / 2)
    loss, _ = trajectory_ratio_loss(logps, old, torch.tensor([-1.0, 0.0]), mask, 0.2, 0.2, log_ratio_clamp=0.3)
    assert loss.item() == pytest.approx(math.exp(0.3) / 2)


def test_trajectory_ratio_gives_each_token_its_sequence_term_and_reduces_like_trl():
    logps = torch.tensor([[-1.0, -1.0, -1.0], [-2.0, -2.0, 0.0]])
    old = torch.tensor([[-1.1, -1.0, -1.0], [-2.0, -2.1, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv = torch.tensor([1.0, -1.0])
    terms = [-min(math.exp(0.1), 1.2) * 1.0, -max(math.exp(0.1), 0.8) * -1.0]  # per-sequence clipped surrogate
    expected = {"grpo": sum(terms) / 2, "bnpo": (3 * terms[0] + 2 * terms[1]) / 5,
                "dr_grpo": (3 * terms[0] + 2 * terms[1]) / (2 * 4), "dapo": (3 * terms[0] + 2 * terms[1]) / 10}
    for loss_type, value in expected.items():
        loss, _ = trajectory_ratio_loss(logps, old, adv, mask, 0.2, 0.2, 5.0, loss_type, max_completion_length=4,
                                        num_items=10.0)
        assert abs(loss.item() - value) < 1e-5, loss_type
    with pytest.raises(ValueError, match="loss_type"):
        trajectory_ratio_loss(logps, old, adv, mask, loss_type="cispo")


def test_positive_nll_averages_positive_completions_only():
    logps = torch.tensor([[-1.0, -3.0], [-4.0, -2.0], [-0.5, -0.5]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    # token-mean NLL: row 0 (1 + 3) / 2 = 2, row 1 4 (second token masked), row 2 ignored (A < 0)
    assert positive_nll(logps, torch.tensor([1.0, 0.5, -1.0]), mask).item() == pytest.approx(3.0)
    assert positive_nll(logps, torch.tensor([-1.0, 0.0, -1.0]), mask).item() == 0.0


def test_adaptive_temperature_band():
    t = AdaptiveTemperature(temperature=1.0, low=0.5, high=2.0, rate=0.1, t_min=0.7, t_max=1.5)
    assert t.update(0.2) == pytest.approx(1.1)  # entropy below the band: hotter
    assert t.update(3.0) == pytest.approx(1.0)  # above: cooler
    assert t.update(1.0) == pytest.approx(1.0)  # inside: unchanged
    for _ in range(20):
        t.update(0.0)
    assert t.temperature == 1.5
    restored = AdaptiveTemperature()
    restored.load_state_dict(t.state_dict())
    assert restored == t


def test_answer_mask_and_care_bonus():
    mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    pieces = [
        ["ok", "<", "answer", ">A", "</answer>", "<pad>"],  # the letter shares a token with the tag, as in Qwen
        ["no", " tag", " at", " all", ".", "."],
        ["x", "<answer>", "B", "</", "answer", ">"],  # the tag as one token
    ]
    tokens = answer_mask(mask, pieces)
    assert tokens.tolist() == [[0, 0, 0, 1, 1, 0], [0] * 6, [0, 0, 1, 1, 1, 1]]
    lp = answer_logp(torch.tensor([[0.0, 0.0, 0.0, -1.0, -2.0, -9.0], [-1.0] * 6]), tokens[:2])
    assert lp[0].item() == pytest.approx(-1.5) and math.isnan(lp[1])
    # group 1: both correct, mean log-lik -1.5 -> only the more confident one (-1) earns the bonus;
    # group 2: the one correct member is its own mean -> bonus; the wrong one never
    bonus = care_bonus(torch.tensor([-1.0, -2.0, -0.5, math.nan]), torch.tensor([1.0, 1.0, 1.0, 0.0]), 2, 0.5)
    assert bonus.tolist() == [0.5, 0.0, 0.5, 0.0]
    # a group whose accuracy is unpaid (accuracy_tasks: NaN) earns no bonus and no NaN
    bonus = care_bonus(torch.tensor([-1.0, -2.0]), torch.tensor([math.nan, math.nan]), 2, 0.5)
    assert bonus.tolist() == [0.0, 0.0]


def test_ema_update():
    model = torch.nn.Linear(2, 1)
    torch.nn.init.zeros_(model.weight)
    ema = ema_copy(model, decay=0.9)  # a frozen copy: the policy's weights at the start
    torch.nn.init.ones_(model.weight)
    ema.update_parameters(model)
    assert torch.allclose(ema.module.weight, torch.full_like(ema.module.weight, 0.1))
    assert not ema.module.weight.requires_grad


# ---- every variant for 2 real steps on the ci tiny model --------------------------------------------------------

VARIANTS = {
    "equal_right": {"advantage_estimator": "equal_right"},
    "taros": {"advantage_estimator": "taros", "taros_sparsity": 0.5},
    "ips": {"ips_scaling": True},
    "hadw": {"hadw": True},
    "gdpo_hadw": {"multi_objective_aggregation": "normalize_then_sum", "hadw": True},
    "drpo": {"drpo_scaling": True},
    "norm_none_drpo": {"scale_rewards": "none", "drpo_scaling": True},
    "golden_injection": {"golden_injection": True},
    "gold_seed": {"gold_seed_steps": 1},
    "reuse": {"response_reuse": True, "golden_injection": True},
    "dynamic_sampling": {"dynamic_sampling_tries": 1, "skip_zero_variance": True},
    "tic": {"trajectory_ratio": True},
    "scope": {"scope_coef": 0.1, "scope_entropy_band": [50.0, 60.0]},  # entropy below the band: temperature rises
    "care": {"care_bonus": 0.5, "care_ema_every": 1},
    # the accuracy-reading variants with accuracy unpaid (None) on most groups
    "accuracy_tasks": {"advantage_estimator": "equal_right", "hadw": True, "drpo_scaling": True, "care_bonus": 0.5,
                       "accuracy_tasks": ["anatomy_identification"]},
}
EXPECTED_LOGS = {
    "equal_right": ["variants/equal_right_groups"],
    "taros": ["variants/taros_sparsified_groups", "variants/taros_min_saturation_weight"],
    "ips": ["variants/ips_groups"],
    "hadw": ["variants/hadw_anchor", "variants/hadw_groups"],
    "gdpo_hadw": ["variants/hadw_anchor"],
    "drpo": ["variants/drpo_groups"],
    "norm_none_drpo": ["variants/drpo_groups"],
    "golden_injection": ["variants/gold_injected_groups", "variants/rollouts"],
    "gold_seed": ["variants/gold_seeded_groups"],
    "reuse": ["variants/reused_groups", "variants/gold_injected_groups"],
    "dynamic_sampling": ["variants/rollouts", "variants/skipped_groups"],
    "tic": ["variants/tic_log_ratio_mean", "variants/clip_ratio"],
    "scope": ["variants/scope_positive_nll", "variants/scope_temperature"],
    "care": ["rewards/care/mean"],
    "accuracy_tasks": ["variants/equal_right_groups", "variants/drpo_groups", "variants/hadw_groups",
                       "rewards/care/mean"],
}


def make_trainer(model_dir, data_dir, out, samples=8, **overrides):
    from medgrpo.data import to_grpo_dataset
    from medgrpo.train.args import DataArguments, MedModelConfig
    from medgrpo.train.con_grpo_config import ConGRPOConfig
    from medgrpo.train.con_grpo_trainer import ConGRPOTrainer
    from medgrpo.train.modeling import load_for_training
    from medgrpo.train.run import load_training_records

    data_args = DataArguments(dataset_path=str(data_dir), max_train_samples=samples)
    model_args = MedModelConfig(model_name_or_path=str(model_dir), dtype="float32")
    settings = dict(output_dir=str(out), max_steps=2, per_device_train_batch_size=4, num_generations=2,
                    max_completion_length=16, report_to="none", save_strategy="no", logging_steps=1, beta=0.0,
                    bf16=False, gradient_checkpointing=False, learning_rate=1e-3, seed=0,
                    reward_weights=[0.5, 1.0, 0.5, 0.5, 0.5])
    settings.update(overrides)
    model, processor, grid = load_for_training(model_args, data_args)
    dataset = to_grpo_dataset(load_training_records(data_args), data_args.root, grid)
    return ConGRPOTrainer(model=model, args=ConGRPOConfig(**settings), train_dataset=dataset,
                          processing_class=processor)


def logged(trainer, key):
    return [entry[key] for entry in trainer.state.log_history if key in entry]


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_trains_two_steps(tiny_model_dirs, synth_dir, tmp_path, name):
    trainer = make_trainer(tiny_model_dirs["qwen2_5_vl"], synth_dir, tmp_path, **VARIANTS[name])
    trainer.train()
    losses_seen = logged(trainer, "loss")
    assert len(losses_seen) == 2 and all(math.isfinite(v) for v in losses_seen)
    for key in EXPECTED_LOGS[name]:
        assert logged(trainer, key), f"{key} not logged"
    if name == "scope":
        assert logged(trainer, "variants/scope_temperature")[-1] > 1.0
    if name == "gold_seed":
        assert logged(trainer, "variants/gold_seeded_groups")[0] == 2  # step 0: both groups seeded


def test_hadw_state_survives_checkpoint_and_resume(tiny_model_dirs, synth_dir, tmp_path):
    import json

    from medgrpo.train.con_grpo_trainer import VARIANTS_STATE

    first = make_trainer(tiny_model_dirs["qwen2_5_vl"], synth_dir, tmp_path, hadw=True, save_strategy="steps",
                         save_steps=1)
    first.train()
    saved = json.loads((tmp_path / "checkpoint-2" / VARIANTS_STATE).read_text())["hadw"]
    assert saved["steps"] == 2 and saved == first.variants_state()["hadw"]
    step1 = json.loads((tmp_path / "checkpoint-1" / VARIANTS_STATE).read_text())["hadw"]
    assert step1["steps"] == 1 and step1["history"] == saved["history"][:1]

    resumed = make_trainer(tiny_model_dirs["qwen2_5_vl"], synth_dir, tmp_path, hadw=True, max_steps=3)
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    state = resumed.variants_state()["hadw"]
    # restored anchor history continued by one step (a fresh state would hold a single anchor)
    assert state["steps"] == 3 and state["history"][:2] == saved["history"]


def test_care_ema_survives_checkpoint_and_resume(tiny_model_dirs, synth_dir, tmp_path):
    from safetensors.torch import load_file

    from medgrpo.train.con_grpo_trainer import CARE_EMA_WEIGHTS

    model_dir = tiny_model_dirs["qwen2_5_vl"]
    first = make_trainer(model_dir, synth_dir, tmp_path, care_bonus=0.5, care_ema_every=1, care_ema_decay=0.5,
                         save_strategy="steps", save_steps=1)
    with torch.no_grad():  # the untrained ci policy may not move in 2 steps: make the EMA differ from it anyway
        for param in first._ema_model.parameters():
            param.add_(0.01)
    first.train()
    ema = {k: v.clone() for k, v in first._ema_model.state_dict().items()}
    saved = load_file(tmp_path / "checkpoint-2" / CARE_EMA_WEIGHTS)
    assert all(torch.equal(saved[k], ema[k]) for k in saved)

    # the EMA differs from the initial weights, and a resume restores it (not a fresh copy of the policy);
    # care_ema_every=100: no EMA update in the one step after the resume
    resumed = make_trainer(model_dir, synth_dir, tmp_path, care_bonus=0.5, care_ema_every=100, max_steps=3)
    initial = {k: v.clone() for k, v in resumed._ema_model.state_dict().items()}
    assert any(not torch.equal(initial[k], ema[k]) for k in ema)
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    assert resumed.variants_state()["care_ema_step"] == first.variants_state()["care_ema_step"] == 1
    assert all(torch.equal(resumed._ema_model.state_dict()[k], ema[k]) for k in ema)


def test_ablation_runner_table_and_reuse(tiny_model_dirs, synth_dir, tmp_path, capsys):
    import json
    from pathlib import Path

    from medgrpo.train.ablate import main

    recipe = str(Path(__file__).resolve().parents[1] / "recipes/tiny/con_grpo.yaml")
    argv = ["--config", recipe, "--sft", str(tiny_model_dirs["qwen2_5_vl"]), "--dataset", str(synth_dir),
            "--variants", "baseline,gcpo", "--seeds", "2", "--max-steps", "1", "--eval-limit", "3",
            "--max-new-tokens", "8", "--out", str(tmp_path / "ab"), "--", "--per_device_train_batch_size", "4",
            "--num_generations", "2", "--max_completion_length", "8", "--max_train_samples", "4"]
    assert main(argv) == 0
    result = json.loads((tmp_path / "ab" / "ablation.json").read_text())
    table = result["table"]
    assert set(table) == {"baseline", "gcpo"}
    for row in table.values():
        assert row["accuracy"]["n"] == 2 and len(row["accuracy"]["seeds"]) == 2
        assert row["rollouts"]["mean"] == 4  # one step of 2 prompts x 2 generations; gold injection adds none
    assert "delta" in table["gcpo"]["accuracy"] and "delta" not in table["baseline"]["accuracy"]
    # accuracy is compared record by record with the same seed's baseline (an interval), rollouts by their means
    assert table["gcpo"]["accuracy"]["ci_low"] <= table["gcpo"]["accuracy"]["delta"] <= table["gcpo"]["accuracy"][
        "ci_high"]
    assert "ci_low" not in table["gcpo"]["rollouts"] and "delta_se" in table["gcpo"]["rollouts"]
    markdown = (tmp_path / "ab" / "ablation.md").read_text()
    assert "| gcpo | golden_injection=True |" in markdown and "medgrpo ablate --config" in markdown
    assert (tmp_path / "ab" / "learning_curves.png").stat().st_size > 0
    # a second call reuses every finished run (no training: the run folders are untouched)
    stamp = (tmp_path / "ab/runs/gcpo/seed1/ablate_train.json").stat().st_mtime_ns
    assert main(argv) == 0
    assert (tmp_path / "ab/runs/gcpo/seed1/ablate_train.json").stat().st_mtime_ns == stamp
    # an ablation under way: --finished-only tabulates what finished and trains nothing
    import shutil

    shutil.rmtree(tmp_path / "ab/runs/gcpo/seed1")
    assert main([*argv[: argv.index("--")], "--finished-only"]) == 0
    table = json.loads((tmp_path / "ab" / "ablation.json").read_text())["table"]
    assert table["gcpo"]["accuracy"]["n"] == 1 and table["baseline"]["accuracy"]["n"] == 2
    assert not (tmp_path / "ab/runs/gcpo/seed1").exists()


def test_ablation_runner_bad_request_is_one_line(tmp_path, capsys):
    from medgrpo.train.ablate import main

    assert main(["--config", "x.yaml", "--sft", "m", "--dataset", "d", "--variants", "nope", "--out",
                 str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("medgrpo: unknown variant 'nope'")


# ---- the variant losses against TRL's own computation on the same batch -----------------------------------------


def _scored_batch(trainer):
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 2  # what the training loop sets; 2 so the scaling shows
    rows = [trainer.train_dataset[i] for i in range(trainer.args.per_device_train_batch_size)]
    torch.manual_seed(0)
    return trainer._generate_and_score_completions(rows)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_tic_on_single_token_completions_is_trls_loss(tiny_model_dirs, synth_dir, tmp_path, loss_type):
    """One token per completion: the trajectory ratio is the token ratio, so TIC-GRPO reduced for ``loss_type``
    must give what TRL's own ``_compute_loss`` gives on the same batch (the completions and old log-probs fixed)."""
    from trl import GRPOTrainer

    trainer = make_trainer(tiny_model_dirs["qwen2_5_vl"], synth_dir, tmp_path, loss_type=loss_type,
                           max_completion_length=1, num_iterations=2)  # num_iterations: TRL keeps old log-probs
    inputs = _scored_batch(trainer)
    with torch.no_grad():  # move the policy off the sampling one, so ratios differ from 1 and clipping matters
        for p in trainer.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    expected = GRPOTrainer._compute_loss(trainer, trainer.model, inputs)
    trainer.args.trajectory_ratio = True
    got = trainer._compute_loss(trainer.model, inputs)
    assert torch.allclose(got, expected, rtol=1e-5, atol=1e-7), (got.item(), expected.item())


def test_scope_adds_its_nll_to_trls_own_loss(tiny_model_dirs, synth_dir, tmp_path):
    """SCOPE-RL composes with TRL's loss: every GRPOConfig loss field (here dr_grpo with beta and delta) still
    applies, and the difference is exactly ``scope_coef`` times the positive-sample NLL, with no second forward."""
    from trl import GRPOTrainer

    from medgrpo.train.losses import positive_nll

    trainer = make_trainer(tiny_model_dirs["qwen2_5_vl"], synth_dir, tmp_path, loss_type="dr_grpo", beta=0.04,
                           delta=1.5, scope_coef=0.3)
    inputs = _scored_batch(trainer)
    expected = GRPOTrainer._compute_loss(trainer, trainer.model, inputs)
    calls = []
    original = GRPOTrainer._get_per_token_logps_and_entropies
    GRPOTrainer._get_per_token_logps_and_entropies = lambda self, *a, **k: calls.append(1) or original(self, *a, **k)
    try:
        got = trainer._compute_loss(trainer.model, inputs)
    finally:
        GRPOTrainer._get_per_token_logps_and_entropies = original
    assert len(calls) == 1
    logps, _, _ = original(trainer, trainer.model, torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
                           torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1),
                           inputs["completion_ids"].size(1), pixel_values=inputs.get("pixel_values"),
                           image_grid_thw=inputs.get("image_grid_thw"), num_images=inputs.get("num_images"))
    nll = positive_nll(logps, inputs["advantages"], inputs["completion_mask"])
    scale = trainer.current_gradient_accumulation_steps
    assert torch.allclose(got, expected + 0.3 * nll / scale, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("setting, named", [
    ({"loss_type": "cispo"}, "loss_type='cispo'"), ({"beta": 0.04}, "beta"), ({"delta": 1.5}, "delta"),
    ({"top_entropy_quantile": 0.2}, "top_entropy_quantile"), ({"importance_sampling_level": "sequence"}, "importance_sampling_level='sequence'"),
    ({"off_policy_mask_threshold": 0.5}, "off_policy_mask_threshold")])
def test_tic_stops_on_a_loss_field_it_cannot_honour(tmp_path, setting, named):
    from medgrpo.train.con_grpo_config import ConGRPOConfig

    with pytest.raises(ValueError, match=f"cannot honour {named}"):
        ConGRPOConfig(output_dir=str(tmp_path), trajectory_ratio=True, bf16=False, **setting)
    ConGRPOConfig(output_dir=str(tmp_path), trajectory_ratio=True, bf16=False, loss_type="grpo")  # honoured


def test_ablation_variant_fields_win_over_flags_given_to_every_run(tmp_path):
    from pathlib import Path

    from medgrpo.train.ablate import variant_argv
    from medgrpo.train.args import DataArguments, MedModelConfig
    from medgrpo.train.con_grpo_config import ConGRPOConfig
    from medgrpo.train.run import parse_args

    recipe = str(Path(__file__).resolve().parents[1] / "recipes/tiny/con_grpo.yaml")
    argv = variant_argv("gcpo", recipe, "m", "d", tmp_path, 0, None,
                        ["--golden_injection", "false"])
    _, args, _ = parse_args((DataArguments, ConGRPOConfig, MedModelConfig), argv, "test")
    assert args.golden_injection is True
    argv = variant_argv("baseline", recipe, "m", "d", tmp_path, 0, None,
                        ["--golden_injection", "false"])
    assert parse_args((DataArguments, ConGRPOConfig, MedModelConfig), argv, "test")[1].golden_injection is False


def test_scope_rl_stops_when_its_clamp_would_move_the_recipes_temperature(tmp_path):
    from medgrpo.train.con_grpo_config import ConGRPOConfig

    with pytest.raises(ValueError, match="outside scope_temperature_range"):
        ConGRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, scope_coef=0.05, temperature=0.5)
    config = ConGRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, scope_coef=0.05, temperature=0.5,
                           scope_temperature_range=[0.35, 0.75])
    assert config.scope_temperature_range == [0.35, 0.75]
