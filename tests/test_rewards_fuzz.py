"""Never crashes: hypothesis-generated completions on every reward and on ``verify``; every output is finite
and in [0, 1], or None where not applicable. MEDGRPO_FUZZ_EXAMPLES raises the example count for a longer local
run."""

import json
import math
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from medgrpo.data.boxes import BoxFrame
from medgrpo.data.record import MedADRecord
from medgrpo.rewards import KEYS, REWARDS, RewardSettings, build_reward_funcs, verify

EXAMPLES = int(os.environ.get("MEDGRPO_FUZZ_EXAMPLES", "10000"))

RECORDS = [
    MedADRecord(
        "a",
        ["x.png"],
        "Is there an abnormality in this MRI of the brain?",
        [
            "no abnormality",
            "abnormality on the left side",
            "abnormality on the right side",
            "abnormalities on both sides",
        ],
        "B",
        "anomaly_detection",
        "MRI",
        "brain",
        {
            "abnormal": True,
            "finding": "mass",
            "location": "left upper quadrant",
            "laterality": "left",
            "appearance": ["hyperintense"],
            "modality": "MRI",
            "anatomy": "brain",
            "size": "small",
        },
        [[10.0, 10.0, 30.0, 30.0]],
        None,
        "synth",
    ),
    MedADRecord(
        "b",
        ["x.png"],
        "Which imaging modality is this?",
        ["CT", "MRI"],
        "A",
        "modality_classification",
        None,
        None,
        {"abnormal": False},
        None,
        None,
        "",
    ),
    MedADRecord("c", ["x.png"], "Where is the lesion?", [], "left upper lobe", "other"),
]
FRAMES = [BoxFrame("abs", 128, 96, 112, 84), BoxFrame("rel1000", 64, 64, 56, 56), None]

NUMBERS = st.one_of(
    st.integers(-(10**30), 10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "inf", "-inf", "1e999", "-0", "1e-999", "00012", ".5", "5.", "+3", "--1", ""]),
)
BOXES = st.lists(NUMBERS, min_size=0, max_size=6).map(lambda xs: "<box>[" + ", ".join(xs) + "]</box>")
TAGS = st.sampled_from(
    [
        "<think>",
        "</think>",
        "<answer>",
        "</answer>",
        "<box>",
        "</box>",
        "<THINK>",
        "</Answer>",
        "< think >",
        "<think/>",
        "<answer><answer>",
        "</think></think>",
        "<|im_end|>",
    ]
)
WORDS = st.sampled_from(
    [
        "mass",
        "no",
        "not",
        "normal",
        "abnormality",
        "left",
        "right",
        "upper",
        "lower",
        "MRI",
        "CT",
        "brain",
        "therefore",
        "the answer is",
        "option",
        "(A)",
        "(B)",
        "C",
        "A",
        "B",
        "rather than",
        "absent",
        ", ",
        ". ",
        "\n",
        "hyperintense",
        "otherwise",
        "cyst",
        "nodule",
        "left upper lobe",
        "both sides",
        "quadrant",
        "ruled out",
    ]
)
JSONS = st.recursive(
    st.none() | st.booleans() | st.floats() | st.text(max_size=5),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3),
    max_leaves=4,
).map(lambda x: json.dumps(x))
FRAGMENT = st.one_of(
    TAGS, BOXES, WORDS, JSONS, st.text(max_size=20), st.sampled_from(["\x00", "İ" * 3, "ß", "🩻"])
)
TEXTS = st.one_of(
    st.lists(FRAGMENT, max_size=16).map("".join),
    st.builds(
        lambda a, b, n: f"<think>{a}</think><answer>{b}</answer>" * n,
        st.lists(FRAGMENT, max_size=12).map(" ".join),
        st.lists(FRAGMENT, max_size=3).map("".join),
        st.integers(1, 3),
    ),
    st.builds(lambda frag, n: frag * n, FRAGMENT, st.integers(50, 800)),  # huge
)
COMPLETIONS = st.one_of(
    TEXTS,
    st.none(),
    st.just([]),
    TEXTS.map(lambda t: [{"role": "assistant", "content": t}]),
    TEXTS.map(lambda t: [{"role": "assistant", "content": [{"type": "text", "text": t}, {"type": "image"}]}]),
    st.sampled_from([[None], [{"content": None}], [{"content": 3}], {"content": "x"}, 42, b"<think>"]),
)
SHAPED = RewardSettings(gate_on_correct=True, zero_on_format_failure=True, grounding_metric="giou")
FUNCS = build_reward_funcs(list(REWARDS), SHAPED)  # verify covers the default settings


def in_range(value):
    return value is None or (isinstance(value, float) and math.isfinite(value) and 0.0 <= value <= 1.0)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
@given(completions=st.lists(COMPLETIONS, min_size=3, max_size=3), which=st.integers(0, 2))
def test_rewards_never_crash_and_stay_in_range(completions, which):
    record, frame = RECORDS[which], FRAMES[which]
    for s in (None, SHAPED):
        scores = verify(completions[0], record, frame, s)
        assert set(scores) == set(KEYS)
        assert all(in_range(v) for v in scores.values()), scores
        assert (scores["grounding"] is None) == (record.bbox is None)
    columns = {
        "id": [r.id for r in RECORDS],
        "question": [r.question for r in RECORDS],
        "options": [r.options for r in RECORDS],
        "answer": [r.answer for r in RECORDS],
        "task": [r.task for r in RECORDS],
        "bbox": [json.dumps(r.bbox) if r.bbox else "" for r in RECORDS],
        "evidence": [json.dumps(r.evidence) if r.evidence else "" for r in RECORDS],
        "box_format": ["abs", "rel1000", ""],
        "image_size": [[128, 96], [64, 64], None],
        "model_image_size": [[112, 84], [56, 56], None],
    }
    for func in FUNCS:
        out = func(prompts=None, completions=completions, **columns)
        assert len(out) == 3 and all(in_range(v) for v in out), (func, out)
