"""Question generation for MedAD-38K's five task families, as multiple-choice items.

Each family is asked only when the source has the labels it needs: anomaly detection when the source holds
both normal and abnormal images, pathology characterization when it has at least two abnormal classes,
lesion localization when the finding has a box or mask that falls in one coarse region, modality and anatomy
identification when the source's metadata names them. Distractors come from the same label space (the
source's classes, its coarse regions, or the modality / anatomy lists below) and are never also correct: a
candidate that shares a lexicon concept with a correct answer (``Mass`` vs ``Nodule``, ``MRI`` vs
``CE-MRI``) is left out, because the verifiers could not tell the two apart either. Answer letters are
balanced per task and option count; everything is deterministic for a given seed and item order.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from dataclasses import dataclass

from medgrpo.data.build.evidence import REGIONS
from medgrpo.data.record import LETTERS
from medgrpo.rewards.claims import read
from medgrpo.rewards.lexicon import agree, norm_phrase

MODALITIES = ("X-ray", "CT", "MRI", "Ultrasound", "Dermoscopy", "Fundus photography", "OCT", "Endoscopy",
              "Microscopy", "Mammography")
"""The modality label space (MedAD-38K's ten modalities, CE-MRI folded into MRI)."""
ANATOMIES = ("Brain", "Chest", "Abdomen", "Skin", "Eye", "Breast", "Knee", "Spine", "Colon", "Hand")
"""The anatomy label space."""
MAX_OPTIONS = 4

_QUESTIONS = {
    "anomaly_detection": ("Is this {image} normal or abnormal?", "Does this {image} look normal or abnormal?",
                          "How would you classify this {image}: normal or abnormal?"),
    "pathology_characterization": ("Which finding is present in this {image}?",
                                   "Which abnormality does this {image} show?",
                                   "What is the most likely diagnosis for the finding in this {image}?"),
    "lesion_localization": ("Where is the {finding} located in this {image}?",
                            "In which region of this {image} is the {finding}?"),
    "modality_classification": ("Which imaging modality was used to acquire this image?",
                                "What kind of imaging study is this?", "Which modality is this image?"),
    "anatomy_identification": ("Which body region is shown in this image?", "What anatomy does this image show?",
                               "Which part of the body was imaged here?"),
}
_PATIENT_SIDES = " Left and right are given from the patient's perspective."


@dataclass(frozen=True)
class ItemFacts:
    """What questions may be asked from: class names of the positive labels, coarse region, metadata."""

    names: tuple[str, ...]  # option texts of the positive labels (empty = normal)
    findings: tuple[str, ...]  # finding texts of the positive labels
    location: str | None
    modality: str | None
    anatomy: str | None


@dataclass(frozen=True)
class Question:
    task: str
    question: str
    options: list[str]
    answer: str  # the correct letter


def same_claim(a: str, b: str) -> bool:
    """True when two option texts cannot be told apart: the same words, or a shared lexicon concept."""
    if norm_phrase(a) == norm_phrase(b):
        return True
    return bool(read(a).asserted & read(b).asserted)


def compatible(a: str, b: str) -> bool:
    """True when two modality/anatomy texts may both describe one image (``MRI`` / ``CE-MRI``, ``Chest`` /
    ``Breast``): one image has one modality, so only incompatible ones make valid distractors."""
    ca, cb = read(a).asserted, read(b).asserted
    if not ca or not cb:
        return norm_phrase(a) == norm_phrase(b)
    return any(agree(x, y) for x in ca for y in cb)


class LetterBalancer:
    """Puts the correct option at the letter used least so far for its (task, option count), ties broken by
    the seeded rng: over N questions every letter is correct N/k times, give or take one."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.counts: dict[tuple[str, int], list[int]] = defaultdict(list)

    def place(self, task: str, correct: str, distractors: list[str]) -> tuple[list[str], str]:
        n = len(distractors) + 1
        counts = self.counts[(task, n)] or [0] * n
        self.counts[(task, n)] = counts
        low = min(counts)
        pos = self.rng.choice([i for i, c in enumerate(counts) if c == low])
        counts[pos] += 1
        rest = list(distractors)
        self.rng.shuffle(rest)
        rest.insert(pos, correct)
        return rest, LETTERS[pos]


def prose(text: str) -> str:
    """A label as it reads inside a sentence: ``Melanocytic nevus`` -> ``melanocytic nevus``, while acronyms
    and mixed forms (``MRI``, ``X-ray``, ``CE-MRI``) keep their case."""
    return text.lower() if re.fullmatch(r"[A-Z][a-z]+(?: [a-z]+)*", text) else text


def _image_phrase(facts: ItemFacts) -> str:
    if facts.modality and facts.anatomy:
        return f"{prose(facts.modality)} image of the {facts.anatomy.lower()}"
    return f"{prose(facts.modality)} image" if facts.modality else "image"


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _pick(rng: random.Random, pool: list[str], k: int) -> list[str]:
    return rng.sample(pool, min(k, len(pool)))


def ask(task: str, facts: ItemFacts, abnormal_names: list[str], has_normal: bool, has_abnormal: bool,
        rng: random.Random, balancer: LetterBalancer, convention: str = "image") -> Question | None:
    """One question of ``task`` about an item, or None when its labels cannot support that task.

    Args:
        task: one of the five task families.
        facts: the item's labels and metadata.
        abnormal_names: the option texts of every abnormal class of the source (the distractor pool).
        has_normal, has_abnormal: whether the source holds normal / abnormal images at all.
        rng: the seeded generator (phrasing, distractor choice, letter ties).
        balancer: shared per split, so answer letters stay balanced.
        convention: ``patient`` adds a note that left/right are the patient's.
    """
    image = _image_phrase(facts)
    template = rng.choice(_QUESTIONS[task])
    if task == "anomaly_detection":
        if not (has_normal and has_abnormal):
            return None
        correct, distractors = ("Abnormal", ["Normal"]) if facts.names else ("Normal", ["Abnormal"])
        question = template.format(image=image)
    elif task == "pathology_characterization":
        if not facts.names:
            return None
        correct = facts.names[rng.randrange(len(facts.names))]
        pool = [n for n in abnormal_names if not any(same_claim(n, p) for p in facts.names)]
        if not pool:
            return None
        distractors = _pick(rng, pool, MAX_OPTIONS - 1)
        question = template.format(image=image)
    elif task == "lesion_localization":
        if not facts.names or facts.location not in REGIONS:
            return None
        correct = _cap(facts.location)
        distractors = [_cap(r) for r in _pick(rng, [r for r in REGIONS if r != facts.location], MAX_OPTIONS - 1)]
        question = template.format(image=image, finding=" and ".join(facts.findings))
        if convention == "patient":
            question += _PATIENT_SIDES
    elif task == "modality_classification":
        if not facts.modality:
            return None
        correct = _cap(facts.modality)
        distractors = _pick(rng, [m for m in MODALITIES if not compatible(m, correct)], MAX_OPTIONS - 1)
        question = template
    elif task == "anatomy_identification":
        if not facts.anatomy:
            return None
        correct = _cap(facts.anatomy)
        distractors = _pick(rng, [a for a in ANATOMIES if not compatible(a, correct)], MAX_OPTIONS - 1)
        question = template
    else:
        raise ValueError(f"unknown task '{task}'")
    options, letter = balancer.place(task, correct, distractors)
    return Question(task, question, options, letter)
