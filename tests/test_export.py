"""medgrpo export: folders that load with transformers alone, identical greedy outputs, model card, hygiene, push.

The two "runs" are built from the ci tiny model: stage 1 (full weights, perturbed so that greedy decoding is not
degenerate) and stage 2 (a LoRA adapter on stage 1 made with peft), each with the ``medgrpo_run.json`` the
training stages write. Reloads happen in a fresh ``python -I`` process where medgrpo cannot be imported.
"""

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from PIL import Image

from medgrpo.export import (
    MANIFEST,
    check_manifest,
    export_model,
    find_local_paths,
    load_source,
    main,
    upload_files,
    verify_export,
)

ARCH = "qwen2_5_vl"
MIN_PIXELS, MAX_PIXELS = 56 * 56, 56 * 84  # the stage-2 recipe's limits, unlike the tiny model's own
NEW_TOKENS = 24
DICOM_SENTINEL = "DOE^SENTINEL"
SECRET = "hf_SECRETSECRETSECRET"
METRICS = {
    "schema_version": 1,
    "model": "/somewhere/local/run",
    "datasets": {
        "medad-synth": {
            "path": "/somewhere/local/medad-synth", "split": "test",
            "overall": {
                "n": 30,
                "accuracy": {"value": 0.8125, "ci_low": 0.6875, "ci_high": 0.9375, "n": 30},
                "consistency": {"value": 0.6, "ci_low": 0.45, "ci_high": 0.75, "n": 30},
                "grounding_iou": {"value": None, "ci_low": None, "ci_high": None, "n": 0},
                "completion_tokens": {"value": 41.5, "ci_low": 38.0, "ci_high": 45.0, "n": 30},
            },
            "by_task": {"anomaly_detection": {"n": 6, "accuracy": {"value": 1.0, "ci_low": 1.0, "ci_high": 1.0}}},
        }
    },
}
# Runs in a fresh interpreter: drop the editable-install hook, then prove medgrpo is not importable.
ISOLATE = """
import importlib.util, sys
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
assert importlib.util.find_spec("medgrpo") is None, "medgrpo is importable"
"""


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2))


@pytest.fixture(scope="module")
def runs(tiny_model_dirs, synth_dir, tmp_path_factory) -> dict[str, Path]:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText, AutoProcessor

    root = tmp_path_factory.mktemp("runs")
    tiny = tiny_model_dirs[ARCH]
    model = AutoModelForImageTextToText.from_pretrained(tiny)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # stands in for training: random-init tiny models decode only newlines
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.3)
    sft = root / "sft"
    model.save_pretrained(sft)
    AutoProcessor.from_pretrained(tiny).save_pretrained(sft)
    _write_json(sft / "medgrpo_run.json", {
        "stage": "sft", "base_model": "Qwen/Qwen2.5-VL-3B-Instruct",
        "datasets": [str(synth_dir), "zhtstar/MedAD-38K"],
        "data": {"dataset_path": str(synth_dir), "system_prompt": None, "dicom_window": "auto"},
        "model": {"use_peft": False, "dtype": "float32"},
        "recipe": {"learning_rate": 0.002, "max_steps": 140, "output_dir": str(sft), "hub_token": SECRET},
    })
    # peft records the tiny model as the adapter's base (the weights' origin); medgrpo_run.json names stage 1.
    adapter = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                               init_lora_weights=False))
    grpo = root / "con_grpo"
    adapter.save_pretrained(grpo)
    _write_json(grpo / "medgrpo_run.json", {
        # recorded relative to where training ran (the runs folder), as the training CLI does
        "stage": "con_grpo", "base_model": "sft", "datasets": [str(synth_dir)],
        "data": {"dataset_path": str(synth_dir), "system_prompt": None, "min_pixels": MIN_PIXELS,
                 "max_pixels": MAX_PIXELS, "dicom_window": "auto"},
        "model": {"use_peft": True, "lora_r": 4, "lora_alpha": 8},
        "recipe": {"learning_rate": 0.0005, "num_generations": 4, "beta": 0.0, "loss_type": "dapo",
                   "reward_funcs": ["format", "accuracy", "evidence"], "reward_weights": [0.5, 1.0, 0.75],
                   "gate_on_correct": True, "ha_dw": True, "output_dir": str(grpo), "hub_token": SECRET},
    })
    # stray run output that must never travel: DICOM header values in a predictions file
    (grpo / "eval").mkdir()
    (grpo / "eval" / "predictions.jsonl").write_text(json.dumps({"PatientName": DICOM_SENTINEL}) + "\n")
    return {"tiny": tiny, "sft": sft, "con_grpo": grpo, "data": synth_dir}


@pytest.fixture(scope="module")
def exports(runs, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("exports")
    metrics = root / "metrics.json"
    _write_json(metrics, METRICS)
    return {
        "full": export_model(runs["sft"], root / "sft-export", metrics=metrics),
        "merged": export_model(runs["con_grpo"], root / "grpo-export", metrics=metrics, repo_id="org/medgrpo-tiny"),
        "adapter": export_model(runs["con_grpo"], root / "grpo-adapter", keep_adapter=True),
    }


def _front_matter(path: Path) -> dict:
    text = path.read_text()
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


def _snippet(export: Path) -> str:
    return re.search(r"```python\n(.*?)```", (export / "README.md").read_text(), re.DOTALL).group(1)


def _run_isolated(script: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-I", "-c", ISOLATE + script], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def _source_completion(run_dir: Path, export: Path) -> str:
    """What the source checkpoint (adapter unmerged) answers to the card's usage snippet, greedily."""
    model, processor = load_source(run_dir, merge=False)
    messages = ast.literal_eval(re.search(r"messages = (\[.*?\n\])", _snippet(export), re.DOTALL).group(1))
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    image = Image.open(export.parent / "scan.png").convert("RGB")
    inputs = processor(text=[text], images=[image], return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False)
    return processor.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)[0]


def test_usage_snippets_reload_offline_without_medgrpo_and_match_source(runs, exports):
    pairs = [("full", "sft"), ("merged", "con_grpo"), ("adapter", "con_grpo")]
    parent = exports["full"].parent
    Image.new("RGB", (96, 80), (120, 60, 30)).save(parent / "scan.png")
    script = ""
    for kind, _ in pairs:
        # the Hub id of a pushed export stands for the same folder once downloaded; fewer tokens keep CI fast
        snippet = _snippet(exports[kind]).replace("'org/medgrpo-tiny'", repr(f"./{exports[kind].name}"))
        snippet = snippet.replace("'path/to/sft'", repr(str(runs["sft"])))  # the adapter's local base
        assert "max_new_tokens=512" in snippet
        snippet = snippet.replace("max_new_tokens=512", f"max_new_tokens={NEW_TOKENS}")
        script += f"exec({snippet!r}, {{}})\nprint('<<end>>')\n"  # one interpreter start-up for both
    result = _run_isolated(script, cwd=parent)
    assert result.returncode == 0, result.stderr[-2000:]
    printed = result.stdout.split("<<end>>\n")
    assert len(printed) == len(pairs) + 1
    for (kind, run), out in zip(pairs, printed, strict=False):
        expected = _source_completion(runs[run], exports[kind])
        assert out.rsplit("\nanswer:", 1)[0] == expected
        assert len(set(expected)) > 3  # a non-degenerate output, so that "identical" means something


def test_merged_export_holds_stage1_plus_lora_weights(runs, exports):
    from safetensors.torch import load_file

    merged = load_file(exports["merged"] / "model.safetensors")
    stage1 = load_file(runs["sft"] / "model.safetensors")
    tiny = load_file(runs["tiny"] / "model.safetensors")
    mlp = next(k for k in merged if "layers.0.mlp.down_proj" in k and "visual" not in k)
    q = next(k for k in merged if "layers.0.self_attn.q_proj.weight" in k and "visual" not in k)
    assert torch.equal(merged[mlp], stage1[mlp]) and not torch.equal(merged[mlp], tiny[mlp])  # base = stage 1
    assert not torch.allclose(merged[q], stage1[q])  # the LoRA delta was merged in
    assert not any("lora" in k for k in merged)
    assert not (exports["merged"] / "adapter_config.json").exists()


def test_export_folder_contents_and_processor_limits(exports):
    from transformers import AutoProcessor

    for export in exports.values():
        names = {p.name for p in export.iterdir()}
        assert {"README.md", MANIFEST, "generation_config.json", "chat_template.jinja", "tokenizer.json",
                "processor_config.json", "medgrpo_run.json"} <= names
        assert check_manifest(export) == []
        assert not list(export.parent.glob(f".{export.name}.*"))  # no temp folder left behind
    assert {"config.json", "model.safetensors"} <= {p.name for p in exports["full"].iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {p.name for p in exports["adapter"].iterdir()}
    size = AutoProcessor.from_pretrained(exports["merged"]).image_processor.size
    assert (size["shortest_edge"], size["longest_edge"]) == (MIN_PIXELS, MAX_PIXELS)
    tokenizer_config = json.loads((exports["full"] / "tokenizer_config.json").read_text())
    assert "local_files_only" not in tokenizer_config


def test_no_local_paths_secrets_or_dicom_values_in_any_file(runs, exports, tmp_path_factory):
    forbidden = [str(runs["sft"].parent), str(runs["data"].parent), str(Path.home()), "/somewhere/local",
                 DICOM_SENTINEL, SECRET]
    for export in exports.values():
        for path in export.rglob("*"):
            if path.is_file() and path.suffix != ".safetensors":
                text = path.read_text(errors="replace")
                assert not [f for f in forbidden if f in text], path
    adapter_config = json.loads((exports["adapter"] / "adapter_config.json").read_text())
    assert adapter_config["base_model_name_or_path"] is None  # stage 1 was a local folder: no Hub id to name


def test_find_local_paths_reports_a_planted_path(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"note": f"{tmp_path}/secret/run"}))
    (tmp_path / "tokenizer.json").write_text(json.dumps({"vocab": {str(tmp_path): 1}}))  # vocabularies skipped
    assert find_local_paths(tmp_path, [str(tmp_path)]) == [f"config.json: {tmp_path}"]


def test_model_card_yaml_and_body(exports):
    from huggingface_hub import ModelCard

    meta = _front_matter(exports["merged"] / "README.md")
    assert meta["license"] == "apache-2.0"
    assert meta["pipeline_tag"] == "image-text-to-text"
    assert meta["base_model"] == "Qwen/Qwen2.5-VL-3B-Instruct"  # followed back through the stage-1 folder
    assert meta["datasets"] == ["zhtstar/MedAD-38K"]  # local dataset folders are not Hub ids
    assert "medical" in meta["tags"] and ARCH in meta["tags"]
    results = meta["model-index"][0]["results"]
    values = {m["type"]: m["value"] for r in results for m in r["metrics"]}
    assert values == {"accuracy": 0.8125, "consistency": 0.6}  # headline metrics with a value only
    assert ModelCard((exports["merged"] / "README.md").read_text()).data.eval_results[0].metric_value == 0.8125
    body = (exports["merged"] / "README.md").read_text()
    assert "| medad-synth | 30 | accuracy | 0.812 | [0.688, 0.938] |" in body
    assert "| medad-synth | 30 | completion_tokens | 41.500 | [38.000, 45.000] |" in body
    assert "Not for clinical use" in body
    assert "Stage 1: SFT" in body and "Stage 2: Con-GRPO" in body
    assert "| `evidence` | 0.75 |" in body and "| `ha_dw` | `true` |" in body
    assert "model_id = 'org/medgrpo-tiny'" in body
    assert "| medad-synth | anomaly_detection | 6 | 1.000 | [1.000, 1.000] |" in body
    no_metrics = _front_matter(exports["adapter"] / "README.md")
    assert "model-index" not in no_metrics and no_metrics["library_name"] == "peft"
    assert "the model it was trained on, `sft`" in (exports["adapter"] / "README.md").read_text()


def test_export_without_provenance_or_metrics(runs, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    for f in runs["tiny"].iterdir():
        (bare / f.name).write_bytes(f.read_bytes())
    out = export_model(bare, tmp_path / "out")
    meta = _front_matter(out / "README.md")
    assert "base_model" not in meta and "model-index" not in meta
    assert "No training provenance" in (out / "README.md").read_text()
    assert not (out / "medgrpo_run.json").exists()


def test_verify_passes_then_catches_tampering_and_wrong_source(runs, exports, capsys, tmp_path):
    report = verify_export(exports["adapter"], runs["con_grpo"], runs["data"], samples=2, max_new_tokens=8)
    assert report.ok and len(report.samples) == 2
    args = ["--verify", str(exports["merged"]), "--dataset", str(runs["data"]), "--samples", "2",
            "--max-new-tokens", "8"]
    assert main([*args, "--source", str(runs["con_grpo"])]) == 0
    assert "identical on 2/2 samples" in capsys.readouterr().out
    # stage 1 is not what was exported (no LoRA, and its processor has other pixel limits)
    assert main([*args, "--source", str(runs["sft"])]) == 1
    assert "identical on 0/2 samples" in capsys.readouterr().out

    copy = tmp_path / "copy"
    copy.mkdir()
    for f in exports["full"].iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    with open(copy / "README.md", "a") as fh:
        fh.write("edited\n")
    assert check_manifest(copy) == ["README.md: sha256 differs from the manifest"]


def test_refuses_non_empty_out_unless_overwrite(runs, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["--model", str(runs["sft"]), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("medgrpo: ") and "--overwrite" in err and err.count("\n") == 1
    assert (out / "keep.txt").read_text() == "mine"
    assert main(["--model", str(runs["sft"]), "--out", str(runs["sft"]), "--overwrite"]) == 2  # never the source
    assert main(["--model", str(runs["sft"]), "--out", str(out), "--overwrite"]) == 0
    assert not (out / "keep.txt").exists() and check_manifest(out) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_bad_metrics_file_is_one_line_error(runs, tmp_path, capsys):
    metrics = tmp_path / "metrics.json"
    metrics.write_text(json.dumps({"schema_version": 1, "datasets": {"x": {"accuracy": 1}}}))
    assert main(["--model", str(runs["sft"]), "--out", str(tmp_path / "out"), "--metrics", str(metrics)]) == 2
    err = capsys.readouterr().err
    assert err == f"medgrpo: {metrics}: field 'datasets.x.overall': expected an object of metrics\n"
    metrics.write_text(json.dumps({"schema_version": 2, "datasets": {}}))
    assert main(["--model", str(runs["sft"]), "--out", str(tmp_path / "out"), "--metrics", str(metrics)]) == 2
    assert capsys.readouterr().err == f"medgrpo: {metrics}: field 'schema_version': expected 1, got 2\n"
    assert not (tmp_path / "out").exists()


def test_dry_run_lists_exactly_the_folder(exports, capsys):
    assert main(["--out", str(exports["full"]), "--push-to-hub", "org/name", "--dry-run"]) == 0
    listed = [line.strip() for line in capsys.readouterr().out.splitlines()[1:]]
    on_disk = sorted(p.relative_to(exports["full"]).as_posix() for p in exports["full"].rglob("*") if p.is_file())
    assert listed == on_disk == upload_files(exports["full"])


@pytest.mark.parametrize("env,message", [
    ({"HF_HUB_OFFLINE": "1", "HF_TOKEN": "hf_fake"}, "HF_HUB_OFFLINE is set"),
    ({"HF_HUB_OFFLINE": "0"}, "no Hugging Face token"),
    ({"HF_HUB_OFFLINE": "0", "HF_TOKEN": "hf_fake", "HF_ENDPOINT": "http://127.0.0.1:9"}, "push to org/name failed"),
])
def test_push_fails_with_one_clear_line(env, message, exports, tmp_path):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    clean.update(env, HF_HOME=str(tmp_path / "hf-home"))  # no stored token
    result = subprocess.run([sys.executable, "-m", "medgrpo.cli", "export", "--out", str(exports["full"]),
                             "--push-to-hub", "org/name"], env=clean, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.startswith("medgrpo: ") and message in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen3_vl"])
def test_other_architectures_export_and_verify(arch, tiny_model_dirs, synth_dir, tmp_path):
    out = export_model(tiny_model_dirs[arch], tmp_path / "export")
    assert "integers on a 0-1000 grid" in (out / "README.md").read_text()
    report = verify_export(out, tiny_model_dirs[arch], synth_dir, samples=1, max_new_tokens=4)
    assert report.ok, report


def test_pickled_training_args_are_never_unpickled(runs, tmp_path):
    """A run without medgrpo_run.json exports with a card that says so; its training_args.bin (a pickle that
    could run code when loaded) is left alone."""
    from trl import SFTConfig

    run = tmp_path / "run"
    run.mkdir()
    for f in runs["tiny"].iterdir():
        (run / f.name).write_bytes(f.read_bytes())
    torch.save(SFTConfig(output_dir=str(run), learning_rate=0.00123, bf16=False, report_to="none"),
               run / "training_args.bin")
    card = (export_model(run, tmp_path / "out") / "README.md").read_text()
    assert "No training provenance" in card and "0.00123" not in card
    assert str(tmp_path) not in card
