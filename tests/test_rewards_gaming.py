"""Gaming resistance: on MedAD-Synth records of every task family, the honest gold completion scores at least
as high in total as every known shortcut, under the default settings and with both shaping options on."""

import re

import pytest

from medgrpo.data import load_records
from medgrpo.data.boxes import ImageGrid
from medgrpo.prompts import BOX_RE, build_target
from medgrpo.rewards import RewardSettings, verify
from medgrpo.rewards.registry import REWARD_NAMES

GRID = ImageGrid("abs", 28, 56 * 56, 112 * 112)


def total(completion, record, frame, settings):
    scores = verify(completion, record, frame, settings)
    return sum(scores[name] or 0.0 for name in REWARD_NAMES)


def split(target):
    m = re.fullmatch(r"<think>(.*)</think>\n<answer>(.*)</answer>", target, re.DOTALL)
    return m.group(1), m.group(2)


def shortcuts(record, frame):
    """name -> gamed completion for one record (boxes in the model's convention, like the gold target)."""
    think, answer = split(build_target(record, frame))
    letters = record.letters
    other = next(x for x in letters if x != answer)
    whole = f"<box>[0, 0, {frame.model_width}, {frame.model_height}]</box>"
    listing = " ".join(f"({x}) {o}." for x, o in zip(letters, record.options, strict=True))
    many = " ".join(
        f"<box>[{x}, {y}, {x + 16}, {y + 16}]</box>" for x in range(0, 96, 16) for y in range(0, 96, 16)
    )
    rejections = " ".join(f"{o}: no." for o in record.options)
    gold_box = BOX_RE.search(think)
    no_box = BOX_RE.sub("", think)
    return {
        "empty reasoning": f"<think></think>\n<answer>{answer}</answer>",
        "blank reasoning": f"<think> </think>\n<answer>{answer}</answer>",
        "bare answer": f"<think>The answer is {answer}.</think>\n<answer>{answer}</answer>",
        "lists every option": f"<think>It could be {listing}</think>\n<answer>{answer}</answer>",
        "rejects every option": f"<think>{rejections} So the answer is {answer}.</think>\n<answer>{answer}</answer>",
        "gold reasoning, then rejects every option": f"<think>{think} {rejections}</think>\n<answer>{answer}</answer>",
        "copies the question": f"<think>{record.question}</think>\n<answer>{answer}</answer>",
        "concludes another option": f"<think>{think} Therefore the answer is {other} "
        f"({record.options[letters.index(other)]}).</think>\n<answer>{answer}</answer>",
        "several answer blocks": f"<think>{think}</think>\n<answer>{answer}</answer><answer>{other}</answer>",
        "repeated answer blocks": f"<think>{think}</think>\n" + f"<answer>{answer}</answer>" * 2,
        "all letters": f"<think>{think}</think>\n<answer>{letters}</answer>",
        "whole-image box": f"<think>{BOX_RE.sub(whole, think) if gold_box else think + ' ' + whole}</think>\n"
        f"<answer>{answer}</answer>",
        "many boxes": f"<think>{no_box} {many} {gold_box.group(0) if gold_box else ''}</think>\n"
        f"<answer>{answer}</answer>",
        "gold reasoning x10": f"<think>{' '.join([think] * 10)}</think>\n<answer>{answer}</answer>",
        "upper-case tags": f"<THINK>{think}</THINK>\n<ANSWER>{answer}</ANSWER>",
        "mixed-case tags": f"<Think>{think}</Think>\n<Answer>{answer}</Answer>",
        "answer outside the grammar": f"{think} The answer is {answer}.",
    }


SETTINGS = {
    "default": RewardSettings(),
    "shaped": RewardSettings(gate_on_correct=True, zero_on_format_failure=True, grounding_metric="giou"),
}


@pytest.fixture(scope="module")
def records(synth_dir):
    records = load_records(synth_dir, split="train")
    assert {r.task for r in records} >= {
        "anatomy_identification",
        "modality_classification",
        "anomaly_detection",
        "pathology_characterization",
        "lesion_localization",
    }
    return records


@pytest.mark.parametrize("settings", sorted(SETTINGS))
def test_honest_completion_beats_every_shortcut(records, settings):
    failures = []
    strictly_better = 0
    comparisons = 0
    for record in records:
        frame = GRID.frame(128, 128)
        honest = total(build_target(record, frame), record, frame, SETTINGS[settings])
        for name, gamed in shortcuts(record, frame).items():
            score = total(gamed, record, frame, SETTINGS[settings])
            comparisons += 1
            strictly_better += honest > score + 1e-9
            if score > honest + 1e-9:
                failures.append(f"{record.id} ({record.task}) {name}: {score:.3f} > honest {honest:.3f}")
    assert not failures, "\n".join(failures[:20])
    # only the repeated gold reasoning and a box list that ends on the gold box may tie
    assert strictly_better >= comparisons - 2 * len(records)
