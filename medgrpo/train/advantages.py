"""Advantage estimators over the GLOBAL reward tensor: the GRPO variants that only change how rewards become advantages.

Every function here is pure (tensors in, tensors out) except the two small history objects, :class:`HADWState` and
:class:`DRPOState`, which carry the anchor / per-domain reward history between steps and serialise to a dict so the
trainer can save them in each checkpoint. Inputs:

* ``rewards``: ``(N, K)`` rewards of N completions (``N = groups * G``, consecutive rows form a group, exactly as TRL
  gathers them) for K reward components; NaN = "not applicable" (e.g. grounding on a record without a box);
* ``weights``: ``(K,)`` reward weights (TRL's ``reward_weights``);
* ``num_generations``: G.

Formulas follow ``shared/docs/research-brief.md`` section 5; where a paper's exact form is not public the docstring
says ``[inferred]``. Rows whose every reward is NaN (unscorable) always get advantage 0, as in TRL.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import torch
from trl.trainer.utils import nanstd

EPS = 1e-4  # TRL's std guard; keeps our "group" / "batch" advantages identical to GRPOTrainer's


def _grouped(x: torch.Tensor, num_generations: int) -> torch.Tensor:
    if x.shape[0] % num_generations:
        raise ValueError(f"{x.shape[0]} completions do not split into groups of num_generations={num_generations}")
    return x.view(-1, num_generations, *x.shape[1:])


def unscorable(rewards: torch.Tensor) -> torch.Tensor:
    """``(N,)`` bool: rows where every reward component is NaN."""
    return torch.isnan(rewards).all(dim=1)


def weighted_sum(rewards: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``(N,)`` total reward ``sum_k w_k r_k`` ignoring NaN components; NaN where the whole row is NaN."""
    total = (rewards * weights.to(rewards).unsqueeze(0)).nansum(dim=1)
    return total.masked_fill(unscorable(rewards), math.nan)


def group_relative(total: torch.Tensor, num_generations: int, scope: str = "group", eps: float = EPS) -> torch.Tensor:
    """Group-relative advantage ``r - mean_group(r)``, divided by a std whose scope is the normalisation ablation.

    ``scope``: ``group`` (GRPO: the group's std), ``batch`` (the std of the whole global batch, Lite PPO / TRL
    ``scale_rewards="batch"``), ``none`` (Dr. GRPO: no division). "Why GRPO Needs Normalization" (2026) reads the std
    division as an adaptive gradient scale; this switch is that paper's ablation. Same numbers as TRL's
    ``sum_then_normalize`` for the same scope.
    """
    if scope not in ("group", "batch", "none"):
        raise ValueError(f"normalisation scope must be 'group', 'batch' or 'none', not '{scope}'")
    grouped = _grouped(total, num_generations)
    centred = (grouped - torch.nanmean(grouped, dim=1, keepdim=True)).reshape(-1)
    if scope == "group":
        std = nanstd(grouped, dim=1, keepdim=True).expand_as(grouped).reshape(-1)
    elif scope == "batch":
        std = nanstd(total).expand_as(total)
    else:
        return torch.nan_to_num(centred, nan=0.0)
    return torch.nan_to_num(centred / (std + eps), nan=0.0)


def sum_then_normalize(rewards: torch.Tensor, weights: torch.Tensor, num_generations: int, scope: str = "group",
                       eps: float = EPS) -> torch.Tensor:
    """GRPO's advantage: weighted sum of the components, then :func:`group_relative` (TRL's default aggregation)."""
    return group_relative(weighted_sum(rewards, weights), num_generations, scope, eps)


def normalize_then_sum(rewards: torch.Tensor, weights: torch.Tensor, num_generations: int,
                       eps: float = EPS) -> torch.Tensor:
    """GDPO per-component normalisation: standardise each component within its group, weigh, sum, then standardise
    over the batch (TRL's ``multi_objective_aggregation="normalize_then_sum"``).

    Summing raw components first lets a high-variance auxiliary reward drown the accuracy signal; normalising each
    component keeps every objective's in-group ranking at the same scale.
    """
    z = standardize_components(rewards, num_generations, eps)
    total = (z * weights.to(rewards).unsqueeze(0)).nansum(dim=1).masked_fill(unscorable(rewards), math.nan)
    advantages = (total - torch.nanmean(total)) / (nanstd(total) + eps)
    return torch.nan_to_num(advantages, nan=0.0)


def standardize_components(rewards: torch.Tensor, num_generations: int, eps: float = EPS) -> torch.Tensor:
    """``(N, K)`` in-group z-scores ``(r_k - mean_k) / (std_k + eps)`` of each component (NaN stays NaN)."""
    grouped = _grouped(rewards, num_generations)
    mean = torch.nanmean(grouped, dim=1, keepdim=True)
    std = nanstd(grouped, dim=1, keepdim=True) if num_generations > 1 else torch.zeros_like(mean)
    return ((grouped - mean) / (std + eps)).reshape(rewards.shape)


def equal_right(rewards: torch.Tensor, weights: torch.Tensor, num_generations: int, accuracy_index: int,
                margin: float = 0.1, eps: float = EPS) -> torch.Tensor:
    """GDEPO equal-right advantage ``A_i = s_i * (margin + |z_i|)`` [inferred form].

    ``s_i = +1`` when completion i is correct (accuracy >= 0.5) else ``-1``; ``z_i`` is the in-group z-score of the
    weighted sum of the OTHER components. Accuracy alone sets the sign, so no auxiliary reward (consistency,
    evidence, ...) can push a correct answer below a wrong one; the auxiliaries only set the magnitude. A group
    whose accuracy is not applicable (NaN: ``accuracy_tasks`` leaves it unpaid) has no sign to set, so it keeps
    GRPO's advantage of the other components.
    """
    correct = rewards[:, accuracy_index] >= 0.5
    sign = torch.where(correct, 1.0, -1.0).to(rewards)
    others = [k for k in range(rewards.shape[1]) if k != accuracy_index]
    if others:
        aux = weighted_sum(rewards[:, others], weights[others])
        grouped = _grouped(aux, num_generations)
        std = nanstd(grouped, dim=1, keepdim=True) if num_generations > 1 else torch.zeros_like(grouped[:, :1])
        z = ((grouped - torch.nanmean(grouped, dim=1, keepdim=True)) / (std + eps)).reshape(-1)
        magnitude = margin + torch.nan_to_num(z, nan=0.0).abs()
    else:
        magnitude = torch.full_like(sign, margin)
    advantages = sign * magnitude
    unpaid = torch.isnan(rewards[:, accuracy_index])
    if unpaid.any() and others:
        advantages = torch.where(unpaid, group_relative(aux, num_generations), advantages)
    elif unpaid.any():
        advantages = advantages.masked_fill(unpaid, 0.0)
    return advantages.masked_fill(unscorable(rewards), 0.0)


def saturation_weights(rewards: torch.Tensor, std_ref: float = 0.5) -> torch.Tensor:
    """TaRoS saturation weights ``w_k = clip(std_k / std_ref, 0, 1)`` over the batch [inferred form].

    A component every completion already maxes out (or fails) has batch std ~0 and carries no ranking signal, only
    noise once standardised in-group; down-weighting it keeps the undecided components in charge. ``std_ref=0.5`` is
    the largest std a [0, 1] reward can have.
    """
    std = nanstd(rewards, dim=0)
    return torch.nan_to_num(std / std_ref, nan=0.0).clamp(0.0, 1.0)


def taros(rewards: torch.Tensor, weights: torch.Tensor, num_generations: int, std_ref: float = 0.5,
          sparsity: float = 0.0, eps: float = EPS) -> tuple[torch.Tensor, torch.Tensor, int]:
    """TaRoS-style advantage [inferred form]: per-component in-group z-scores, weighted by the reward weights and by
    :func:`saturation_weights`, summed; then intra-group sparsity keeps only the decisive members, those with
    ``|A_i| >= sparsity * max_j |A_j|`` in their group (the rest get 0).

    Returns ``(advantages, saturation weights (K,), groups where sparsity zeroed a member)``.
    """
    sat = saturation_weights(rewards, std_ref)
    z = standardize_components(rewards, num_generations, eps)
    total = (z * (weights.to(rewards) * sat).unsqueeze(0)).nansum(dim=1).masked_fill(unscorable(rewards), 0.0)
    grouped = _grouped(total, num_generations)
    if sparsity > 0:
        keep = grouped.abs() >= sparsity * grouped.abs().amax(dim=1, keepdim=True)
        touched = int(((~keep) & (grouped != 0)).any(dim=1).sum())
        grouped = grouped * keep
    else:
        touched = 0
    return grouped.reshape(-1), sat, touched


def outcome_frequency(outcomes: list[str], num_generations: int) -> torch.Tensor:
    """``(N,)`` share of its group that gave the same outcome (final answer) as each completion."""
    if len(outcomes) % num_generations:
        raise ValueError(f"{len(outcomes)} outcomes do not split into groups of {num_generations}")
    freq = []
    for start in range(0, len(outcomes), num_generations):
        group = outcomes[start:start + num_generations]
        freq += [group.count(o) / num_generations for o in group]
    return torch.tensor(freq)


def ips_scale(total: torch.Tensor, outcomes: list[str], num_generations: int, max_scale: float = 4.0) -> torch.Tensor:
    """IPS-GRPO: divide each reward by the in-group frequency of its outcome, the factor clamped to ``max_scale``
    [inferred form]; the caller then normalises as usual.

    Without it, an answer the policy already emits most of the time collects its reward on every copy, so the
    sampled outcome distribution drifts towards the mode; inverse-propensity scaling makes the expected signal per
    outcome proportional to its reward, not to its frequency. The clamp bounds the variance from rare outcomes.
    """
    factor = (1.0 / outcome_frequency(outcomes, num_generations)).clamp(max=max_scale).to(total)
    return total * factor


@dataclass
class HADWState:
    """History-aware difficulty anchor of HA-DW ("Your Group-Relative Advantage Is Biased", 2026).

    ``C_t = (1 - eta * s_t) * C_{t-1} + eta * s_t * y_t`` with ``y_t`` the batch accuracy and ``s_t`` the std of the
    last ``window`` anchors. [inferred] Two choices the brief leaves open: ``C_0 = y_1`` (the first batch accuracy),
    and ``s_t`` is the population std of the last ``window - 1`` anchors plus ``y_t``; with anchors alone a constant history
    has std 0 and freezes the anchor forever, while including the new observation makes the step grow exactly when
    accuracy departs from the history. Reproduction values: ``window=50, eta=0.1``.
    """

    eta: float = 0.1
    window: int = 50
    anchor: float | None = None
    history: deque = field(default_factory=deque)
    steps: int = 0

    def update(self, batch_accuracy: float) -> float:
        """Move the anchor towards this step's batch accuracy; returns the new anchor ``C_t``."""
        if self.anchor is None:
            self.anchor = float(batch_accuracy)
        else:
            recent = list(self.history)[-(self.window - 1):] + [float(batch_accuracy)]
            s_t = float(torch.tensor(recent, dtype=torch.float64).std(unbiased=False)) if len(recent) > 1 else 0.0
            self.anchor = (1 - self.eta * s_t) * self.anchor + self.eta * s_t * float(batch_accuracy)
        self.history.append(self.anchor)
        while len(self.history) > self.window:
            self.history.popleft()
        self.steps += 1
        return self.anchor

    def state_dict(self) -> dict[str, Any]:
        return {"eta": self.eta, "window": self.window, "anchor": self.anchor, "history": list(self.history),
                "steps": self.steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.eta, self.window, self.anchor = state["eta"], state["window"], state["anchor"]
        self.history = deque(state["history"])
        self.steps = state["steps"]


def hadw_weights(advantages: torch.Tensor, group_accuracy: torch.Tensor, anchor: float,
                 lam: float = 1.3) -> torch.Tensor:
    """HA-DW weights ``lam * exp(-sign(A) * sign(d) * |d|)`` with ``d = group mean accuracy - C_t`` (per completion).

    Mean-centred advantages underweight correct answers on hard prompts (d < 0) and under-penalise wrong answers on
    easy ones (d > 0); this weight grows exactly those and shrinks the opposite cases. Multiply into the advantage.
    """
    d = group_accuracy - anchor
    return lam * torch.exp(-torch.sign(advantages) * torch.sign(d) * d.abs())


@dataclass
class DRPOState:
    """Per-domain (here: per-modality) reward history for DRPO-style scaling (QoQ-Med) [inferred form].

    Keeps an EMA ``h_m`` of each modality's mean accuracy. :meth:`scales` gives every completion of modality m the
    factor ``(1 - h_m + eps) / mean_i(1 - h_{m_i} + eps)`` clamped to ``[1/max_scale, max_scale]``: domains the
    policy still fails on get a larger share of the update, so an easy majority modality cannot dominate the
    gradient. QoQ-Med clusters reward history inside each domain as well; one EMA per modality is the simplification.
    """

    decay: float = 0.9
    max_scale: float = 2.0
    eps: float = 0.05
    history: dict[str, float] = field(default_factory=dict)

    def update(self, modalities: list[str], accuracy: torch.Tensor) -> None:
        """Fold this batch's per-modality mean accuracy into the EMA (first sight: the batch mean itself)."""
        for name in sorted(set(modalities)):
            values = accuracy[[i for i, m in enumerate(modalities) if m == name]]
            values = values[~torch.isnan(values)]
            if values.numel():
                mean = float(values.mean())
                old = self.history.get(name)
                self.history[name] = mean if old is None else self.decay * old + (1 - self.decay) * mean

    def scales(self, modalities: list[str]) -> torch.Tensor:
        """``(N,)`` per-completion factors, mean 1 over the batch before clamping."""
        hardness = torch.tensor([1.0 - self.history.get(m, 0.5) + self.eps for m in modalities], dtype=torch.float32)
        return (hardness / hardness.mean()).clamp(1.0 / self.max_scale, self.max_scale)

    def state_dict(self) -> dict[str, Any]:
        return {"decay": self.decay, "max_scale": self.max_scale, "eps": self.eps, "history": dict(self.history)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.decay, self.max_scale, self.eps = state["decay"], state["max_scale"], state["eps"]
        self.history = dict(state["history"])


@dataclass
class AdvantageSpec:
    """Which estimator and which multiplicative corrections to apply (built by the trainer from its config).

    ``estimator``: ``grpo`` (sum then normalise with ``scope``), ``gdpo`` (normalise then sum), ``equal_right``
    (GDEPO), ``taros``. ``ips`` rescales rewards before ``grpo`` normalisation; ``hadw`` and ``drpo`` multiply the
    resulting advantages. ``accuracy_index`` is the column of the accuracy reward (needed by all but grpo/gdpo/ips).
    """

    estimator: str = "grpo"
    scope: str = "group"
    accuracy_index: int | None = None
    equal_right_margin: float = 0.1
    taros_std_ref: float = 0.5
    taros_sparsity: float = 0.0
    ips: bool = False
    ips_max_scale: float = 4.0
    hadw: bool = False
    hadw_lambda: float = 1.3
    drpo: bool = False


def compute_advantages(
    rewards: torch.Tensor,
    weights: torch.Tensor,
    num_generations: int,
    spec: AdvantageSpec,
    outcomes: list[str] | None = None,
    modalities: list[str] | None = None,
    hadw_state: HADWState | None = None,
    drpo_state: DRPOState | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The ``(N,)`` advantages ``spec`` describes, and the figures to log (``variants/...``: groups touched, anchor)."""
    stats: dict[str, float] = {}
    n_groups = rewards.shape[0] // num_generations
    acc = rewards[:, spec.accuracy_index] if spec.accuracy_index is not None else None
    if spec.estimator in ("equal_right", "taros") or spec.hadw or spec.drpo:
        if acc is None:
            raise ValueError(f"advantage variant '{spec.estimator}'/HA-DW/DRPO needs the accuracy reward")
    if spec.estimator == "grpo":
        total = weighted_sum(rewards, weights)
        if spec.ips:
            if outcomes is None:
                raise ValueError("IPS scaling needs the outcome (final answer) of every completion")
            scaled = ips_scale(total, outcomes, num_generations, spec.ips_max_scale)
            stats["variants/ips_groups"] = float(
                (_grouped(torch.nan_to_num(scaled - total), num_generations).abs() > 0).any(dim=1).sum())
            total = scaled
        advantages = group_relative(total, num_generations, spec.scope)
    elif spec.estimator == "gdpo":
        advantages = normalize_then_sum(rewards, weights, num_generations)
    elif spec.estimator == "equal_right":
        advantages = equal_right(rewards, weights, num_generations, spec.accuracy_index, spec.equal_right_margin)
        stats["variants/equal_right_groups"] = float(n_groups)
    elif spec.estimator == "taros":
        advantages, sat, touched = taros(rewards, weights, num_generations, spec.taros_std_ref, spec.taros_sparsity)
        stats["variants/taros_sparsified_groups"] = float(touched)
        stats["variants/taros_min_saturation_weight"] = float(sat.min())
    else:
        raise ValueError(f"unknown advantage estimator '{spec.estimator}' (grpo, gdpo, equal_right, taros)")
    if spec.hadw:
        if hadw_state is None:
            raise ValueError("HA-DW needs its HADWState")
        batch_acc = float(torch.nanmean(acc))
        # a batch with no paid accuracy (accuracy_tasks) leaves the anchor where it was
        anchor = hadw_state.update(batch_acc) if not math.isnan(batch_acc) else hadw_state.anchor
        if anchor is not None:
            group_acc = torch.nanmean(_grouped(acc, num_generations), dim=1).repeat_interleave(num_generations)
            # unpaid groups sit at the anchor (d = 0): the plain factor lam, like a group of average difficulty
            weight = hadw_weights(advantages, torch.nan_to_num(group_acc, nan=anchor), anchor, spec.hadw_lambda)
            advantages = advantages * weight
            stats["variants/hadw_anchor"] = anchor
        stats["variants/hadw_groups"] = float(
            (_grouped(advantages, num_generations) != 0).any(dim=1).sum())
    if spec.drpo:
        if drpo_state is None or modalities is None:
            raise ValueError("DRPO needs its DRPOState and the modality of every completion")
        drpo_state.update(modalities, acc)
        scale = drpo_state.scales(modalities).to(advantages)
        advantages = advantages * scale
        stats["variants/drpo_groups"] = float((_grouped(scale, num_generations) != 1).any(dim=1).sum())
    return advantages.masked_fill(unscorable(rewards), 0.0), stats
