"""Loss-side variants on hand-computed numbers, then every variant for a few real steps on the ci tiny model."""

import math

import pytest
import torch

from medgrpo.train.losses import (
    AdaptiveTemperature,
    answer_logp,
    answer_mask,
    care_bonus,
    ema_update,
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
    ids = torch.tensor([[5, 1, 2, 9, 9, 0], [5, 5, 5, 5, 5, 5]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]])
    tokens = answer_mask(ids, mask, [1, 2])
    assert tokens.tolist() == [[0, 0, 0, 1, 1, 0], [0, 0, 0, 0, 0, 0]]
    lp = answer_logp(torch.tensor([[0.0, 0.0, 0.0, -1.0, -2.0, -9.0], [-1.0] * 6]), tokens)
    assert lp[0].item() == pytest.approx(-1.5) and math.isnan(lp[1])
    # group 1: both correct, mean log-lik -1.5 -> only the more confident one (-1) earns the bonus;
    # group 2: the one correct member is its own mean -> bonus; the wrong one never
    bonus = care_bonus(torch.tensor([-1.0, -2.0, -0.5, math.nan]), torch.tensor([1.0, 1.0, 1.0, 0.0]), 2, 0.5)
    assert bonus.tolist() == [0.5, 0.0, 0.5, 0.0]


def test_ema_update():
    ema, model = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    torch.nn.init.zeros_(ema.weight)
    torch.nn.init.ones_(model.weight)
    ema_update(ema, model, decay=0.9)
    assert torch.allclose(ema.weight, torch.full_like(ema.weight, 0.1))
