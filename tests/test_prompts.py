"""Output grammar, prompts, targets and box conventions: original pixels <-> each model's convention."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from medgrpo.data import MedADRecord
from medgrpo.data.boxes import BoxFrame, ImageGrid, box_format_for, iou, smart_resize
from medgrpo.prompts import BOX_RE, build_prompt, build_target, format_options


def record(**over):
    fields = dict(
        id="r", images=["a.png"], question="Where is the lesion?", options=["left upper", "right lower"],
        answer="B", task="lesion_localization", cot="CT of the brain. A mass <box>[100, 50, 300, 250]</box> "
        "lies right lower, so the answer is B.",
    )
    fields.update(over)
    return MedADRecord(**fields)


def test_prompt_holds_question_options_and_box_convention():
    for fmt, phrase in (("abs", "pixel coordinates"), ("rel1000", "0 to 1000")):
        frame = BoxFrame(fmt, 400, 300, 224, 168)
        messages = build_prompt(record(), frame)
        assert messages[0]["role"] == "system" and messages[1]["role"] == "user"
        text = messages[1]["content"]
        assert "Where is the lesion?" in text and "A. left upper\nB. right lower" in text
        assert phrase in text and "<answer></answer>" in text
    assert build_prompt(record(), system_prompt=None)[0]["role"] == "user"


def test_target_converts_boxes_to_each_convention():
    rec = record()
    abs_frame = BoxFrame("abs", 400, 300, 200, 150)
    target = build_target(rec, abs_frame)
    assert target.startswith("<think>") and target.endswith("</think>\n<answer>B</answer>")
    assert "<box>[50, 25, 150, 125]</box>" in target
    rel = build_target(rec, BoxFrame("rel1000", 400, 300, 200, 150))
    assert "<box>[250, 167, 750, 833]</box>" in rel


def test_target_without_cot_states_the_answer():
    assert build_target(record(cot=None)) == "<think>The answer is B: right lower.</think>\n<answer>B</answer>"


def test_format_options_letters():
    assert format_options(["x", "y", "z"]) == "A. x\nB. y\nC. z"


def test_box_format_per_architecture():
    assert box_format_for("qwen2_5_vl") == "abs"
    assert box_format_for("qwen2_vl") == box_format_for("qwen3_vl") == "rel1000"
    with pytest.raises(ValueError, match="unsupported model_type"):
        box_format_for("llava")


@given(
    w=st.integers(8, 2048), h=st.integers(8, 2048), fmt=st.sampled_from(["abs", "rel1000"]),
    fx=st.tuples(st.floats(0, 1), st.floats(0, 1)), fy=st.tuples(st.floats(0, 1), st.floats(0, 1)),
)
def test_box_round_trip_within_one_model_unit(w, h, fmt, fx, fy):
    grid = ImageGrid(fmt, factor=28, min_pixels=56 * 56, max_pixels=448 * 448)
    frame = grid.frame(w, h)
    x1, x2 = sorted(v * w for v in fx)
    y1, y2 = sorted(v * h for v in fy)
    box = [x1, y1, x2, y2]
    back = frame.to_original(frame.to_model(box))
    # One unit of the model's grid, expressed in original pixels, bounds the rounding error.
    sx, sy = (w / frame.model_width, h / frame.model_height) if fmt == "abs" else (w / 1000, h / 1000)
    for a, b, s in zip(box, back, (sx, sy, sx, sy), strict=True):
        assert abs(a - b) <= 0.5 * s + 1e-6


@given(h=st.integers(1, 3000), w=st.integers(1, 3000))
def test_smart_resize_invariants(h, w):
    rh, rw = smart_resize(h, w, 28, 56 * 56, 28 * 28 * 256)
    assert rh % 28 == 0 and rw % 28 == 0
    assert rh * rw <= 28 * 28 * 256 or min(rh, rw) == 28


def test_box_regex_and_iou():
    m = BOX_RE.search("see <box>[1, 2.5, 3e1, 40]</box>")
    assert [float(g) for g in m.groups()] == [1.0, 2.5, 30.0, 40.0]
    assert iou([0, 0, 10, 10], [0, 0, 10, 10]) == 1.0
    assert iou([0, 0, 10, 10], [5, 0, 15, 10]) == pytest.approx(1 / 3)
    assert iou([0, 0, 0, 10], [0, 0, 10, 10]) == 0.0
