"""Record schema and loader: every bad field is named with its file and line; paths stay inside the root."""

import json
import os
from pathlib import Path

import pytest
from PIL import Image

from medgrpo.data import (
    LoadReport,
    MedADRecord,
    RecordError,
    load_records,
    record_from_dict,
    validate_dataset,
)


def good_row(**over):
    row = {
        "id": "r1",
        "images": ["images/a.png"],
        "question": "Is there an abnormality?",
        "options": ["yes", "no"],
        "answer": "A",
        "task": "anomaly_detection",
        "modality": "CT",
        "anatomy": "brain",
        "evidence": {"abnormal": True, "finding": "mass", "location": "left upper", "appearance": ["hyperdense"]},
        "bbox": [[2, 3, 20, 30]],
        "cot": "A bright mass <box>[2, 3, 20, 30]</box>, so the answer is A.",
        "source": "test",
    }
    row.update(over)
    return row


@pytest.fixture
def dataset(tmp_path):
    (tmp_path / "images").mkdir()
    Image.new("RGB", (64, 48)).save(tmp_path / "images" / "a.png")
    return tmp_path


def write(dataset: Path, rows, name="train.jsonl"):
    with open(dataset / name, "w") as fh:
        for row in rows:
            fh.write((row if isinstance(row, str) else json.dumps(row)) + "\n")


def test_good_row_round_trips(dataset):
    write(dataset, [good_row()])
    (record,) = load_records(dataset, split="train")
    assert isinstance(record, MedADRecord)
    assert record.answer_text() == "yes" and record.letters == "AB" and record.is_mcq
    assert record_from_dict(record.to_dict()) == record


@pytest.mark.parametrize(
    "override, field",
    [
        ({"answer": "C"}, "answer"),
        ({"task": "segmentation"}, "task"),
        ({"bbox": [[10, 10, 5, 20]]}, "bbox"),
        ({"bbox": [[0, 0, 65, 10]]}, "bbox"),  # outside the 64x48 image
        ({"bbox": [[0, 0, float("nan"), 10]]}, "bbox"),
        ({"images": ["images/missing.png"]}, "images"),
        ({"images": ["../outside.png"]}, "images"),
        ({"images": []}, "images"),
        ({"options": ["only one"]}, "options"),
        ({"options": ["yes", "Yes"]}, "options"),
        ({"question": "  "}, "question"),
        ({"evidence": {"finding": "mass"}}, "evidence"),
        ({"evidence": {"abnormal": True, "colour": "red"}}, "evidence"),
        ({"modality": 3}, "modality"),
        ({"extra": 1}, "extra"),
    ],
)
def test_bad_field_named_with_file_and_line(dataset, override, field):
    write(dataset, [good_row(id="ok"), good_row(**override)])
    with pytest.raises(RecordError) as err:
        load_records(dataset, split="train")
    message = str(err.value)
    assert f"train.jsonl:2: field '{field}'" in message
    assert "\n" not in message


def test_missing_required_field(dataset):
    row = good_row()
    del row["answer"]
    write(dataset, [row])
    with pytest.raises(RecordError, match=r"train.jsonl:1: field 'answer': missing"):
        load_records(dataset)


def test_duplicate_ids_and_bad_json(dataset):
    write(dataset, [good_row(), good_row()])
    with pytest.raises(RecordError, match=r":2: field 'id': duplicate id 'r1' \(first at .*:1\)"):
        load_records(dataset)
    write(dataset, ["{not json"])
    with pytest.raises(RecordError, match=r"train.jsonl:1: not valid JSON"):
        load_records(dataset)


def test_symlink_escaping_root_is_rejected(dataset, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside") / "secret.png"
    Image.new("RGB", (8, 8)).save(outside)
    os.symlink(outside, dataset / "images" / "link.png")
    write(dataset, [good_row(images=["images/link.png"], bbox=None)])
    with pytest.raises(RecordError, match="resolves outside the dataset root"):
        load_records(dataset)


def test_skip_policy_counts_and_keeps_good_rows(dataset):
    write(dataset, [good_row(id="a"), good_row(id="b", answer="Z"), good_row(id="c", task="x")])
    report = LoadReport(path=str(dataset))
    records = load_records(dataset, on_bad_record="skip", report=report)
    assert [r.id for r in records] == ["a"]
    assert report.kept == 1 and len(report.skipped) == 2
    assert validate_dataset(dataset) == (1, report.skipped)


def test_open_ended_record(dataset):
    write(dataset, [good_row(options=[], answer="a left frontal mass", task="other")])
    (record,) = load_records(dataset)
    assert not record.is_mcq and record.answer_text() == "a left frontal mass"


def test_flat_single_box_is_accepted(dataset):
    write(dataset, [good_row(bbox=[2, 3, 20, 30])])
    assert load_records(dataset)[0].bbox == [[2.0, 3.0, 20.0, 30.0]]
