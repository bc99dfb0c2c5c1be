"""SFT/GRPO dataset builders: columns per the contract, multi-image rows, the on_bad_record policy (bad rows
found before training), and PHI safety across every artifact the data pipeline writes."""

import json
import logging
import os
import subprocess
import sys

import datasets
import numpy as np
import pytest
from PIL import Image

from medgrpo.data import BuildReport, ImageSettings, to_grpo_dataset, to_sft_dataset
from medgrpo.data.adapters import convert
from medgrpo.data.boxes import ImageGrid
from medgrpo.data.dicom import write_dicom
from medgrpo.data.preprocess import prepare_images
from medgrpo.data.record import MedADRecord, RecordError, load_records

GRID = ImageGrid("abs", factor=28, min_pixels=56 * 56, max_pixels=28 * 28 * 16)


def _rec(rid, images=("a.png",), **kw):
    fields = dict(question="Is there a lesion?", options=["Yes", "No"], answer="A", task="anomaly_detection")
    fields.update(kw)
    return MedADRecord(id=rid, images=list(images), **fields)


@pytest.fixture
def root(tmp_path):
    Image.new("RGB", (200, 100), (40, 40, 40)).save(tmp_path / "a.png")
    Image.new("L", (64, 64), 200).save(tmp_path / "b.png")
    (tmp_path / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n-truncated")
    full = write_dicom(tmp_path / "full.dcm", np.zeros((64, 64), np.uint16)).read_bytes()
    (tmp_path / "cut.dcm").write_bytes(full[: len(full) // 2])
    return tmp_path


def test_grpo_columns_and_types(root):
    rec = _rec("r1", bbox=[[20.0, 10.0, 100.0, 50.0]], modality="CT", evidence={"abnormal": True},
               cot="A lesion at <box>[20, 10, 100, 50]</box>. So A.")
    ds = to_grpo_dataset([rec, _rec("r2", options=[], answer="a small nodule", task="other")], root, GRID)
    expected = {"prompt", "images", "id", "question", "options", "answer", "task", "modality", "anatomy",
                "evidence", "bbox", "cot", "source", "box_format", "image_size", "model_image_size", "target"}
    assert set(ds.column_names) == expected
    row = ds[0]
    assert row["prompt"][-1]["role"] == "user" and isinstance(row["prompt"][-1]["content"], str)
    assert row["image_size"] == [200, 100] and row["model_image_size"] == list(GRID.resized_size(200, 100))
    assert row["images"][0].size == tuple(row["model_image_size"]) and row["box_format"] == "abs"
    assert json.loads(row["bbox"]) == [[20.0, 10.0, 100.0, 50.0]] and json.loads(row["evidence"])["abnormal"]
    sx = row["model_image_size"][0] / 200
    assert f"<box>[{round(20 * sx)}, " in row["target"] and row["target"].endswith("<answer>A</answer>")
    assert ds[1]["options"] == [] and ds[1]["anatomy"] == "" and ds[1]["bbox"] == "" and ds[1]["evidence"] == ""


def test_sft_rows_and_multi_image(root):
    ds = to_sft_dataset([_rec("m", images=("a.png", "b.png"))], root, GRID, system_prompt=None)
    assert ds.column_names == ["prompt", "completion", "images"]
    row = ds[0]
    assert [m["role"] for m in row["prompt"]] == ["user"] and row["completion"][0]["role"] == "assistant"
    assert row["completion"][0]["content"].startswith("<think>")
    assert [im.size for im in row["images"]] == [GRID.resized_size(200, 100), GRID.resized_size(64, 64)]
    assert all(im.mode == "RGB" for im in row["images"])


BAD = {
    "missing image": _rec("bad", images=("nope.png",)),
    "corrupt image": _rec("bad", images=("broken.png",)),
    "truncated dicom": _rec("bad", images=("cut.dcm",)),
    "outside root": _rec("bad", images=("../x.png",)),
    "box outside image": _rec("bad", bbox=[[10.0, 10.0, 250.0, 50.0]]),
    "cot box outside": _rec("bad", cot="see <box>[0, 0, 10, 300]</box>"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_error_policy_names_the_row_before_training(root, case):
    with pytest.raises(RecordError) as err:
        to_grpo_dataset([_rec("ok"), BAD[case]], root, GRID, on_bad_record="error")
    msg = str(err.value)
    assert "row 2 (id 'bad')" in msg and "\n" not in msg


def test_skip_policy_counts_and_reports_ids(root, caplog):
    records = [_rec("ok1"), BAD["missing image"], _rec("ok2"), _rec("ok1"), BAD["corrupt image"]]
    report = BuildReport()
    with caplog.at_level(logging.WARNING):
        ds = to_sft_dataset(records, root, GRID, on_bad_record="skip", report=report)
    assert len(ds) == 2 and report.kept == 2
    assert [rid for rid, _ in report.skipped] == ["bad", "ok1", "bad"]
    assert "duplicate id 'ok1'" in report.skipped[1][1]
    assert "skipped 3 bad record(s)" in caplog.text
    with pytest.raises(RecordError, match="no usable records"):
        to_sft_dataset([BAD["missing image"]], root, GRID, on_bad_record="skip")
    with pytest.raises(RecordError, match="on_bad_record"):
        to_sft_dataset(records, root, GRID, on_bad_record="ignore")


PHI = {"PatientName": "Doe^Janeprivate", "PatientID": "MRN-99887766", "PatientBirthDate": "19530417",
       "StudyDate": "20240229", "InstitutionName": "St Example Hospital", "AccessionNumber": "ACC5551234"}


def test_phi_never_leaves_the_dicom_loader(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))  # rows files scanned too
    src = tmp_path / "src"
    (src / "imgs").mkdir(parents=True)
    hu = np.random.default_rng(0).integers(0, 2000, (60, 80)).astype(np.uint16)
    write_dicom(src / "imgs" / "study.dcm", hu, rescale=(1.0, -1024.0), window=(40, 400), extra=PHI)
    rows = [{"id": "p1", "image": "imgs/study.dcm", "question": "Which modality?", "options": ["CT", "MRI"],
             "answer": "A", "task": "modality_classification", "modality": "CT", "bbox": [[5, 5, 40, 30]]},
            {"id": "p2", "image": "imgs/missing.dcm", "question": "Which region?", "options": ["head", "chest"],
             "answer": "B", "task": "anatomy_identification"}]
    (src / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with caplog.at_level(logging.DEBUG):
        convert("medad_mcq", src, tmp_path / "converted")
        records = load_records(tmp_path / "converted" / "train.jsonl")
        settings = ImageSettings(window="soft_tissue", cache_dir=str(tmp_path / "cache"))
        for build in (to_sft_dataset, to_grpo_dataset):
            ds = build(records, tmp_path / "converted", GRID, settings)
            ds.save_to_disk(str(tmp_path / f"saved-{build.__name__}"))
            text = json.dumps([{k: v for k, v in row.items() if k != "images"} for row in ds], default=str)
            assert not any(value in text for value in PHI.values())
    artifacts = [p for p in tmp_path.rglob("*") if p.is_file() and not p.is_relative_to(src)]
    kinds = {p.suffix for p in artifacts}
    assert {".px", ".arrow", ".dcm", ".jsonl", ".md"} <= kinds  # cache, saved datasets, converted folder
    assert list((tmp_path / "hf-cache").glob("medgrpo-rows-*/rows.arrow"))  # the builders' own rows files
    needles = [v.encode() for v in PHI.values()] + [v.encode("utf-16-le") for v in PHI.values()]
    for path in artifacts:
        data = path.read_bytes()
        assert not any(n in data for n in needles), path
    assert not any(value in caplog.text for value in PHI.values())
    # the de-identified copy still decodes to the same pixels as the original
    from medgrpo.data.dicom import read_dicom

    copy = next(p for p in artifacts if p.suffix == ".dcm")
    np.testing.assert_array_equal(read_dicom(copy)[0], read_dicom(src / "imgs" / "study.dcm")[0])


def test_images_are_a_fixed_point_of_each_tiny_processor(tiny_model_dirs, synth_dir):
    """What the builders hand to TRL is already on each real processor's grid: re-processing keeps the size,
    so trainer, vLLM and evaluator count the same image tokens."""
    from transformers import AutoProcessor

    records = load_records(synth_dir, split="test")[:4]
    for arch, path in tiny_model_dirs.items():
        processor = AutoProcessor.from_pretrained(path)
        grid = ImageGrid.from_processor(processor, arch)
        ds = to_grpo_dataset(records, synth_dir, grid)
        patch = processor.image_processor.patch_size
        for row in ds:
            (_, gh, gw), = processor.image_processor(images=row["images"][:1], return_tensors="np")["image_grid_thw"]
            assert [gw * patch, gh * patch] == row["model_image_size"], arch
            assert row["box_format"] == ("abs" if arch == "qwen2_5_vl" else "rel1000")


def test_rows_are_streamed_to_a_memory_mapped_file_losslessly(root, tmp_path, monkeypatch):
    """The dataset is backed by one Arrow file in a medgrpo-rows-* folder of the datasets cache (host memory
    does not grow with the dataset), and its images decode to exactly the prepared pixels."""
    cache = tmp_path / "hf-cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(cache))
    records = [_rec("m", images=("a.png", "b.png")), _rec("n")]
    for build in (to_sft_dataset, to_grpo_dataset):
        ds = build(records, root, GRID)
        files = [f["filename"] for f in ds.cache_files]
        assert len(files) == 1 and files[0].startswith(str(cache)) and "medgrpo-rows-" in files[0]
        for row, record in zip(ds, records, strict=True):
            prepared, _ = prepare_images(record, root, GRID)
            assert len(row["images"]) == len(prepared)
            for got, want in zip(row["images"], prepared, strict=True):
                np.testing.assert_array_equal(np.asarray(got.convert("RGB")), np.asarray(want))


def test_a_failed_build_leaves_no_rows_folder(root, tmp_path, monkeypatch):
    cache = tmp_path / "hf-cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(cache))
    with pytest.raises(RecordError, match="row 2"):
        to_grpo_dataset([_rec("ok"), BAD["corrupt image"]], root, GRID, on_bad_record="error")
    with pytest.raises(RecordError, match="no usable records"):
        to_sft_dataset([BAD["missing image"]], root, GRID, on_bad_record="skip")
    assert not list(cache.glob("medgrpo-rows-*"))


def test_the_rows_folder_goes_when_the_process_exits(root, tmp_path):
    script = (
        "import sys; from medgrpo.data import to_sft_dataset; from medgrpo.data.boxes import ImageGrid;"
        "from medgrpo.data.record import MedADRecord;"
        "r = MedADRecord(id='x', images=['a.png'], question='Q?', options=['Yes', 'No'], answer='A', task='other');"
        "ds = to_sft_dataset([r], sys.argv[1], ImageGrid('abs', 28, 3136, 12544));"
        "print(ds.cache_files[0]['filename'])"
    )
    env = {"HF_DATASETS_CACHE": str(tmp_path / "hf-cache"), "HF_HUB_OFFLINE": "1", "PATH": ""}
    proc = subprocess.run([sys.executable, "-c", script, str(root)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    written = proc.stdout.strip().splitlines()[-1]
    assert written.startswith(str(tmp_path / "hf-cache")) and written.endswith("rows.arrow")
    assert not list((tmp_path / "hf-cache").glob("medgrpo-rows-*"))


def test_an_unwritable_datasets_cache_is_one_line(root, tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(blocker / "cache"))
    with pytest.raises(RecordError, match=r"HF_DATASETS_CACHE .*not-a-folder/cache: cannot hold the training rows"):
        to_sft_dataset([_rec("ok")], root, GRID)


def test_a_disk_full_while_writing_rows_is_one_line_and_leaves_nothing(root, tmp_path, monkeypatch):
    import errno

    from datasets.arrow_writer import ArrowWriter

    cache = tmp_path / "hf-cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(cache))

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ArrowWriter, "finalize", full)
    with pytest.raises(RecordError, match=r"cannot hold the training rows \(No space left on device\)"):
        to_grpo_dataset([_rec("ok")], root, GRID)
    assert not list(cache.glob("medgrpo-rows-*"))


def test_rows_folders_of_dead_processes_on_this_host_are_swept(root, tmp_path, monkeypatch):
    """A process killed with SIGKILL cannot clean up; the next build on the same host removes its folder, and
    leaves those of live processes and of other hosts (a shared cache) alone."""
    import socket

    cache = tmp_path / "hf-cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(cache))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    stale = cache / f"medgrpo-rows-{host}-{dead.pid}-abc"
    live = cache / f"medgrpo-rows-{host}-{os.getppid()}-abc"
    elsewhere = cache / f"medgrpo-rows-other-host-{dead.pid}-abc"
    for folder in (stale, live, elsewhere):
        folder.mkdir(parents=True)
        (folder / "rows.arrow").write_bytes(b"")
    ds = to_sft_dataset([_rec("ok")], root, GRID)
    assert not stale.exists() and live.is_dir() and elsewhere.is_dir()
    assert f"medgrpo-rows-{host}-{os.getpid()}-" in ds.cache_files[0]["filename"]
