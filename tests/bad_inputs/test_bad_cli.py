"""Bad input through every ``medgrpo`` command: exit code 2, exactly one ``medgrpo: <file/row/field>: <why>`` line
on stderr, no traceback, and nothing left where the output would have gone. With ``on_bad_record: skip`` the bad
rows are dropped and counted instead.

Cases already asserted elsewhere are listed in README.md beside this file (and checked by test_bad_index.py);
this file holds the ones that had no test.
"""

import shutil
from pathlib import Path

import numpy as np
import pytest

from medgrpo.cli import main as medgrpo
from medgrpo.data import load_records

REPO = Path(__file__).resolve().parents[2]
FORMATS = ["vqa_rad", "slake", "pathvqa", "pmc_vqa", "omnimedvqa", "medad_mcq", "jsonl", "hf"]


def refused(argv: list[str], capsys, *must_not_exist: Path) -> str:
    """Run ``medgrpo argv``; assert the refusal contract; return the one error line (without ``medgrpo: ``)."""
    try:
        code = medgrpo(argv)
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("medgrpo:")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err[-2000:]
    for path in must_not_exist:
        assert not path.exists(), f"{path} left behind"
    return lines[0].removeprefix("medgrpo: ")


@pytest.mark.parametrize("fmt", FORMATS)
def test_convert_an_empty_folder_names_what_is_missing(fmt, tmp_path, capsys):
    (tmp_path / "release").mkdir()
    line = refused(["data", "convert", "--format", fmt, "--input", str(tmp_path / "release"),
                    "--out", str(tmp_path / "out")], capsys, tmp_path / "out")
    assert line.startswith(f"{tmp_path / 'release'}: ") and ("no " in line or "needs --mapping" in line)


def test_convert_a_missing_input(tmp_path, capsys):
    line = refused(["data", "convert", "--format", "medad_mcq", "--input", str(tmp_path / "nope"),
                    "--out", str(tmp_path / "out")], capsys, tmp_path / "out")
    assert line == f"{tmp_path / 'nope'}: no such file or folder"


@pytest.fixture
def broken_dataset(synth_dir, tmp_path) -> Path:
    """Four MedAD-Synth rows; row 2's PNG is zero bytes and row 4's image is a truncated DICOM."""
    from medgrpo.data import write_records
    from medgrpo.data.dicom import write_dicom

    root = tmp_path / "data"
    (root / "images").mkdir(parents=True)
    records = load_records(synth_dir, split="train")[:4]
    for record in records:
        shutil.copy(synth_dir / record.images[0], root / record.images[0])
    (root / records[1].images[0]).write_bytes(b"")
    dicom = write_dicom(root / "images/cut.dcm", np.zeros((64, 64), "int16"), window=(40, 400))
    dicom.write_bytes(dicom.read_bytes()[:-900])
    records[3].images, records[3].bbox = ["images/cut.dcm"], None
    records[3].cot = records[3].cot.split("<box>")[0] if records[3].cot else None
    write_records(records, root / "train.jsonl")
    shutil.copy(root / "train.jsonl", root / "test.jsonl")
    return root


def _grpo(model: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return ["grpo", "--config", str(REPO / "recipes/tiny/con_grpo.yaml"), "--model_name_or_path", str(model),
            "--dataset_path", str(data), "--output_dir", str(out), "--max_steps", "1", "--num_generations", "2",
            "--per_device_train_batch_size", "2", "--max_completion_length", "4", "--save_strategy", "no",
            "--report_to", "none", *extra]


@pytest.mark.parametrize("stage", ["grpo", "sft"])
def test_training_on_a_zero_byte_png_names_file_row_and_field(stage, broken_dataset, tiny_model_dirs, tmp_path,
                                                               capsys):
    argv = _grpo(tiny_model_dirs["qwen2_5_vl"], broken_dataset, tmp_path / "out")
    if stage == "sft":
        argv = ["sft", "--config", str(REPO / "recipes/tiny/sft.yaml"), *argv[3:9], "--max_steps", "1",
                "--report_to", "none", "--save_strategy", "no"]
    line = refused(argv, capsys, tmp_path / "out")
    assert line.startswith(f"{broken_dataset / 'train.jsonl'}:2: field 'images': 'images/") and "cannot be read" in line


def test_training_skips_and_counts_unreadable_images(broken_dataset, tiny_model_dirs, tmp_path, capsys, caplog):
    """The zero-byte PNG is caught while records load; the truncated DICOM (its header reads) when its pixels are
    decoded for the dataset. Both are dropped, counted and named, and training goes on."""
    argv = _grpo(tiny_model_dirs["qwen2_5_vl"], broken_dataset, tmp_path / "out", "--on_bad_record", "skip")
    assert medgrpo(argv) == 0
    err = capsys.readouterr().err
    assert f"medgrpo: skipped 1 bad record(s); first: {broken_dataset / 'train.jsonl'}:2: field 'images'" in err
    dicom_row = load_records(broken_dataset / "train.jsonl", check_images=False)[3].id
    assert f"skipped 1 bad record(s) under {broken_dataset}: {dicom_row}" in caplog.text
    assert (tmp_path / "out/model.safetensors").is_file()


def test_eval_on_unreadable_images_is_one_line(broken_dataset, tiny_model_dirs, tmp_path, capsys):
    line = refused(["eval", "--model", str(tiny_model_dirs["qwen2_5_vl"]), "--suite", str(broken_dataset),
                    "--out", str(tmp_path / "out")], capsys, tmp_path / "out")
    assert "test.jsonl:2" in line and "images" in line


@pytest.mark.parametrize("case", ["missing", "not_a_model", "missing_recipe", "empty_recipe"])
def test_model_and_recipe_paths(case, tiny_model_dirs, synth_dir, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty.yaml").write_text("")
    argv, expected = {
        "missing": (["eval", "--model", str(tmp_path / "nope"), "--suite", str(synth_dir), "--out",
                     str(tmp_path / "out")], "nope"),
        "not_a_model": (["export", "--model", str(tmp_path / "empty"), "--out", str(tmp_path / "out")],
                        "no config.json or adapter_config.json: not a model folder"),
        "missing_recipe": (["grpo", "--config", str(tmp_path / "nope.yaml"), "--output_dir", str(tmp_path / "out")],
                           "nope.yaml"),
        "empty_recipe": (["sft", "--config", str(tmp_path / "empty.yaml"), "--model_name_or_path",
                          str(tmp_path / "nope"), "--output_dir", str(tmp_path / "out")], "empty.yaml must contain a YAML mapping"),
    }[case]
    assert expected in refused(argv, capsys, tmp_path / "out")


def test_synth_bad_counts(tmp_path, capsys):
    line = refused(["synth", "--n-train", "0", "--out", str(tmp_path / "out")], capsys, tmp_path / "out")
    assert line == "--n-train and --n-test must be >= 1 (got 0 and 500)"
