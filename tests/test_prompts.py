"""Output grammar, prompts, targets and box conventions: original pixels <-> each model's convention."""

import pytest
from hypothesis import given, settings
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


@settings(deadline=None)  # the first call imports qwen_vl_utils (and torchvision) for the resize rule
@given(
    w=st.integers(11, 2048), h=st.integers(11, 2048), fmt=st.sampled_from(["abs", "rel1000"]),  # ratio <= 200
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


@settings(deadline=None)
@given(h=st.integers(1, 3000), w=st.integers(1, 3000))
def test_smart_resize_invariants(h, w):
    if max(h, w) / min(h, w) > 200:  # the Qwen-VL processors refuse such images: one line, not a grid
        with pytest.raises(ValueError, match="aspect ratio"):
            smart_resize(h, w, 28, 56 * 56, 28 * 28 * 256)
        return
    rh, rw = smart_resize(h, w, 28, 56 * 56, 28 * 28 * 256)
    assert rh % 28 == 0 and rw % 28 == 0
    assert rh * rw <= 28 * 28 * 256 or min(rh, rw) == 28


def test_box_regex_and_iou():
    m = BOX_RE.search("see <box>[1, 2.5, 3e1, 40]</box>")
    assert [float(g) for g in m.groups()] == [1.0, 2.5, 30.0, 40.0]
    assert iou([0, 0, 10, 10], [0, 0, 10, 10]) == 1.0
    assert iou([0, 0, 10, 10], [5, 0, 15, 10]) == pytest.approx(1 / 3)
    assert iou([0, 0, 0, 10], [0, 0, 10, 10]) == 0.0


@settings(deadline=None)
@given(st.lists(st.floats(0, 500), min_size=8, max_size=8))
def test_iou_and_giou_are_torchvisions(v):
    """The reward's IoU and GIoU are plain Python for speed (a torchvision call per box pair costs ~75 us, the
    reward's budget per completion ~100 us); they must be torchvision.ops' formulas."""
    import torch
    from torchvision.ops import box_iou, generalized_box_iou

    from medgrpo.rewards.grounding import box_giou
    from medgrpo.rewards.grounding import box_iou as reward_iou

    a = (min(v[0], v[2]), min(v[1], v[3]), max(v[0], v[2]), max(v[1], v[3]))
    b = (min(v[4], v[6]), min(v[5], v[7]), max(v[4], v[6]), max(v[5], v[7]))
    ta, tb = torch.tensor([a], dtype=torch.float64), torch.tensor([b], dtype=torch.float64)
    degenerate = (a[2] - a[0]) * (a[3] - a[1]) <= 0 or (b[2] - b[0]) * (b[3] - b[1]) <= 0
    if not degenerate:  # torchvision divides by zero there; the reward scores 0 (IoU) and -1 (GIoU) instead
        assert reward_iou(a, b) == pytest.approx(box_iou(ta, tb).item(), abs=1e-9)
        assert iou(list(a), list(b)) == pytest.approx(box_iou(ta, tb).item(), abs=1e-9)
        assert box_giou(a, b) == pytest.approx(generalized_box_iou(ta, tb).item(), abs=1e-9)
