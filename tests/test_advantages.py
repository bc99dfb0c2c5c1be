"""Advantage estimators on fixed reward tensors; every expected number is worked out by hand in the test."""

import math

import pytest
import torch

from medgrpo.train.advantages import (
    EPS,
    AdvantageSpec,
    DRPOState,
    HADWState,
    compute_advantages,
    equal_right,
    group_relative,
    hadw_weights,
    ips_scale,
    normalize_then_sum,
    saturation_weights,
    sum_then_normalize,
    taros,
    weighted_sum,
)

NAN = math.nan


def close(actual, expected, tol=1e-5):
    assert torch.allclose(actual.double(), torch.tensor(expected, dtype=torch.float64), atol=tol), (actual, expected)


def test_group_relative_scopes():
    total = torch.tensor([1.0, 0, 0, 0, 1, 1, 0, 0])
    # group 1: mean 0.25, deviations (0.75, -0.25 x3), Bessel std sqrt((0.5625 + 3 * 0.0625) / 3) = 0.5
    # group 2: mean 0.5, deviations +-0.5, Bessel std sqrt(4 * 0.25 / 3) = 1 / sqrt(3)
    s2 = 1 / math.sqrt(3)
    close(group_relative(total, 4, "group"),
          [0.75 / (0.5 + EPS)] + [-0.25 / (0.5 + EPS)] * 3 + [0.5 / (s2 + EPS)] * 2 + [-0.5 / (s2 + EPS)] * 2)
    # batch: one std over all 8 rewards, mean 0.375: var = (3 * 0.625^2 + 5 * 0.375^2) / 7 = 1.875 / 7
    sb = math.sqrt(1.875 / 7)
    close(group_relative(total, 4, "batch"), [d / (sb + EPS) for d in (0.75, -0.25, -0.25, -0.25, 0.5, 0.5, -0.5, -0.5)])
    close(group_relative(total, 4, "none"), [0.75, -0.25, -0.25, -0.25, 0.5, 0.5, -0.5, -0.5])
    with pytest.raises(ValueError, match="scope"):
        group_relative(total, 4, "global")
    with pytest.raises(ValueError, match="groups"):
        group_relative(total, 3)


def test_weighted_sum_ignores_nan_components_and_keeps_unscorable_rows_nan():
    rewards = torch.tensor([[1.0, NAN], [0.5, 1.0], [NAN, NAN]])
    out = weighted_sum(rewards, torch.tensor([2.0, 1.0]))
    close(out[:2], [2.0, 2.0])
    assert math.isnan(out[2])
    # an unscorable row gets advantage 0 and is left out of its group's baseline
    adv = sum_then_normalize(torch.tensor([[1.0], [0.0], [NAN], [1.0]]), torch.tensor([1.0]), 2, "none")
    close(adv, [0.5, -0.5, 0.0, 0.0])


def test_gdpo_normalizes_each_component_in_its_group():
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    # group 1: each component is (1, 0) or (0, 1): z = +-0.5 / (sqrt(0.5) + eps); they cancel -> totals 0, 0
    # group 2: component 0 constant -> z 0; component 1 (1, 0) -> +-a
    a = 0.5 / (math.sqrt(0.5) + EPS)
    totals = [0.0, 0.0, a, -a]
    std = math.sqrt(2 * a * a / 3)  # batch Bessel std, mean 0
    close(normalize_then_sum(rewards, torch.tensor([1.0, 1.0]), 2), [t / (std + EPS) for t in totals])
    # plain GRPO on the same rewards: group 1 totals (1, 1) carry no signal at all
    close(sum_then_normalize(rewards, torch.tensor([1.0, 1.0]), 2)[:2], [0.0, 0.0])


def test_equal_right_accuracy_sets_the_sign():
    # group 1: correct answer with evidence 0 vs wrong answer with evidence 1: GRPO's sum is (1, 1) -> no signal
    # group 2: two correct answers with equal evidence -> both +margin
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.5], [1.0, 0.5]])
    z = 0.5 / (math.sqrt(0.5) + EPS)
    adv = equal_right(rewards, torch.tensor([1.0, 1.0]), 2, accuracy_index=0, margin=0.1)
    close(adv, [0.1 + z, -(0.1 + z), 0.1, 0.1])
    assert adv[0] > 0 > adv[1]


def test_variants_keep_training_groups_whose_accuracy_is_unpaid():
    """``accuracy_tasks`` leaves accuracy NaN on some groups: they keep GRPO's signal on the other rewards."""
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0], [NAN, 1.0], [NAN, 0.0]])
    weights = torch.tensor([1.0, 1.0])
    z = 0.5 / (math.sqrt(0.5) + EPS)
    # equal_right: the paid group as before, the unpaid one ranked by its consistency alone
    close(equal_right(rewards, weights, 2, accuracy_index=0, margin=0.1), [0.1 + z, -(0.1 + z), z, -z])
    # HA-DW: the anchor follows the paid rows only; a batch with none paid leaves it (and the advantages) alone
    state = HADWState()
    spec = AdvantageSpec(hadw=True, accuracy_index=0, hadw_lambda=1.3)
    adv, stats = compute_advantages(rewards, weights, 2, spec, hadw_state=state)
    assert stats["variants/hadw_anchor"] == pytest.approx(0.5) and torch.isfinite(adv).all()
    close(adv[2:], [1.3 * z, -1.3 * z])  # unpaid group at the anchor: d = 0, factor lam
    unpaid = torch.tensor([[NAN, 1.0], [NAN, 0.0]])
    adv, stats = compute_advantages(unpaid, weights, 2, spec, hadw_state=state)
    assert state.anchor == pytest.approx(0.5) and state.steps == 1
    close(adv, [1.3 * z, -1.3 * z])
    adv, _ = compute_advantages(unpaid, weights, 2, spec, hadw_state=HADWState())  # no anchor yet: plain GRPO
    close(adv, [z, -z])
    # DRPO and TaRoS: finite advantages, the unpaid rows ranked by the paid components
    drpo = DRPOState()
    adv, _ = compute_advantages(rewards, weights, 2, AdvantageSpec(drpo=True, accuracy_index=0),
                                modalities=["CT", "CT", "MRI", "MRI"], drpo_state=drpo)
    assert drpo.history == {"CT": 0.5} and torch.isfinite(adv).all() and adv[2] > 0 > adv[3]
    adv, _, _ = taros(rewards, weights, 2)
    assert torch.isfinite(adv).all() and adv[2] > 0 > adv[3]


def test_taros_saturation_and_sparsity():
    # component 0 varies (batch std 1/sqrt(3) > 0.5 -> weight 1); component 1 saturated at 1 (std 0 -> weight 0)
    rewards = torch.tensor([[1.0, 1.0], [0.0, 1.0], [0.0, 1.0], [1.0, 1.0]])
    close(saturation_weights(rewards), [1.0, 0.0])
    adv, sat, touched = taros(rewards, torch.tensor([1.0, 1.0]), 2)
    z = 0.5 / (math.sqrt(0.5) + EPS)
    close(adv, [z, -z, -z, z])
    assert touched == 0
    # sparsity 0.5 in a (1, 0, 0, 0) group: z = (0.75, -0.25 x3) / (0.5 + eps); only |z| >= 0.5 * max survives.
    # batch std of (1, 0, 0, 0) is 0.5 -> saturation weight exactly 1
    adv, sat, touched = taros(torch.tensor([[1.0], [0.0], [0.0], [0.0]]), torch.tensor([1.0]), 4, sparsity=0.5)
    close(adv, [0.75 / (0.5 + EPS), 0.0, 0.0, 0.0])
    assert touched == 1


def test_ips_scales_by_inverse_outcome_frequency_with_clamp():
    total = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    outcomes = ["A", "A", "A", "B", "C", "D", "D", "D"]
    # frequencies 3/4 (x3), 1/4, then 1/4, 3/4 (x3) -> factors 4/3 and 4
    close(ips_scale(total, outcomes, 4), [4 / 3] * 3 + [0.0, 4.0, 0.0, 0.0, 0.0])
    close(ips_scale(total, outcomes, 4, max_scale=1.2), [1.2] * 3 + [0.0, 1.2, 0.0, 0.0, 0.0])


def test_hadw_anchor_recurrence_and_weights():
    state = HADWState(eta=0.1, window=50)
    assert state.update(0.2) == pytest.approx(0.2)  # C_0 = first batch accuracy
    # s = population std of (0.2, 0.6) = 0.2 -> C = (1 - 0.02) * 0.2 + 0.02 * 0.6 = 0.208
    assert state.update(0.6) == pytest.approx(0.208)
    # s = std of (0.2, 0.208, 0.6): mean 0.336, squares 0.018496 + 0.016384 + 0.069696 -> var 0.104576 / 3
    s = math.sqrt(0.104576 / 3)
    assert state.update(0.6) == pytest.approx((1 - 0.1 * s) * 0.208 + 0.1 * s * 0.6)
    # hard group (mean acc 0.25 < anchor 0.5, d = -0.25): a correct answer (A > 0) is weighted up, a wrong one down
    w = hadw_weights(torch.tensor([1.0, -1.0, 1.0]), torch.tensor([0.25, 0.25, 0.75]), anchor=0.5, lam=1.3)
    close(w, [1.3 * math.exp(0.25), 1.3 * math.exp(-0.25), 1.3 * math.exp(-0.25)])


def test_hadw_state_round_trip_and_window():
    state = HADWState(eta=0.5, window=3)
    for y in (0.1, 0.9, 0.4, 0.8):
        state.update(y)
    assert len(state.history) == 3
    restored = HADWState()
    restored.load_state_dict(state.state_dict())
    assert restored.state_dict() == state.state_dict()
    assert restored.update(0.3) == state.update(0.3)


def test_drpo_scales_hard_modalities_up():
    state = DRPOState(decay=0.9, max_scale=2.0, eps=0.05)
    mods = ["CT", "CT", "MRI", "MRI"]
    state.update(mods, torch.tensor([1.0, 1.0, 0.0, 1.0]))
    assert state.history == {"CT": 1.0, "MRI": 0.5}
    # hardness CT 0.05, MRI 0.55, batch mean 0.3 -> CT 1/6 (clamped to 0.5), MRI 11/6
    close(state.scales(mods), [0.5, 0.5, 11 / 6, 11 / 6])
    state.update(["CT", "CT"], torch.tensor([0.0, NAN]))
    assert state.history["CT"] == pytest.approx(0.9)
    restored = DRPOState()
    restored.load_state_dict(state.state_dict())
    assert restored.history == state.history


def test_compute_advantages_composes_grpo_hadw_and_logs():
    rewards = torch.tensor([[1.0, 1.0], [0.0, 1.0], [0.0, 1.0], [0.0, 0.0]])  # columns: accuracy, format
    weights = torch.tensor([1.0, 0.5])
    spec = AdvantageSpec(estimator="grpo", accuracy_index=0, hadw=True, hadw_lambda=1.0)
    state = HADWState()
    adv, stats = compute_advantages(rewards, weights, 2, spec, hadw_state=state)
    # totals (1.5, 0.5 | 0.5, 0): GRPO advantages +-0.5/(std + eps); anchor = batch acc 0.25
    g1 = 0.5 / (math.sqrt(0.5) + EPS)
    g2 = 0.25 / (math.sqrt(0.125) + EPS)
    # group 1 acc 0.5 (d = +0.25): A>0 -> exp(-0.25), A<0 -> exp(+0.25); group 2 acc 0 (d = -0.25): reversed
    close(adv, [g1 * math.exp(-0.25), -g1 * math.exp(0.25), g2 * math.exp(0.25), -g2 * math.exp(-0.25)])
    assert stats["variants/hadw_anchor"] == pytest.approx(0.25)
    assert stats["variants/hadw_groups"] == 2


def test_compute_advantages_ips_and_errors():
    rewards = torch.tensor([[1.0], [1.0], [1.0], [0.0]])
    spec = AdvantageSpec(estimator="grpo", scope="none", ips=True, ips_max_scale=4.0)
    adv, stats = compute_advantages(rewards, torch.tensor([1.0]), 4, spec, outcomes=["A", "A", "A", "B"])
    # scaled rewards (4/3 x3, 0): mean 1, no std division
    close(adv, [1 / 3, 1 / 3, 1 / 3, -1.0])
    assert stats["variants/ips_groups"] == 1
    with pytest.raises(ValueError, match="accuracy"):
        compute_advantages(rewards, torch.tensor([1.0]), 4, AdvantageSpec(estimator="equal_right"))
    with pytest.raises(ValueError, match="unknown advantage estimator"):
        compute_advantages(rewards, torch.tensor([1.0]), 4, AdvantageSpec(estimator="ppo"))
