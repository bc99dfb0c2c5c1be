"""The evaluation harness end to end: CLI on MedAD-Synth with tiny models, resume, bad inputs, reports, compare."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from PIL import Image

from medgrpo.data import load_records
from medgrpo.data.boxes import ImageGrid
from medgrpo.eval.cli import main
from medgrpo.eval.evaluate import EvalError, evaluate, read_predictions
from medgrpo.eval.generate import Completion, ModelLoadError, TransformersGenerator
from medgrpo.eval.report import compare
from medgrpo.eval.suites import SuiteError, load_suite
from medgrpo.prompts import SYSTEM_PROMPT, build_target, instruction

REPO = Path(__file__).resolve().parents[1]


def _suite(tmp_path: Path, data: Path, limit: int | None = None) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(f"name: t\ndatasets:\n  - name: synth\n    path: {data}\n    split: test\n"
                    + (f"    limit: {limit}\n" if limit else ""), encoding="utf-8")
    return path


def test_cli_end_to_end_on_synth(tiny_model_dirs, synth_dir, tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["--model", str(tiny_model_dirs["qwen2_5_vl"]), "--suite", str(_suite(tmp_path, synth_dir, 12)),
               "--out", str(out), "--batch-size", "4", "--max-new-tokens", "12", "--num-samples", "2",
               "--no-progress"])
    assert rc == 0, capsys.readouterr().err
    rows = read_predictions(out / "predictions.jsonl")
    assert len(rows) == 12 and len({r["id"] for r in rows}) == 12
    assert all(len(r["samples"]) == 2 for r in rows)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["schema_version"] == 1
    ds = metrics["datasets"]["synth"]
    assert ds["overall"]["n"] == 12 and 0.0 <= ds["overall"]["accuracy"]["value"] <= 1.0
    assert set(ds["by_task"]) == {r["task"] for r in rows}
    n_anomaly = sum(r["task"] == "anomaly_detection" for r in rows)
    assert n_anomaly and ds["anomaly"]["n_scored"] == n_anomaly
    for r in rows:
        if r["task"] == "anomaly_detection":
            assert sum(r["letter_probs"].values()) == pytest.approx(1.0, abs=1e-5)
    assert ds["baselines"]["random_option"]["accuracy"] == 0.25
    assert ds["baselines"]["majority_answer"]["fit_on"] == "train"
    assert ds["sampling"]["k"] == 2
    report = (out / "report.md").read_text()
    assert "chance: random option" in report and "| anomaly_detection |" in report
    for png in ("per_task_synth.png", "reliability_synth.png"):
        with Image.open(out / png) as im:
            assert im.size[0] > 100
    assert "synth: 12 records" in capsys.readouterr().out


def test_rel1000_architecture_runs(tiny_model_dirs, synth_dir, tmp_path):
    metrics = evaluate(tiny_model_dirs["qwen3_vl"], _suite(tmp_path, synth_dir, 4), tmp_path / "run",
                       batch_size=4, max_new_tokens=8, n_boot=50, progress=False)
    assert metrics["datasets"]["synth"]["overall"]["n"] == 4


class _Recorder:
    """Wraps a real generator: counts the records it generates for, and can fail on a chosen call."""

    def __init__(self, inner: TransformersGenerator, fail_on_call: int | None = None):
        self.inner, self.grid, self.fail_on_call = inner, inner.grid, fail_on_call
        self.calls = self.records = 0

    def generate(self, batch, **kwargs):
        self.calls += 1
        if self.calls == self.fail_on_call:
            raise KeyboardInterrupt  # what a killed run looks like from inside the loop
        self.records += len(batch)
        return self.inner.generate(batch, **kwargs)

    def letter_probs(self, *args):
        return self.inner.letter_probs(*args)


def test_resume_after_interruption(tiny_model_dirs, synth_dir, tmp_path):
    gen = TransformersGenerator(tiny_model_dirs["qwen2_5_vl"])
    suite = _suite(tmp_path, synth_dir, 10)
    kw = dict(batch_size=4, max_new_tokens=10, n_boot=50, progress=False)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        evaluate(gen.model.name_or_path, suite, out, generator=_Recorder(gen, fail_on_call=2), **kw)
    assert len(read_predictions(out / "predictions.jsonl")) == 4 and not (out / "metrics.json").exists()
    with open(out / "predictions.jsonl", "a") as fh:
        fh.write('{"dataset": "synth", "id": "tor')  # the kill landed mid-write
    again = _Recorder(gen)
    resumed = evaluate(gen.model.name_or_path, suite, out, generator=again, **kw)
    assert again.records == 6  # only the records the first run did not finish
    rows = read_predictions(out / "predictions.jsonl")
    assert len(rows) == 10 and len({r["id"] for r in rows}) == 10
    fresh = evaluate(gen.model.name_or_path, suite, tmp_path / "fresh", generator=gen, **kw)
    by_id = {r["id"]: r["completion"] for r in read_predictions(tmp_path / "fresh" / "predictions.jsonl")}
    assert {r["id"]: r["completion"] for r in rows} == by_id
    assert resumed["datasets"]["synth"]["overall"] == fresh["datasets"]["synth"]["overall"]
    nothing = _Recorder(gen)
    evaluate(gen.model.name_or_path, suite, out, generator=nothing, **kw)
    assert nothing.records == 0
    with pytest.raises(EvalError, match="max_new_tokens"):
        evaluate(gen.model.name_or_path, suite, out, generator=gen, **{**kw, "max_new_tokens": 11})


def test_missing_dataset_path_names_path_and_command(tiny_model_dirs, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rc = main(["--model", str(tiny_model_dirs["qwen2_5_vl"]), "--suite", str(REPO / "eval/suites/medad-synth.yaml"),
               "--out", "out"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert str(tmp_path / "data/medad-synth") in err and "medgrpo synth --out data/medad-synth" in err
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_shipped_suites_parse_and_say_how_to_get_data(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    suites = sorted((REPO / "eval/suites").glob("*.yaml"))
    assert {p.stem for p in suites} >= {"medad-synth", "vqa-rad", "slake", "pathvqa", "pmc-vqa", "omnimedvqa",
                                         "medad-38k"}
    for path in suites:
        for spec in load_suite(path).datasets:
            with pytest.raises(SuiteError, match="create it with: medgrpo"):
                spec.check_exists()


@pytest.mark.parametrize("text, message", [
    ("datasets: []\n", "non-empty list"),
    ("datasets:\n  - {name: a}\n", "field 'path'"),
    ("datasets:\n  - {name: a, path: b, limt: 3}\n", "unknown key 'limt'"),
    ("datasets:\n  - {name: a, path: b, limit: 0}\n", "field 'limit'"),
    ("datasets: [\n", "not valid YAML"),
])
def test_bad_suite_is_one_line(tmp_path, text, message):
    path = tmp_path / "s.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SuiteError, match=message) as info:
        load_suite(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_model_folder_without_processor(tiny_model_dirs, synth_dir, tmp_path, capsys):
    bare = tmp_path / "bare"
    shutil.copytree(tiny_model_dirs["qwen2_5_vl"], bare)
    (bare / "processor_config.json").unlink()  # transformers 5 saves the image processor in here
    (bare / "preprocessor_config.json").unlink(missing_ok=True)
    rc = main(["--model", str(bare), "--suite", str(_suite(tmp_path, synth_dir, 2)), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("medgrpo: ") and "no processor" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "o").exists()
    with pytest.raises(ModelLoadError, match="base_model_name_or_path"):
        (tmp_path / "lora").mkdir()
        (tmp_path / "lora" / "adapter_config.json").write_text("{}")
        TransformersGenerator(tmp_path / "lora")


class _Scripted:
    """A generator test double: answers each prompt with a completion chosen from its record (real grid)."""

    def __init__(self, records, root: Path, write):
        self.grid = ImageGrid("abs", 28, 56 * 56, 112 * 112)
        self.by_text = {}
        for r in records:
            with Image.open(root / r.images[0]) as im:
                frame = self.grid.frame(*im.size)
            self.by_text[instruction(r, "abs")] = (r, frame)
        self.write = write

    def generate(self, batch, num_samples=1, sample=False, **kwargs):
        out = []
        for i, p in enumerate(batch):
            record, frame = self.by_text[p.messages[-1]["content"]]
            out.append([Completion(self.write(record, frame, i), 7)] * (num_samples if sample else 1))
        return out

    def letter_probs(self, batch, prefixes, letters):
        return [{L: 1 / len(opts) for L in opts} for opts in letters]


BROKEN = ["", "<think>I see a lesion in the left lobe.</think>", "<think>x</think>\n<answer></answer>",
          "<answer>Z</answer>", "<think><answer>A", "<ANSWER>A</ANSWER>"]


def test_no_answer_is_wrong_and_format_failure_and_compare(synth_dir, tmp_path, capsys):
    records = load_records(synth_dir, split="test")[:12]
    gold = _Scripted(records, synth_dir, lambda r, frame, i: build_target(r, frame))
    broken = _Scripted(records, synth_dir, lambda r, frame, i: BROKEN[i % len(BROKEN)])
    suite = _suite(tmp_path, synth_dir, 12)
    kw = dict(batch_size=6, n_boot=100, progress=False)
    good = evaluate("gold-model", suite, tmp_path / "gold", generator=gold, **kw)["datasets"]["synth"]
    bad = evaluate("broken-model", suite, tmp_path / "broken", generator=broken, **kw)["datasets"]["synth"]
    assert good["overall"]["accuracy"]["value"] == 1.0 and good["overall"]["format_failure_rate"]["value"] == 0.0
    assert good["overall"]["grounding_acc50"]["value"] == 1.0
    assert bad["overall"]["accuracy"]["value"] == 0.0 and bad["overall"]["format_failure_rate"]["value"] == 1.0
    assert all(c["macro_f1"] == 0.0 for c in bad["classification"].values())
    assert (tmp_path / "broken" / "report.md").is_file()
    text = compare([tmp_path / "gold", tmp_path / "broken"], n_boot=100)
    line = next(x for x in text.splitlines() if x.startswith("synth") and " accuracy " in x)
    assert "-100.0" in line and line.rstrip().endswith("12")
    assert main(["--compare", str(tmp_path / "gold"), str(tmp_path / "broken")]) == 0
    assert "format failures" in capsys.readouterr().out
    assert main(["--compare", str(tmp_path / "gold"), str(tmp_path / "nowhere")]) == 2


def _mixed_dataset(root: Path) -> Path:
    """Two-image MCQ, an open-ended question, and (row 3) an image that is not an image."""
    (root / "images").mkdir(parents=True)
    for name, size in (("a.png", (64, 48)), ("b.png", (40, 40))):
        Image.new("RGB", size, (90, 90, 90)).save(root / "images" / name)
    (root / "images" / "broken.png").write_bytes(b"not a png")
    rows = [
        {"id": "two", "images": ["images/a.png", "images/b.png"], "question": "Which view is brighter?",
         "options": ["first", "second"], "answer": "A", "task": "other", "source": "mixed"},
        {"id": "open", "images": ["images/b.png"], "question": "Name the organ.", "options": [],
         "answer": "liver", "task": "other", "source": "mixed"},
        {"id": "bad", "images": ["images/broken.png"], "question": "Is it normal?", "options": ["yes", "no"],
         "answer": "B", "task": "anomaly_detection", "source": "mixed"},
    ]
    (root / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return root


def test_multi_image_open_ended_and_unreadable_image(tiny_model_dirs, tmp_path):
    data = _mixed_dataset(tmp_path / "mixed")
    gen = TransformersGenerator(tiny_model_dirs["qwen2_vl"])
    kw = dict(batch_size=3, max_new_tokens=6, n_boot=50, progress=False, generator=gen)
    with pytest.raises(EvalError, match="record 'bad': field 'images'") as info:
        evaluate("m", data, tmp_path / "strict", **kw)
    assert "\n" not in str(info.value)
    suite = tmp_path / "skip.yaml"
    suite.write_text(f"datasets:\n  - {{name: mixed, path: {data}, on_bad_record: skip}}\n", encoding="utf-8")
    ds = evaluate("m", suite, tmp_path / "skip", **kw)["datasets"]["mixed"]
    assert ds["overall"]["n"] == 2 and ds["skipped_records"] == 1
    assert ds["baselines"]["random_option"]["accuracy"] == 0.5  # the open-ended row has no options
    assert ds["baselines"]["majority_answer"]["fit_on"] == "eval"  # no train split to fit on
    assert ds["classification"] == {} and ds["anomaly"] is None


def test_vllm_backend_without_vllm_is_one_line(tiny_model_dirs, synth_dir, tmp_path, capsys):
    try:
        import vllm  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("vLLM is installed here")
    rc = main(["--model", str(tiny_model_dirs["qwen2_5_vl"]), "--suite", str(_suite(tmp_path, synth_dir, 2)),
               "--out", str(tmp_path / "o"), "--backend", "vllm"])
    assert rc == 2 and "pip install 'medgrpo[vllm]'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_judge_backend_scores_reach_metrics(synth_dir, tmp_path, monkeypatch):
    from medgrpo.rewards import JudgeSettings, RewardSettings
    from medgrpo.rewards import judge as judge_mod

    reply = ('{"visual_grounding": 0.25, "question_relevance": 0.5, "answer_support": 0.75, '
             '"no_hallucination": 1, "no_contradiction": 0}')
    asked = []

    def transport(batch):  # stands in for the judge model; the client, parsing and verify are real
        asked.append(len(batch))
        return [reply] * len(batch)

    monkeypatch.setattr(judge_mod, "judge_for", lambda settings: judge_mod.JudgeClient(settings, transport))
    records = load_records(synth_dir, split="test")[:6]
    gold = _Scripted(records, synth_dir, lambda r, frame, i: build_target(r, frame))
    settings = RewardSettings(evidence_backend="judge", judge=JudgeSettings(transport="http"))
    metrics = evaluate("m", _suite(tmp_path, synth_dir, 6), tmp_path / "judged", generator=gold, batch_size=3,
                       n_boot=50, progress=False, reward_settings=settings)
    ov = metrics["datasets"]["synth"]["overall"]
    assert asked == [3, 3]  # one batched judge call per generation batch
    assert ov["evidence/visual_grounding"]["value"] == 0.25 and ov["evidence/no_contradiction"]["value"] == 0.0
    assert ov["evidence"]["value"] == pytest.approx(0.5)
    assert metrics["generation"]["evidence_backend"] == "judge"


def test_conclusion_vs_letter_separates_reasoning_from_letter(synth_dir, tmp_path, monkeypatch, capsys):
    """Gold reasoning with the letter always "A": reasoning right everywhere, letter right only where A is gold, and
    the per-option tally shows the one letter given."""
    import runpy

    records = [r for r in load_records(synth_dir, split="test") if r.task == "modality_classification"]
    rows = [{"id": r.id, "task": r.task, "pred": "A", "completion": f"<think>{r.cot}</think><answer>A</answer>"}
            for r in records]
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "predictions.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    argv = ["conclusion_vs_letter.py", str(synth_dir), str(tmp_path / "eval"), "--letters", "modality_classification"]
    monkeypatch.setattr("sys.argv", argv)
    runpy.run_path(str(REPO / "eval" / "conclusion_vs_letter.py"), run_name="__main__")
    out = capsys.readouterr().out
    n, letter, reasoning = out.split("modality_classification")[1].split()[:3]
    assert int(n) == len(records) and float(reasoning) == 1.0
    assert float(letter) == pytest.approx(sum(r.answer == "A" for r in records) / len(records), abs=1e-3)
    tally = out.split("letter given per gold option")[1].splitlines()[1:]
    golds = {r.options[r.letters.index(r.answer)] for r in records}
    assert len(tally) == len(golds) and all(line.split()[-1].startswith("A:") for line in tally)


def test_conclusion_vs_letter_tells_a_class_prior_from_a_letter_that_reads_the_options(synth_dir, tmp_path,
                                                                                       monkeypatch, capsys):
    """Gold reasoning everywhere; one run's letter is the most common gold letter of the record's class (a policy
    that never reads the option list), the other's the gold letter. The prior scores exactly the class-table
    ceiling and 0 off the table; the lookup scores 1 off the table."""
    import runpy
    from collections import Counter, defaultdict

    records = [r for split in ("train", "test") for r in load_records(synth_dir, split=split)]
    by_class: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for r in records:
        by_class[r.task, r.answer_text()][r.answer] += 1
    table = {key: golds.most_common(1)[0][0] for key, golds in by_class.items()}
    assert any(r.answer != table[r.task, r.answer_text()] for r in records)  # some records are off the table
    for name, letter_of in (("prior", lambda r: table[r.task, r.answer_text()]), ("lookup", lambda r: r.answer)):
        rows = [{"id": r.id, "task": r.task, "pred": letter_of(r),
                 "completion": f"<think>{r.cot}</think><answer>{letter_of(r)}</answer>"} for r in records]
        (tmp_path / name).mkdir()
        (tmp_path / name / "predictions.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    monkeypatch.setattr("sys.argv", ["c.py", str(synth_dir), str(tmp_path / "prior"), str(tmp_path / "lookup")])
    runpy.run_path(str(REPO / "eval" / "conclusion_vs_letter.py"), run_name="__main__")
    prior, lookup = (part.split("overall")[1].split()[:5]
                     for part in capsys.readouterr().out.split(str(tmp_path / "lookup")))
    ceiling = sum(max(golds.values()) for golds in by_class.values()) / len(records)
    assert float(prior[1]) == pytest.approx(ceiling, abs=1e-3) and float(prior[3]) == pytest.approx(ceiling, abs=1e-3)
    assert float(prior[4]) == 0.0 and float(lookup[4]) == 1.0 and float(lookup[1]) == 1.0


def test_conclusion_vs_letter_names_the_tasks_when_letters_task_is_unknown(synth_dir, tmp_path, monkeypatch, capsys):
    import runpy

    record = load_records(synth_dir, split="test")[0]
    row = {"id": record.id, "task": record.task, "pred": "A", "completion": "<think>x</think><answer>A</answer>"}
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "predictions.jsonl").write_text(json.dumps(row) + "\n")
    monkeypatch.setattr("sys.argv", ["c.py", str(synth_dir), str(tmp_path / "eval"), "--letters", "modality"])
    runpy.run_path(str(REPO / "eval" / "conclusion_vs_letter.py"), run_name="__main__")
    assert f"no predictions for task 'modality' (tasks: {record.task})" in capsys.readouterr().out


class _Recording(_Scripted):
    """:class:`_Scripted` that also keeps the system turn of every prompt it was given."""

    def __init__(self, *args):
        super().__init__(*args)
        self.systems = []

    def generate(self, batch, **kwargs):
        self.systems += [p.messages[0]["content"] if p.messages[0]["role"] == "system" else None for p in batch]
        return super().generate(batch, **kwargs)


@pytest.mark.parametrize("trained, expected", [(None, SYSTEM_PROMPT), ("", None), ("Be brief.", "Be brief.")])
def test_default_system_prompt_is_the_one_the_model_trained_with(synth_dir, tmp_path, trained, expected):
    # A model trained without the system turn (or with its own) must not be scored on a prompt it never saw.
    records = load_records(synth_dir, split="test")[:4]
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "medgrpo_run.json").write_text(json.dumps({"stage": "sft", "data": {"system_prompt": trained}}))
    gen = _Recording(records, synth_dir, lambda r, frame, i: build_target(r, frame))
    metrics = evaluate(model_dir, _suite(tmp_path, synth_dir, 4), tmp_path / "eval", generator=gen, n_boot=10,
                       progress=False)
    assert gen.systems == [expected] * 4
    assert metrics["datasets"]["synth"]["system_prompt"] == expected
    # A suite that names its own system turn keeps it.
    suite = tmp_path / "own.yaml"
    suite.write_text(f"name: t\ndatasets:\n  - name: synth\n    path: {synth_dir}\n    limit: 4\n"
                     "    system_prompt: Answer.\n", encoding="utf-8")
    gen.systems.clear()
    evaluate(model_dir, suite, tmp_path / "eval-own", generator=gen, n_boot=10, progress=False)
    assert gen.systems == ["Answer."] * 4
