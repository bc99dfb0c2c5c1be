"""The one parser of the output grammar (:mod:`medgrpo.prompts`): completion -> think, answer, cited boxes.

Rewards and evaluation both read completions through :func:`parse_completion`, so what is optimised and what
is reported cannot disagree on what a completion said. Not cached: the reward functions share one batch's
results (:mod:`medgrpo.rewards.registry`), so each completion is parsed once.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import Any, NamedTuple

from medgrpo.data.record import LETTERS
from medgrpo.prompts import ANSWER_CLOSE, ANSWER_OPEN, BOX_CLOSE, BOX_OPEN, BOX_RE, THINK_CLOSE, THINK_OPEN

_ANY_TAG_RE = re.compile(r"</?\s*(?:think|answer|box)\s*>", re.IGNORECASE)
_CHOICE_RE = re.compile(r"\A\(?([A-J])\)?(?:\s*[.:)\-]\s*(.*))?\Z", re.DOTALL)

Box = tuple[float, float, float, float]


class ParsedCompletion(NamedTuple):
    """What one completion says, read leniently, plus whether it follows the grammar strictly (immutable; a
    named tuple rather than a frozen dataclass, which takes several times longer to build).

    Attributes:
        text: the completion text.
        think: the first ``<think>...</think>`` block's content (None when there is none).
        answer: the ``<answer>`` block's content, stripped; None unless there is exactly one answer block.
        boxes: every well-formed, finite ``<box>[x1, y1, x2, y2]</box>`` cited in the reasoning (in the
            model's convention, in order); taken from the whole text when there is no think block.
        n_bad_boxes: ``<box>`` tags that are not a well-formed finite box (malformed, NaN, inf).
        strict: exactly one non-empty think block then one answer block, nothing but whitespace around
            them, no other grammar tag (in any letter case) except well-formed boxes inside the think block,
            no tag inside the answer.
    """

    text: str
    think: str | None
    answer: str | None
    boxes: tuple[Box, ...]
    n_bad_boxes: int
    strict: bool


def completion_text(completion: Any) -> str:
    """The assistant text of a completion: a string, or TRL's conversational list of messages.

    Message contents may be strings or lists of content blocks (``{"type": "text", "text": ...}``); anything
    else (None, numbers, images) contributes nothing, so malformed input reads as an empty completion.
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    if not isinstance(completion, list | tuple):
        return ""
    parts: list[str] = []
    for message in completion:
        content = message.get("content") if isinstance(message, dict) else message
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list | tuple):
            for block in content:
                if isinstance(block, dict) and isinstance(block.get("text"), str):
                    parts.append(block["text"])
                elif isinstance(block, str):
                    parts.append(block)
    return "".join(parts)


@lru_cache(maxsize=1 << 14)
def _box_in(tag: str) -> Box | None:
    """The box one ``<box>...</box>`` tag cites; None unless the tag is well-formed and its numbers finite.
    Cached: the completions of one prompt cite the same few boxes."""
    m = BOX_RE.fullmatch(tag)
    if m is None:
        return None
    try:
        box = tuple(map(float, m.groups()))
    except (OverflowError, ValueError):
        return None
    return box if all(map(math.isfinite, box)) else None  # type: ignore[return-value]


def _boxes(text: str) -> tuple[tuple[Box, ...], int, bool]:
    """The well-formed, finite boxes ``text`` cites; how many of its ``<box>`` tags are not one; and whether
    each of its "<" opens or closes one of those boxes (then it holds no other tag, in any spelling)."""
    boxes: list[Box] = []
    n_tags = 0
    only_boxes = True
    end = 0  # the end of the last box
    at = text.find(BOX_OPEN)
    while at >= 0:
        n_tags += 1
        close = text.find("<", at + 1)  # a well-formed tag has no "<" before its closing one
        well_formed = close >= 0 and text.startswith(BOX_CLOSE, close)
        box = _box_in(text[at : close + len(BOX_CLOSE)]) if well_formed else None
        if box is None:
            at = text.find(BOX_OPEN, at + 1)
            continue
        boxes.append(box)
        only_boxes = only_boxes and text.find("<", end, at) < 0
        end = close + len(BOX_CLOSE)
        at = text.find(BOX_OPEN, end)
    only_boxes = only_boxes and text.find("<", end) < 0
    return tuple(boxes), n_tags - len(boxes), only_boxes


def _only_exact_tags(text: str, n_boxes: int) -> bool:
    """One think and one answer block, ``n_boxes`` boxes, and no other grammar tag in any spelling."""
    return (
        text.count(THINK_OPEN) == 1
        and text.count(THINK_CLOSE) == 1
        and text.count(BOX_OPEN) == text.count(BOX_CLOSE) == n_boxes
        and len(_ANY_TAG_RE.findall(text)) == 4 + 2 * n_boxes
    )


def parse_text(text: str) -> ParsedCompletion:
    """Parse a completion's text (see :class:`ParsedCompletion`)."""
    answer = None
    a0 = text.find(ANSWER_OPEN)
    a1 = -1
    if a0 >= 0 and text.count(ANSWER_OPEN) == 1 and text.count(ANSWER_CLOSE) == 1:
        a1 = text.find(ANSWER_CLOSE, a0 + len(ANSWER_OPEN))
        if a1 >= 0:
            answer = text[a0 + len(ANSWER_OPEN) : a1].strip()
    think = None
    t0 = text.find(THINK_OPEN)
    t1 = text.find(THINK_CLOSE, t0) if t0 >= 0 else -1
    if t1 >= 0:
        think = text[t0 + len(THINK_OPEN) : t1]
    boxes, n_bad, only_boxes = _boxes(think if think is not None else text)
    # Strict framing (nothing but whitespace around <think>...</think> then <answer>...</answer>) by string
    # methods, without a regex walking the whole reasoning. With no "<" in the reasoning but its boxes', and
    # none in the answer or the whitespace around, the four tags and the boxes' are the only tags there are.
    strict = bool(
        answer
        and think
        and not think.isspace()
        and (t0 == 0 or text[:t0].isspace())
        and a0 >= t1 + len(THINK_CLOSE)
        and not text[t1 + len(THINK_CLOSE) : a0].strip()
        and not text[a1 + len(ANSWER_CLOSE) :].strip()
        and "<" not in answer
        and n_bad == 0
        and (only_boxes or _only_exact_tags(text, len(boxes)))
    )
    return ParsedCompletion(text, think, answer, boxes, n_bad, strict)


def parse_completion(completion: Any) -> ParsedCompletion:
    """Parse a completion (string or TRL conversational list; anything else reads as empty). Never raises."""
    return parse_text(completion_text(completion))


def choice_of(answer: str | None, options: tuple[str, ...] | list[str], strict: bool = False) -> str | None:
    """The option letter an ``<answer>`` content commits to, or None.

    Strict: exactly one letter valid for this record (``A`` .. the ``len(options)``-th letter). Lenient (what
    accuracy uses): also ``(B)``, ``B.``, ``B: <that option's text>``, or the text of exactly one option.
    Several letters (``"AB"``, ``"A, B"``), a letter beyond the options, or a letter whose text names another
    option are never a choice.
    """
    if not answer or not options:
        return None
    letters = LETTERS[: len(options)]
    if len(answer) == 1 and answer in letters:  # the usual answer, either way
        return answer
    if strict:
        return None
    m = _CHOICE_RE.match(answer)
    if m:
        letter, rest = m.group(1), m.group(2)
        if letter not in letters:
            return None
        if not rest or _norm(rest) == _norm(options[letters.index(letter)]):
            return letter
        return None
    target = _norm(answer)
    hits = [letters[i] for i, o in enumerate(options) if _norm(o) == target]
    return hits[0] if len(hits) == 1 else None


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())
