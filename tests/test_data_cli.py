"""`medgrpo data validate` and `medgrpo data convert` through the top-level CLI: exit codes and one-line errors."""

import json
import shutil
from pathlib import Path

import pytest
from PIL import Image

from medgrpo.cli import main

FIXTURES = Path(__file__).parent / "fixtures"


def _row(rid, **kw):
    row = {"id": rid, "images": ["images/a.png"], "question": "Which modality?", "options": ["CT", "MRI"],
           "answer": "A", "task": "modality_classification"}
    row.update(kw)
    return json.dumps(row)


@pytest.fixture
def dataset(tmp_path):
    (tmp_path / "ds" / "images").mkdir(parents=True)
    Image.new("RGB", (50, 40)).save(tmp_path / "ds" / "images" / "a.png")
    (tmp_path / "ds" / "train.jsonl").write_text(_row("a") + "\n" + _row("b", bbox=[1, 2, 30, 20]) + "\n")
    (tmp_path / "ds" / "test.jsonl").write_text(_row("c") + "\n")
    return tmp_path / "ds"


def test_validate_clean_folder(dataset, capsys):
    assert main(["data", "validate", str(dataset)]) == 0
    assert "ok: 3 valid record(s) in 2 file(s)" in capsys.readouterr().out


def test_validate_reports_every_bad_row(dataset, capsys):
    lines = [_row("a"), _row("b", answer="C"), _row("c", bbox=[1, 2, 60, 20]), _row("d", task="segmentation"),
             _row("e", images=["../../etc/passwd"]), _row("f", images=["images/missing.png"]), "{not json"]
    (dataset / "train.jsonl").write_text("\n".join(lines) + "\n")
    (dataset / "test.jsonl").write_text(_row("a") + "\n")
    assert main(["data", "validate", str(dataset)]) == 1
    out, err = capsys.readouterr()
    got = out.strip().splitlines()
    train = f"{dataset}/train.jsonl"
    assert got[:6] == [
        f"{train}:2: field 'answer': 'C' is not among the option letters AB",
        f"{train}:3: field 'bbox': [1.0, 2.0, 60.0, 20.0] lies outside the 50x40 image",
        f"{train}:4: field 'task': unknown task 'segmentation' (one of: anatomy_identification, "
        "modality_classification, anomaly_detection, pathology_characterization, lesion_localization, other)",
        f"{train}:5: field 'images': '../../etc/passwd' resolves outside the dataset root",
        f"{train}:6: field 'images': 'images/missing.png' does not exist",
        f"{train}:7: not valid JSON (Expecting property name enclosed in double quotes)",
    ]
    assert got[6] == f"{dataset}/test.jsonl:1: field 'id': duplicate id 'a' (also in train.jsonl)"
    assert "7 bad row(s), 2 valid" in err


def test_validate_missing_path_is_exit_2(tmp_path, capsys):
    assert main(["data", "validate", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("medgrpo: ") and err.count("\n") == 1


def test_convert_then_validate(tmp_path, capsys):
    src = tmp_path / "slake"
    shutil.copytree(FIXTURES / "slake", src)
    for name in ("xmlab0", "xmlab1"):
        (src / "imgs" / name).mkdir(parents=True)
        Image.new("RGB", (30, 30)).save(src / "imgs" / name / "source.jpg")
    assert main(["data", "convert", "--format", "slake", "--input", str(src), "--out", str(tmp_path / "out")]) == 0
    assert "dropped 1 row(s)" in capsys.readouterr().out
    assert main(["data", "validate", str(tmp_path / "out")]) == 0


def test_convert_bad_mapping_is_one_line_exit_2(tmp_path, capsys):
    src = tmp_path / "generic"
    shutil.copytree(FIXTURES / "generic", src)
    code = main(["data", "convert", "--format", "jsonl", "--input", str(src / "data.jsonl"),
                 "--out", str(tmp_path / "out"), "--mapping", str(src / "bad_mapping.yaml")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "field 'columns.question': column 'question_text' is not in" in err and not (tmp_path / "out").exists()


def test_help_and_unknown_subcommand(capsys):
    with pytest.raises(SystemExit) as ok:
        main(["data", "--help"])
    assert ok.value.code == 0 and "validate" in capsys.readouterr().out
    with pytest.raises(SystemExit) as bad:
        main(["data", "frobnicate"])
    assert bad.value.code == 2
    with pytest.raises(SystemExit) as conv:
        main(["data", "convert", "--help"])
    assert conv.value.code == 0 and "omnimedvqa" in capsys.readouterr().out
    with pytest.raises(SystemExit) as build:  # registered subcommands are importable and parse their options
        main(["data", "build", "--help"])
    assert build.value.code == 0 and "--config" in capsys.readouterr().out


def test_validate_the_embedded_synth_folder(synth_dir, capsys):
    assert main(["data", "validate", str(synth_dir)]) == 0
    assert capsys.readouterr().out.startswith("ok: ")
