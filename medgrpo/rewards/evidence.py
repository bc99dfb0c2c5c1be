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
    0.0 without a valid answer, when the reasoning denies the chosen answer or its conclusion contradicts it,
    or when the sentences before the conclusion commit (by content) to options that do not include the chosen
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

from medgrpo.data.boxes import BoxFrame
from medgrpo.rewards.claims import Reading, read
from medgrpo.rewards.consistency import Verdict, committed, conclusion
from medgrpo.rewards.facts import RecordFacts
from medgrpo.rewards.grounding import box_iou, match_score, to_original
from medgrpo.rewards.lexicon import CATEGORY, OPPOSITES, agree, conflict
from medgrpo.rewards.parsing import ParsedCompletion
from medgrpo.rewards.settings import CRITERIA

BOX_HIT_IOU = 0.1
"""A cited box with IoU below this against every gold box claims a region that holds no lesion."""

_VISUAL = frozenset(
    {"modality", "anatomy", "finding", "generic", "normal", "laterality", "location", "appearance", "size"}
)
_TASK_ASPECT = {
    "modality_classification": ("modality",),
    "anatomy_identification": ("anatomy",),
    "pathology_characterization": ("finding", "appearance", "size"),
    "lesion_localization": ("laterality", "location"),
}
_DESCRIPTOR_CATS = ("laterality", "location", "appearance", "size")


def _cats(concepts: frozenset[str], *cats: str) -> list[str]:
    return [c for c in concepts if CATEGORY[c] in cats]


def _finding_descriptors(reading: Reading) -> set[str]:
    out: set[str] = set()
    for s in reading.sentences:
        if s.is_finding:
            out.update(c for c in s.asserted if CATEGORY[c] in _DESCRIPTOR_CATS)
    return out


def visual_grounding(reading: Reading, facts: RecordFacts, first_box: float | None) -> float:
    items: list[float] = []
    if facts.modality:
        items.append(
            float(any(agree(c, m) for c in _cats(reading.asserted, "modality") for m in facts.modality))
        )
    if facts.anatomy:
        items.append(
            float(any(agree(c, a) for c in _cats(reading.asserted, "anatomy") for a in facts.anatomy))
        )
    if facts.abnormal is True:
        where = facts.laterality | facts.location
        if where:
            items.append(float(bool(where & _finding_descriptors(reading))))
        if facts.gold_boxes:
            items.append(first_box or 0.0)
    elif facts.abnormal is False:
        items.append(float(reading.polarity == {"normal"}))
    if not items:
        return float(any(CATEGORY[c] in _VISUAL for c in reading.asserted))
    return sum(items) / len(items)


def question_relevance(reading: Reading, facts: RecordFacts, engaged: bool) -> float:
    cats = _TASK_ASPECT.get(facts.task)
    if cats is not None:
        aspect = bool(_cats(reading.asserted, *cats))
        if facts.task == "lesion_localization":
            aspect = aspect or any(s.boxes for s in reading.sentences)
    elif facts.task == "anomaly_detection":
        aspect = bool(reading.polarity)
    else:
        aspect = bool(reading.asserted & read(facts.question_low).asserted) or engaged
    score = (float(aspect) + float(engaged)) / 2
    question = facts.question_low.strip()
    think = reading.low.strip()
    if question and think and question in think:
        novelty = 1.0 - len(question) * think.count(question) / len(think)
        score *= min(1.0, max(0.0, novelty) / 0.5)
    return score


def _body_hits(reading: Reading, facts: RecordFacts) -> tuple[frozenset[str], frozenset[str], int]:
    """(options the sentences before the conclusion commit to by content, the conclusion's options, its
    index).
    """
    if not facts.is_mcq:
        return frozenset(), frozenset(), len(reading.sentences)
    hits, index = conclusion(reading, facts)
    body = frozenset().union(*(committed(s, facts, letters=False) for s in reading.sentences[:index]))
    return body, hits, index


def answer_support(
    reading: Reading, facts: RecordFacts, choice: str | None, answer: str | None, verdict: Verdict
) -> float:
    body, _, index = _body_hits(reading, facts)
    if facts.is_mcq:
        if choice is None or verdict.kind == "contradict":
            return 0.0
        i = facts.letters.index(choice)
        concepts = facts.option_concepts[i]
        if (
            facts.option_polarity[i] is None
            and concepts
            and concepts <= reading.denied
            and not concepts <= reading.asserted
        ):
            return 0.0
        if body and choice not in body:  # the observations point to another option
            return 0.0
        content = choice in body or any(
            choice in committed(s, facts, letters=False) for s in reading.sentences[index:]
        )
    else:
        if not answer or verdict.kind == "contradict":
            return 0.0
        content = verdict.kind == "agree"
    observed = any(
        s.boxes or any(CATEGORY[c] in _VISUAL for c in s.asserted)
        for s in reading.sentences[: min(index, len(reading.sentences) - 1)]
    )
    return 0.5 * content + 0.5 * observed


def no_hallucination(reading: Reading, facts: RecordFacts, boxes: list[tuple[float, ...]]) -> float:
    checked = wrong = 0
    for cat, known in (("modality", facts.modality), ("anatomy", facts.anatomy)):
        if known:
            for c in _cats(reading.asserted, cat):
                checked += 1
                wrong += not any(agree(c, k) for k in known)
    if facts.abnormal is not None:
        for c in _cats(reading.asserted, "finding", "generic"):
            checked += 1
            if facts.abnormal is False:
                wrong += 1
            elif CATEGORY[c] == "finding" and facts.finding and "abnormal" not in facts.finding:
                wrong += not any(agree(c, f) for f in facts.finding)
        if reading.polarity:
            checked += 1
            wrong += ("normal" if facts.abnormal else "abnormal") in reading.polarity
        if facts.abnormal:
            known = facts.descriptors()
            for c in _finding_descriptors(reading):
                opposite = OPPOSITES.get(c, frozenset()) & known
                if c in known or opposite:
                    checked += 1
                    wrong += bool(opposite) and c not in known
    if boxes and (facts.abnormal is False or facts.gold_boxes):
        for box in boxes:
            checked += 1
            wrong += facts.abnormal is False or max(box_iou(box, g) for g in facts.gold_boxes) < BOX_HIT_IOU
    return 1.0 - wrong / checked if checked else 1.0


def no_contradiction(reading: Reading, facts: RecordFacts, verdict: Verdict) -> float:
    if verdict.kind == "contradict":
        return 0.0
    body, hits, _ = _body_hits(reading, facts)
    conflicts = int(len(reading.polarity) == 2) + int(bool(body and hits) and not body & hits)
    known = facts.descriptors()  # a record may describe one lesion as both (a bright rim, a dark centre)
    modalities = _cats(reading.asserted, "modality")
    conflicts += any(conflict(a, b) for i, a in enumerate(modalities) for b in modalities[i + 1 :])
    descriptors = sorted(_finding_descriptors(reading))
    conflicts += sum(
        1
        for i, a in enumerate(descriptors)
        for b in descriptors[i + 1 :]
        if b in OPPOSITES.get(a, ()) and not (a in known and b in known)
    )
    conflicts += len(set(_cats(reading.asserted & reading.denied, "modality", "finding")))
    return max(0.0, 1.0 - 0.5 * conflicts)


def evidence_criteria(
    parsed: ParsedCompletion,
    reading: Reading,
    facts: RecordFacts,
    frame: BoxFrame | None,
    choice: str | None,
    verdict: Verdict,
    metric: str = "iou",
) -> dict[str, float]:
    """The five criteria of the rule backend for one completion (see the module docstring)."""
    boxes = [to_original(b, frame) for b in parsed.boxes]
    first = match_score(boxes[0], facts.gold_boxes, metric) if boxes and facts.gold_boxes else None
    engaged = verdict.kind in ("agree", "hedge", "contradict")
    said = bool(reading.sentences)  # the absence criteria reward a rationale that errs in nothing, not silence
    scores = (
        visual_grounding(reading, facts, first),
        question_relevance(reading, facts, engaged),
        answer_support(reading, facts, choice, parsed.answer, verdict),
        no_hallucination(reading, facts, boxes) if said else 0.0,
        no_contradiction(reading, facts, verdict) if said else 0.0,
    )
    return dict(zip(CRITERIA, scores, strict=True))


def combine(criteria: dict[str, float | None], weights: tuple[float, ...]) -> float | None:
    """Weighted mean of the criteria that could be scored (None ones are left out); None when none could."""
    total = weight = 0.0
    for name, w in zip(CRITERIA, weights, strict=True):
        value = criteria.get(name)
        if value is not None and w > 0:
            total += w * value
            weight += w
    return total / weight if weight > 0 else None
