"""Adapters: each public layout (fixtures under tests/fixtures/ in the published format) converts into a folder
that passes validation, with open/closed questions handled and dropped rows recorded in the card."""

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from medgrpo.data.adapters import ADAPTERS, AdapterError, convert
from medgrpo.data.record import load_records

FIXTURES = Path(__file__).parent / "fixtures"


def _png(path: Path, size=(40, 32)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(len(str(path)))
    Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)).save(path)
    return path


def _png_bytes(size=(24, 24)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, (10, 200, 30)).save(buf, format="PNG")
    return buf.getvalue()


def _source(tmp_path: Path, name: str, images: list[str]) -> Path:
    src = tmp_path / name
    shutil.copytree(FIXTURES / name, src)
    for rel in images:
        _png(src / rel)
    return src


def _load_all(out: Path) -> dict[str, dict]:
    return {r.id: r for split in ("train", "validation", "test") if (out / f"{split}.jsonl").exists()
            for r in load_records(out / f"{split}.jsonl")}


def test_vqa_rad(tmp_path):
    src = _source(tmp_path, "vqa_rad", ["VQA_RAD Image Folder/synpic100.jpg", "VQA_RAD Image Folder/synpic200.jpg"])
    report = convert("vqa_rad", src, tmp_path / "out")
    recs = _load_all(tmp_path / "out")
    assert set(recs) == {"vqa_rad-1", "vqa_rad-2", "vqa_rad-3", "vqa_rad-4", "vqa_rad-5"}
    assert recs["vqa_rad-1"].options == ["Yes", "No"] and recs["vqa_rad-1"].answer == "A"
    assert recs["vqa_rad-2"].answer == "B" and recs["vqa_rad-2"].task == "anomaly_detection"
    assert recs["vqa_rad-3"].options == [] and recs["vqa_rad-3"].answer == "x-ray"
    assert recs["vqa_rad-3"].task == "modality_classification"
    assert recs["vqa_rad-4"].options == [] and recs["vqa_rad-4"].answer == "left"  # closed but not yes/no
    assert recs["vqa_rad-5"].answer == "2"
    assert report.kept == {"train": 3, "test": 2}
    card = (tmp_path / "out" / "README.md").read_text()
    assert "licence: CC0" in card and "dropped rows: 2" in card and "synpic999.jpg" in card
    assert "'image_name'" in card  # the row without an image name, with why
    # one image shared by several questions is copied once
    assert len(list((tmp_path / "out" / "images").rglob("*.jpg"))) == 2


def test_vqa_rad_xml_release_converts_like_the_json(tmp_path):
    """The OSF release also publishes the table as XML, one element per question with its fields as children."""
    src = _source(tmp_path, "vqa_rad", ["VQA_RAD Image Folder/synpic100.jpg", "VQA_RAD Image Folder/synpic200.jpg"])
    items = json.loads((src / "VQA_RAD Dataset Public.json").read_text())
    fields = "".join(
        "<VQA_RAD_Public>" + "".join(f"<{k}>{v}</{k}>" for k, v in item.items()
                                     if isinstance(v, str | int | float)) + "</VQA_RAD_Public>"
        for item in items)
    xml = src / "VQA_RAD Dataset Public.xml"
    xml.write_text(f"<?xml version='1.0' encoding='utf-8'?><dataroot>{fields.replace('&', '&amp;')}</dataroot>")
    _converts_like_the_json(src, tmp_path)


def _converts_like_the_json(src: Path, tmp_path: Path) -> None:
    """The release's other table (beside the .json in ``src``) converts to the same records and counts."""
    from_json = convert("vqa_rad", src, tmp_path / "json")
    (src / "VQA_RAD Dataset Public.json").unlink()
    other = convert("vqa_rad", src, tmp_path / "other")
    assert other.kept == from_json.kept and len(other.dropped) == len(from_json.dropped)
    assert {k: (r.question, r.options, r.answer) for k, r in _load_all(tmp_path / "other").items()} == \
        {k: (r.question, r.options, r.answer) for k, r in _load_all(tmp_path / "json").items()}


def test_vqa_rad_xlsx_release_converts_like_the_json(tmp_path):
    """The spreadsheet release: a header row of the field names, one row per question (integers stay integers)."""
    import openpyxl  # the xlsx extra, installed by `make install`
    src = _source(tmp_path, "vqa_rad", ["VQA_RAD Image Folder/synpic100.jpg", "VQA_RAD Image Folder/synpic200.jpg"])
    items = json.loads((src / "VQA_RAD Dataset Public.json").read_text())
    header = sorted({k for item in items for k, v in item.items() if isinstance(v, str | int | float)})
    book = openpyxl.Workbook()
    book.active.append(header)
    for item in items:
        book.active.append([item.get(k) for k in header])
    book.save(src / "VQA_RAD Dataset Public.xlsx")
    _converts_like_the_json(src, tmp_path)


def test_vqa_rad_hub_parquet_copy(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    for split in ("train", "test"):
        (tmp_path / "vqarad" / "default" / split).mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(_hf_rows()), tmp_path / "vqarad/default" / split / "0000.parquet")
    report = convert("vqa_rad", tmp_path / "vqarad", tmp_path / "out")
    assert report.kept == {"train": 2, "test": 2}
    assert all(r.id.startswith("vqa_rad-default-") for r in _load_all(tmp_path / "out").values())


def test_slake_keeps_english_and_maps_splits(tmp_path):
    src = _source(tmp_path, "slake", ["imgs/xmlab0/source.jpg", "imgs/xmlab1/source.jpg"])
    report = convert("slake", src, tmp_path / "out")
    assert report.kept == {"train": 2, "validation": 1, "test": 1}
    recs = _load_all(tmp_path / "out")
    assert recs["slake-9"].modality == "MRI" and recs["slake-9"].anatomy == "abdomen"
    assert recs["slake-10"].options == ["Yes", "No"] and recs["slake-10"].task == "anatomy_identification"
    assert recs["slake-30"].options == [] and recs["slake-30"].answer == "Left Lung"
    assert "q_lang" in (tmp_path / "out" / "README.md").read_text()


PMC_IMAGES = ["images/PMC1_fig1.jpg", "images/PMC2_fig3.jpg", "images/PMC3_fig2.jpg", "images/PMC4_fig1.jpg",
              "images_2/PMC9_fig1.jpg", "images_2/PMC9_fig2.jpg", "images_2/PMC9_fig3.jpg"]


def test_pmc_vqa_version_1_strips_choice_prefixes_and_keeps_the_clean_test_set(tmp_path):
    src = _source(tmp_path, "pmc_vqa", PMC_IMAGES)
    with pytest.raises(AdapterError, match="both PMC-VQA versions.*--version"):
        convert("pmc_vqa", src, tmp_path / "refused")
    report = convert("pmc_vqa", src, tmp_path / "out", version="1")
    recs = _load_all(tmp_path / "out")
    first = recs["pmc_vqa-v1-train-1"]
    assert first.options == ["MRI", "CT scan", "Ultrasound", "PET"] and first.answer == "B"
    assert recs["pmc_vqa-v1-train-2"].answer_text() == "Liver"
    assert recs["pmc_vqa-v1-train-4"].answer == "B"  # an empty Answer cell: the label decides
    assert report.kept == {"train": 3, "test": 1, "test_clean": 1}
    assert load_records(tmp_path / "out", split="test_clean")[0].id == "pmc_vqa-v1-test_clean-1"
    assert len(report.dropped) == 1 and "train.csv:4" in report.dropped[0][0] and "Answer_label" in report.dropped[0][1]


def test_pmc_vqa_version_2_reads_letters_and_its_own_images_with_ids_apart_from_version_1(tmp_path):
    src = _source(tmp_path, "pmc_vqa", PMC_IMAGES)
    report = convert("pmc_vqa", src, tmp_path / "v2", version="2")
    recs = _load_all(tmp_path / "v2")
    assert report.kept == {"train": 2, "test": 1} and not report.dropped
    assert recs["pmc_vqa-v2-test-1"].answer_text() == "Optic disc"
    assert recs["pmc_vqa-v2-train-2"].options == ["H&E", "Gram", "PAS", "Giemsa"]
    convert("pmc_vqa", src, tmp_path / "v1", version="1")
    assert not set(recs) & set(_load_all(tmp_path / "v1"))
    with pytest.raises(AdapterError, match="one version"):
        convert("vqa_rad", src, tmp_path / "x", version="2")


def test_pmc_vqa_reads_the_file_names_and_column_spelling_of_the_dataset_card(tmp_path):
    """The card names version 2 train2.csv / test2.csv / images2.zip and spells the label column Anwser_label."""
    src = _source(tmp_path, "pmc_vqa", ["images2/PMC9_fig1.jpg", "images2/PMC9_fig2.jpg", "images2/PMC9_fig3.jpg",
                                        "images/PMC1_fig1.jpg", "images/PMC2_fig3.jpg", "images/PMC4_fig1.jpg"])
    for name in ("train_2.csv", "test_2.csv"):
        (src / name).rename(src / name.replace("_2", "2"))
    assert convert("pmc_vqa", src, tmp_path / "v2", version="2").kept == {"train": 2, "test": 1}
    (src / "train.csv").write_text((src / "train.csv").read_text().replace("Answer_label", "Anwser_label"))
    report = convert("pmc_vqa", src / "train.csv", tmp_path / "v1")
    assert report.kept == {"train": 3} and _load_all(tmp_path / "v1")["pmc_vqa-v1-train-4"].answer == "B"


def test_pmc_vqa_parquet_copies_of_the_tables_take_version_from_columns_and_split_from_folders(tmp_path):
    import csv

    import pyarrow as pa
    import pyarrow.parquet as pq

    src = _source(tmp_path, "pmc_vqa", PMC_IMAGES)
    hub = tmp_path / "hub"
    for name, folder in (("train.csv", "train"), ("test_clean.csv", "test_clean"), ("train_2.csv", "train2")):
        with open(src / name, newline="") as fh:
            rows = list(csv.DictReader(fh))
        (hub / "default" / folder).mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(rows), hub / "default" / folder / "0000.parquet")
    shutil.copytree(src / "images", hub / "images")
    with pytest.raises(AdapterError, match="both PMC-VQA versions"):
        convert("pmc_vqa", hub, tmp_path / "refused")
    report = convert("pmc_vqa", hub, tmp_path / "out", version="1")
    assert report.kept == {"train": 3, "test_clean": 1}
    assert len(report.dropped) == 1 and "train/0000.parquet:row 3" in report.dropped[0][0]
    # the same ids as the CSV release: the row's place in its table
    convert("pmc_vqa", src, tmp_path / "csv", version="1")
    from_csv = {k: (r.question, r.answer) for k, r in _load_all(tmp_path / "csv").items() if "-test-" not in k}
    assert {k: (r.question, r.answer) for k, r in _load_all(tmp_path / "out").items()} == from_csv


def test_omnimedvqa_matches_answer_text_to_option(tmp_path):
    src = _source(tmp_path, "omnimedvqa", ["Images/TinySet/img_001.png", "Images/TinySet/img_002.png"])
    report = convert("omnimedvqa", src, tmp_path / "out")
    recs = _load_all(tmp_path / "out")
    assert recs["omnimedvqa-TinySet_0001"].answer == "B"
    assert recs["omnimedvqa-TinySet_0001"].task == "modality_classification"
    assert recs["omnimedvqa-TinySet_0002"].options == ["Yes", "No"]
    assert report.kept["test"] >= 2 and any("gt_answer" in reason for _, reason in report.dropped)


def test_omnimedvqa_reads_the_hubs_zip_as_it_is_like_the_folder_it_unpacks_to(tmp_path):
    import zipfile

    src = _source(tmp_path, "omnimedvqa", ["Images/TinySet/img_001.png", "Images/TinySet/img_002.png",
                                           "Images/Chest CT Scan/test/adenocarcinoma/000108.png"])
    archive = tmp_path / "OmniMedVQA.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for file in sorted(src.rglob("*")):
            if file.is_file():
                zf.write(file, "OmniMedVQA/" + file.relative_to(src).as_posix())
    from_zip = convert("omnimedvqa", archive, tmp_path / "zip")
    from_folder = convert("omnimedvqa", src, tmp_path / "folder")
    assert from_zip.kept == from_folder.kept == {"test": 3}
    # the Restricted-access image is not in either: named and counted in both
    for report in (from_zip, from_folder):
        assert len(report.dropped) == 2 and "gt_answer" in report.dropped[0][1]
        assert "Images/RestrictedSet/train/case_07/slice_12.png' does not exist" in report.dropped[1][1]
    assert "OmniMedVQA.zip:OmniMedVQA/QA_information/Restricted-access/" in from_zip.dropped[1][0]
    assert {k: (r.question, r.options, r.answer) for k, r in _load_all(tmp_path / "zip").items()} == \
        {k: (r.question, r.options, r.answer) for k, r in _load_all(tmp_path / "folder").items()}
    zipped = sorted(p.read_bytes() for p in (tmp_path / "zip" / "images").rglob("*.png"))
    assert zipped == sorted(p.read_bytes() for p in (tmp_path / "folder" / "images").rglob("*.png"))
    with pytest.raises(AdapterError, match="no QA_information"):
        empty = tmp_path / "empty.zip"
        zipfile.ZipFile(empty, "w").close()
        convert("omnimedvqa", empty, tmp_path / "none")


def test_omnimedvqa_reads_its_files_quirks_as_published(tmp_path):
    """"modality" for "modality_type" (Chest CT Scan.json), a gt_answer differing from its option by case and a
    full stop, and a Restricted-access image path relative to its original dataset under Images/<dataset>/."""
    src = _source(tmp_path, "omnimedvqa", ["Images/TinySet/img_001.png", "Images/TinySet/img_002.png",
                                           "Images/Chest CT Scan/test/adenocarcinoma/000108.png",
                                           "Images/RestrictedSet/train/case_07/slice_12.png"])
    report = convert("omnimedvqa", src, tmp_path / "out")
    recs = _load_all(tmp_path / "out")
    ct = recs["omnimedvqa-Chest CT Scan_0001"]
    assert ct.answer == "A" and ct.modality == "CT(Computed Tomography)"
    assert recs["omnimedvqa-RestrictedSet_0001"].answer_text() == "Liver"
    assert report.kept == {"test": 4} and len(report.dropped) == 1  # TinySet_0003: "Both" is not an option


def test_medad_mcq_bad_rows_are_dropped_with_reasons(tmp_path):
    src = _source(tmp_path, "medad_mcq", ["imgs/brain_001.png"])
    _png(tmp_path / "outside.png")
    report = convert("medad_mcq", src, tmp_path / "out")
    recs = _load_all(tmp_path / "out")
    assert set(recs) == {"m1", "m2", "m3", "t2"}
    assert recs["m2"].answer == "A" and recs["m2"].bbox == [[4.0, 6.0, 20.0, 22.0]]
    assert recs["m3"].task == "anomaly_detection"
    reasons = "\n".join(f"{w}: {r}" for w, r in report.dropped)
    assert "train.jsonl:4: field 'answer': 'E' is not among" in reasons
    assert "train.jsonl:5: field 'task': unknown task 'Organ Counting'" in reasons
    assert "train.jsonl:6: field 'images'" in reasons and "outside the input folder" in reasons
    assert "test.jsonl:1: field 'id': duplicate id 'm1'" in reasons
    assert "test.jsonl:2: field 'bbox'" in reasons
    assert not (tmp_path / "out" / "images" / "outside.png").exists()


def test_generic_jsonl_with_mapping(tmp_path):
    src = _source(tmp_path, "generic", ["pics/a.png", "pics/b.png"])
    report = convert("jsonl", src / "data.jsonl", tmp_path / "out", mapping=src / "mapping.yaml")
    recs = _load_all(tmp_path / "out")
    assert recs["g1"].options == ["Yes", "No"] and recs["g1"].task == "anomaly_detection"
    assert recs["g2"].answer == "B" and recs["g2"].options == ["femur", "tibia", "radius"]
    assert recs["g3"].options == [] and report.kept == {"train": 2, "test": 1}
    assert "licence: CC BY 4.0" in (tmp_path / "out" / "README.md").read_text()


def test_mapping_naming_a_missing_column_is_one_line(tmp_path):
    src = _source(tmp_path, "generic", ["pics/a.png"])
    with pytest.raises(AdapterError) as err:
        convert("jsonl", src / "data.jsonl", tmp_path / "out", mapping=src / "bad_mapping.yaml")
    msg = str(err.value)
    assert "bad_mapping.yaml: field 'columns.question': column 'question_text' is not in" in msg
    assert "\n" not in msg and not (tmp_path / "out").exists()


def _hf_rows():
    return [
        {"image": {"bytes": _png_bytes(), "path": "p1.png"}, "question": "is this malignant?", "answer": "yes"},
        {"image": {"bytes": _png_bytes((30, 20)), "path": "p2.png"}, "question": "what stain is used?",
         "answer": "hematoxylin and eosin"},
    ]


def test_pathvqa_parquet_layout(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "pvqa" / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(_hf_rows()), tmp_path / "pvqa/data/train-00000-of-00001.parquet")
    pq.write_table(pa.Table.from_pylist(_hf_rows()[:1]), tmp_path / "pvqa/data/test-00000-of-00001.parquet")
    report = convert("pathvqa", tmp_path / "pvqa", tmp_path / "out")
    assert report.kept == {"train": 2, "test": 1}
    recs = load_records(tmp_path / "out" / "train.jsonl")
    assert recs[0].options == ["Yes", "No"] and recs[1].options == [] and recs[0].source == "PathVQA"


def test_pathvqa_hub_parquet_export_takes_the_split_from_the_folder(tmp_path):
    """The Hub serves every dataset as default/<split>/0000.parquet: the split comes from the folder, and the
    ids from the path, so no split's rows are dropped as duplicates of another's."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for split, n in (("train", 2), ("validation", 1), ("test", 2)):
        (tmp_path / "pvqa" / "default" / split).mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(_hf_rows()[:n]), tmp_path / "pvqa/default" / split / "0000.parquet")
    report = convert("pathvqa", tmp_path / "pvqa", tmp_path / "out")
    assert report.kept == {"train": 2, "validation": 1, "test": 2} and not report.dropped
    ids = [r.id for split in ("train", "validation", "test") for r in load_records(tmp_path / "out" / f"{split}.jsonl")]
    assert len(set(ids)) == 5 and "pathvqa-default-test-0000-0" in ids


def test_hf_save_to_disk_with_mapping(tmp_path):
    import datasets

    rows = [{"img": r["image"], "q": r["question"], "a": r["answer"], "opts": ["yes", "no"] if i == 0 else []}
            for i, r in enumerate(_hf_rows())]
    feats = datasets.Features({"img": datasets.Image(), "q": datasets.Value("string"), "a": datasets.Value("string"),
                               "opts": [datasets.Value("string")]})
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows, features=feats)}).save_to_disk(tmp_path / "saved")
    (tmp_path / "map.yaml").write_text("columns: {images: img, question: q, answer: a, options: opts}\ntask: other\n")
    report = convert("hf", tmp_path / "saved", tmp_path / "out", mapping=tmp_path / "map.yaml")
    recs = load_records(tmp_path / "out" / "train.jsonl")
    assert report.kept == {"train": 2}
    assert recs[0].options == ["yes", "no"] and recs[0].answer == "A"
    assert Image.open(tmp_path / "out" / recs[1].images[0]).size == (30, 20)


def test_every_format_is_registered_and_output_is_never_half_written(tmp_path):
    assert set(ADAPTERS) == {"vqa_rad", "slake", "pathvqa", "pmc_vqa", "omnimedvqa", "medad_mcq", "jsonl", "hf"}
    (tmp_path / "empty").mkdir()
    with pytest.raises(AdapterError, match="no 'VQA_RAD Dataset Public.json'"):
        convert("vqa_rad", tmp_path / "empty", tmp_path / "out")
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.jsonl").write_text(json.dumps({"id": "x", "image": "missing.png", "question": "q?",
                                                 "options": ["a", "b"], "answer": "A", "task": "other"}) + "\n")
    with pytest.raises(AdapterError, match="no usable rows"):
        convert("medad_mcq", src, tmp_path / "out")
    assert not (tmp_path / "out").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["empty", "src"]
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("x")
    with pytest.raises(AdapterError, match="not empty"):
        convert("medad_mcq", src, tmp_path / "full")
