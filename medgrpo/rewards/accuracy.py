"""The ``accuracy`` verifier: is the answer right?"""

from __future__ import annotations

import re
from collections import Counter

from medgrpo.rewards.facts import RecordFacts
from medgrpo.rewards.parsing import ParsedCompletion, choice_of

_ARTICLES = {"a", "an", "the"}
_POLAR_ANSWERS = {"yes", "no"}
_WORD_RE = re.compile(r"[a-z0-9]+")


def normalize_answer(text: str) -> list[str]:
    """Lower case, punctuation and articles dropped, split into words (SQuAD's answer normalisation)."""
    return [w for w in _WORD_RE.findall(text.lower()) if w not in _ARTICLES]


def token_f1(prediction: str, gold: str) -> float:
    """Token-level F1 of two free-text answers after :func:`normalize_answer` (SQuAD, Rajpurkar et al.)."""
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    if not pred or not ref:
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def accuracy_score(parsed: ParsedCompletion, facts: RecordFacts) -> float:
    """Multiple choice: 1.0 when the one ``<answer>`` block names the gold option, else 0.0.

    The answer is read leniently (``C``, ``(C)``, ``C.``, ``C: <its text>``, or one option's exact text:
    :func:`~medgrpo.rewards.parsing.choice_of`); several answer blocks, several letters, or a letter beyond
    the options score 0. Open-ended: 1.0 on a normalised exact match, else the token F1 with the gold answer;
    a yes/no gold answer needs the exact word (F1 would pay half for "yes no").
    """
    if parsed.answer is None:
        return 0.0
    if facts.is_mcq:
        return 1.0 if choice_of(parsed.answer, facts.options) == facts.answer else 0.0
    pred = normalize_answer(parsed.answer)
    gold = normalize_answer(facts.answer)
    if pred == gold:
        return 1.0 if gold else 0.0
    if len(gold) == 1 and gold[0] in _POLAR_ANSWERS:
        return 0.0
    return token_f1(parsed.answer, facts.answer)
