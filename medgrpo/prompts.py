"""The one output grammar, and the prompts and gold targets written in it.

::

    <think> diagnostic reasoning; a region it relies on is cited as <box>[x1, y1, x2, y2]</box> </think>
    <answer>C</answer>

``<answer>`` holds exactly one option letter (or a short free-text answer for open-ended questions); nothing
but whitespace stands outside the two blocks. Boxes in a completion use the model's own convention
(:mod:`medgrpo.data.boxes`); records store original pixels, and :func:`build_target` converts.
The parser of this grammar lives in :mod:`medgrpo.rewards.parsing`; both read the constants below.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from medgrpo.data.boxes import BoxFrame
from medgrpo.data.record import LETTERS, MedADRecord

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
BOX_OPEN, BOX_CLOSE = "<box>", "</box>"
GRAMMAR_TOKENS = (THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE, BOX_OPEN, BOX_CLOSE)

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
BOX_RE = re.compile(
    rf"<box>\s*\[\s*({_NUM})\s*,\s*({_NUM})\s*,\s*({_NUM})\s*,\s*({_NUM})\s*\]\s*</box>"
)
"""A cited box: ``<box>[x1, y1, x2, y2]</box>`` (numbers in the model's convention)."""

SYSTEM_PROMPT = (
    "You are a careful medical imaging assistant. Reason step by step about what the image shows before you "
    "answer: the modality, the anatomy, any finding with its location and appearance, then your conclusion."
)

_COORDS = {
    "abs": "in pixel coordinates of the image as you see it",
    "rel1000": "as integers from 0 to 1000 relative to the image width and height",
}


def format_options(options: list[str]) -> str:
    return "\n".join(f"{LETTERS[i]}. {text}" for i, text in enumerate(options))


def format_box(box: list[float]) -> str:
    return f"{BOX_OPEN}[{', '.join(str(int(round(v))) for v in box)}]{BOX_CLOSE}"


def rewrite_boxes(text: str, convert: Callable[[list[float]], list[float]]) -> str:
    """Rewrite every ``<box>[...]</box>`` in ``text`` through ``convert`` (e.g. original -> model pixels)."""
    return BOX_RE.sub(lambda m: format_box(convert([float(g) for g in m.groups()])), text)


def instruction(record: MedADRecord, box_format: str = "abs") -> str:
    """The user-turn text: question, lettered options and the output-format instruction."""
    parts = [record.question.strip()]
    if record.is_mcq:
        parts.append("Options:\n" + format_options(record.options))
        answer_rule = "then give only the letter of the correct option inside <answer></answer>"
    else:
        answer_rule = "then give a short answer inside <answer></answer>"
    parts.append(
        "Think inside <think></think>, citing any region you rely on as <box>[x1, y1, x2, y2]</box> "
        f"{_COORDS[box_format]}, {answer_rule}."
    )
    return "\n".join(parts)


def build_prompt(
    record: MedADRecord,
    frame: BoxFrame | None = None,
    system_prompt: str | None = SYSTEM_PROMPT,
) -> list[dict[str, Any]]:
    """The conversational prompt for one record (TRL inserts the image placeholders from the ``images`` column).

    Args:
        record: the item.
        frame: the coordinate frame of ``record.images[0]`` (decides how boxes are to be written).
        system_prompt: a system turn, or None for none.
    """
    messages: list[dict[str, Any]] = []
    if system_prompt:
        messages.append({"role": "system", "content": system_prompt})
    box_format = frame.box_format if frame is not None else "abs"
    messages.append({"role": "user", "content": instruction(record, box_format)})
    return messages


def build_target(record: MedADRecord, frame: BoxFrame | None = None) -> str:
    """The gold completion: the record's ``cot`` (boxes converted to the model's convention) and its answer.

    A record without ``cot`` gets a one-sentence reasoning that states the answer, so that SFT on plain VQA data
    still teaches the grammar.
    """
    if record.cot:
        think = record.cot.strip()
        if frame is not None:
            think = rewrite_boxes(think, frame.to_model)
    elif record.is_mcq:
        think = f"The answer is {record.answer}: {record.answer_text()}."
    else:
        think = f"The answer is {record.answer}."
    return f"{THINK_OPEN}{think}{THINK_CLOSE}\n{ANSWER_OPEN}{record.answer}{ANSWER_CLOSE}"
