"""Both training stages on the real tiny models: SFT then Con-GRPO per architecture, LoRA, multi-image rows,
DICOM data, per-component logging, config errors before any model loads (kill -9 and resume: tests/test_faults.py)."""

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import datasets
import numpy as np
import pytest
import yaml
from transformers import AutoModelForImageTextToText

from medgrpo.data import RecordError, load_records, write_records
from medgrpo.data.dicom import write_dicom
from medgrpo.models.loading import load_model, load_processor
from medgrpo.train.args import DataArguments, MedModelConfig
from medgrpo.train.con_grpo import train_con_grpo
from medgrpo.train.con_grpo_config import ConGRPOConfig
from medgrpo.train.run import load_training_records, oversample_rows, parse_args
from medgrpo.train.sft import train_sft
from medgrpo.train.sft_config import MedSFTConfig

REPO = Path(__file__).resolve().parents[1]
SFT_TYPES = (DataArguments, MedSFTConfig, MedModelConfig)
GRPO_TYPES = (DataArguments, ConGRPOConfig, MedModelConfig)
REWARDS = ["format", "accuracy", "consistency", "evidence", "grounding"]


def sft_argv(model, data, out, *extra):
    return ["--config", str(REPO / "recipes/tiny/sft.yaml"), "--model_name_or_path", str(model),
            "--dataset_path", str(data), "--output_dir", str(out), "--max_steps", "2",
            "--per_device_train_batch_size", "2", "--max_train_samples", "8", "--report_to", "none",
            "--save_strategy", "no", "--logging_steps", "1", *extra]


def grpo_argv(model, data, out, *extra):
    return ["--config", str(REPO / "recipes/tiny/con_grpo.yaml"), "--model_name_or_path", str(model),
            "--dataset_path", str(data), "--output_dir", str(out), "--max_steps", "2",
            "--per_device_train_batch_size", "4", "--num_generations", "2", "--max_completion_length", "12",
            "--max_train_samples", "8", "--report_to", "none", "--save_strategy", "no", "--logging_steps", "1",
            *extra]


def log_keys(out: Path) -> set[str]:
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    return {key for entry in history for key in entry}


@pytest.mark.parametrize("arch", ["qwen2_5_vl", "qwen2_vl", "qwen3_vl"])
def test_sft_then_con_grpo_each_architecture(tiny_model_dirs, synth_dir, tmp_path, arch, monkeypatch):
    rows_cache = tmp_path / "hf-cache"  # where the stages stream their rows; each stage removes its own
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(rows_cache))
    sft_out = train_sft(*parse_args(SFT_TYPES, sft_argv(tiny_model_dirs[arch], synth_dir, tmp_path / "sft"), "t"))
    assert rows_cache.is_dir() and not list(rows_cache.glob("medgrpo-rows-*"))
    assert (sft_out / "model.safetensors").is_file() and (sft_out / "medgrpo_run.json").is_file()
    assert json.loads((sft_out / "medgrpo_run.json").read_text())["stage"] == "sft"

    grpo_out = train_con_grpo(*parse_args(GRPO_TYPES, grpo_argv(sft_out, synth_dir, tmp_path / "grpo"), "t"))
    keys = log_keys(grpo_out)
    for name in REWARDS:
        assert f"rewards/{name}/mean" in keys
    for criterion in ("visual_grounding", "question_relevance", "answer_support", "no_hallucination",
                      "no_contradiction"):
        assert f"evidence/{criterion}" in keys
    assert "reasoning_accuracy" in keys  # logged beside accuracy: does the reasoning point to the gold answer?
    assert "frac_reward_zero_std" in keys
    assert any(k.startswith("tasks/") and k.endswith("/accuracy") for k in keys)
    model = AutoModelForImageTextToText.from_pretrained(grpo_out)
    assert model.config.model_type == arch
    assert not list(rows_cache.glob("medgrpo-rows-*"))


def test_lora_sft_then_grpo_from_merged_adapter(tiny_model_dirs, synth_dir, tmp_path):
    lora = ["--use_peft", "true", "--lora_r", "4", "--lora_alpha", "8", "--lora_target_modules", "q_proj", "v_proj"]
    sft_out = train_sft(*parse_args(
        SFT_TYPES, sft_argv(tiny_model_dirs["qwen2_5_vl"], synth_dir, tmp_path / "sft", *lora), "t"))
    assert (sft_out / "adapter_config.json").is_file() and not (sft_out / "model.safetensors").exists()
    # Stage 2 loads the adapter onto its base, merges it, and trains LoRA again on top.
    grpo_out = train_con_grpo(*parse_args(GRPO_TYPES, grpo_argv(sft_out, synth_dir, tmp_path / "grpo", *lora), "t"))
    assert (grpo_out / "adapter_config.json").is_file()
    # The stacked adapters load back (stage-2 LoRA on merged stage-1 LoRA on the base) for eval and export.
    merged = load_model(grpo_out)
    assert not hasattr(merged, "peft_config") and merged.config.model_type == "qwen2_5_vl"
    assert load_processor(grpo_out).image_processor.size["longest_edge"] > 0
    # vLLM cannot serve an adapter: evaluation's vLLM backend gets it merged once, with the run's pixel limits
    from transformers import AutoProcessor

    from medgrpo.eval.generate import servable_folder

    served = servable_folder(grpo_out)
    assert served == grpo_out / "merged-for-vllm" and not (served / "adapter_config.json").exists()
    assert AutoModelForImageTextToText.from_pretrained(served).config.model_type == "qwen2_5_vl"
    assert AutoProcessor.from_pretrained(served).image_processor.size == load_processor(grpo_out).image_processor.size
    stamp = (served / "config.json").stat().st_mtime
    assert servable_folder(grpo_out) == served and (served / "config.json").stat().st_mtime == stamp
    assert servable_folder(tiny_model_dirs["qwen2_5_vl"]) == tiny_model_dirs["qwen2_5_vl"]


def test_multi_image_and_dicom_rows(tiny_model_dirs, synth_dir, tmp_path):
    data = tmp_path / "data"
    (data / "images").mkdir(parents=True)
    rng = np.random.default_rng(0)
    records = load_records(synth_dir, split="train")[:6]
    for i, record in enumerate(records):
        src = synth_dir / record.images[0]
        shutil.copy(src, data / "images" / src.name)
        dicom = f"images/scan_{i}.dcm"
        hu = rng.integers(-1000, 1000, size=(128, 128)).astype(np.int16)
        write_dicom(data / dicom, hu, rescale=(1.0, 0.0), window=(40.0, 400.0),
                    extra={"PatientName": "Doe^Jane", "PatientID": "PHI-12345"})
        # First image keeps the record's boxes; the DICOM is a second view.
        record.images = [f"images/{src.name}", dicom] if i % 2 else [dicom]
        if not i % 2:
            record.bbox = None
            record.cot = record.cot.split("<box>")[0] if record.cot else None
    write_records(records, data / "train.jsonl")
    model = tiny_model_dirs["qwen2_vl"]
    sft_out = train_sft(*parse_args(SFT_TYPES, sft_argv(model, data, tmp_path / "sft"), "t"))
    grpo_out = train_con_grpo(*parse_args(GRPO_TYPES, grpo_argv(sft_out, data, tmp_path / "grpo"), "t"))
    for path in grpo_out.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".jinja", ".md", ".txt"):
            text = path.read_text(errors="ignore")
            assert "PHI-12345" not in text and "Doe^Jane" not in text


def _write_yaml(path: Path, **over) -> Path:
    config = yaml.safe_load((REPO / "recipes/tiny/con_grpo.yaml").read_text())
    config.update(over)
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize(
    "over, message",
    [
        ({"not_a_field": 1}, "unknown option 'not_a_field' in"),
        ({"num_generations": 3}, "num_generations"),
        ({"reward_funcs": ["format", "nope"]}, "unknown reward 'nope'"),
        ({"reward_weights": [1.0, 1.0]}, "give one weight per reward"),
        ({"evidence_weights": [1.0]}, "evidence_weights needs 5 values"),
        ({"model_name_or_path": "no/such/model/here"}, "does not exist"),
        ({"dataset_path": "/no/such/dataset"}, "no such dataset"),
        ({"dicom_window": "sideways"}, "window"),
        ({"tasks": ["anatomy"]}, "tasks: unknown task 'anatomy'"),
        ({"accuracy_tasks": ["anatomy"]}, "accuracy_tasks: unknown task 'anatomy'"),
    ],
)
def test_config_errors_are_one_line_before_any_model_loads(tiny_model_dirs, synth_dir, tmp_path, capsys,
                                                           over, message):
    from medgrpo.train import con_grpo

    paths = {"model_name_or_path": str(tiny_model_dirs["qwen2_5_vl"]), "dataset_path": str(synth_dir)}
    recipe = _write_yaml(tmp_path / "r.yaml", **{**paths, **over})
    assert con_grpo.main(["--config", str(recipe), "--output_dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("medgrpo:")]
    assert len(lines) == 1 and message in lines[0], err[-2000:]
    assert "Loading weights" not in err and not (tmp_path / "out").exists()


def test_tasks_keep_only_those_families_from_the_cli_and_yaml(tiny_model_dirs, synth_dir, tmp_path):
    keep = ["anatomy_identification", "modality_classification"]
    every = load_records(synth_dir, split="train")
    data_args = parse_args(GRPO_TYPES, grpo_argv(tiny_model_dirs["qwen2_5_vl"], synth_dir, tmp_path / "o",
                                                  "--max_train_samples", "100000", "--tasks", *keep), "t")[0]
    assert data_args.tasks == keep
    records = load_training_records(data_args)
    assert {r.task for r in records} == set(keep)
    assert [r.id for r in records] == [r.id for r in every if r.task in keep]
    recipe = _write_yaml(tmp_path / "r.yaml", model_name_or_path=str(tiny_model_dirs["qwen2_5_vl"]),
                         dataset_path=str(synth_dir), tasks=keep[:1], max_train_samples=3)
    data_args = parse_args(GRPO_TYPES, ["--config", str(recipe), "--output_dir", str(tmp_path / "o")], "t")[0]
    assert [r.task for r in load_training_records(data_args)] == keep[:1] * 3  # tasks first, then the cap

    only_anatomy = tmp_path / "anatomy.jsonl"  # a JSONL beside the synth images, with one family in it
    write_records([r for r in every if r.task == keep[0]], only_anatomy)
    shutil.copytree(synth_dir / "images", tmp_path / "images")
    with pytest.raises(RecordError, match="no training records of tasks modality_classification"):
        load_training_records(DataArguments(dataset_path=str(only_anatomy), tasks=keep[1:]))


def test_oversample_tasks_repeat_those_families_rows(tiny_model_dirs, synth_dir, tmp_path, capsys):
    from medgrpo.data import to_grpo_dataset
    from medgrpo.data.boxes import ImageGrid
    from medgrpo.data.builders import BuildReport

    paid = ["anatomy_identification", "modality_classification"]
    data_args = parse_args(GRPO_TYPES, grpo_argv(tiny_model_dirs["qwen2_5_vl"], synth_dir, tmp_path / "o",
                                                  "--max_train_samples", "30", "--oversample_tasks", *paid,
                                                  "--oversample_factor", "3"), "t")[0]
    records = load_training_records(data_args)
    report = BuildReport()
    grid = ImageGrid.from_processor(load_processor(tiny_model_dirs["qwen2_5_vl"]), "qwen2_5_vl")
    dataset = oversample_rows(to_grpo_dataset(records, data_args.root, grid, report=report), records, report,
                              data_args)
    counts = Counter(dataset["id"])
    assert set(counts) == {r.id for r in records}
    assert all(counts[r.id] == (3 if r.task in paid else 1) for r in records)
    n_paid = sum(r.task in paid for r in records)
    assert 0 < n_paid < len(records) and len(dataset) == len(records) + 2 * n_paid
    assert f"{n_paid} rows of {', '.join(paid)} listed x3" in capsys.readouterr().out
    for bad, message in ((["--oversample_tasks", "anatomy"], "oversample_tasks: unknown task 'anatomy'"),
                         (["--oversample_tasks", paid[0], "--oversample_factor", "0"], "at least 1")):
        with pytest.raises(ValueError, match=message):
            parse_args(GRPO_TYPES, grpo_argv(tiny_model_dirs["qwen2_5_vl"], synth_dir, tmp_path / "o", *bad), "t")


def test_accuracy_tasks_pay_accuracy_on_those_families_only(tiny_model_dirs, synth_dir, tmp_path):
    """A real Con-GRPO run: the accuracy reward is logged per family only where it is paid; the other rewards
    are paid on every family."""
    records = load_records(synth_dir, split="train")[:16]
    families = sorted({r.task for r in records})
    assert len(families) > 1
    paid = families[0]
    out = train_con_grpo(*parse_args(GRPO_TYPES, grpo_argv(
        tiny_model_dirs["qwen2_5_vl"], synth_dir, tmp_path / "grpo", "--max_train_samples", "16",
        "--max_steps", "4", "--accuracy_tasks", paid), "t"))
    keys = log_keys(out)
    seen = {k.split("/")[1] for k in keys if k.startswith("tasks/") and k.endswith("/format")}
    assert len(seen) > 1
    assert {k.split("/")[1] for k in keys if k.startswith("tasks/") and k.endswith("/accuracy")} <= {paid}
    assert all(f"tasks/{task}/consistency" in keys for task in seen)


def test_cli_error_exit_code_without_traceback(tmp_path):
    recipe = _write_yaml(tmp_path / "r.yaml", reward_funcs=["nope"])
    proc = subprocess.run([sys.executable, "-m", "medgrpo.train", "con_grpo", "--config", str(recipe)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 2 and "medgrpo: reward_funcs: unknown reward 'nope'" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("where", ["command line", "recipe"])
def test_an_unknown_key_stops_in_one_line_with_the_closest_field(tmp_path, where):
    from medgrpo.train.run import UnknownKeyError

    recipe = REPO / "recipes" / "tiny" / "sft.yaml"
    if where == "recipe":
        recipe = tmp_path / "typo.yaml"
        recipe.write_text("learning_rat: 1.0e-5\n" + (REPO / "recipes" / "tiny" / "sft.yaml").read_text())
        argv = ["--config", str(recipe)]
    else:
        argv = ["--config", str(recipe), "--learning_rat", "1e-5"]
    with pytest.raises(UnknownKeyError, match="unknown option 'learning_rat' .*did you mean 'learning_rate'"):
        parse_args(SFT_TYPES, [*argv, "--output_dir", str(tmp_path / "out")], "t")
    assert not (tmp_path / "out").exists()  # stopped before anything was made
    # a boolean field's negation is HfArgumentParser's own option, not a typo
    _, args, _ = parse_args(GRPO_TYPES, ["--config", str(REPO / "recipes" / "tiny" / "con_grpo.yaml"),
                                         "--no_zero_on_format_failure", "--output_dir", str(tmp_path / "ok")], "t")
    assert args.zero_on_format_failure is False


@pytest.mark.parametrize("types, recipe", [(SFT_TYPES, "sft.yaml"), (GRPO_TYPES, "con_grpo.yaml")])
def test_a_default_run_configures_without_deprecation_warnings(tmp_path, types, recipe):
    """TRL defaults gradient_checkpointing to True and transformers 5 deprecates the name: the config hands it to
    activation_checkpointing first, so the setting holds and nothing is printed before the run."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning, deprecations included, fails the test
        _, args, _ = parse_args(types, ["--config", str(REPO / "recipes" / "tiny" / recipe),
                                        "--output_dir", str(tmp_path / "out")], "t")
    assert args.gradient_checkpointing is False and getattr(args, "activation_checkpointing", False) is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gpu_only = ["--bf16", "false"] + (["--use_vllm", "false"] if types is GRPO_TYPES else [])
        _, args, _ = parse_args(types, ["--config", str(REPO / "recipes" / "qwen2.5-vl-3b" / recipe), *gpu_only,
                                        "--output_dir", str(tmp_path / "gpu")], "t")
    assert args.gradient_checkpointing is True


@pytest.mark.parametrize("recipe", sorted(p for p in (REPO / "recipes").glob("*/*.yaml")
                                          if p.parent.name != "accelerate_configs"), ids=lambda p: str(p.parent.name + "/" + p.name))
def test_every_recipe_field_is_real_and_validates(recipe):
    config = yaml.safe_load(recipe.read_text())
    types = SFT_TYPES if recipe.name.startswith("sft") else GRPO_TYPES
    known = {f for t in types for f in t.__dataclass_fields__}
    assert set(config) <= known, set(config) - known
    # GPU-only switches are overridden so the recipe validates on a CPU machine; every other value is checked.
    overrides = ["--bf16", "false", "--use_vllm", "false"] if "use_vllm" in config else ["--bf16", "false"]
    data_args, training_args, model_args = parse_args(types, ["--config", str(recipe), *overrides], "t")
    assert model_args.model_name_or_path and training_args.output_dir
    if types is GRPO_TYPES:
        assert len(training_args.reward_weights) == len(training_args.reward_funcs)


def test_medgrpo_rewards_in_a_plain_trl_trainer_pay_as_in_con_grpo(tiny_model_dirs, synth_dir, tmp_path):
    """``medgrpo.rewards.REWARDS`` in TRL's own GRPOTrainer trains, and pays what ConGRPOTrainer with its default
    config pays, completion by completion (one set of shaping defaults)."""
    import torch
    from trl import GRPOConfig, GRPOTrainer

    from medgrpo.data import load_records, to_grpo_dataset
    from medgrpo.prompts import build_target
    from medgrpo.rewards import REWARDS as FUNCS
    from medgrpo.train.con_grpo_trainer import ConGRPOTrainer
    from medgrpo.train.modeling import load_for_training

    data_args = DataArguments(dataset_path=str(synth_dir), max_train_samples=8)
    model, processor, grid = load_for_training(MedModelConfig(model_name_or_path=str(tiny_model_dirs["qwen2_5_vl"]),
                                                              dtype="float32"), data_args)
    records = load_records(synth_dir, split="train")[:8]
    dataset = to_grpo_dataset(records, data_args.root, grid)
    common = dict(max_steps=2, per_device_train_batch_size=4, num_generations=2, max_completion_length=12,
                  report_to="none", save_strategy="no", logging_steps=1, beta=0.0, bf16=False,
                  gradient_checkpointing=False, learning_rate=1e-3, seed=0, use_cpu=True)
    plain = GRPOTrainer(model=model, reward_funcs=[FUNCS[n] for n in REWARDS], train_dataset=dataset,
                        args=GRPOConfig(output_dir=str(tmp_path / "plain"), **common), processing_class=processor)
    plain.train()
    assert {f"rewards/{n}/mean" for n in REWARDS} <= {k for e in plain.state.log_history for k in e}
    con = ConGRPOTrainer(model=model, train_dataset=dataset, processing_class=processor,
                         args=ConGRPOConfig(output_dir=str(tmp_path / "con"), **common))
    rows = [dataset[i] for i in range(4)]
    targets = [build_target(r) for r in records[:4]]
    targets[1] = targets[1].replace(f"<answer>{records[1].answer}", "<answer>Z")  # a wrong letter
    targets[2] = "no grammar at all"
    completions = [[{"role": "assistant", "content": t}] for t in targets]
    prompts = [row["prompt"] for row in rows]
    for trainer in (plain, con):
        trainer.state.global_step = 0
    paid_plain = plain._calculate_rewards(rows, prompts, completions, [[1]] * 4)
    paid_con = con._calculate_rewards(rows, prompts, completions, [[1]] * 4)
    assert torch.equal(torch.nan_to_num(paid_plain, nan=-1.0), torch.nan_to_num(paid_con, nan=-1.0))
    assert paid_con[2, 1:].nan_to_num(0.0).abs().sum() == 0  # outside the grammar nothing but format is paid


def test_a_user_reward_by_import_path_is_weighted_and_logged_like_medgrpos(tiny_model_dirs, synth_dir, tmp_path,
                                                                          monkeypatch):
    (tmp_path / "my_rewards.py").write_text(
        "def brevity(prompts=None, completions=None, **columns):\n"
        "    return [1.0 / (1 + len(str(c))) for c in completions]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "run"
    train_con_grpo(*parse_args(GRPO_TYPES, grpo_argv(tiny_model_dirs["qwen2_5_vl"], synth_dir, out, "--reward_funcs",
                                                     "format", "accuracy", "my_rewards:brevity", "--reward_weights",
                                                     "0.5", "1.0", "2.0"), "t"))
    keys = log_keys(out)
    assert "rewards/brevity/mean" in keys and "rewards/format/mean" in keys
    with pytest.raises(ValueError, match="reward 'my_rewards:nothing': my_rewards has no function 'nothing'"):
        ConGRPOConfig(output_dir=str(tmp_path / "x"), bf16=False, reward_funcs=["format", "my_rewards:nothing"])
    with pytest.raises(ValueError, match="cannot import no_such_module"):
        ConGRPOConfig(output_dir=str(tmp_path / "x"), bf16=False, reward_funcs=["no_such_module:f"])


def test_help_shows_each_fields_docstring(capsys):
    from medgrpo.train.run import field_docs

    with pytest.raises(SystemExit):
        parse_args(GRPO_TYPES, ["--help"], "medgrpo grpo")
    shown = " ".join(capsys.readouterr().out.split())
    docs = field_docs(ConGRPOConfig)
    for name in ("gate_on_correct", "hadw", "scope_coef", "accuracy_tasks"):  # own fields and the variants mixin's
        assert " ".join(docs[name].split())[:80] in shown, name
    assert field_docs(DataArguments)["dataset_path"].startswith("A MedAD dataset folder")
