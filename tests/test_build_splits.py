"""Leakage-free splits on a fixture with repeated patients, and the end-to-end build CLI."""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

import pytest

from medgrpo.data import load_records
from medgrpo.data.build import build_dataset, load_config
from medgrpo.data.build.cli import main
from medgrpo.data.build.readers import BuildError, SourceItem, make_reader
from medgrpo.data.build.splits import leaks, split_items

ROOT = Path(__file__).parents[1]
CXR = Path(__file__).parent / "fixtures" / "build" / "chestxray14"


def _items(groups: list[str]) -> list[SourceItem]:
    return [SourceItem(f"i{k}", Path(f"/x/i{k}.png"), [], g) for k, g in enumerate(groups)]


def test_groups_never_cross_splits_and_shares_follow_fractions():
    rng = random.Random(0)
    items = _items([f"p{rng.randrange(60)}" for _ in range(400)])  # ~7 images per patient
    splits = split_items(items, {"train": 0.7, "val": 0.1, "test": 0.2}, seed=1)
    assert sum(len(v) for v in splits.values()) == 400 and leaks(splits) == []
    where = defaultdict(set)
    for name, its in splits.items():
        for item in its:
            where[item.group].add(name)
    assert all(len(s) == 1 for s in where.values())
    assert abs(len(splits["train"]) - 280) <= 15 and abs(len(splits["test"]) - 80) <= 15
    assert split_items(items, {"train": 0.7, "val": 0.1, "test": 0.2}, seed=1) == splits
    assert split_items(items, {"train": 0.7, "val": 0.1, "test": 0.2}, seed=2) != splits


def test_leaks_reports_a_shared_patient_and_a_shared_image():
    a, b = _items(["p1", "p2"])
    c = SourceItem("i9", Path("/x/i0.png"), [], "p1")
    found = leaks({"train": [a], "test": [b, c]})
    assert found == ["group 'p1' in both train and test", "image '/x/i0.png' in both train and test"]


def test_bad_fractions_are_one_line():
    with pytest.raises(BuildError, match="fractions must be positive and sum to 1"):
        split_items(_items(["a"]), {"train": 0.8, "test": 0.3})


def test_chestxray_build_keeps_each_patient_in_one_split(tmp_path):
    patients = {i.id: i.group for i in make_reader("chestxray14", CXR).read()}
    assert max(list(patients.values()).count(p) for p in set(patients.values())) == 3  # repeated patients
    for seed in range(4):
        config = load_config(ROOT / "data" / "sources" / "chestxray14.yaml")
        config.root = CXR
        out = tmp_path / f"s{seed}"
        build_dataset(config, out, seed=seed)
        split_of = {}
        for split in ("train", "test"):
            for record in load_records(out, split=split):
                patient = patients[Path(record.images[0]).stem]
                assert split_of.setdefault(patient, split) == split, (seed, patient)
        assert set(split_of.values()) == {"train", "test"}


def _yaml(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "src.yaml"
    path.write_text(body)
    return path


def test_cli_builds_a_valid_folder_with_a_card(tmp_path, capsys):
    config = _yaml(tmp_path, f"source: br35h\nlayout: br35h\nroot: {CXR.parent / 'br35h'}\nmodality: MRI\n"
                             "anatomy: brain\nclasses: {yes: Glioma}\n")
    out = tmp_path / "out"
    assert main(["--config", str(config), "--out", str(out), "--seed", "3"]) == 0
    assert "wrote" in capsys.readouterr().out
    records = load_records(out)
    assert {r.source for r in records} == {"br35h"} and all(r.cot for r in records)
    assert any(r.evidence.get("finding") == "glioma" for r in records)  # unquoted `yes:` key still maps
    card = (out / "README.md").read_text()
    assert "## Questions per task" in card and "template_accepted" in card and "--seed 3" in card
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "src.yaml"]  # no temporary folder left


def test_cli_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    bad = _yaml(tmp_path, "source: x\nlayout: br35h\nroot: missing\ncolour: red\n")
    assert main(["--config", str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("medgrpo: ") and "field 'colour': unknown" in err and err.count("\n") == 1
    missing_root = _yaml(tmp_path, "source: x\nlayout: br35h\nroot: nowhere\n")
    assert main(["--config", str(missing_root), "--out", str(out)]) == 2
    assert "nowhere: source folder does not exist" in capsys.readouterr().err
    assert not out.exists()
    out.mkdir()
    (out / "keep.txt").write_text("x")
    good = _yaml(tmp_path, f"source: x\nlayout: br35h\nroot: {CXR.parent / 'br35h'}\n")
    assert main(["--config", str(good), "--out", str(out)]) == 2
    assert "output folder exists and is not empty" in capsys.readouterr().err


def test_build_is_deterministic_per_seed(tmp_path):
    config = load_config(ROOT / "data" / "sources" / "chestxray14.yaml")
    config.root = CXR
    texts = []
    for name, seed in (("a", 5), ("b", 5), ("c", 6)):
        build_dataset(config, tmp_path / name, seed=seed)
        texts.append((tmp_path / name / "train.jsonl").read_text() + (tmp_path / name / "test.jsonl").read_text())
    assert texts[0] == texts[1] and texts[0] != texts[2]
