"""Reward settings: which evidence backend, how its five criteria are weighted, and the shaping options.

Frozen (hashable) so that verification results can be cached per (completion, record, settings).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

CRITERIA: tuple[str, ...] = (
    "visual_grounding",
    "question_relevance",
    "answer_support",
    "no_hallucination",
    "no_contradiction",
)
"""MedAD-R1's five evidence-aware consistency criteria, in the order ``evidence_weights`` uses."""


class RewardSettingsError(ValueError):
    """An invalid reward setting (one line naming the field)."""


@dataclass(frozen=True)
class JudgeSettings:
    """How the ``judge`` evidence backend reaches its model. Only text is ever sent: never image bytes.

    Attributes:
        transport: ``"http"`` (an OpenAI-compatible ``/chat/completions`` endpoint, e.g. a vLLM server) or
            ``"local"`` (a transformers model loaded in this process).
        base_url: for ``http``: the endpoint root, e.g. ``http://127.0.0.1:8000/v1``; requests go to this host
            only (no proxies, no redirects followed).
        model: for ``http``: the served model name; for ``local``: a model folder (or hub id, offline cache).
        api_key_env: name of an environment variable holding a bearer token (the token itself never lives in
            a config file); empty for none.
        max_concurrency: parallel HTTP requests.
        timeout_s: per-request timeout.
        max_retries: retries after the first attempt, on timeouts, connection errors, 429 and 5xx.
        backoff_s: first retry delay; doubled on each further retry.
        max_new_tokens: generation budget of the judge's JSON answer.
        batch_size: completions per forward pass for ``local``.
        cache_size: judged results kept (keyed by completion, record id, rubric version).
    """

    transport: Literal["http", "local"] = "http"
    base_url: str = "http://127.0.0.1:8000/v1"
    model: str = ""
    api_key_env: str = ""
    max_concurrency: int = 8
    timeout_s: float = 60.0
    max_retries: int = 3
    backoff_s: float = 1.0
    max_new_tokens: int = 128
    batch_size: int = 8
    cache_size: int = 100_000

    def __post_init__(self) -> None:
        if self.transport not in ("http", "local"):
            raise RewardSettingsError(f"judge.transport must be 'http' or 'local', not {self.transport!r}")
        for name in ("max_concurrency", "max_new_tokens", "batch_size", "cache_size"):
            if int(getattr(self, name)) < 1:
                raise RewardSettingsError(f"judge.{name} must be >= 1")
        if self.max_retries < 0 or not self.timeout_s > 0 or self.backoff_s < 0:
            raise RewardSettingsError("judge.timeout_s must be > 0, max_retries and backoff_s >= 0")


@dataclass(frozen=True)
class RewardSettings:
    """Settings shared by :func:`medgrpo.rewards.verify` and the TRL reward functions.

    Attributes:
        evidence_backend: ``"rule"`` (default: the record's structured evidence + the lexicon) or ``"judge"``.
        evidence_weights: weights of the five criteria (order of :data:`CRITERIA`); the evidence score is
            their weighted mean over the criteria that could be scored.
        gate_on_correct: multiply ``consistency`` and ``evidence`` by ``accuracy``, so a consistent but wrong
            completion earns nothing beyond its (zero) accuracy (on by default, as in ``ConGRPOConfig``: otherwise
            the policy can trade accuracy for fluent, self-consistent wrong answers; off, consistency rewards
            coherent reasoning before the answer is right, which the CPU demo's recipe chooses, measured).
        zero_on_format_failure: when the format score is 0, every other reward is 0 (grounding stays None
            where it does not apply): nothing is earned outside the grammar (on by default: partial credit for
            broken outputs was measured to be gamed by longer outputs).

    The defaults are the rewards' (``REWARDS``, ``ConGRPOConfig``); evaluation reads the verifiers unshaped
    (:data:`METRICS`), so a metric is what the verifier measured, not what training would have paid.
        grounding_metric: ``"iou"`` or ``"giou"`` (rescaled from [-1, 1] to [0, 1], so that a near miss still
            gets a gradient).
        judge: transport settings of the ``judge`` backend.
    """

    evidence_backend: Literal["rule", "judge"] = "rule"
    evidence_weights: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0, 1.0)
    gate_on_correct: bool = True
    zero_on_format_failure: bool = True
    grounding_metric: Literal["iou", "giou"] = "iou"
    judge: JudgeSettings = field(default_factory=JudgeSettings)

    def __post_init__(self) -> None:
        if self.evidence_backend not in ("rule", "judge"):
            raise RewardSettingsError(
                f"evidence_backend must be 'rule' or 'judge', not {self.evidence_backend!r}"
            )
        weights = tuple(float(w) for w in self.evidence_weights)
        if len(weights) != len(CRITERIA):
            raise RewardSettingsError(
                f"evidence_weights needs {len(CRITERIA)} numbers ({', '.join(CRITERIA)})"
            )
        if any(not math.isfinite(w) or w < 0 for w in weights) or sum(weights) <= 0:
            raise RewardSettingsError("evidence_weights must be finite, >= 0, and not all 0")
        object.__setattr__(self, "evidence_weights", weights)
        if self.grounding_metric not in ("iou", "giou"):
            raise RewardSettingsError(
                f"grounding_metric must be 'iou' or 'giou', not {self.grounding_metric!r}"
            )
        if isinstance(self.judge, dict):  # from a YAML recipe
            unknown = sorted(set(self.judge) - set(JudgeSettings.__dataclass_fields__))
            if unknown:
                raise RewardSettingsError(f"judge.{unknown[0]}: unknown setting")
            object.__setattr__(self, "judge", JudgeSettings(**self.judge))


METRICS = RewardSettings(gate_on_correct=False, zero_on_format_failure=False)
"""The verifiers read as they are, without the rewards' shaping: what :func:`medgrpo.rewards.verify` returns by
default and what evaluation reports."""

