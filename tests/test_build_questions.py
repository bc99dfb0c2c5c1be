"""Question generation: letter balance, distractor validity, determinism per seed."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from medgrpo.data.build.questions import (
    ANATOMIES,
    MODALITIES,
    ItemFacts,
    LetterBalancer,
    ask,
    compatible,
    same_claim,
)
from medgrpo.data.record import LETTERS

NIH = ["Atelectasis", "Cardiomegaly", "Effusion", "Infiltration", "Mass", "Nodule", "Pneumonia", "Pneumothorax",
       "Consolidation", "Edema", "Emphysema", "Fibrosis", "Pleural thickening", "Hernia"]


def _ask_all(task, facts_list, seed=0, names=NIH):
    rng = random.Random(seed)
    balancer = LetterBalancer(rng)
    return [ask(task, f, names, True, True, rng, balancer) for f in facts_list]


def _facts(names=("Mass",), location="upper left", modality="X-ray", anatomy="chest"):
    return ItemFacts(tuple(names), tuple(n.lower() for n in names), location, modality, anatomy)


@pytest.mark.parametrize("task", ["anomaly_detection", "pathology_characterization", "lesion_localization",
                                  "modality_classification", "anatomy_identification"])
def test_letters_balanced_within_one(task):
    questions = _ask_all(task, [_facts() for _ in range(41)])
    n = len(questions[0].options)
    counts = Counter(q.answer for q in questions)
    assert set(counts) == set(LETTERS[:n])
    assert max(counts.values()) - min(counts.values()) <= 1
    assert n == (2 if task == "anomaly_detection" else 4)


def test_distractors_never_also_correct():
    rng = random.Random(1)
    items = [_facts(rng.sample(NIH, rng.randint(1, 3))) for _ in range(200)]
    for facts, q in zip(items, _ask_all("pathology_characterization", items), strict=True):
        correct = q.options[LETTERS.index(q.answer)]
        assert correct in facts.names
        for i, option in enumerate(q.options):
            if LETTERS[i] != q.answer:
                assert not any(same_claim(option, p) for p in facts.names), (option, facts.names)
        assert len(set(q.options)) == len(q.options)
    # Mass and Nodule read as one lexicon concept: a mass image never offers Nodule
    assert same_claim("Mass", "Nodule") and same_claim("Pneumonia", "Consolidation")
    assert not same_claim("Mass", "Effusion")


def test_modality_and_anatomy_distractors_incompatible():
    q_mri = _ask_all("modality_classification", [_facts(modality="CE-MRI")] * 30)
    for q in q_mri:
        wrong = [o for i, o in enumerate(q.options) if LETTERS[i] != q.answer]
        assert "MRI" not in wrong and all(o in MODALITIES for o in wrong)
    q_chest = _ask_all("anatomy_identification", [_facts()] * 30)
    for q in q_chest:
        wrong = [o for i, o in enumerate(q.options) if LETTERS[i] != q.answer]
        assert "Breast" not in wrong and all(o in ANATOMIES for o in wrong)  # chest/breast may co-occur
    assert compatible("MRI", "CE-MRI") and not compatible("MRI", "CT")


def test_unsupported_tasks_return_none():
    rng, bal = random.Random(0), LetterBalancer(random.Random(0))
    normal = _facts(names=(), location=None)
    assert ask("pathology_characterization", normal, NIH, True, True, rng, bal) is None
    assert ask("lesion_localization", _facts(location="bilateral"), NIH, True, True, rng, bal) is None
    assert ask("anomaly_detection", _facts(), NIH, False, True, rng, bal) is None  # no normal images in source
    assert ask("modality_classification", _facts(modality=None), NIH, True, True, rng, bal) is None
    only = ask("pathology_characterization", _facts(names=("Mass",)), ["Mass", "Nodule"], True, True, rng, bal)
    assert only is None  # the only other class is not a valid distractor


def test_deterministic_per_seed():
    items = [_facts(random.Random(i).sample(NIH, 2)) for i in range(20)]
    a = _ask_all("pathology_characterization", items, seed=3)
    assert a == _ask_all("pathology_characterization", items, seed=3)
    assert a != _ask_all("pathology_characterization", items, seed=4)
