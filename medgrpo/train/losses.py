"""Loss-side GRPO variants: TIC-GRPO's trajectory ratio, SCOPE-RL's positive-sample regulariser with its adaptive
temperature, and GRPO-CARE's EMA-reference likelihood consistency bonus.

Pure tensor functions plus two tiny stateful helpers (:class:`AdaptiveTemperature`, :func:`ema_update`). SCOPE-RL's
term is added to TRL's own loss (every ``GRPOConfig`` loss field still applies); TIC-GRPO replaces the ratio, so its
loss is computed here from TRL's own per-token log-probs and reduced as TRL reduces for ``loss_type``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

TIC_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
"""The ``loss_type`` aggregations TIC-GRPO's sequence-level term is reduced with, as TRL reduces its token terms."""


def trajectory_ratio_loss(
    per_token_logps: torch.Tensor,
    old_per_token_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    log_ratio_clamp: float = 5.0,
    loss_type: str = "grpo",
    max_completion_length: int | None = None,
    num_items: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """TIC-GRPO (2025): one importance ratio per trajectory, ``exp(clamp(sum_t log(pi/pi_old)))``, in PPO's clipped
    surrogate ``-min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)``, given to every token of its sequence and reduced
    as TRL reduces token terms for ``loss_type`` (``grpo``: mean per sequence, then over sequences; ``bnpo``: over
    the batch's tokens; ``dr_grpo``: sum over ``batch x max_completion_length``; ``dapo``: sum over ``num_items``,
    the token count TRL normalises by), so a single-token completion gives TRL's own loss.

    GSPO uses the MEAN of the token log-ratios; TIC-GRPO uses the SUM, the true trajectory probability ratio, and
    clamps the log-sum (``log_ratio_clamp``) so one long, drifted sequence cannot overflow the exponential.

    Args:
        per_token_logps, old_per_token_logps, mask: ``(B, T)``.
        advantages: ``(B,)``.

    Returns: the scalar loss (before gradient-accumulation scaling) and ``{"clip_ratio", "log_ratio_mean"}``.
    """
    if loss_type not in TIC_LOSS_TYPES:
        raise ValueError(f"trajectory_ratio reduces with loss_type {' / '.join(TIC_LOSS_TYPES)}, not '{loss_type}'")
    log_ratio = ((per_token_logps - old_per_token_logps) * mask).sum(dim=1)
    log_ratio = log_ratio.clamp(-log_ratio_clamp, log_ratio_clamp)
    ratio = torch.exp(log_ratio)
    clipped = ratio.clamp(1 - epsilon_low, 1 + epsilon_high)
    per_token = (-torch.min(ratio * advantages, clipped * advantages)).unsqueeze(1) * mask
    if loss_type == "grpo":
        loss = (per_token.sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)).mean()
    elif loss_type == "bnpo":
        loss = per_token.sum() / mask.sum().clamp(min=1.0)
    elif loss_type == "dr_grpo":
        loss = per_token.sum() / (per_token.size(0) * (max_completion_length or per_token.size(1)))
    else:
        loss = per_token.sum() / max(num_items if num_items is not None else float(mask.sum()), 1.0)
    is_clipped = ((ratio < 1 - epsilon_low) & (advantages < 0)) | ((ratio > 1 + epsilon_high) & (advantages > 0))
    return loss, {"clip_ratio": is_clipped.float().mean().item(), "log_ratio_mean": log_ratio.mean().item()}


def positive_nll(per_token_logps: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """SCOPE-RL regulariser [inferred form]: the mean, over completions with a positive advantage, of their
    token-mean negative log-likelihood under the policy; 0 (with a graph) when the batch has none.

    Samples drawn at a raised temperature and verified correct are diverse AND right; fitting them keeps probability
    mass spread over correct alternatives, holding entropy up without rewarding wrong tokens as a plain entropy
    bonus does.
    """
    positive = (advantages > 0).to(per_token_logps)
    token_nll = -(per_token_logps * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
    return (token_nll * positive).sum() / positive.sum().clamp(min=1.0)


@dataclass
class AdaptiveTemperature:
    """SCOPE-RL's adaptive sampling temperature [inferred form]: kept while the policy's mean token entropy stays in
    ``[low, high]``, multiplied by ``1 + rate`` when entropy falls below the band (collapse: sample hotter, so the
    positive samples the regulariser fits are more diverse) and divided by it above the band; clamped to
    ``[t_min, t_max]``.
    """

    temperature: float = 1.0
    low: float = 0.5
    high: float = 2.0
    rate: float = 0.05
    t_min: float = 0.7
    t_max: float = 1.5

    def update(self, entropy: float) -> float:
        if entropy < self.low:
            self.temperature *= 1 + self.rate
        elif entropy > self.high:
            self.temperature /= 1 + self.rate
        self.temperature = min(max(self.temperature, self.t_min), self.t_max)
        return self.temperature

    def state_dict(self) -> dict[str, Any]:
        return dict(vars(self))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            setattr(self, key, value)


def answer_mask(mask: torch.Tensor, pieces: list[list[str]], tag: str = "<answer>") -> torch.Tensor:
    """``(B, T)``: each completion's tokens from the one that holds the first character after its first ``tag``,
    within ``mask``; ``pieces`` are the completions' tokens decoded one by one. Found in the text, not as a token
    sequence: real Qwen tokenizers merge the tag with what follows (``<answer>A`` is ``<``, ``answer``, ``>A``).
    A completion without the tag gets an empty mask (it cannot be correct anyway)."""
    out = torch.zeros_like(mask)
    for row, tokens in enumerate(pieces):
        at = "".join(tokens).find(tag)
        if at < 0:
            continue
        end, pos = at + len(tag), 0
        for t, piece in enumerate(tokens):
            pos += len(piece)
            if pos > end:
                out[row, t:] = mask[row, t:]
                break
    return out


def answer_logp(per_token_logps: torch.Tensor, answer_tokens: torch.Tensor) -> torch.Tensor:
    """``(B,)`` mean log-prob of the answer tokens (NaN where a completion has none)."""
    count = answer_tokens.sum(dim=1)
    mean = (per_token_logps * answer_tokens).sum(dim=1) / count.clamp(min=1)
    return mean.masked_fill(count == 0, float("nan"))


def care_bonus(likelihood: torch.Tensor, accuracy: torch.Tensor, num_generations: int,
               bonus: float = 0.5) -> torch.Tensor:
    """GRPO-CARE (2025) consistency bonus: ``bonus * accuracy`` for correct completions whose answer likelihood
    under the EMA reference, given their own reasoning, is at least the mean over the correct members of their
    group ("correct and confident"); 0 otherwise. [inferred: the group-mean threshold]

    Rewarding answers the slow-moving reference finds implied by the reasoning favours rationales that actually
    lead to their answer, the failure mode of accuracy-only rewards (right answer, unrelated reasoning).

    Args:
        likelihood: ``(N,)`` mean answer-token log-prob under the EMA model (NaN = no answer tokens).
        accuracy: ``(N,)`` accuracy reward in [0, 1].
    """
    correct = (accuracy >= 0.5) & ~torch.isnan(likelihood)
    grouped_l = likelihood.view(-1, num_generations)
    grouped_c = correct.view(-1, num_generations)
    filled = torch.where(grouped_c, grouped_l, torch.zeros_like(grouped_l))
    mean = filled.sum(dim=1, keepdim=True) / grouped_c.sum(dim=1, keepdim=True).clamp(min=1)
    confident = grouped_c & (grouped_l >= mean - 1e-6)
    return (confident.reshape(-1).to(accuracy) * bonus * torch.nan_to_num(accuracy, nan=0.0))


def ema_copy(model: torch.nn.Module, decay: float) -> torch.optim.swa_utils.AveragedModel:
    """GRPO-CARE's slow reference: a frozen copy of ``model`` (``torch.optim.swa_utils.AveragedModel`` with an EMA
    average), whose ``update_parameters(model)`` moves it ``p_ema <- decay * p_ema + (1 - decay) * p`` (the paper:
    0.995 every 10 steps); ``.module`` is the copy to score with."""
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay))
    ema.update_parameters(model)  # counts as the first average, so every later update decays instead of copying
    ema.module.eval().requires_grad_(False)
    return ema
