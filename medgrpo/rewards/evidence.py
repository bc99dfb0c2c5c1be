"""The ``evidence`` verifier, rule backend: MedAD-R1's Evidence-Aware Consistency Reward, five criteria.

MedAD-R1 (arXiv 2602.01081) scores a reasoning on visual grounding, question relevance, answer support,
absence of hallucination and absence of contradiction; it does not publish how. Here each criterion is a rule
over the reasoning's claims (:mod:`medgrpo.rewards.claims`, read through the lexicon) checked against the
record's structured ``evidence``, ``modality``, ``anatomy`` and ``bbox``. Every criterion is in [0, 1]:

``visual_grounding``
    The mean of the checks the record allows: the reasoning names the record's modality; its anatomy; for an
    abnormal record, the lesion's laterality/location (asserted in a sentence that describes the finding) and,
    when the record has boxes, the match score of the first cited box (0 without a box); for a normal record,
    that the reasoning states the image is normal. A record with nothing to check: 1.0 when the reasoning
    describes anything visual (a lexicon concept), else 0.0.
``question_relevance``
    The mean of two checks: the reasoning addresses the aspect the task asks about (modality for modality
    classification, anatomy for anatomy identification, normal/abnormal for anomaly detection, finding type or
    appearance for pathology characterization, location or a box for lesion localization, a concept shared
    with the question or any option for ``other``); and it engages with the options (commits to one, by
    letter, text or polarity; or, open-ended, states the answer). Multiplied by min(1, novelty / 0.5), where
    novelty is the share of the reasoning that is not a verbatim copy of the question.
``answer_support``
    0.0 without a valid answer, when the reasoning contradicts the chosen answer (which includes denying its
    content, :func:`~medgrpo.rewards.consistency.denies_option`), or when the sentences before the conclusion commit (by content) to options that do not include the chosen
    one: the observations point elsewhere. Otherwise 0.5 when the reasoning asserts the chosen option's
    content (its text or concepts, or its polarity; a bare letter does not count) plus 0.5 when a sentence
    before the conclusion states an observation (a visual concept or a cited box): the answer must rest on
    something seen.
``no_hallucination``
    1 - wrong / checked over the claims the record can check: each modality and anatomy named (wrong when
    incompatible with the record's), each finding asserted (wrong on a normal image, or when incompatible with
    the record's finding), the stated polarity (wrong when opposite to the record's), each laterality /
    location / appearance / size descriptor of the finding (wrong when it conflicts with the record's, e.g.
    the wrong side), and each cited box (wrong on a normal image, or when its IoU with every gold box is below
    :data:`BOX_HIT_IOU`). 1.0 when nothing checkable is claimed; 0.0 for an empty reasoning (silence is not
    evidence, so a blank completion must not earn the two absence criteria).
``no_contradiction``
    0.0 when the reasoning's conclusion contradicts the answer (:mod:`medgrpo.rewards.consistency`). Else 1 -
    0.5 per internal conflict (floored at 0): the sentences before the conclusion commit to other options than
    the conclusion does; both polarities stated; two incompatible modalities; opposite descriptors of the
    finding (left and right, bright and dark...; not when the record itself describes its lesion with both,
    like an abscess's bright rim and dark centre); a finding or modality both asserted and denied. 0.0 for an
    empty reasoning.
"""

from __future__ import annotations

from functools import lru_cache
from operator import attrgetter, mul
from typing import NamedTuple

from medgrpo.rewards.claims import DESCRIPTOR_CATEGORIES, VISUAL_CATEGORIES, Reading, read
from medgrpo.rewards.consistency import Commitments, Verdict
from medgrpo.rewards.facts import Box, RecordFacts
from medgrpo.rewards.grounding import best_iou
from medgrpo.rewards.lexicon import CONCEPTS, OPPOSITES, agree, conflict
from medgrpo.rewards.parsing import ParsedCompletion

BOX_HIT_IOU = 0.1
"""A cited box with IoU below this against every gold box claims a region that holds no lesion."""


def _of(*cats: str) -> frozenset[str]:
    """Every concept of ``cats``: claims of those categories are then one set intersection away."""
    return frozenset().union(*(CONCEPTS[cat] for cat in cats))


_VISUAL = _of(*VISUAL_CATEGORIES)
_TASK_ASPECT = {
    "modality_classification": _of("modality"),
    "anatomy_identification": _of("anatomy"),
    "pathology_characterization": _of("finding", "appearance", "size"),
    "lesion_localization": _of("laterality", "location"),
}
_MODALITY, _ANATOMY, _FINDING = _of("modality"), _of("anatomy"), _of("finding")
_FINDING_OR_GENERIC = _of("finding", "generic")
_MODALITY_OR_FINDING = _of("modality", "finding")
_DESCRIPTORS = _of(*DESCRIPTOR_CATEGORIES)


def _agreeing(known: frozenset[str], claimable: frozenset[str]) -> frozenset[str]:
    """The concepts of ``claimable`` that agree with one of ``known`` (the record's)."""
    return frozenset(c for c in claimable if any(agree(c, k) for k in known))


class _Checks(NamedTuple):
    """What the criteria check a reasoning's claims against, derived once per record so that checking a
    completion is set algebra. None: the record does not say. ``opposed``: the pairs of opposite descriptors
    that conflict, which are all but those the record has both of (it may describe one lesion as both, like
    an abscess's bright rim and dark centre), as descriptor -> the later (sorted) descriptors it conflicts
    with, so that counting the pairs a reasoning states walks its few descriptors rather than every pair.
    ``checked`` / ``unfounded``: the modality, anatomy and finding concepts that no_hallucination checks /
    finds wrong (the categories are disjoint, so one intersection counts them all)."""

    modality: frozenset[str] | None  # the modality concepts that agree with the record's
    anatomy: frozenset[str] | None  # the anatomy concepts that agree with the record's
    finding: frozenset[str] | None  # the finding concepts that agree with its specific (not generic) finding
    where: frozenset[str]  # the lesion's laterality and location
    checkable: frozenset[str]  # descriptors the record has, or has the opposite of
    wrong: frozenset[str]  # descriptors the record has only the opposite of (e.g. "left" for a right lesion)
    opposed: dict[str, frozenset[str]]
    checked: frozenset[str]
    unfounded: frozenset[str]
    question: str  # the question, stripped


@lru_cache(maxsize=1 << 14)
def _checks(facts: RecordFacts) -> _Checks:
    known = facts.descriptors()
    opposite = {c: OPPOSITES.get(c, frozenset()) for c in _DESCRIPTORS}
    specific = facts.finding and "abnormal" not in facts.finding
    modality = _agreeing(facts.modality, _MODALITY) if facts.modality else None
    anatomy = _agreeing(facts.anatomy, _ANATOMY) if facts.anatomy else None
    finding = _agreeing(facts.finding, _FINDING) if specific else None
    checked, unfounded = set(), set()
    for agreeing, claimable in ((modality, _MODALITY), (anatomy, _ANATOMY)):
        if agreeing is not None:
            checked |= claimable
            unfounded |= claimable - agreeing
    if facts.abnormal is not None:  # findings: all wrong on a normal image, else those the record's is not
        checked |= _FINDING_OR_GENERIC
        if facts.abnormal is False:
            unfounded |= _FINDING_OR_GENERIC
        elif finding is not None:
            unfounded |= _FINDING - finding
    return _Checks(
        modality,
        anatomy,
        finding,
        facts.laterality | facts.location,
        frozenset(c for c in _DESCRIPTORS if c in known or opposite[c] & known),
        frozenset(c for c in _DESCRIPTORS if c not in known and opposite[c] & known),
        {
            a: frozenset(b for b in opposite[a] if a < b and not (a in known and b in known))
            for a in _DESCRIPTORS
        },
        frozenset(checked),
        frozenset(unfounded),
        facts.question_low.strip(),
    )


_OBSERVED, _BOXES = attrgetter("observed"), attrgetter("boxes")


def visual_grounding(reading: Reading, facts: RecordFacts, grounding: float | None) -> float:
    checks = _checks(facts)
    items: list[float] = []
    if checks.modality is not None:
        items.append(float(not reading.asserted.isdisjoint(checks.modality)))
    if checks.anatomy is not None:
        items.append(float(not reading.asserted.isdisjoint(checks.anatomy)))
    if facts.abnormal is True:
        if checks.where:
            items.append(float(not checks.where.isdisjoint(reading.descriptors)))
        if facts.gold_boxes:
            items.append(grounding or 0.0)
    elif facts.abnormal is False:
        items.append(float(reading.polarity == {"normal"}))
    if not items:
        return float(not reading.asserted.isdisjoint(_VISUAL))
    return sum(items) / len(items)


def question_relevance(reading: Reading, facts: RecordFacts, engaged: bool) -> float:
    concepts = _TASK_ASPECT.get(facts.task)
    if concepts is not None:
        aspect = not reading.asserted.isdisjoint(concepts)
        if facts.task == "lesion_localization":
            aspect = aspect or any(map(_BOXES, reading.sentences))
    elif facts.task == "anomaly_detection":
        aspect = bool(reading.polarity)
    else:
        aspect = bool(reading.asserted & read(facts.question_low).asserted) or engaged
    score = (float(aspect) + float(engaged)) / 2
    question = _checks(facts).question
    # a stripped question is found (and counted) alike in the reasoning and in its stripped copy
    if question and question in reading.low:
        think = reading.low.strip()
        novelty = 1.0 - len(question) * think.count(question) / len(think)
        score *= min(1.0, max(0.0, novelty) / 0.5)
    return score


def answer_support(
    reading: Reading,
    facts: RecordFacts,
    choice: str | None,
    answer: str | None,
    verdict: Verdict,
    argument: Commitments,
) -> float:
    if facts.is_mcq:
        if choice is None or verdict.kind == "contradict":  # a contradiction includes denying the choice
            return 0.0
        if argument.body and choice not in argument.body:  # the observations point to another option
            return 0.0
        content = choice in argument.content
    else:
        if not answer or verdict.kind == "contradict":
            return 0.0
        content = verdict.kind == "agree"
    observed = any(map(_OBSERVED, reading.sentences[: min(argument.index, len(reading.sentences) - 1)]))
    return 0.5 * content + 0.5 * observed


def no_hallucination(reading: Reading, facts: RecordFacts, boxes: list[Box]) -> float:
    checks = _checks(facts)
    checked = len(reading.asserted & checks.checked)  # modality, anatomy and finding claims
    wrong = len(reading.asserted & checks.unfounded)
    if facts.abnormal is not None:
        if reading.polarity:
            checked += 1
            wrong += ("normal" if facts.abnormal else "abnormal") in reading.polarity
        if facts.abnormal:
            checked += len(reading.descriptors & checks.checkable)
            wrong += len(reading.descriptors & checks.wrong)
    if boxes and (facts.abnormal is False or facts.gold_boxes):
        for box in boxes:
            checked += 1
            wrong += facts.abnormal is False or best_iou(box, facts.gold_boxes) < BOX_HIT_IOU
    return 1.0 - wrong / checked if checked else 1.0


def no_contradiction(reading: Reading, facts: RecordFacts, verdict: Verdict, argument: Commitments) -> float:
    if verdict.kind == "contradict":
        return 0.0
    body, hits = argument.body, argument.hits
    conflicts = int(len(reading.polarity) == 2) + int(bool(body and hits) and not body & hits)
    modalities = list(reading.asserted & _MODALITY)
    if len(modalities) > 1:
        conflicts += any(conflict(a, b) for i, a in enumerate(modalities) for b in modalities[i + 1 :])
    described = reading.descriptors
    if len(described) > 1:
        opposed = _checks(facts).opposed
        conflicts += sum(len(opposed[a] & described) for a in described)
    conflicts += len(reading.asserted & reading.denied & _MODALITY_OR_FINDING)
    return max(0.0, 1.0 - 0.5 * conflicts)


def evidence_criteria(
    parsed: ParsedCompletion,
    reading: Reading,
    facts: RecordFacts,
    boxes: list[Box],
    grounding: float | None,
    choice: str | None,
    verdict: Verdict,
    argument: Commitments,
) -> tuple[float, ...]:
    """The five criteria of the rule backend for one completion (see the module docstring), in the order of
    :data:`~medgrpo.rewards.settings.CRITERIA`. ``boxes``: the cited boxes in original pixels; ``grounding``:
    the first one's match score (:func:`~medgrpo.rewards.grounding.grounding_score`); ``argument``:
    ``commitments(reading, facts)``.
    """
    engaged = verdict.kind in ("agree", "hedge", "contradict")
    said = bool(reading.sentences)  # the absence criteria reward a rationale that errs in nothing, not silence
    return (
        visual_grounding(reading, facts, grounding),
        question_relevance(reading, facts, engaged),
        answer_support(reading, facts, choice, parsed.answer, verdict, argument),
        no_hallucination(reading, facts, boxes) if said else 0.0,
        no_contradiction(reading, facts, verdict, argument) if said else 0.0,
    )


def combine(criteria: tuple[float | None, ...], weights: tuple[float, ...]) -> float | None:
    """Weighted mean of the criteria (in the order of :data:`~medgrpo.rewards.settings.CRITERIA`) that could
    be scored (None ones are left out); None when none could."""
    if None not in criteria:  # the rule backend scores all five: the weighted mean in two C-level sums
        weight = sum(weights)
        return sum(map(mul, criteria, weights)) / weight if weight > 0 else None
    total = weight = 0.0
    for value, w in zip(criteria, weights, strict=True):
        if value is not None and w > 0:
            total += w * value
            weight += w
    return total / weight if weight > 0 else None
