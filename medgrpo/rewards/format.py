"""The ``format`` verifier: does a completion follow the output grammar of :mod:`medgrpo.prompts` strictly?"""

from __future__ import annotations

from medgrpo.rewards.facts import RecordFacts
from medgrpo.rewards.parsing import ParsedCompletion, choice_of

MAX_OPEN_ANSWER_WORDS = 24
"""An open-ended ``<answer>`` is a short answer, not a second reasoning."""


def format_score(parsed: ParsedCompletion, facts: RecordFacts) -> float:
    """1.0 when the completion is exactly ``<think>reasoning</think><answer>X</answer>``, else 0.0.

    Strict: one non-empty think block then one answer block, only whitespace outside them, grammar tags only
    in their exact lower-case spelling, boxes only as well-formed finite ``<box>[x1, y1, x2, y2]</box>``
    inside the reasoning (see :class:`~medgrpo.rewards.parsing.ParsedCompletion`), and an answer that is one
    option letter valid for this record (``A`` .. the ``len(options)``-th letter) or, for an open-ended
    record, a short free text (at most :data:`MAX_OPEN_ANSWER_WORDS` words). All-or-nothing: partial credit
    for format is known to be gamed by longer outputs.
    """
    if not parsed.strict or parsed.answer is None:
        return 0.0
    if facts.is_mcq:
        return 1.0 if choice_of(parsed.answer, facts.options, strict=True) else 0.0
    return 1.0 if len(parsed.answer.split()) <= MAX_OPEN_ANSWER_WORDS else 0.0
