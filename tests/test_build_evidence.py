"""Evidence from masks and boxes against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from medgrpo.data.build.evidence import build_evidence, clip_box, mask_boxes, region_of, size_class


def test_mask_box_is_pixel_edges_of_the_component():
    mask = np.zeros((64, 64), dtype=bool)
    mask[10:20, 40:56] = True  # rows 10..19, columns 40..55
    assert mask_boxes(mask) == [[40.0, 10.0, 56.0, 20.0]]
    single = np.zeros((8, 8), dtype=bool)
    single[5, 3] = True
    assert mask_boxes(single) == [[3.0, 5.0, 4.0, 6.0]]
    assert mask_boxes(np.zeros((8, 8), dtype=bool)) == []


def test_mask_components_largest_first_and_speckle_dropped():
    mask = np.zeros((100, 100), dtype=bool)
    mask[60:70, 60:70] = True  # 100 px
    mask[5:30, 5:25] = True  # 500 px: listed first
    mask[90, 2] = True  # 1 px < 1 % of 500: speckle
    assert mask_boxes(mask) == [[5.0, 5.0, 25.0, 30.0], [60.0, 60.0, 70.0, 70.0]]


def test_region_and_laterality_by_hand():
    # box centre (48, 15) in a 64x64 image: x share 0.75 -> right, y share 0.23 -> upper
    assert region_of([[40, 10, 56, 20]], 64, 64) == ("upper right", "right")
    # radiological convention: the image's right is the patient's left
    assert region_of([[40, 10, 56, 20]], 64, 64, "patient") == ("upper left", "left")
    # centre (12, 50): left, lower
    assert region_of([[4, 40, 20, 60]], 64, 64) == ("lower left", "left")
    # one box each side: bilateral
    assert region_of([[2, 2, 12, 12], [50, 2, 60, 12]], 64, 64) == ("bilateral", "bilateral")
    # centre (32, 32): middle band both ways
    assert region_of([[28, 28, 36, 36]], 64, 64) == ("central", None)
    # centre (32, 8): upper, neither side
    assert region_of([[28, 4, 36, 12]], 64, 64) == ("upper", None)
    with pytest.raises(ValueError, match="convention"):
        region_of([[0, 0, 1, 1]], 4, 4, "viewer")


def test_size_class_thresholds():
    assert size_class(81, 64, 64) == "small"  # 1.98 %
    assert size_class(160, 64, 64) == "medium"  # 3.9 %
    assert size_class(410, 64, 64) == "large"  # 10.01 %


def test_clip_box_rounds_into_the_image():
    assert clip_box([8.5, 6.2, 20.5, 16.6], 64, 64) == [8.0, 6.0, 20.0, 17.0]  # banker's rounding of .5
    assert clip_box([-3, 60.4, 70, 90], 64, 64) == [0.0, 60.0, 64.0, 64.0]
    assert clip_box([70, 70, 80, 80], 64, 64) is None


def test_evidence_from_mask_pairs_fixture_build(tmp_path):
    from pathlib import Path

    from medgrpo.data import load_records
    from medgrpo.data.build import build_dataset, load_config

    config = load_config(Path(__file__).parents[1] / "data" / "sources" / "mask_pairs.yaml")
    config.root = Path(__file__).parent / "fixtures" / "build" / "mask_pairs"
    config.splits = {"train": 1.0}
    config.tasks = ("lesion_localization",)
    build_dataset(config, tmp_path / "out")
    by_image = {r.images[0]: r for r in load_records(tmp_path / "out")}
    case1 = by_image["images/case1.png"]  # mask rows 10..19, columns 40..55; the YAML is patient convention
    assert case1.bbox == [[40.0, 10.0, 56.0, 20.0]]
    assert case1.evidence == {"abnormal": True, "finding": "tumour", "location": "upper left", "laterality": "left",
                              "size": "medium", "modality": "MRI", "anatomy": "brain"}
    assert case1.answer_text() == "Upper left"
    case2 = by_image["images/case2.png"]  # rows 40..59, columns 4..19: the patient's lower right
    assert case2.bbox == [[4.0, 40.0, 20.0, 60.0]] and case2.evidence["laterality"] == "right"
    assert "images/case4.png" not in by_image  # bilateral: no single region to ask about
    assert "images/case3.png" not in by_image  # empty mask: normal, nothing to localize


def test_build_evidence_normal_and_plain():
    assert build_evidence([], [], 64, 64, "CT", None) == {"abnormal": False, "modality": "CT"}
    ev = build_evidence(["mass"], [], 64, 64, None, "chest")
    assert ev == {"abnormal": True, "finding": "mass", "anatomy": "chest"}
