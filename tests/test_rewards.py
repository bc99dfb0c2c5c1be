"""Verifiers on hand-written completions: the expected score per criterion, for every task family."""

import math

import pytest

from medgrpo.data.boxes import BoxFrame
from medgrpo.data.builders import grpo_columns
from medgrpo.data.record import MedADRecord
from medgrpo.prompts import build_target
from medgrpo.rewards import (
    METRICS,
    REWARDS,
    RewardSettings,
    RewardSettingsError,
    build_reward_funcs,
    choice_of,
    parse_completion,
    records_from_columns,
    total_reward,
    verify,
)

DETECTION = [
    "no abnormality",
    "abnormality on the left side",
    "abnormality on the right side",
    "abnormalities on both sides",
]
QUADRANTS = ["left upper quadrant", "right upper quadrant", "left lower quadrant", "right lower quadrant"]
LESION = {
    "abnormal": True,
    "finding": "mass",
    "location": "left upper quadrant",
    "laterality": "left",
    "appearance": ["hyperintense", "irregular", "lobulated"],
    "modality": "MRI",
    "anatomy": "brain",
    "size": "large",
}
NORMAL = {
    "abnormal": False,
    "finding": None,
    "location": None,
    "laterality": None,
    "appearance": [],
    "modality": "CT",
    "anatomy": "chest",
    "size": None,
}
BOX = [20.0, 20.0, 40.0, 40.0]


def rec(task, options, answer, evidence=LESION, bbox=(BOX,), question="Which option is correct?", **kw):
    ev = evidence or {}
    return MedADRecord(
        id=kw.pop("id", task),
        images=["images/x.png"],
        question=question,
        options=options,
        answer=answer,
        task=task,
        modality=ev.get("modality"),
        anatomy=ev.get("anatomy"),
        evidence=evidence,
        bbox=[list(b) for b in bbox] if bbox else None,
        **kw,
    )


def done(think, answer):
    return f"<think>{think}</think>\n<answer>{answer}</answer>"


MRI_BRAIN = "This is an MRI scan of the brain."
FINDING = (
    "There is a large irregular hyperintense mass in the left upper quadrant <box>[20, 20, 40, 40]</box>."
)

ANOMALY = rec(
    "anomaly_detection",
    DETECTION,
    "B",
    question="Is there an abnormality in this MRI scan of the brain, and if so, on which side?",
)
ANOMALY_NORMAL = rec(
    "anomaly_detection",
    DETECTION,
    "A",
    evidence=NORMAL,
    bbox=None,
    question="Is there an abnormality in this CT scan of the chest?",
)
MODALITY = rec("modality_classification", ["CT", "MRI", "X-ray", "ultrasound"], "B")
ANATOMY = rec("anatomy_identification", ["knee", "chest", "brain", "skin"], "C")
PATHOLOGY = rec("pathology_characterization", ["nodule", "cyst", "calcification", "mass"], "D")
LOCATION = rec("lesion_localization", QUADRANTS, "A")
OPEN = rec("other", [], "left upper lobe", evidence=None, bbox=None, question="Where is the lesion?")

HONEST = {
    "anomaly": (
        ANOMALY,
        done(
            f"{MRI_BRAIN} {FINDING} The abnormality is therefore on the left side only, so "
            "the answer is B (abnormality on the left side).",
            "B",
        ),
    ),
    "anomaly_normal": (
        ANOMALY_NORMAL,
        done(
            "This is a CT scan of the chest. No focal lesion is seen; the chest "
            "looks normal. There is therefore no abnormality, so the answer is A "
            "(no abnormality).",
            "A",
        ),
    ),
    "modality": (
        MODALITY,
        done(f"{MRI_BRAIN} {FINDING} The imaging modality is therefore MRI, so the answer is B (MRI).", "B"),
    ),
    "anatomy": (
        ANATOMY,
        done(
            f"{MRI_BRAIN} {FINDING} The region shown is therefore the brain, so the answer is C (brain).", "C"
        ),
    ),
    "pathology": (
        PATHOLOGY,
        done(
            f"{MRI_BRAIN} {FINDING} It is not a cyst. These features are typical of a "
            "mass, so the answer is D (mass).",
            "D",
        ),
    ),
    "location": (
        LOCATION,
        done(
            f"{MRI_BRAIN} {FINDING} The lesion therefore lies in the left upper quadrant, "
            "so the answer is A (left upper quadrant).",
            "A",
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_completion_scores_full_marks(name):
    record, completion = HONEST[name]
    s = verify(completion, record)
    assert (s["format"], s["accuracy"], s["consistency"]) == (1.0, 1.0, 1.0)
    for key in (
        "evidence/question_relevance",
        "evidence/answer_support",
        "evidence/no_hallucination",
        "evidence/no_contradiction",
    ):
        assert s[key] == 1.0, key
    assert s["evidence/visual_grounding"] == 1.0
    assert s["grounding"] == (None if record.bbox is None else 1.0)
    assert s["reasoning_accuracy"] == 1.0


# ---- format ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "completion, expected",
    [
        (done("Reasoning.", "B"), 1.0),
        (done("Reasoning with a box <box>[1, 2, 3, 4]</box>.", "B"), 1.0),
        ("  \n" + done("Reasoning.", "B") + "\n ", 1.0),
        ([{"role": "assistant", "content": done("Reasoning.", "B")}], 1.0),
        ([{"role": "assistant", "content": [{"type": "text", "text": done("Reasoning.", "B")}]}], 1.0),
        ("Sure! " + done("Reasoning.", "B"), 0.0),
        (done("Reasoning.", "B") + " Done.", 0.0),
        (done("", "B"), 0.0),
        (done("   ", "B"), 0.0),
        (done("Reasoning.", "B") + "<answer>B</answer>", 0.0),
        (done("Reasoning.", "E"), 0.0),
        (done("Reasoning.", "b"), 0.0),
        (done("Reasoning.", "AB"), 0.0),
        (done("Reasoning.", "B. MRI"), 0.0),
        ("<THINK>Reasoning.</THINK><ANSWER>B</ANSWER>", 0.0),
        ("<think>Reasoning.</Think><answer>B</answer>", 0.0),
        (done("Reasoning <Box>[1, 2, 3, 4]</Box>.", "B"), 0.0),
        (done("Reasoning <box>[nan, 2, 3, 4]</box>.", "B"), 0.0),
        (done("Reasoning <box>[1, 2, 3]</box>.", "B"), 0.0),
        (done("Reasoning <think>nested</think>.", "B"), 0.0),
        ("<answer>B</answer><think>Reasoning.</think>", 0.0),
        (None, 0.0),
        ([], 0.0),
    ],
)
def test_format(completion, expected):
    assert verify(completion, MODALITY)["format"] == expected


def test_format_open_ended_takes_short_free_text():
    assert verify(done("Reasoning.", "left upper lobe"), OPEN)["format"] == 1.0
    assert verify(done("Reasoning.", " ".join(["word"] * 30)), OPEN)["format"] == 0.0


# ---- accuracy ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer, expected",
    [
        ("B", 1.0),
        ("(B)", 1.0),
        ("B.", 1.0),
        ("B: MRI", 1.0),
        ("MRI", 1.0),
        ("mri", 1.0),
        ("A", 0.0),
        ("B: CT", 0.0),
        ("AB", 0.0),
        ("A, B", 0.0),
        ("E", 0.0),
        ("", 0.0),
        ("The answer", 0.0),
    ],
)
def test_accuracy_multiple_choice(answer, expected):
    assert verify(done("Reasoning.", answer), MODALITY)["accuracy"] == expected


def test_accuracy_counts_only_a_single_answer_block():
    assert verify(done("x", "B") + "<answer>B</answer>", MODALITY)["accuracy"] == 0.0
    assert verify("<think>x</think><answer>B", MODALITY)["accuracy"] == 0.0


def test_choice_of_respects_the_number_of_options():
    assert choice_of("C", ["a", "b", "c"]) == "C"
    assert choice_of("D", ["a", "b", "c"]) is None
    assert choice_of("C", ["a", "b", "c"], strict=True) == "C"
    assert choice_of("(C)", ["a", "b", "c"], strict=True) is None


@pytest.mark.parametrize(
    "answer, expected",
    [
        ("left upper lobe", 1.0),
        ("The left upper lobe.", 1.0),
        ("upper lobe", 0.8),
        ("right lower lung", 0.0),
    ],
)
def test_accuracy_open_ended(answer, expected):
    assert verify(done("Reasoning.", answer), OPEN)["accuracy"] == pytest.approx(expected)


def test_accuracy_open_ended_yes_no_needs_the_exact_word():
    record = rec("other", [], "yes", evidence=None, bbox=None, question="Is there a lesion?")
    assert verify(done("x", "Yes."), record)["accuracy"] == 1.0
    assert verify(done("x", "yes no"), record)["accuracy"] == 0.0


# ---- consistency -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "record, think, answer, expected",
    [
        # anomaly detection: polarity and side
        (ANOMALY, f"{FINDING} The abnormality is therefore on the left side only.", "B", 1.0),
        (ANOMALY, f"{FINDING} The abnormality is therefore on the left side only.", "C", 0.0),
        (ANOMALY, f"{FINDING} There is therefore no abnormality.", "B", 0.0),
        (
            ANOMALY,
            "No abnormality is seen. Yet there is a mass in the left upper quadrant. So the answer is B.",
            "B",
            0.0,
        ),
        (ANOMALY_NORMAL, "No focal lesion is seen; the chest looks normal.", "A", 1.0),
        (ANOMALY_NORMAL, "No focal lesion is seen; the chest looks normal.", "B", 0.0),
        # modality: letter and text
        (MODALITY, "This is an MRI scan. Therefore the answer is B.", "B", 1.0),
        (MODALITY, "This is an MRI scan. Therefore the answer is B.", "A", 0.0),
        (MODALITY, "It is not CT but MRI, so the answer is (B).", "B", 1.0),
        (MODALITY, "It could be CT or MRI, so the answer is A or B.", "B", 0.5),
        # a letter whose option is not the class the conclusion names: a class the options do not offer
        (rec("modality_classification", ["X-ray", "dermoscopy", "MRI", "ultrasound"], "C"),
         "CT of the brain. The imaging modality is therefore CT, so the correct option is B (CT).", "B", 0.0),
        (rec("modality_classification", ["X-ray", "dermoscopy", "MRI", "ultrasound"], "C"),
         "CT of the brain. The imaging modality is therefore MRI, so the correct option is C (MRI).", "C", 1.0),
        (MODALITY, "It is one of A, B, C or D: (A) CT, (B) MRI, (C) X-ray, (D) ultrasound.", "B", 0.25),
        # anatomy: the conclusion, not an earlier mention, decides
        (ANATOMY, "The knee is not shown. The region is therefore the brain.", "C", 1.0),
        (ANATOMY, "The region is therefore the knee.", "C", 0.0),
        # pathology: "nodule" and "mass" share a lexicon concept, so their own words decide
        (PATHOLOGY, "An irregular lobulated lesion, not a cyst, typical of a mass.", "D", 1.0),
        (PATHOLOGY, "A round well-defined lesion typical of a nodule.", "D", 0.0),
        # localisation: by text through the lexicon
        (LOCATION, "The lesion lies in the upper left quadrant.", "A", 1.0),
        (LOCATION, "The lesion lies in the right lower quadrant.", "A", 0.0),
        # no conclusion, no reasoning
        (MODALITY, "The image is grey.", "B", 0.5),
        (MODALITY, "", "B", 0.0),
    ],
)
def test_consistency(record, think, answer, expected):
    assert verify(done(think, answer), record)["consistency"] == pytest.approx(expected)


def test_consistency_without_a_valid_answer_is_zero():
    assert verify(done("Therefore the answer is B.", "Z"), MODALITY)["consistency"] == 0.0
    assert verify("<think>Therefore the answer is B.</think>", MODALITY)["consistency"] == 0.0


@pytest.mark.parametrize(
    "think, expected",
    [
        ("The lesion is in the left upper lobe.", 1.0),
        ("The lesion is not in the left upper lobe.", 0.0),
        ("The image is grey.", 0.5),
    ],
)
def test_consistency_open_ended(think, expected):
    assert verify(done(think, "left upper lobe"), OPEN)["consistency"] == expected


@pytest.mark.parametrize(
    "record, think, answer, expected",
    [
        # the reasoning points to the gold option: right whatever the answer block says
        (MODALITY, "This is an MRI scan. Therefore the answer is B.", "B", 1.0),
        (MODALITY, "This is an MRI scan. Therefore the answer is B.", "A", 1.0),
        # the right option's words with a wrong letter: the reasoning is right, the letter is not
        (MODALITY, "The modality is therefore MRI, so the answer is C (MRI).", "C", 1.0),
        # consistent with a wrong answer is still a wrong reasoning, whatever letter it writes
        (MODALITY, "This is a CT scan. Therefore the answer is A.", "A", 0.0),
        (MODALITY, "The modality is therefore CT, so the answer is B (CT).", "B", 0.0),
        # by letter alone, when it names no option's content
        (MODALITY, "The image is grey. Therefore the answer is B.", "B", 1.0),
        (MODALITY, "It could be CT or MRI, so the answer is A or B.", "B", 0.0),  # not the gold alone
        (MODALITY, "It is not CT. The modality is MRI.", "B", 1.0),  # a denied option is not pointed to
        (MODALITY, "The image is grey.", "B", 0.0),
        (MODALITY, "", "B", 0.0),
        (ANOMALY_NORMAL, "No focal lesion is seen; the chest looks normal.", "B", 1.0),
        (ANOMALY_NORMAL, f"{FINDING} The abnormality is therefore on the left side only.", "A", 0.0),
        (LOCATION, "The lesion lies in the upper left quadrant.", "C", 1.0),
        (OPEN, "The lesion is in the left upper lobe.", "right lower lobe", 1.0),
        (OPEN, "The lesion is not in the left upper lobe.", "left upper lobe", 0.0),
    ],
)
def test_reasoning_accuracy_asks_whether_the_reasoning_points_to_the_gold_answer(record, think, answer, expected):
    s = verify(done(think, answer), record)
    assert s["reasoning_accuracy"] == pytest.approx(expected)
    gated = verify(done(think, answer), record, settings=RewardSettings(gate_on_correct=True))
    assert gated["reasoning_accuracy"] == s["reasoning_accuracy"]  # a metric: never shaped


@pytest.mark.parametrize("answer", ["Q", "", "AB"])
def test_reasoning_accuracy_is_none_when_the_records_answer_is_not_an_option(answer):
    bad = rec("modality_classification", ["CT", "MRI"], answer)
    assert verify(done("Therefore the answer is B.", "B"), bad)["reasoning_accuracy"] is None


# ---- evidence criteria -------------------------------------------------------------------------------------


def test_no_hallucination_flags_a_lesion_on_a_normal_image_and_the_wrong_side():
    lesion_on_normal = done(
        "This is a CT scan of the chest. There is a mass in the left upper lobe. The answer is A.", "A"
    )
    assert verify(lesion_on_normal, ANOMALY_NORMAL)["evidence/no_hallucination"] == 0.5  # mass + polarity
    wrong_side = done(
        f"{MRI_BRAIN} There is an irregular hyperintense mass in the right upper quadrant. The answer is A.",
        "A",
    )
    right_side = wrong_side.replace("right upper", "left upper")
    assert verify(wrong_side, LOCATION)["evidence/no_hallucination"] < 1.0
    assert verify(right_side, LOCATION)["evidence/no_hallucination"] == 1.0
    wrong_modality = done("This is a CT scan of the brain. The answer is B.", "B")
    assert verify(wrong_modality, MODALITY)["evidence/no_hallucination"] == 0.5


def test_no_hallucination_counts_boxes_that_miss_the_lesion():
    hit = done(f"{MRI_BRAIN} A mass <box>[20, 20, 40, 40]</box>. The answer is D.", "D")
    miss = done(
        f"{MRI_BRAIN} A mass <box>[20, 20, 40, 40]</box> and <box>[90, 90, 120, 120]</box>. The answer is D.",
        "D",
    )
    assert (
        verify(hit, PATHOLOGY)["evidence/no_hallucination"]
        > verify(miss, PATHOLOGY)["evidence/no_hallucination"]
    )


def test_no_contradiction():
    both_sides = done(
        f"{MRI_BRAIN} There is a mass in the left and right upper quadrant. The answer is A.", "A"
    )
    assert verify(both_sides, LOCATION)["evidence/no_contradiction"] == 0.5
    other_option = done(f"{MRI_BRAIN} {FINDING} So the answer is C (calcification).", "D")
    assert verify(other_option, PATHOLOGY)["evidence/no_contradiction"] == 0.0
    two_modalities = done("This is a CT scan, it is an MRI scan. The answer is B.", "B")
    assert verify(two_modalities, MODALITY)["evidence/no_contradiction"] == 0.5


def test_visual_grounding_checks_modality_anatomy_location_and_box():
    full = verify(HONEST["location"][1], LOCATION)["evidence/visual_grounding"]
    no_box = verify(HONEST["location"][1].replace("<box>[20, 20, 40, 40]</box>", ""), LOCATION)
    nothing = verify(done("Therefore the answer is A.", "A"), LOCATION)
    assert full == 1.0
    assert no_box["evidence/visual_grounding"] == pytest.approx(0.75)
    assert nothing["evidence/visual_grounding"] == 0.0


def test_question_relevance_penalises_copying_the_question():
    record = rec(
        "lesion_localization",
        QUADRANTS,
        "A",
        question="Where is the lesion located in this MRI scan "
        "of the brain? Left and right refer to the image as displayed.",
    )
    copied = verify(done(record.question, "A"), record)["evidence/question_relevance"]
    honest = verify(HONEST["location"][1], record)["evidence/question_relevance"]
    assert copied == 0.0 and honest == 1.0


def test_answer_support_needs_content_and_an_observation():
    bare = verify(done("The answer is D.", "D"), PATHOLOGY)["evidence/answer_support"]
    content_only = verify(done("The answer is D (mass).", "D"), PATHOLOGY)["evidence/answer_support"]
    assert (bare, content_only) == (0.0, 0.5)
    assert verify(HONEST["pathology"][1], PATHOLOGY)["evidence/answer_support"] == 1.0


def test_evidence_weights_select_criteria():
    completion = done("This is a CT scan of the brain. The answer is B.", "B")
    only_hallucination = RewardSettings(evidence_weights=(0, 0, 0, 1, 0))
    s = verify(completion, MODALITY, settings=only_hallucination)
    assert s["evidence"] == s["evidence/no_hallucination"] == 0.5
    s = verify(completion, MODALITY)
    assert s["evidence"] == pytest.approx(
        sum(
            s[f"evidence/{c}"]
            for c in (
                "visual_grounding",
                "question_relevance",
                "answer_support",
                "no_hallucination",
                "no_contradiction",
            )
        )
        / 5
    )


# ---- grounding ---------------------------------------------------------------------------------------------

ABS = BoxFrame("abs", 200, 100, 100, 50)  # the model sees the image at half size
REL = BoxFrame("rel1000", 200, 100, 100, 50)


@pytest.mark.parametrize(
    "frame, cited, expected",
    [
        (ABS, "<box>[10, 10, 20, 20]</box>", 1.0),  # model pixels x2 = original [20, 20, 40, 40]
        (REL, "<box>[100, 200, 200, 400]</box>", 1.0),  # 0-1000 grid of a 200x100 image
        (None, "<box>[20, 20, 40, 40]</box>", 1.0),  # no frame: original pixels
        (ABS, "<box>[20, 20, 40, 40]</box>", 0.0),  # read as original pixels it would be a hit: it is not
        (ABS, "<box>[10, 10, 20, 20]</box> <box>[0, 0, 100, 50]</box>", 1.0),
        (ABS, "<box>[0, 0, 100, 50]</box> <box>[10, 10, 20, 20]</box>", pytest.approx(400 / 20000)),
        (ABS, "<box>[-50, -50, 20, 20]</box>", pytest.approx(400 / 1600)),  # clamped to the image
        (ABS, "<box>[20, 20, 10, 10]</box>", 1.0),  # corners in any order
        (ABS, "no box", 0.0),
    ],
)
def test_grounding_first_box_in_original_pixels(frame, cited, expected):
    record = rec("lesion_localization", QUADRANTS, "A")
    assert verify(done(f"A mass {cited}.", "A"), record, frame)["grounding"] == expected


def test_grounding_is_none_without_gold_box_and_giou_rewards_near_misses():
    assert verify(done("<box>[1, 2, 3, 4]</box>", "A"), ANOMALY_NORMAL)["grounding"] is None
    near = done("A mass <box>[41, 20, 60, 40]</box>.", "A")
    far = done("A mass <box>[150, 80, 160, 90]</box>.", "A")
    giou = RewardSettings(grounding_metric="giou")
    assert verify(near, LOCATION)["grounding"] == verify(far, LOCATION)["grounding"] == 0.0
    assert (
        verify(near, LOCATION, settings=giou)["grounding"]
        > verify(far, LOCATION, settings=giou)["grounding"]
        > 0
    )


# ---- shaping options ---------------------------------------------------------------------------------------


def test_gate_on_correct_gives_consistent_but_wrong_nothing_extra():
    wrong = done(
        f"{MRI_BRAIN} {FINDING} These features are typical of a cyst, so the answer is B (cyst).", "B"
    )
    plain, gated = (
        verify(wrong, PATHOLOGY),
        verify(wrong, PATHOLOGY, settings=RewardSettings(gate_on_correct=True)),
    )
    assert plain["consistency"] == 1.0 and plain["evidence"] > 0
    assert gated["consistency"] == 0.0 and gated["evidence"] == 0.0
    assert gated["evidence/no_contradiction"] == plain["evidence/no_contradiction"]  # criteria stay raw


def test_zero_on_format_failure():
    settings = RewardSettings(zero_on_format_failure=True)
    sloppy = "Sure. " + HONEST["location"][1]
    s = verify(sloppy, LOCATION, settings=settings)
    assert s["format"] == s["accuracy"] == s["consistency"] == s["evidence"] == s["grounding"] == 0.0
    assert verify(sloppy, OPEN, settings=settings)["grounding"] is None
    assert verify(HONEST["location"][1], LOCATION, settings=settings)["accuracy"] == 1.0


def test_settings_are_validated():
    with pytest.raises(RewardSettingsError, match="evidence_weights"):
        RewardSettings(evidence_weights=(1.0, 2.0))
    with pytest.raises(RewardSettingsError, match="evidence_weights"):
        RewardSettings(evidence_weights=(0, 0, 0, 0, math.nan))
    with pytest.raises(RewardSettingsError, match="evidence_backend"):
        RewardSettings(evidence_backend="llm")
    with pytest.raises(ValueError, match="unknown reward 'fmt'"):
        build_reward_funcs(["format", "fmt"])


# ---- TRL reward functions ----------------------------------------------------------------------------------


def columns_of(records, frames):
    """The GRPO dataset columns the builder writes for these records (what TRL hands the reward functions)."""
    rows = [grpo_columns(r, f) for r, f in zip(records, frames, strict=True)]
    return {k: [row[k] for row in rows] for k in rows[0]}


def test_reward_functions_match_verify_and_log_the_five_criteria():
    records = [r for r, _ in HONEST.values()] + [OPEN]
    frames = [ABS] * len(records)
    completions = [[{"role": "assistant", "content": c}] for _, c in HONEST.values()] + ["garbage"]
    completions[0] = [{"role": "assistant", "content": build_target(records[0], ABS)}]
    cols = columns_of(records, frames)
    logged = {}
    funcs = build_reward_funcs(["format", "accuracy", "consistency", "evidence", "grounding"])
    assert [f.__name__ for f in funcs] == ["format", "accuracy", "consistency", "evidence", "grounding"]
    out = {
        f.__name__: f(
            prompts=[[]] * len(records),
            completions=completions,
            completion_ids=[[1]] * len(records),
            trainer_state=None,
            log_extra=lambda *a: None,
            log_metric=lambda k, v: logged.__setitem__(k, v),
            **cols,
        )
        for f in funcs
    }
    expected = [verify(c, r, f) for c, r, f in zip(completions, records, frames, strict=True)]
    for name, values in out.items():
        assert values == [e[name] for e in expected], name
    assert out["grounding"][-1] is None
    for key in [k for k in expected[0] if k.startswith("evidence/")] + ["reasoning_accuracy"]:
        assert logged[key] == pytest.approx(sum(e[key] for e in expected) / len(expected))


def test_a_reward_paid_on_some_task_families_is_none_on_the_others():
    records = [r for r, _ in HONEST.values()]
    assert len({r.task for r in records}) > 1
    kept = records[0].task
    completions = [build_target(r, ABS) for r in records]
    cols = columns_of(records, [ABS] * len(records))
    accuracy, consistency = build_reward_funcs(["accuracy", "consistency"], tasks={"accuracy": [kept]})
    assert consistency.tasks is None
    full = REWARDS["accuracy"](prompts=None, completions=completions, **cols)
    masked = accuracy(prompts=None, completions=completions, **cols)
    assert masked == [v if r.task == kept else None for v, r in zip(full, records, strict=True)]
    assert any(v is None for v in masked) and any(v is not None for v in masked)
    assert consistency(prompts=None, completions=completions, **cols) == REWARDS["consistency"](
        prompts=None, completions=completions, **cols)


def test_records_from_columns_round_trip_and_bad_columns_never_raise():
    records = [r for r, _ in HONEST.values()]
    rows = records_from_columns(columns_of(records, [REL] * len(records)))
    assert [(r.id, r.options, r.answer, r.evidence, r.bbox) for r, _ in rows] == [
        (r.id, r.options, r.answer, r.evidence, r.bbox) for r in records
    ]
    assert all(f == REL for _, f in rows)
    bad = {
        "id": [1, None],
        "options": ["A", [None]],
        "evidence": ["{not json", 3],
        "bbox": ["[[1, 2]]", "x"],
        "image_size": [[0, 0], "big"],
        "box_format": ["abs", None],
    }
    rows = records_from_columns(bad)
    assert len(rows) == 2 and all(f is None for _, f in rows) and rows[0][0].evidence is None
    values = REWARDS["evidence"](prompts=None, completions=["<think>x</think><answer>A</answer>"] * 3, **bad)
    assert len(values) == 3 and all(0.0 <= v <= 1.0 for v in values)


def test_parse_completion_reads_think_answer_and_boxes():
    p = parse_completion(done("See <box>[1, 2.5, 3, 4]</box> and <box>[1, inf, 3, 4]</box>.", " C "))
    assert p.think.startswith("See") and p.answer == "C" and p.boxes == ((1.0, 2.5, 3.0, 4.0),)
    assert p.n_bad_boxes == 1 and not p.strict


def test_observations_pointing_to_another_option_lose_support_and_count_as_a_contradiction():
    coherent_but_wrong = done(f"{MRI_BRAIN} {FINDING} So the answer is B (right upper quadrant).", "B")
    s = verify(coherent_but_wrong, LOCATION)
    assert s["consistency"] == 1.0  # the conclusion matches the answer ...
    assert (
        s["evidence/answer_support"] == 0.0
    )  # ... but the finding it rests on is in the left upper quadrant
    assert s["evidence/no_contradiction"] == 0.5


def test_left_and_right_together_commit_to_both_sides():
    record = rec(
        "anomaly_detection",
        DETECTION,
        "D",
        question="Is there an abnormality, and on which side?",
        evidence={**LESION, "laterality": "bilateral", "location": "left upper and right lower quadrant"},
    )
    think = (
        f"{MRI_BRAIN} There are two masses, one in the left upper quadrant and one in the right lower "
        "quadrant. There are therefore abnormalities on both sides, so the answer is D."
    )
    s = verify(done(think, "D"), record)
    assert s["consistency"] == s["evidence/answer_support"] == s["evidence/no_contradiction"] == 1.0
    assert (
        verify(done(think.replace("so the answer is D", "so the answer is B"), "B"), record)["consistency"]
        == 0.0
    )


def test_silence_earns_no_evidence():
    """An empty or blank rationale gets no credit for 'no hallucination' / 'no contradiction'."""
    record = MedADRecord(id="s", images=["a.png"], question="Which modality is this?",
                         options=["CT", "MRI", "X-ray", "ultrasound"], answer="A", task="modality_classification",
                         modality="CT", anatomy="brain", evidence={"abnormal": False})
    for completion in ("", "<think></think>\n<answer>A</answer>", "<think>   </think><answer>A</answer>"):
        scores = verify(completion, record)
        assert scores["evidence"] == 0.0
        assert scores["evidence/no_hallucination"] == scores["evidence/no_contradiction"] == 0.0


# ---- the fast paths score like the plain definitions --------------------------------------------------------


def test_reward_functions_share_a_batch_only_when_texts_columns_and_settings_match():
    """TRL calls the five functions one after the other on one batch; they share the scoring, but a function
    with other settings, other completions or other records never gets another batch's scores."""
    records = [r for r, _ in HONEST.values()]
    frames = [ABS] * len(records)
    texts = [c for _, c in HONEST.values()]
    texts[1] = done("No lesion; the answer is C.", "C")
    cols = columns_of(records, frames)
    shaped = RewardSettings(gate_on_correct=True, zero_on_format_failure=True, grounding_metric="giou")
    plain, gated = build_reward_funcs(list(REWARDS), METRICS), build_reward_funcs(list(REWARDS), shaped)
    for fa, fb in zip(plain, gated, strict=True):  # interleaved: each call follows one with other settings
        for func, settings in ((fa, None), (fb, shaped)):
            scores = [verify(t, r, f, settings) for t, r, f in zip(texts, records, frames, strict=True)]
            expected = [s[func.__name__] for s in scores]
            assert func(prompts=None, completions=texts, **cols) == expected, func.__name__
    swapped = columns_of(records[::-1], frames)  # the same texts against other records
    expected = [verify(t, r, ABS)["evidence"] for t, r in zip(texts, records[::-1], strict=True)]
    assert plain[3](prompts=None, completions=texts, **swapped) == expected
    other = texts[::-1]  # the same column objects with other completions
    expected = [verify(t, r, ABS)["evidence"] for t, r in zip(other, records[::-1], strict=True)]
    assert plain[3](prompts=None, completions=other, **swapped) == expected


def test_total_reward_of_an_unshaped_evaluation_is_what_training_pays():
    """A held-out split scored with the default settings, then shaped and weighted afterwards
    (:func:`total_reward`), gets the reward the training functions pay the same completions under a recipe's
    shaping and weights; a completion outside the grammar earns nothing but its format weight."""
    records = [r for r, _ in HONEST.values()]
    frames = [ABS] * len(records)
    texts = [c for _, c in HONEST.values()]
    texts[1] = done("No lesion; the answer is C.", "C")  # consistent with itself, wrong
    texts[2] = "the answer is A"  # no grammar
    cols = columns_of(records, frames)
    names, weights = list(REWARDS), [0.5, 1.0, 1.0, 0.5, 0.25]
    for settings in (RewardSettings(), METRICS):
        paid = [func(prompts=None, completions=texts, **cols) for func in build_reward_funcs(names, settings)]
        for i, (text, record) in enumerate(zip(texts, records, strict=True)):
            per_func = [p[i] for p in paid]
            expected = sum(w * v for w, v in zip(weights, per_func, strict=True) if v is not None)
            got = total_reward(verify(text, record, ABS), names, weights, settings)
            assert got == pytest.approx(expected), (i, settings)
    shaped = RewardSettings(zero_on_format_failure=True)
    assert total_reward(verify(texts[2], records[2], ABS), names, weights, shaped) == 0.0
    user = total_reward(verify(texts[0], records[0], ABS), [*names, "my_rewards:brevity"], [*weights, 3.0], shaped)
    assert user == total_reward(verify(texts[0], records[0], ABS), names, weights, shaped)  # its term left out
    assert total_reward(verify(texts[0], records[0], ABS), ["grounding"], None, shaped) is not None
    no_box = rec("anatomy_identification", ["chest", "knee", "brain", "abdomen"], "A", bbox=())
    assert total_reward(verify(done("A chest.", "A"), no_box), ["grounding"], None, shaped) is None


def test_sentence_splitting_matches_its_definition():
    """Sentences end at whitespace after . ! ? and at line breaks; the fast path for texts with only periods
    must split exactly like that definition (every short string over a tricky alphabet)."""
    import itertools
    import re

    from medgrpo.rewards.claims import _sentences

    definition = re.compile(r"(?<=[.!?])\s+|\n")
    alphabet = [".", "!", "?", " ", "\n", "\t", "\u00a0", "a"]
    for n in range(6):
        for chars in itertools.product(alphabet, repeat=n):
            text = "".join(chars)
            assert _sentences(text) == definition.split(text), repr(text)


def test_claim_words_start_and_end_at_word_boundaries_in_any_script():
    from medgrpo.rewards.claims import read

    assert read("ümass").asserted == frozenset()  # "ü" is a letter: no word starts at "m"
    assert read("ü mass").asserted == {"mass"}
    assert read("massü").asserted == frozenset()
    assert read("an x-ray of the chest_wall").asserted == {"xray"}  # "_" joins words
    assert read("no mass, left side").denied == {"mass"} and read("no mass, left side").asserted == {"left"}
    assert read("The answer is (C).").sentences[0].letters == {"C"}
    assert read("<box>[1, 2, 3, 4]</box>, no mass").sentences[0].boxes == 1


def limit(reason, record, think):
    """A written style the rule reader still misreads: a strict xfail, so that fixing it shows up."""
    return pytest.param(record, think, marks=pytest.mark.xfail(strict=True, reason=f"known limit: {reason}"))


# Correct answers argued the way instruction-tuned models write (option-by-option eliminations, framing,
# questions, negated lists, one-sided normal findings); the rule verifiers must read each as consistent, pointing
# to the gold option, and free of hallucination and contradiction.
WRITTEN = [
    (MODALITY, f"{MRI_BRAIN} A. CT: no. C. X-ray: no. D. Ultrasound - no. So the answer is B."),
    (ANATOMY, f"{MRI_BRAIN} Option A (knee) is incorrect. Option B (chest) is wrong. Skin does not fit. So the answer "
     "is C."),
    (PATHOLOGY, f"{FINDING} A cyst is unlikely. Calcification is not consistent with this signal. So the answer is D "
     "(mass)."),
    (LOCATION, f"{FINDING} Right upper quadrant: no. Left lower quadrant: no. Right lower quadrant: no. The answer is "
     "A."),
    (ANOMALY, f"{MRI_BRAIN} {FINDING} Right side: no. So the answer is B."),
    (MODALITY, "Let's consider each option. A. CT - incorrect, the signal pattern differs. B. MRI - correct, "
     "typical T2 appearance of the brain. C. X-ray - incorrect. D. Ultrasound - incorrect. Final answer: B."),
    (ANATOMY, "The scan shows the brain inside the skull on MRI. It cannot be the knee or the skin, and the chest "
     "is not shown. So the answer is C."),
    (ANATOMY, "First, what region is this? The brain is visible on this MRI. Chest: incorrect. Knee: incorrect. "
     "Therefore, C."),
    (PATHOLOGY, "There is a large lobulated hyperintense mass. Could it be a cyst? Unlikely, given the irregular "
     "margins. A calcification is ruled out. The answer is D."),
    (LOCATION, "The MRI of the brain shows a large mass in the left upper quadrant. There is no lesion in the right "
     "upper, left lower or right lower quadrants. The answer is A."),
    (LOCATION, "I need to check where the lesion is. A hyperintense mass is seen in the left upper quadrant; the "
     "other quadrants are clear. So the answer is A."),
    (ANOMALY, "To decide whether the brain MRI is abnormal, I inspect both hemispheres. A large hyperintense mass "
     "is present on the left; the right side shows no abnormality. So the answer is B."),
    (ANOMALY_NORMAL, "This chest CT was reviewed for nodules, masses, effusion and pneumothorax. None are present. "
     "The lungs are clear and the study is normal. The answer is A."),
    (ANOMALY_NORMAL, "The chest CT shows normal lungs. There is no evidence of a mass, nodule, or effusion. So the "
     "answer is A."),
    (ANOMALY_NORMAL, "Chest CT. Findings: no consolidation, no effusion, no mass. Impression: normal study. Answer: A."),
    (ANATOMY, "The structure shown is the brain, seen on MRI with gyri and ventricles. No knee, chest or skin "
     "structures are visible. Hence the correct option is C."),
    (LOCATION, "The mass lies in the upper part of the image on the left side, i.e. the left upper quadrant. The "
     "answer is A."),
    (ANOMALY, "Assessment for abnormality: there is a large hyperintense mass in the left hemisphere of this brain "
     "MRI. The right hemisphere is unremarkable. The abnormality is therefore on the left side only. Answer: B."),
    (ANOMALY_NORMAL, "The chest CT demonstrates clear lungs, a normal heart size, and no pleural effusion. No focal "
     "lesion is identified. The study is within normal limits, so the answer is A."),
    (ANOMALY_NORMAL, "Evaluating this chest CT for any abnormality: lungs clear, mediastinum normal, no nodules or "
     "masses. Overall impression: no abnormality. Answer: A."),
    (PATHOLOGY, "Findings: a large irregular hyperintense lesion. Differential: cyst (no, margins irregular), "
     "calcification (no, not dark), mass (yes). The answer is D."),
    (ANATOMY, "The brain parenchyma is visible on this MRI. The chest, knee and skin are therefore excluded. The "
     "answer is C (brain)."),
    (LOCATION, "The large hyperintense mass of this brain MRI sits in the left upper quadrant. The right upper, left "
     "lower and right lower quadrants appear unremarkable. The answer is A."),
    # counterfactuals weigh their subject without claiming it
    (MODALITY, "The image is a cross-sectional MRI of the brain. It is not a CT, since bone is not bright. An X-ray "
     "would be a projection image, which this is not. The answer is B."),
    (PATHOLOGY, "On this brain MRI there is a large irregular hyperintense mass. A simple cyst would be round and "
     "well-defined, which is not the case. Therefore the answer is D (mass)."),
    limit("a general statement about an option is read as a claim", MODALITY, "The contrast points to MRI rather "
          "than CT. X-ray and ultrasound do not produce cross-sections like this. Conclusion: MRI, option B."),
    limit("framing split from its object", ANOMALY_NORMAL, "I carefully inspected the chest CT for masses, nodules "
          "and effusions but found none. Everything looks normal. The answer is A."),
]


@pytest.mark.parametrize(("record", "think"), WRITTEN)
def test_correct_reasoning_in_written_styles_reads_as_consistent(record, think):
    scores = verify(done(think, record.answer), record)
    for key in ("consistency", "reasoning_accuracy", "evidence/no_hallucination", "evidence/no_contradiction"):
        assert scores[key] == 1.0, key


def test_places_and_questions_keep_their_scope():
    from medgrpo.rewards.claims import read

    one_side = read("A large mass is present on the left; the right side shows no abnormality.")
    assert "right" in one_side.denied and "right" not in one_side.asserted and one_side.polarity == {"abnormal"}
    assert read("The left side is normal.").polarity == frozenset()
    assert read("This chest CT was reviewed for nodules, masses and effusion.").asserted == {"chest", "ct"}
    assert read("Chest: incorrect.").denied == {"chest"}
    assert read("Left lower quadrant appears unremarkable.").denied == {"left", "lower"}
    assert read("Evaluating this chest CT for any abnormality: lungs clear.").polarity == frozenset()
    assert read("Could it be a cyst?").sentences[0].low == ""  # no option words to match in a question


def test_trailing_negations_reject_only_what_they_close():
    from medgrpo.rewards.claims import read

    assert read("CT: no. MRI - no. X-ray is incorrect.").denied == {"ct", "mri", "xray"}
    assert read("Option A: no.").sentences[0].denied_letters == {"A"}
    assert "ultrasound" in read("Ultrasound: no fan shape.").asserted  # the "no" is about what follows
    assert read("A cyst is unlikely.").denied == read("Unlikely to be a cyst.").denied == {"cyst"}
    assert read("We look for whether there is a lesion or not.").denied == frozenset()
    assert read("Lesion: none.").polarity == {"normal"}
    assert read("No mass, left side.").asserted == {"left"}  # a lone "no" opening a clause after a comma


def test_a_negation_runs_on_over_a_list_of_the_same_kind():
    """Radiology's usual negative ("no effusion, pneumothorax or consolidation") denies every finding listed, and
    stops at a mention of another kind ("no mass, left side") or at a contrast ("no mass, but a cyst")."""
    from medgrpo.rewards.claims import read

    listing = read("The lungs are clear without consolidation, effusion, or pneumothorax.")
    assert listing.denied == {"consolidation", "effusion", "pneumothorax"} and listing.polarity == frozenset()
    assert read("No mass, left side.").asserted == {"left"}
    assert read("No mass, but a cyst in the left lobe.").asserted == {"cyst", "left"}
    assert read("A mass, a cyst and an effusion.").asserted == {"mass", "cyst", "effusion"}
    assert read("CT, X-ray and ultrasound are excluded.").denied == {"ct", "xray", "ultrasound"}
    assert read("Brain MRI, mass absent.").asserted == {"brain", "mri"}  # a list holds one kind of concept
    think = "CT of the chest. No effusion, pneumothorax or consolidation. The study is normal."
    assert verify(done(f"{think} So the answer is A.", "A"), ANOMALY_NORMAL)["evidence/no_hallucination"] == 1.0


def test_hypothetical_mentions_claim_nothing():
    from medgrpo.rewards.claims import read

    framing = read("To determine whether there is an abnormality, I examine the chest CT.")
    assert framing.asserted == framing.denied == framing.polarity == frozenset()
    assert read("I look for a mass, a nodule or an effusion.").asserted == frozenset()
    assert read("If option A were right, the rim would be bright.").sentences[0].letters == frozenset()
    assert read("The mass is in the left upper quadrant, whether benign or not.").asserted >= {"mass", "left"}
    asked = read("Is there a mass? No.")
    assert asked.asserted == asked.denied == asked.polarity == frozenset()
    assert read("Is there a lesion? Yes, a mass in the left lobe.").asserted == {"mass", "left"}
    assert read("The absence of a mass is reassuring.").denied == {"mass"}
    assert read("There is no doubt that this is a mass.").asserted == {"mass"}
    assert read("Not only a mass but also an effusion.").asserted == {"mass", "effusion"}
    think = "To determine whether there is an abnormality, I review the chest CT. No abnormality is seen."
    scores = verify(done(f"{think} So the answer is A.", "A"), ANOMALY_NORMAL)
    assert scores["consistency"] == scores["evidence/no_contradiction"] == scores["evidence/no_hallucination"] == 1.0


def test_denying_the_chosen_option_contradicts_it():
    scores = verify(done("This is not an MRI. So the answer is B.", "B"), MODALITY)
    assert scores["consistency"] == 0.0 and scores["reasoning_accuracy"] == 0.0
    assert scores["evidence/answer_support"] == 0.0


def test_equal_claim_sets_of_cached_sentences_are_one_object():
    """The sentence cache keeps one object per distinct claim set, so that a full cache holds few GC-tracked
    objects (most sentences repeat the same few sets)."""
    from medgrpo.rewards.claims import read_sentence

    a, b = read_sentence("A CT of the chest, left side."), read_sentence("The chest CT shows the left lung.")
    assert a.asserted == b.asserted == {"ct", "chest", "left"} and a.asserted is b.asserted
    assert read_sentence("No mass.").denied is read_sentence("There is no mass here.").denied
    assert read_sentence("Nothing to see.").asserted == frozenset()


def test_strict_format_tells_a_less_than_sign_from_a_tag():
    assert parse_completion(done("Density a < b at the rim.", "B")).strict
    assert not parse_completion(done("Density a <Think> b.", "B")).strict
    assert not parse_completion(done("See < box >[1, 2, 3, 4]</box>.", "B")).strict
    assert not parse_completion(done("Fine.", "B") + "<box>[1, 2, 3, 4]</box>").strict
