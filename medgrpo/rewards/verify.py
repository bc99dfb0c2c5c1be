"""``verify``: every verifier on one completion, the pure function both training rewards and evaluation use.

The raw verifier outputs are not cached per completion (in GRPO every completion is new, so such a cache
would only cost its key hashing); the TRL reward functions share one batch's results instead
(:mod:`medgrpo.rewards.registry`), so each completion is parsed and read once. Shaping (``gate_on_correct``,
``zero_on_format_failure``) is applied on top, identically for :func:`verify` and the reward functions.
"""

from __future__ import annotations

from typing import Any

from medgrpo.data.boxes import BoxFrame
from medgrpo.data.record import MedADRecord
from medgrpo.rewards.accuracy import accuracy_score
from medgrpo.rewards.claims import read, reading_of
from medgrpo.rewards.consistency import commitments, consistency_verdict, reasoning_accuracy
from medgrpo.rewards.evidence import combine, evidence_criteria
from medgrpo.rewards.facts import RecordFacts, facts_of
from medgrpo.rewards.format import format_score
from medgrpo.rewards.grounding import grounding_score, to_original
from medgrpo.rewards.parsing import choice_of, completion_text, parse_text
from medgrpo.rewards.settings import CRITERIA, METRICS, RewardSettings

CRITERION_KEYS: tuple[str, ...] = tuple(f"evidence/{c}" for c in CRITERIA)
KEYS: tuple[str, ...] = (
    "format", "accuracy", "consistency", "evidence", *CRITERION_KEYS, "grounding", "reasoning_accuracy",
)
"""The keys of :func:`verify`'s result, in order."""

def raw_scores(text: str, facts: RecordFacts, frame: BoxFrame | None, metric: str = "iou") -> tuple:
    """(format, accuracy, consistency, grounding, rule criteria, reasoning accuracy) of one completion,
    unshaped."""
    parsed = parse_text(text)
    reading = reading_of(parsed.think) if parsed.think is not None else None
    claims = reading or read("")  # without a think block, the evidence criteria see an empty reasoning
    choice = choice_of(parsed.answer, facts.options) if facts.is_mcq else None
    argument = commitments(claims, facts)
    verdict = consistency_verdict(reading, facts, parsed.answer, choice, argument)
    boxes = [to_original(b, frame) for b in parsed.boxes]  # in original pixels, for both box verifiers
    grounding = grounding_score(boxes, facts, metric)
    return (
        format_score(parsed, facts),
        accuracy_score(parsed, facts),
        verdict.score,
        grounding,
        evidence_criteria(parsed, claims, facts, boxes, grounding, choice, verdict, argument),
        reasoning_accuracy(reading, facts, argument),
    )


def assemble(
    text: str,
    facts: RecordFacts,
    frame: BoxFrame | None,
    settings: RewardSettings,
    judged: dict[str, float | None] | None = None,
) -> dict[str, float | None]:
    """The result dict of :func:`verify`; ``judged`` replaces the rule criteria (judge backend)."""
    fmt, acc, cons, ground, criteria, reasoned = raw_scores(text, facts, frame, settings.grounding_metric)
    if judged is not None:
        criteria = tuple(map(judged.get, CRITERIA))
    evidence = combine(criteria, settings.evidence_weights)
    return shape(dict(zip(KEYS, (fmt, acc, cons, evidence, *criteria, ground, reasoned), strict=True)), settings)


def shape(scores: dict[str, float | None], settings: RewardSettings) -> dict[str, float | None]:
    """``scores`` (a :func:`verify` result) with ``settings``' shaping applied: ``gate_on_correct`` multiplies
    consistency and evidence by accuracy, ``zero_on_format_failure`` zeroes every reward of a completion outside
    the grammar. The criteria and ``reasoning_accuracy`` are never shaped. An evaluation scored without
    shaping (the default settings) can so be shaped afterwards as a training run would have paid it."""
    fmt, acc, cons, evidence, ground = (scores[k] for k in ("format", "accuracy", "consistency", "evidence",
                                                             "grounding"))
    if settings.gate_on_correct:
        cons *= acc
        evidence = None if evidence is None else evidence * acc
    if settings.zero_on_format_failure and fmt == 0.0:
        acc = cons = 0.0
        evidence = None if evidence is None else 0.0
        ground = None if ground is None else 0.0
    return {**scores, "accuracy": acc, "consistency": cons, "evidence": evidence, "grounding": ground}


def total_reward(
    scores: dict[str, float | None],
    reward_funcs: list[str] | tuple[str, ...],
    reward_weights: list[float] | tuple[float, ...] | None,
    settings: RewardSettings,
) -> float | None:
    """The reward a Con-GRPO run pays a completion: ``sum_k w_k r_k`` over the run's ``reward_funcs`` after its
    shaping (:func:`shape`), skipping the rewards that do not apply (TRL's NaN); None when none applies. Used to
    score a held-out split with the training objective itself. A user's reward named by import path
    (``module:function``) has no score here, so its term is left out like a reward that does not apply."""
    weights = reward_weights if reward_weights is not None else [1.0] * len(reward_funcs)
    shaped = shape(scores, settings)
    terms = [w * shaped[name] for name, w in zip(reward_funcs, weights, strict=True) if shaped.get(name) is not None]
    return sum(terms) if terms else None


def verify(
    completion: Any,
    record: MedADRecord,
    frame: BoxFrame | None = None,
    settings: RewardSettings | None = None,
) -> dict[str, float | None]:
    """Score one completion against its record with every verifier.

    Args:
        completion: a string or TRL's conversational list of messages (anything else reads as empty).
        record: the record the completion answers.
        frame: the box frame of ``record.images[0]`` (model convention <-> original pixels); without it, cited
            boxes are taken to be in original pixels already.
        settings: backend, weights and shaping (:class:`RewardSettings`); None reads the verifiers unshaped
            (:data:`~medgrpo.rewards.settings.METRICS`, what evaluation reports).

    Returns:
        ``format``, ``accuracy``, ``consistency``, ``evidence`` (the weighted criteria, shaped like the
        reward), ``evidence/<criterion>`` for MedAD-R1's five criteria (raw, never gated), ``grounding`` (None
        when the record has no box), ``reasoning_accuracy`` (the reasoning points to the gold answer, whatever
        the answer block says: an evaluation metric beside consistency, raw, never shaped). Every value is finite and in [0, 1], or
        None where not applicable.
    """
    settings = settings or METRICS
    text = completion_text(completion)
    facts = facts_of(record)
    judged = None
    if settings.evidence_backend == "judge":
        from medgrpo.rewards.judge import judge_for

        judged = judge_for(settings.judge).score([(text, record)])[0]
    return assemble(text, facts, frame, settings, judged)


def verify_batch(
    completions: list[Any],
    records: list[MedADRecord],
    frames: list[BoxFrame | None] | None = None,
    settings: RewardSettings | None = None,
) -> list[dict[str, float | None]]:
    """:func:`verify` over many completions; with the judge backend, one batched judge call for all."""
    settings = settings or METRICS
    frames = frames if frames is not None else [None] * len(records)
    texts = [completion_text(c) for c in completions]
    judged: list[Any] = [None] * len(texts)
    if settings.evidence_backend == "judge":
        from medgrpo.rewards.judge import judge_for

        judged = judge_for(settings.judge).score(list(zip(texts, records, strict=True)))
    return [
        assemble(t, facts_of(r), f, settings, j)
        for t, r, f, j in zip(texts, records, frames, judged, strict=True)
    ]
