"""MedAD-Synth: counts, balance, validity, boxes that hold the lesion, determinism, no text-only shortcut."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

from medgrpo.data import MedADRecord, load_records
from medgrpo.data import synth as synth_mod
from medgrpo.data.record import LETTERS, record_from_dict
from medgrpo.data.synth import (
    DETECTION_OPTIONS,
    TASK_FAMILIES,
    SynthError,
    difficulty_of,
    generate_synth,
    main,
)
from medgrpo.data.synth_draw import (
    ANATOMIES_BY_MODALITY,
    DIFFICULTIES,
    LESION_KINDS,
    QUADRANTS,
    SIZE,
    Scene,
    draw,
    place_lesion,
)
from medgrpo.prompts import BOX_RE, format_box

N_TRAIN, N_TEST = 300, 100


@pytest.fixture(scope="module")
def synth(tmp_path_factory) -> Path:
    return generate_synth(tmp_path_factory.mktemp("synth") / "medad-synth", N_TRAIN, N_TEST, seed=0)


@pytest.fixture(scope="module")
def splits(synth) -> dict[str, list[MedADRecord]]:
    return {name: load_records(synth, name) for name in ("train", "test")}


def _spread(counts: Counter, keys) -> int:
    return max(counts[k] for k in keys) - min(counts[k] for k in keys)


def test_folder_layout_and_counts(synth, splits):
    assert len(splits["train"]) == N_TRAIN and len(splits["test"]) == N_TEST
    assert len(list((synth / "images").glob("*.png"))) == N_TRAIN + N_TEST
    card = (synth / "README.md").read_text()
    assert "| task | train | test |" in card and "| answer letter | train | test |" in card
    assert f"| anatomy_identification | {N_TRAIN // 5} | {N_TEST // 5} |" in card
    assert not [p for p in synth.parent.iterdir() if p.name.startswith(".")]  # no temp folder left behind


def test_every_row_validates_with_images_and_boxes(synth):
    for name in ("train", "test"):
        for line_no, line in enumerate((synth / f"{name}.jsonl").read_text().splitlines(), 1):
            record_from_dict(json.loads(line), where=f"{name}:{line_no}", root=synth, check_images=True)


@pytest.mark.parametrize("split", ["train", "test"])
def test_tasks_classes_letters_and_difficulties_are_balanced(splits, split):
    records = splits[split]
    assert _spread(Counter(r.task for r in records), TASK_FAMILIES) <= 1
    by_task = defaultdict(list)
    for r in records:
        by_task[r.task].append(r)
    for task, recs in by_task.items():
        assert _spread(Counter(r.answer for r in recs), LETTERS[:4]) <= 1, task
        answers = Counter(r.answer_text() for r in recs)
        assert max(answers.values()) - min(answers.values()) <= 1, (task, answers)
    abnormal = Counter(difficulty_of(r.id) for r in records if r.task in ("pathology_characterization",
                                                                            "lesion_localization"))
    assert _spread(abnormal, DIFFICULTIES) <= 2
    assert {r.modality for r in records} == set(ANATOMIES_BY_MODALITY)
    assert len({r.anatomy for r in records}) >= 5


def _correct_text(r: MedADRecord) -> str:
    """The right option, derived from the scene (modality, anatomy, evidence), not from the answer letter."""
    ev = r.evidence
    if r.task == "modality_classification":
        return r.modality
    if r.task == "anatomy_identification":
        return r.anatomy
    if r.task == "anomaly_detection":
        return DETECTION_OPTIONS[[None, "left", "right", "bilateral"].index(ev["laterality"])]
    if r.task == "pathology_characterization":
        return ev["finding"]
    return ev["location"]


def test_exactly_one_option_is_true_of_the_image(splits):
    for r in splits["train"] + splits["test"]:
        assert len(r.options) == 4 and len(set(r.options)) == 4
        truth = _correct_text(r)
        assert r.options.count(truth) == 1 and r.answer_text() == truth, r.id


def test_evidence_boxes_and_cot_agree(splits):
    for r in splits["train"] + splits["test"]:
        ev = r.evidence
        assert set(ev) == {"abnormal", "finding", "location", "laterality", "appearance", "modality",
                           "anatomy", "size"}
        assert (ev["modality"], ev["anatomy"]) == (r.modality, r.anatomy)
        assert (difficulty_of(r.id) == "normal") == (not ev["abnormal"]) == (r.bbox is None)
        cot = r.cot
        assert "<think>" not in cot and "</think>" not in cot
        assert r.modality in cot and r.anatomy in cot
        assert cot.endswith(f"{r.answer} ({r.answer_text()}).")
        cited = [[float(v) for v in m.groups()] for m in BOX_RE.finditer(cot)]
        if not ev["abnormal"]:
            assert cited == [] and ev["finding"] is None
            continue
        assert cited == r.bbox  # the reasoning cites exactly the gold boxes, in original pixels
        assert len(r.bbox) == (2 if ev["laterality"] == "bilateral" else 1)
        assert ev["finding"] in cot and ev["size"] in cot and all(a in cot for a in ev["appearance"])
        for box, quadrant in zip(r.bbox, ev["location"].split(" and "), strict=True):
            x1, y1, x2, y2 = box
            assert 0 <= x1 < x2 <= SIZE and 0 <= y1 < y2 <= SIZE
            side, row = quadrant.split()[:2]
            half = SIZE / 2
            assert (x2 <= half) if side == "left" else (x1 >= half), (r.id, box, quadrant)
            assert (y2 <= half) if row == "upper" else (y1 >= half), (r.id, box, quadrant)
            assert quadrant in cot


def test_harder_lesions_are_smaller(splits):
    area = defaultdict(list)
    for r in splits["train"]:
        for x1, y1, x2, y2 in r.bbox or []:
            area[difficulty_of(r.id)].append((x2 - x1) * (y2 - y1))
    assert np.mean(area["easy"]) > np.mean(area["medium"]) > np.mean(area["hard"])


@pytest.mark.parametrize("modality,anatomy", [(m, a) for m, anas in ANATOMIES_BY_MODALITY.items() for a in anas])
def test_lesion_changes_the_pixels_inside_its_box_only(modality, anatomy):
    rng = np.random.default_rng(7)
    for i, kind in enumerate(LESION_KINDS):
        lesion = place_lesion(rng, kind, QUADRANTS[i % 4], ("easy", "medium", "hard")[i % 3])
        with_lesion, boxes = draw(Scene(modality, anatomy, (lesion,), seed=i))
        without, no_boxes = draw(Scene(modality, anatomy, (), seed=i))
        assert no_boxes == []
        signed = np.asarray(with_lesion, np.float32) - np.asarray(without, np.float32)
        diff = np.abs(signed).max(axis=-1) if signed.ndim == 3 else np.abs(signed)
        signed = signed.mean(axis=-1) if signed.ndim == 3 else signed
        x1, y1, x2, y2 = (int(v) for v in boxes[0])
        inside = np.zeros_like(diff, bool)
        inside[max(y1 - 2, 0):y2 + 2, max(x1 - 2, 0):x2 + 2] = True  # the soft edge may spill 1-2 px
        assert diff[~inside].max() == 0, (kind, "changed pixels outside the box")
        assert diff[y1:y2, x1:x2].mean() > 4, (kind, diff[y1:y2, x1:x2].mean())  # > 4 grey levels on average
        # ... and in the direction its appearance words say: brighter, darker, or a bright rim round a dark centre
        cx, cy = round(lesion.cx), round(lesion.cy)
        centre, box_mean = signed[cy - 1:cy + 2, cx - 1:cx + 2].mean(), signed[y1:y2, x1:x2].mean()
        if kind == "abscess":
            assert centre < 0 < signed[y1:y2, x1:x2].max(), (kind, centre)
        elif kind == "cyst":
            assert box_mean < 0, (kind, box_mean)
        else:
            assert box_mean > 0, (kind, box_mean)


def test_same_seed_gives_identical_bytes_and_another_seed_does_not(tmp_path):
    synth = generate_synth(tmp_path / "first", 40, 20, seed=0)
    again = generate_synth(tmp_path / "again", 40, 20, seed=0)
    files = sorted(p.relative_to(synth) for p in synth.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    for rel in files:
        assert (synth / rel).read_bytes() == (again / rel).read_bytes(), rel
    other = generate_synth(tmp_path / "other", 20, 5, seed=1)
    assert (other / "images/train_000000.png").read_bytes() != (synth / "images/train_000000.png").read_bytes()
    assert (other / "train.jsonl").read_text().splitlines()[0] != (synth / "train.jsonl").read_text().splitlines()[0]


def test_existing_folder_is_kept_unless_overwrite(tmp_path):
    out = tmp_path / "ds"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(SynthError, match="not empty"):
        generate_synth(out, 5, 5)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    generate_synth(out, 5, 5, overwrite=True)
    assert not (out / "keep.txt").exists() and len(load_records(out)) == 10


def test_failure_midway_leaves_nothing(tmp_path, monkeypatch):
    calls = []

    def failing_draw(scene):
        calls.append(scene)
        if len(calls) == 7:
            raise RuntimeError("disk full")
        return draw(scene)

    monkeypatch.setattr(synth_mod, "draw", failing_draw)
    with pytest.raises(RuntimeError, match="disk full"):
        generate_synth(tmp_path / "ds", 10, 5)
    assert list(tmp_path.iterdir()) == []


def test_cli(tmp_path, capsys):
    assert main(["--out", str(tmp_path / "ds"), "--n-train", "10", "--n-test", "5", "--seed", "3"]) == 0
    assert "records/s" in capsys.readouterr().out
    assert len(load_records(tmp_path / "ds", "test")) == 5
    assert main(["--out", str(tmp_path / "bad"), "--n-train", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("medgrpo: ") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "bad").exists()


def test_difficulty_of_rejects_foreign_ids():
    assert difficulty_of("synth-train-000001-hard") == "hard"
    with pytest.raises(SynthError):
        difficulty_of("vqa-rad-17")


# --- the text-only check: the question and options alone must not reveal the answer -----------------------


def _text_only_accuracy(train: list[MedADRecord], test: list[MedADRecord]) -> float:
    """Best of two text-only guessers fitted on ``train``: the most frequent answer letter per task, and the
    option whose text was most often right when shown (per task). Both ignore the image."""
    letter = {t: Counter(r.answer for r in train if r.task == t).most_common(1)[0][0] for t in TASK_FAMILIES}
    shown, right = defaultdict(Counter), defaultdict(Counter)
    for r in train:
        shown[r.task].update(r.options)
        right[r.task][r.answer_text()] += 1
    by_letter = np.mean([r.answer == letter[r.task] for r in test])
    by_prior = np.mean([
        LETTERS[int(np.argmax([right[r.task][o] / shown[r.task][o] if shown[r.task][o] else 0 for o in r.options]))]
        == r.answer for r in test
    ])
    return float(max(by_letter, by_prior))


def test_text_alone_stays_near_chance(splits):
    # 100 test questions: chance is 25% with a standard error of about 4.3%.
    assert _text_only_accuracy(splits["train"], splits["test"]) < 0.40


def test_text_only_check_catches_a_leaky_benchmark(splits):
    # The same records, but the distractors are drawn from texts that are never right: the check must fire.
    def leak(r: MedADRecord) -> MedADRecord:
        slot = LETTERS.index(r.answer)
        options = [f"unlikely finding {i}" for i in range(3)]
        options.insert(slot, r.answer_text())
        return MedADRecord(**{**r.to_dict(), "options": options})

    leaky = {k: [leak(r) for r in v] for k, v in splits.items()}
    assert _text_only_accuracy(leaky["train"], leaky["test"]) > 0.9


def test_questions_never_name_what_they_ask(splits):
    for r in splits["train"]:
        if r.task == "modality_classification":
            assert not re.search(rf"\b{r.anatomy}\b", r.question)
        if r.task == "anatomy_identification":
            assert r.modality not in r.question
        assert r.answer_text() not in r.question


def test_brief_cot_keeps_the_claims_in_fewer_words(tmp_path):
    full = generate_synth(tmp_path / "full", n_train=40, n_test=5, seed=3)
    brief = generate_synth(tmp_path / "brief", n_train=40, n_test=5, seed=3, cot_style="brief")
    full_rows = load_records(full, split="train")
    brief_rows = load_records(brief, split="train")
    assert [r.answer for r in full_rows] == [r.answer for r in brief_rows]
    assert sum(len(r.cot.split()) for r in brief_rows) < 0.6 * sum(len(r.cot.split()) for r in full_rows)
    for b in brief_rows:
        assert b.modality.lower() in b.cot.lower() and b.anatomy in b.cot
        assert b.cot.rstrip(".").endswith(f"{b.answer} ({b.answer_text()})")
        for box in b.bbox or []:
            assert format_box(box) in b.cot


def test_walk_cot_judges_the_options_in_order_up_to_the_answer_and_reads_as_consistent(tmp_path):
    from medgrpo.data.boxes import ImageGrid
    from medgrpo.prompts import build_target
    from medgrpo.rewards.verify import verify

    brief = load_records(generate_synth(tmp_path / "b", n_train=60, n_test=5, seed=5, cot_style="brief"), "train")
    walk = load_records(generate_synth(tmp_path / "w", n_train=60, n_test=5, seed=5, cot_style="walk"), "train")
    grid = ImageGrid("abs", 28, 56 * 56, 112 * 112)
    for b, w in zip(brief, walk, strict=True):
        assert (b.id, b.options, b.answer) == (w.id, w.options, w.answer)  # only the reasoning differs
        if w.task == "anomaly_detection":  # polarity options are not walked (no "no abnormality: no")
            assert w.cot == b.cot
            continue
        k = LETTERS.index(w.answer)
        walked = [f"{LETTERS[i]}. {o}: no." for i, o in enumerate(w.options[:k])]
        tail = " ".join([*walked, f"{w.answer}. {w.answer_text()}: yes, so the answer is {w.answer} "
                                  f"({w.answer_text()})."])
        assert w.cot.endswith(tail)
        frame = grid.frame(128, 128)
        scores = verify(build_target(w, frame), w, frame)
        assert scores["consistency"] == scores["reasoning_accuracy"] == scores["format"] == 1.0


def test_canonical_option_order_lists_classes_in_order_and_keeps_everything_else(tmp_path):
    shuffled = load_records(generate_synth(tmp_path / "s", n_train=120, n_test=5, seed=4), split="train")
    canonical = load_records(generate_synth(tmp_path / "c", n_train=120, n_test=5, seed=4,
                                            option_order="canonical"), split="train")
    for s, c in zip(shuffled, canonical, strict=True):
        classes = synth_mod._CLASSES[c.task]
        shown = [o.removesuffix(" quadrant") for o in c.options]
        assert [classes.index(o) for o in shown] == sorted(classes.index(o) for o in shown)
        # the same scene, class and option set; only the order, hence the letter, differs
        assert (s.id, s.images, s.answer_text(), sorted(s.options)) == (c.id, c.images, c.answer_text(),
                                                                         sorted(c.options))
        assert c.cot.rstrip(".").endswith(f"{c.answer} ({c.answer_text()})")
    # every letter still occurs: the letter depends on which distractors are shown
    assert set(Counter(r.answer for r in canonical)) == set(LETTERS[:4])
    assert "--option-order canonical" in (tmp_path / "c" / "README.md").read_text()


def test_slotted_option_order_lists_every_class_at_its_home_letter(tmp_path):
    slotted = load_records(generate_synth(tmp_path / "l", n_train=200, n_test=5, seed=4,
                                          option_order="slotted"), split="train")
    shown_at: dict[tuple[str, str], set[str]] = defaultdict(set)
    for r in slotted:
        classes = synth_mod._CLASSES[r.task]
        for letter, option in zip(LETTERS, r.options, strict=False):
            assert classes.index(option.removesuffix(" quadrant")) % 4 == LETTERS.index(letter)
            shown_at[(r.task, letter)].add(option)
        # the letter is the class's home, whatever else is shown
        assert r.answer == LETTERS[classes.index(r.answer_text().removesuffix(" quadrant")) % 4]
        assert r.cot.rstrip(".").endswith(f"{r.answer} ({r.answer_text()})")
    # answer letters stay balanced in every family, so no letter beats chance for a model blind to the class:
    # pathology's five kinds sit at A, B, C, D, A, and its two kinds at A are half as common as the others
    for task in synth_mod._CLASSES:
        counts = Counter(r.answer for r in slotted if r.task == task)
        assert set(counts) == set(LETTERS[:4]) and max(counts.values()) - min(counts.values()) <= 1, (task, counts)
    kinds = Counter(r.answer_text() for r in slotted if r.task == "pathology_characterization")
    assert kinds["nodule"] + kinds["calcification"] in range(kinds["mass"] - 2, kinds["mass"] + 3)
    # a letter two classes share shows either of them, as the correct option or as a distractor
    assert shown_at[("modality_classification", "A")] == {"X-ray", "fundus photography"}
    assert shown_at[("anatomy_identification", "C")] == {"brain", "skin"}
    assert "--option-order slotted" in (tmp_path / "l" / "README.md").read_text()


def test_fixed_option_order_lists_every_class_of_the_family_in_class_order(tmp_path):
    fixed = load_records(generate_synth(tmp_path / "f", n_train=150, n_test=5, seed=4, option_order="fixed"),
                         split="train")
    shuffled = load_records(generate_synth(tmp_path / "s", n_train=150, n_test=5, seed=4), split="train")
    for f, s in zip(fixed, shuffled, strict=True):
        classes = synth_mod._CLASSES[f.task]
        assert [o.removesuffix(" quadrant") for o in f.options] == list(classes)
        assert f.answer == LETTERS[classes.index(f.answer_text().removesuffix(" quadrant"))]
        assert (f.id, f.images, f.answer_text()) == (s.id, s.images, s.answer_text())  # the same scenes
    # classes are balanced, so letters are too: a model blind to the class scores one over the family's size
    for task, classes in synth_mod._CLASSES.items():
        counts = Counter(r.answer for r in fixed if r.task == task)
        assert set(counts) == set(LETTERS[:len(classes)]) and max(counts.values()) - min(counts.values()) <= 1


def test_visible_lesions_are_large_contrasted_and_one_place_per_quadrant(tmp_path):
    visible = load_records(generate_synth(tmp_path / "v", n_train=150, n_test=5, seed=4, setting="visible"),
                           split="train")
    assert {difficulty_of(r.id) for r in visible} == {"visible", "normal"}
    centres = defaultdict(list)
    for r in visible:
        for (x1, y1, x2, y2), quadrant in zip(r.bbox or [], (r.evidence["location"] or "").split(" and "),
                                              strict=False):
            assert x2 - x1 >= 16 and y2 - y1 >= 16  # radius 12-14 px (a calcification's dots span less)
            centres[quadrant.removesuffix(" quadrant")].append(((x1 + x2) / 2, (y1 + y2) / 2))
            assert "large" in r.cot
    for quadrant, points in centres.items():
        spread = np.ptp(np.array(points), axis=0)
        assert (spread <= 16).all(), (quadrant, spread)  # jitter and lobules only: boxes can be learned
    assert "--setting visible" in (tmp_path / "v" / "README.md").read_text()
    with pytest.raises(SynthError, match="--setting"):
        generate_synth(tmp_path / "x", n_train=2, n_test=1, setting="obvious")


def test_bad_option_order_is_one_line_error(tmp_path):
    with pytest.raises(SynthError, match="--option-order"):
        generate_synth(tmp_path / "x", n_train=2, n_test=1, option_order="sorted")


def test_the_training_split_does_not_depend_on_the_test_size(tmp_path):
    # A model trained on one folder can be scored on a larger held-out split drawn later (medgrpo demo --n-test).
    small = generate_synth(tmp_path / "small", n_train=30, n_test=5, seed=3)
    large = generate_synth(tmp_path / "large", n_train=30, n_test=60, seed=3)
    assert (small / "train.jsonl").read_text() == (large / "train.jsonl").read_text()
    first = load_records(small, split="train")[0].images[0]
    assert (small / first).read_bytes() == (large / first).read_bytes()
    assert len(load_records(large, split="test")) == 60
