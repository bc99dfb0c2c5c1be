"""Each source reader on its own fixture layout (tests/fixtures/build/), and its one-line errors."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from medgrpo.data.build.readers import BuildError, make_reader

FIXTURES = Path(__file__).parent / "fixtures" / "build"


def _by_id(items):
    return {i.id: i for i in items}


def test_br35h_yes_no_folders_and_pred_ignored():
    items = _by_id(make_reader("br35h", FIXTURES / "br35h").read())
    assert sorted(items) == ["no_no0", "no_no1", "no_no2", "yes_y0", "yes_y1", "yes_y2"]
    assert items["yes_y0"].labels == ["yes"] and items["no_no1"].labels == []
    assert len({i.group for i in items.values()}) == 6  # no patient ids: one group per image


def test_isic2018_one_hot_and_lesion_groups():
    items = make_reader("isic2018", FIXTURES / "isic2018", {"metadata": "HAM10000_metadata.csv"}).read()
    labels = {i.id: i.labels for i in items}
    assert labels["ISIC_0024306"] == ["MEL"] and labels["ISIC_0024307"] == ["NV"] and labels["ISIC_0024313"] == ["MEL"]
    groups = {i.id: i.group for i in items}
    assert groups["ISIC_0024306"] == groups["ISIC_0024307"] == "HAM_0000000"
    no_meta = make_reader("isic2018", FIXTURES / "isic2018").read()
    assert len({i.group for i in no_meta}) == 9


def test_isic2018_bad_one_hot_row_names_file_and_line(tmp_path):
    root = tmp_path / "isic"
    shutil.copytree(FIXTURES / "isic2018", root)
    csv = root / "ISIC2018_Task3_Training_GroundTruth" / "ISIC2018_Task3_Training_GroundTruth.csv"
    lines = csv.read_text().splitlines()
    lines[3] = lines[3].replace("0.0", "1.0", 1)
    csv.write_text("\n".join(lines) + "\n")
    with pytest.raises(BuildError, match=r"GroundTruth.csv:4: field 'label': expected exactly one positive"):
        make_reader("isic2018", root).read()


def test_chestxray14_labels_patients_and_boxes():
    items = _by_id(make_reader("chestxray14", FIXTURES / "chestxray14").read())
    assert len(items) == 10  # images found under images_001/images and images_002/images
    assert items["00000001_001"].labels == ["Cardiomegaly", "Effusion"]
    assert items["00000001_002"].labels == []  # No Finding
    assert items["00000001_000"].group == items["00000001_002"].group == "patient-1"
    assert items["00000002_000"].boxes == {"Nodule": [[8.5, 6.2, 20.5, 16.6]]}  # x, y, w, h -> x1, y1, x2, y2
    assert items["00000005_000"].boxes == {"Infiltration": [[4.0, 36.0, 24.0, 56.0]]}  # 'Infiltrate' alias


def test_chestxray14_missing_column_and_missing_image(tmp_path):
    root = tmp_path / "cxr"
    shutil.copytree(FIXTURES / "chestxray14", root)
    (root / "images_002" / "images" / "00000007_000.png").unlink()
    with pytest.raises(BuildError, match=r"Data_Entry_2017.csv:11: field 'Image Index': 00000007_000.png not found"):
        make_reader("chestxray14", root).read()
    reader = make_reader("chestxray14", root, {"on_missing_image": "skip"})
    assert len(reader.read()) == 9 and reader.skipped == 1
    entry = root / "Data_Entry_2017.csv"
    entry.write_text(entry.read_text().replace("Patient ID", "Patient"))
    with pytest.raises(BuildError, match=r"Data_Entry_2017.csv: missing column 'Patient ID'"):
        make_reader("chestxray14", root).read()


def test_image_folder_nested_and_normal_class():
    items = make_reader("image_folder", FIXTURES / "image_folder").read()
    assert len(items) == 9
    assert {i.id: i.labels for i in items}["mass_sub_m1"] == ["mass"]
    assert sum(not i.labels for i in items) == 3
    grouped = make_reader("image_folder", FIXTURES / "image_folder", {"group_pattern": r"^([a-z])"}).read()
    assert {i.group for i in grouped} == {"n", "c", "m"}


def test_csv_labels_patients_and_box_columns():
    options = {"csv": "labels.csv", "images": "imgs", "image_column": "file", "label_column": "diagnosis",
               "patient_column": "patient", "box_columns": ["x1", "y1", "x2", "y2"]}
    items = _by_id(make_reader("csv_labels", FIXTURES / "csv_labels", options).read())
    assert items["img1"].labels == ["edema"] and items["img1"].boxes == {"edema": [[4.0, 4.0, 20.0, 20.0]]}
    assert items["img0"].labels == [] and items["img0"].boxes == {}
    assert items["img0"].group == items["img1"].group == "P0"
    with pytest.raises(BuildError, match=r"labels.csv: missing column 'image'"):
        make_reader("csv_labels", FIXTURES / "csv_labels", {"csv": "labels.csv", "images": "imgs"}).read()


def test_mask_pairs_png_masks():
    items = _by_id(make_reader("mask_pairs", FIXTURES / "mask_pairs", {"finding": "tumour",
                                                                        "mask_suffix": "_mask"}).read())
    assert items["case1"].labels == ["tumour"] and items["case3"].labels == []
    assert items["case1"].mask.name == "case1_mask.png"
    with pytest.raises(BuildError, match=r"case1.png: no mask"):
        make_reader("mask_pairs", FIXTURES / "mask_pairs", {"finding": "tumour"}).read()


def test_nifti_needs_nibabel_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "nibabel", None)  # as if the `nifti` extra were not installed
    for sub in ("images", "masks"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "vol.nii.gz").write_bytes(b"\0")
    with pytest.raises(BuildError, match=r"vol.nii.gz: reading NIfTI needs the optional package nibabel"):
        make_reader("mask_pairs", tmp_path, {"finding": "tumour"}).read()


def test_unknown_layout_and_bad_option():
    with pytest.raises(BuildError, match=r"unknown layout 'nope'"):
        make_reader("nope", FIXTURES)
    with pytest.raises(BuildError, match=r"config field 'reader'"):
        make_reader("br35h", FIXTURES / "br35h", {"colour": 1})
