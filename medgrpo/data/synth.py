"""MedAD-Synth: the embedded benchmark, generated offline and deterministically from a seed.

``medgrpo synth --out DIR --n-train N --n-test M --seed S`` writes a dataset folder (``train.jsonl``,
``test.jsonl``, ``images/*.png``, ``README.md`` card) in the MedAD record schema, with the five MedAD-38K task
families as 4-option questions. Images come from :mod:`medgrpo.data.synth_draw`.

Why the text alone cannot answer: for every task the correct class is drawn from a balanced, shuffled
schedule, distractors are drawn uniformly from the other classes, the correct option's letter from a second
balanced schedule, and no question names the attribute it asks about (a modality question never names the
anatomy, which would narrow the modalities). So the option texts and their order carry no information about
which one is right; ``eval/synth_baselines.py`` measures this against a pixel classifier.

Difficulty (easy / medium / hard: lesion size and contrast; ``normal`` when the image has no lesion) is the
last part of every id, e.g. ``synth-test-000042-hard``: record fields and evidence keys are fixed by the
schema, and :func:`difficulty_of` reads it back.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from medgrpo.data.record import LETTERS, MedADRecord, RecordError, load_records, write_records
from medgrpo.data.synth_draw import (
    ANATOMIES,
    ANATOMIES_BY_MODALITY,
    DIFFICULTIES,
    LESION_KINDS,
    MODALITIES,
    QUADRANTS,
    SETTINGS,
    SIZE,
    Scene,
    draw,
    lesion_appearance,
    place_lesion,
)
from medgrpo.prompts import format_box

SOURCE = "medad-synth"
N_OPTIONS = 4
TASK_FAMILIES = (
    "anatomy_identification",
    "modality_classification",
    "anomaly_detection",
    "pathology_characterization",
    "lesion_localization",
)
DETECTION_OPTIONS = (
    "no abnormality",
    "abnormality on the left side",
    "abnormality on the right side",
    "abnormalities on both sides",
)
"""Anomaly detection answers: presence and side, four classes so that chance is 25% like the other tasks."""

_SPLIT_STREAM = {"train": 1, "test": 2}

_PHRASE = {
    "X-ray": "X-ray",
    "CT": "CT scan",
    "MRI": "MRI scan",
    "ultrasound": "ultrasound image",
    "fundus photography": "fundus photograph",
    "dermoscopy": "dermoscopy image",
}
_MODALITY_CUES = {
    "X-ray": "a grey projection radiograph in which bone is white and air-filled tissue darker",
    "CT": "a grey cross-sectional slice on a black background with bright bone",
    "MRI": "a grey cross-sectional slice with bright fluid and fat signal and dark cortical bone",
    "ultrasound": "a fan-shaped grey field with speckle texture",
    "fundus photography": "a colour photograph of the orange-red retina seen through the pupil",
    "dermoscopy": "a magnified colour view of the skin surface inside a round field",
}
_ANATOMY_CUES = {
    ("X-ray", "chest"): "two dark lung fields crossed by ribs, the spine and the heart shadow",
    ("X-ray", "knee"): "the femur above and the tibia below a joint space",
    ("CT", "brain"): "a bright skull ring around brain tissue and two dark ventricles",
    ("CT", "chest"): "two dark lungs around the heart with a vertebra behind",
    ("CT", "abdomen"): "the liver, both kidneys, bowel loops and a vertebra",
    ("MRI", "brain"): "the scalp, brain tissue and two bright ventricles",
    ("MRI", "knee"): "the femoral condyle and tibia with bright joint fluid and the patella in front",
    ("MRI", "breast"): "two bright fatty breasts with darker glandular tissue below the chest wall",
    ("ultrasound", "abdomen"): "homogeneous liver tissue with a dark tubular vessel and the bright diaphragm",
    ("ultrasound", "breast"): "skin, subcutaneous fat, glandular tissue and the pectoral muscle in layers",
    ("fundus photography", "retina"): "the yellow optic disc, the darker macula and branching vessels",
    ("dermoscopy", "skin"): "skin texture with a few hairs",
}
_QUESTIONS = {
    "anatomy_identification": (
        "Which anatomical region is shown in this image?",
        "What body part does this image depict?",
        "Identify the anatomy shown in this image.",
    ),
    "modality_classification": (
        "Which imaging modality was used to acquire this image?",
        "What kind of medical image is this?",
        "Identify the imaging modality of this image.",
    ),
    "anomaly_detection": (
        "Is there an abnormality in this {phrase} of the {anatomy}, and if so, on which side?",
        "Does this {phrase} of the {anatomy} show any abnormality? If it does, where?",
        "Look for abnormal findings in this {phrase} of the {anatomy}. Which statement is correct?",
    ),
    "pathology_characterization": (
        "What is the most likely type of the lesion in this {phrase}?",
        "How is the lesion seen in this {phrase} of the {anatomy} best characterized?",
        "Which kind of lesion does this {phrase} show?",
    ),
    "lesion_localization": (
        "Where is the lesion located in this {phrase} of the {anatomy}?",
        "In which region of this {phrase} is the lesion?",
        "Locate the lesion in this {phrase}.",
    ),
}
_SIDES_NOTE = " Left and right refer to the image as displayed."
_ENDINGS = ("so the answer is {letter} ({text}).", "so the correct option is {letter} ({text}).",
            "which corresponds to option {letter} ({text}).")


class SynthError(ValueError):
    """MedAD-Synth cannot be generated with these arguments (one line)."""


def difficulty_of(record_id: str) -> str:
    """The difficulty a MedAD-Synth id carries: ``visible``, ``easy``, ``medium``, ``hard`` or ``normal``."""
    level = record_id.rsplit("-", 1)[-1]
    if level not in (*DIFFICULTIES, *SETTINGS["visible"], "normal"):
        raise SynthError(f"'{record_id}' is not a MedAD-Synth id (no difficulty suffix)")
    return level


def _schedule(rng: np.random.Generator, classes: tuple[str, ...] | str, n: int) -> list[Any]:
    """``n`` draws in which every class appears equally often (+-1), in shuffled order."""
    classes = list(classes)
    extra = [classes[i] for i in rng.permutation(len(classes))[: n % len(classes)]]
    pool = classes * (n // len(classes)) + extra
    rng.shuffle(pool)
    return pool


OPTION_ORDERS = ("fixed", "shuffled", "canonical", "slotted")
"""``fixed`` (the default, and the CPU demo's): every question lists all of its family's classes, always in class
order (six modalities A-F, seven anatomies A-G, the four detection answers, five lesion kinds, four quadrants), as a
closed-set classification benchmark does, so a letter names one class and chance is one over the number of
classes. ``shuffled``: four options, the correct option's letter following a balanced schedule: it also asks the
model to find its conclusion in a list it has not seen in that order, a lookup the 1.5M-parameter demo model does
not learn in a CPU budget (eval/results/demo-report.md, experiments 9-11). ``canonical``: the four
options are listed in the task's class order, so the letter is a function of the image's class and of which
distractors are shown. ``slotted``: every class has a home letter (its place in the class order, modulo four) and
is always listed there; the other three letters each show a class drawn uniformly from those at home on that
letter, so the letter is a function of the image's class alone. The answer letters still follow a balanced schedule
(the class is drawn among those at home on the scheduled letter), so no letter is worth more than chance to a model
that does not perceive the class: with classes balanced instead, pathology's five kinds at A, B, C, D, A would make
"always A" score 0.40. The CPU demo's tiny model does not learn in
minutes to look a letter up in the option list (eval/results/demo-report.md), which ``canonical`` still asks for
about 30% of the time; real checkpoints do, and ``shuffled`` measures it."""
COT_STYLES = ("full", "brief", "walk")
"""Gold reasoning styles: ``full``; ``brief`` (the same claims in about a third of the tokens); ``walk`` (brief,
then the options in list order, each judged, stopping at the answer: "A. X-ray: no. B. CT: yes, so the answer is
B (CT)." puts the answer's letter a few tokens after the same letter copied from the option list; anomaly
detection keeps the brief ending, as judging "A. no abnormality: no" would negate a polarity twice)."""


def _options(rng: np.random.Generator, correct: str, classes: tuple[str, ...], letter: str,
             order: str = "shuffled") -> tuple[list[str], str]:
    """Four options (``correct`` and three other classes) and the correct option's letter: ``letter`` when
    ``order="shuffled"``, its place in class order when ``"canonical"``, its home letter when ``"slotted"`` (see
    :data:`OPTION_ORDERS`). One permutation is drawn whatever the order, so the images and every later draw of a
    record are the same in all three."""
    others = [c for c in classes if c != correct]
    drawn = [others[i] for i in rng.permutation(len(others))]
    distractors = drawn[: N_OPTIONS - 1]
    if order == "fixed":
        return list(classes), LETTERS[classes.index(correct)]
    if order == "canonical":
        options = sorted([correct, *distractors], key=classes.index)
        return options, LETTERS[options.index(correct)]
    if order == "slotted":
        home = {c: classes.index(c) % N_OPTIONS for c in classes}
        options = [correct if s == home[correct] else next(c for c in drawn if home[c] == s)
                   for s in range(N_OPTIONS)]
        return options, LETTERS[home[correct]]
    slot = LETTERS.index(letter)
    return distractors[:slot] + [correct] + distractors[slot:], letter


def _finding_text(kind: str, modality: str, size: str, boxes: list[list[float]], quadrants: list[str],
                  rng: np.random.Generator) -> str:
    """The finding sentence: size, appearance and type of the lesion(s), each cited with its box."""
    look = lesion_appearance(kind, modality)
    noun = kind if len(boxes) == 1 else kind + ("es" if kind.endswith("s") else "s")
    if kind == "abscess":
        shape = f"{size} {look[0]} {noun} with {'a ' if len(boxes) == 1 else ''}{look[1]} and {look[2]}"
    else:
        shape = f"{size} {look[1]}, {look[2]} {look[0]} {noun}"
    cited = [f"the {q} quadrant {format_box(b)}" for q, b in zip(quadrants, boxes, strict=True)]
    if len(boxes) == 1:
        opener = str(rng.choice(["There is a", "I see a", "The image shows a"]))
        return f"{opener} {shape} in {cited[0]}."
    opener = str(rng.choice(["There are two", "I see two", "The image shows two"]))
    return f"{opener} {shape}, one in {cited[0]} and one in {cited[1]}."


def _conclusion(task: str, answer: str, kind: str | None, modality: str, anatomy: str) -> str:
    if task == "modality_classification":
        return f"The imaging modality is therefore {answer},"
    if task == "anatomy_identification":
        return f"The region shown is therefore the {anatomy},"
    if task == "anomaly_detection":
        return {
            "no abnormality": "There is therefore no abnormality,",
            "abnormality on the left side": "The abnormality is therefore on the left side only,",
            "abnormality on the right side": "The abnormality is therefore on the right side only,",
            "abnormalities on both sides": "There are therefore abnormalities on both sides,",
        }[answer]
    if task == "pathology_characterization":
        look = ", ".join(lesion_appearance(str(kind), modality))
        return f"These features ({look}) are typical of {'an' if kind == 'abscess' else 'a'} {kind},"
    return f"The lesion therefore lies in the {answer} quadrant,"


_CLASSES: dict[str, tuple[str, ...]] = {
    "anatomy_identification": ANATOMIES,
    "modality_classification": MODALITIES,
    "anomaly_detection": DETECTION_OPTIONS,
    "pathology_characterization": LESION_KINDS,
    "lesion_localization": QUADRANTS,
}
"""The answer classes of each task (the correct class is scheduled, distractors are drawn from the rest)."""

_ARTICLE = {"X-ray": "an", "CT": "a", "MRI": "an", "ultrasound": "an", "fundus photography": "a",
            "dermoscopy": "a"}


_LEVELS = {level: spec for levels in SETTINGS.values() for level, spec in levels.items()}


def _scene(rng: np.random.Generator, task: str, target: str, difficulty: str) -> tuple[Scene, list[str], str]:
    """The scene for ``task`` whose correct class is ``target``: (scene, lesion quadrants, difficulty level).

    Whatever the task does not ask about is drawn independently of ``target``, so it cannot give it away.
    """
    if task == "anatomy_identification":
        anatomy = target
        modality = str(rng.choice([m for m, a in ANATOMIES_BY_MODALITY.items() if anatomy in a]))
    else:
        modality = target if task == "modality_classification" else str(rng.choice(MODALITIES))
        anatomy = str(rng.choice(ANATOMIES_BY_MODALITY[modality]))
    kind = target if task == "pathology_characterization" else str(rng.choice(LESION_KINDS))
    rows = [str(rng.choice(["upper", "lower"])) for _ in range(2)]
    if task == "lesion_localization":
        quadrants = [target]
    elif task == "anomaly_detection":
        quadrants = {
            "no abnormality": [],
            "abnormality on the left side": [f"left {rows[0]}"],
            "abnormality on the right side": [f"right {rows[0]}"],
            "abnormalities on both sides": [f"left {rows[0]}", f"right {rows[1]}"],
        }[target]
    elif task == "pathology_characterization" or rng.random() < 0.5:
        quadrants = [str(rng.choice(QUADRANTS))]
    else:  # half of the modality and anatomy images are normal
        quadrants = []
    level = difficulty if quadrants else "normal"
    lesions = tuple(place_lesion(rng, kind, q, level) for q in quadrants)
    return Scene(modality, anatomy, lesions, seed=int(rng.integers(2**31))), quadrants, level


def _brief_finding(kind: str, modality: str, size: str, boxes: list[list[float]], quadrants: list[str]) -> str:
    look = lesion_appearance(kind, modality)[0]
    if len(boxes) == 1:
        return f"A {size} {look} {kind} in the {quadrants[0]} quadrant {format_box(boxes[0])}."
    cited = " and ".join(f"{q} {format_box(b)}" for q, b in zip(quadrants, boxes, strict=True))
    return f"Two {size} {look} {kind}{'es' if kind.endswith('s') else 's'}: {cited}."


def _cot(rng: np.random.Generator, task: str, target: str, scene: Scene, quadrants: list[str],
         boxes: list[list[float]], size: str | None, letter: str, answer_text: str, options: list[str],
         style: str = "full") -> str:
    """Gold reasoning: modality -> anatomy -> finding (boxes cited) -> conclusion -> option letter and text.

    ``style="brief"`` states the same steps in about a third of the tokens (no description of the image cues), for
    CPU-sized models whose generation budget is small; the claims and the ending are the same. ``style="walk"``
    is brief with the conclusion's sentence closed and the options then judged in list order up to the answer.
    """
    modality, anatomy = scene.modality, scene.anatomy
    kind = scene.lesions[0].kind if scene.lesions else None
    ending = str(rng.choice(_ENDINGS)).format(letter=letter, text=answer_text)
    if style in ("brief", "walk"):
        finding = "No lesion." if kind is None else _brief_finding(kind, modality, str(size), boxes, quadrants)
        conclusion = _conclusion(task, target, kind, modality, anatomy)
        if style == "walk" and task != "anomaly_detection":  # its options are polarities: no double negation
            rejected = "".join(f" {LETTERS[i]}. {text}: no." for i, text in enumerate(options[: LETTERS.index(letter)]))
            conclusion = f"{conclusion[:-1]}.{rejected} {letter}. {answer_text}: yes,"  # its trailing comma closed
            ending = f"so the answer is {letter} ({answer_text})."  # the drawn ending is replaced, its draw kept:
            # the rng stream, hence every later record, stays the same as with brief reasoning
        return f"{modality[:1].upper()}{modality[1:]} of the {anatomy}. {finding} {conclusion} {ending}"
    steps = [
        str(rng.choice(["This is {a} {m} image: {c}.", "The image is {a} {m} study, {c}.",
                        "Modality: {m}, recognisable as {c}."])).format(
            a=_ARTICLE[modality], m=modality, c=_MODALITY_CUES[modality]),
        str(rng.choice(["It shows the {x}, with {c}.", "The anatomy is the {x}: {c}.",
                        "We are looking at the {x} ({c})."])).format(
            x=anatomy, c=_ANATOMY_CUES[(modality, anatomy)]),
    ]
    if kind is None:
        steps.append(str(rng.choice(["No focal lesion is seen; the {x} looks normal.",
                                     "I see no lesion: the {x} appears normal.",
                                     "There is no focal abnormality in the {x}."])).format(x=anatomy))
    else:
        steps.append(_finding_text(kind, modality, str(size), boxes, quadrants, rng))
    steps.append(f"{_conclusion(task, target, kind, modality, anatomy)} {ending}")
    return " ".join(steps)


def _make_record(split: str, index: int, task: str, target: str, letter: str, difficulty: str, seed: int,
                 root: Path, cot_style: str = "full", option_order: str = "shuffled") -> MedADRecord:
    """Draw one scene for ``task`` whose correct class is ``target``, save its image under ``root``."""
    rng = np.random.default_rng([seed, _SPLIT_STREAM[split], index])
    scene, quadrants, level = _scene(rng, task, target, difficulty)
    image, boxes = draw(scene)
    rel = f"images/{split}_{index:06d}.png"
    image.save(root / rel, format="PNG")

    shown = [f"{c} quadrant" if task == "lesion_localization" else c for c in _CLASSES[task]]
    answer_text = shown[_CLASSES[task].index(target)]
    options, letter = _options(rng, answer_text, tuple(shown), letter, option_order)
    question = str(rng.choice(_QUESTIONS[task])).format(phrase=_PHRASE[scene.modality], anatomy=scene.anatomy)
    if task in ("anomaly_detection", "lesion_localization"):
        question += _SIDES_NOTE
    size = _LEVELS[level][3] if scene.lesions else None
    return MedADRecord(
        id=f"synth-{split}-{index:06d}-{level}",
        images=[rel],
        question=question,
        options=options,
        answer=letter,
        task=task,
        modality=scene.modality,
        anatomy=scene.anatomy,
        evidence=_evidence(scene, quadrants, size),
        bbox=boxes or None,
        cot=_cot(rng, task, target, scene, quadrants, boxes, size, letter, answer_text, options, cot_style),
        source=SOURCE,
    )


def _evidence(scene: Scene, quadrants: list[str], size: str | None) -> dict[str, Any]:
    """The structured findings under the contract's keys (``None`` where a key does not apply)."""
    if not scene.lesions:
        return {"abnormal": False, "finding": None, "location": None, "laterality": None, "appearance": [],
                "modality": scene.modality, "anatomy": scene.anatomy, "size": None}
    kind = scene.lesions[0].kind
    sides = sorted({q.split()[0] for q in quadrants})
    return {
        "abnormal": True,
        "finding": kind,
        "location": " and ".join(f"{q} quadrant" for q in quadrants),
        "laterality": "bilateral" if len(sides) == 2 else sides[0],
        "appearance": lesion_appearance(kind, scene.modality),
        "modality": scene.modality,
        "anatomy": scene.anatomy,
        "size": size,
    }


def _home_classes(rng: np.random.Generator, classes: tuple[str, ...], letters: list[str]) -> list[str]:
    """Slotted options: the correct class of each record, drawn in a balanced schedule from the classes at home
    on its scheduled letter, so the letters stay balanced whatever the number of classes."""
    homes = {letter: _schedule(rng, classes[LETTERS.index(letter)::N_OPTIONS], letters.count(letter))
             for letter in sorted(set(letters))}
    return [homes[letter].pop() for letter in letters]


def synth_split(split: str, n: int, seed: int, root: Path, cot_style: str = "full",
                option_order: str = "shuffled", setting: str = "realistic") -> list[MedADRecord]:
    """``n`` records of one split, images written to ``root/images``; tasks, answer classes, answer letters
    and difficulties each follow their own balanced schedule so that every count is equal to within one (under
    slotted options the classes follow the letters instead, see :data:`OPTION_ORDERS`)."""
    plan = np.random.default_rng([seed, _SPLIT_STREAM[split], 2**31])
    tasks = _schedule(plan, TASK_FAMILIES, n)
    by_task = Counter(tasks)
    targets = {t: _schedule(plan, _CLASSES[t], by_task[t]) for t in TASK_FAMILIES}
    letters = {t: _schedule(plan, LETTERS[:N_OPTIONS], by_task[t]) for t in TASK_FAMILIES}
    levels = {t: _schedule(plan, tuple(SETTINGS[setting]), by_task[t]) for t in TASK_FAMILIES}
    if option_order == "slotted":  # the class schedule above is still drawn, so letters and levels stay the same
        targets = {t: _home_classes(plan, _CLASSES[t], letters[t]) for t in TASK_FAMILIES}
    seen: Counter[str] = Counter()
    records = []
    for index, task in enumerate(tasks):
        k = seen[task]
        seen[task] += 1
        records.append(_make_record(split, index, task, targets[task][k], letters[task][k], levels[task][k],
                                    seed, root, cot_style, option_order))
    return records


def _count_table(title: str, splits: dict[str, list[MedADRecord]], key: Any) -> list[str]:
    counts = {name: Counter(key(r) for r in recs) for name, recs in splits.items()}
    values = sorted(set().union(*counts.values()))
    lines = [f"| {title} | " + " | ".join(splits) + " |", "|---|" + "---:|" * len(splits)]
    lines += [f"| {v} | " + " | ".join(str(counts[s][v]) for s in splits) + " |" for v in values]
    return lines + [""]


LEARNABILITY = """\
Measured with `OMP_NUM_THREADS=1 python eval/synth_baselines.py --n-train 3000 --n-test 1000 --seed 0`
(scikit-learn logistic regressions; test-set MCQ accuracy over the four options; chance = 25%). Pixels:
16x16 thumbnails for modality/anatomy; for the lesion tasks, the residual against the median of the 15
nearest training images (grid max-pooled, or a crop around its peak). Text: TF-IDF of question + lettered
options -> letter, and the option most often right in training.

| task | pixels | pixels easy / medium / hard | text TF-IDF | text prior |
|---|---:|---|---:|---:|
| anatomy_identification | 100% | 100% / 100% / 100% | 24% | 26% |
| modality_classification | 100% | 100% / 100% / 100% | 24% | 24% |
| anomaly_detection | 66% | 87% / 78% / 31% | 23% | 25% |
| pathology_characterization | 54% | 70% / 64% / 28% | 28% | 24% |
| lesion_localization | 87% | 100% / 94% / 67% | 28% | 25% |
| all (1000 questions) | 81% | | 26% | 25% |
"""
"""How learnability was checked, with the figures eval/synth_baselines.py printed (seed 0, 3000/1000)."""


def write_card(path: Path, splits: dict[str, list[MedADRecord]], seed: int, cot_style: str = "full",
               option_order: str = "shuffled", setting: str = "realistic") -> None:
    """The dataset card: what the data is, how it was made, and its counts per task/modality/letter/difficulty."""
    flags = "".join(f" --{flag} {value}" for flag, value, default in
                    (("setting", setting, "realistic"), ("cot-style", cot_style, "full"),
                     ("option-order", option_order, "shuffled")) if value != default)
    order = {
        "fixed": "Every question lists all of its family's classes, always in class order\n  (`--option-order fixed`), "
                 "so a letter names one class; correct classes and difficulties follow balanced shuffled schedules.",
        "shuffled": "Correct classes, answer letters and difficulties follow\n  balanced shuffled schedules; "
                    "distractors are uniform over the other classes.",
        "canonical": "Correct classes and difficulties follow balanced shuffled\n  schedules; distractors are uniform "
                     "over the other classes; options are listed in class order (`--option-order canonical`),\n  so "
                     "the answer letter follows from the class and the distractors shown.",
        "slotted": "Answer letters and difficulties follow balanced shuffled\n  schedules; every class is listed at "
                   "its home letter (its place in the class order, modulo 4; `--option-order slotted`)\n  and each "
                   "other letter shows a class drawn uniformly from those at home there, so the answer letter\n  "
                   "follows from the class alone; the correct class is drawn, balanced, among those at home on the "
                   "record's letter\n  (classes that share a letter are rarer than those that have one alone).",
    }[option_order]
    lines = [
        "# MedAD-Synth",
        "",
        "Procedurally generated medical-image VQA in the MedAD record schema (medgrpo), for offline tests, demos",
        "and learning curves. Not real patient data; no finding here has clinical meaning.",
        "",
        f"Generated by `medgrpo synth --seed {seed} --n-train {len(splits['train'])} "
        f"--n-test {len(splits['test'])}{flags}`; the same seed gives byte-identical files.",
        "",
        "- Files: `train.jsonl` and `test.jsonl` (one MedAD record per line; check with `medgrpo data validate`),",
        "  `images/<split>_<index>.png` (one image per record; grey modalities as 8-bit L, colour as RGB).",
        f"- Images: {SIZE}x{SIZE} PNG, {len(MODALITIES)} modalities ({', '.join(MODALITIES)}), "
        f"{len(ANATOMIES)} anatomies ({', '.join(ANATOMIES)}).",
        f"- Lesions: {', '.join(LESION_KINDS)}; each type has its own look (brighter/darker, well-defined/"
        "irregular, round/lobulated/ring/punctate) and the words in `evidence.appearance` describe it.",
        "- Locations are image quadrants; left and right are the image's as displayed. `bbox` and the `<box>` in",
        "  `cot` are tight boxes around the drawn lesion in original pixels.",
        "- Tasks: the five MedAD-38K families. Anomaly detection asks presence and side (no",
        f"  abnormality / left / right / both sides). {order}",
        *({"visible": [
            "- Lesions (`--setting visible`): large (radius 12-14 px) and contrasted (0.55), each kind drawn with its",
            "  own shape and texture, at one place per quadrant (26 px from both midlines, up to 3 px of jitter).",
            "  The difficulty at the end of each id is `visible`, or `normal` (no lesion).",
        ], "realistic": [
            "- Difficulty is the last part of each id: easy (radius 11-14 px, contrast 0.40), medium (7-10 px,",
            "  0.26), hard (4-6 px, 0.16), normal (no lesion), lesions anywhere in their quadrant.",
        ]}[setting]),
        "  `medgrpo.data.synth.difficulty_of(id)` reads it.",
        "",
        "## Learnability",
        "",
        LEARNABILITY,
        "## Counts",
        "",
    ]
    lines += _count_table("task", splits, lambda r: r.task)
    lines += _count_table("modality", splits, lambda r: r.modality)
    lines += _count_table("anatomy", splits, lambda r: r.anatomy)
    lines += _count_table("answer letter", splits, lambda r: r.answer)
    lines += _count_table("difficulty", splits, lambda r: difficulty_of(r.id))
    lines += _count_table("abnormal", splits, lambda r: str(bool(r.evidence and r.evidence["abnormal"])).lower())
    path.write_text("\n".join(lines), encoding="utf-8")


def generate_synth(out_dir: str | Path, n_train: int = 2000, n_test: int = 500, seed: int = 0,
                   overwrite: bool = False, cot_style: str = "full", option_order: str = "shuffled",
                   setting: str = "realistic") -> Path:
    """Generate MedAD-Synth into ``out_dir`` and return it.

    The folder is built under a temporary name next to ``out_dir``, validated with
    :func:`~medgrpo.data.record.load_records` (every row, images included) and renamed into place, so a
    failure never leaves a half-written dataset.

    Args:
        out_dir: the dataset folder to create.
        n_train, n_test: number of records (one image each) per split.
        seed: everything, images included, is a function of the seed.
        overwrite: replace an existing non-empty ``out_dir`` (otherwise that is an error).
        cot_style: ``"full"`` gold reasoning, ``"brief"`` (same claims, about a third of the tokens: the CPU
            demo uses it so that a tiny model's completions fit a small generation budget), or ``"walk"`` (see
            :data:`COT_STYLES`).
        option_order: ``"shuffled"`` (the benchmark), ``"canonical"`` (options in class order) or ``"slotted"``
            (each class at its home letter); see :data:`OPTION_ORDERS`.

    Raises:
        SynthError: bad counts, or ``out_dir`` exists and is not empty without ``overwrite``.
    """
    out = Path(out_dir)
    if cot_style not in COT_STYLES:
        raise SynthError(f"--cot-style must be one of {', '.join(COT_STYLES)}, not '{cot_style}'")
    if option_order not in OPTION_ORDERS:
        raise SynthError(f"--option-order must be one of {OPTION_ORDERS}, not '{option_order}'")
    if setting not in SETTINGS:
        raise SynthError(f"--setting must be one of {', '.join(SETTINGS)}, not '{setting}'")
    if n_train < 1 or n_test < 1:
        raise SynthError(f"--n-train and --n-test must be >= 1 (got {n_train} and {n_test})")
    if out.exists() and not out.is_dir():
        raise SynthError(f"{out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise SynthError(f"{out}: folder exists and is not empty (pass --overwrite to replace it)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        (tmp / "images").mkdir()
        splits = {name: synth_split(name, n, seed, tmp, cot_style, option_order, setting)
                  for name, n in (("train", n_train), ("test", n_test))}
        for name, records in splits.items():
            write_records(records, tmp / f"{name}.jsonl")
        write_card(tmp / "README.md", splits, seed, cot_style, option_order, setting)
        load_records(tmp)  # every generated row must pass the loader's validation
        os.chmod(tmp, 0o755)
        if out.exists():
            old = out.with_name(f".{out.name}.old-{os.getpid()}")
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old)
        else:
            tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def main(argv: list[str] | None = None) -> int:
    """``medgrpo synth``: write the MedAD-Synth dataset folder."""
    parser = argparse.ArgumentParser(prog="medgrpo synth", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="dataset folder to create")
    parser.add_argument("--n-train", type=int, default=2000, help="training records (default 2000)")
    parser.add_argument("--n-test", type=int, default=500, help="test records (default 500)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing non-empty --out folder")
    parser.add_argument("--cot-style", choices=list(COT_STYLES), default="full",
                        help="gold reasoning: full, brief (same claims, fewer tokens; the CPU demo's choice), or "
                             "walk (brief, then the options judged in list order up to the answer)")
    parser.add_argument("--setting", choices=list(SETTINGS), default="realistic",
                        help="lesions: visible (large, contrasted, one place per quadrant) or realistic")
    parser.add_argument("--option-order", choices=list(OPTION_ORDERS), default="shuffled",
                        help="shuffled (balanced answer letters; the benchmark), canonical (options in class "
                             "order) or slotted (each class at its home letter, so the letter follows from the "
                             "class alone; the CPU demo's choice)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        out = generate_synth(args.out, args.n_train, args.n_test, args.seed, overwrite=args.overwrite,
                             cot_style=args.cot_style, option_order=args.option_order, setting=args.setting)
    except (SynthError, RecordError, OSError) as exc:
        print(f"medgrpo: {exc}", file=sys.stderr)
        return 2
    n = args.n_train + args.n_test
    elapsed = time.perf_counter() - start
    print(f"wrote {n} records to {out} in {elapsed:.1f} s ({n / elapsed:.0f} records/s)")
    return 0
