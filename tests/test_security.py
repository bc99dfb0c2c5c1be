"""Security properties: no code runs from data (pickles, remote code, YAML tags), image paths stay in the dataset
root, and no DICOM identifying value reaches any artifact of a whole run.

Covered elsewhere and not repeated here: the judge HTTP client sends text only, to ``base_url``'s host only, never
through an environment proxy or a redirect (tests/test_rewards_judge.py); a file symlink or ``..`` path escaping the
root (tests/test_record.py, tests/test_preprocess.py); an export never unpickles ``training_args.bin``
(tests/test_export.py).
"""

import ast
import io
import json
import os
import pickle
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from PIL import Image

from medgrpo.cli import main as medgrpo
from medgrpo.data import RecordError, load_records, write_records
from medgrpo.data.boxes import ImageGrid
from medgrpo.data.dicom import write_dicom
from medgrpo.data.preprocess import ImageError, prepare_images
from medgrpo.models.loading import ModelLoadError, load_model
from medgrpo.train import con_grpo, modeling
from medgrpo.train.con_grpo_config import ConGRPOConfig
from medgrpo.train.sft_config import MedSFTConfig

REPO = Path(__file__).resolve().parents[1]
SOURCES = [REPO / p for p in subprocess.run(["git", "ls-files", "medgrpo/*.py", "eval/*.py"], cwd=REPO,
                                             capture_output=True, text=True, check=True).stdout.split()]


# ---- code that runs from data --------------------------------------------------------------------------------------

def _unsafe_calls(path: Path, root: Path = REPO) -> list[str]:
    """Calls that execute code from a file: YAML's full/unsafe loaders, pickle, torch.load without weights_only."""
    found, path = [], path.relative_to(root)
    tree = ast.parse((root / path).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func)
        keywords = {k.arg: k.value for k in node.keywords}
        if name in ("yaml.load", "yaml.full_load", "yaml.unsafe_load", "yaml.load_all", "yaml.unsafe_load_all",
                    "pickle.load", "pickle.loads", "dill.load", "joblib.load", "numpy.load", "np.load"):
            if name in ("np.load", "numpy.load") and not (
                    isinstance(keywords.get("allow_pickle"), ast.Constant) and keywords["allow_pickle"].value):
                continue  # numpy refuses pickles unless told otherwise
            found.append(f"{path}:{node.lineno}: {name}")
        if name.endswith("torch.load"):
            safe = keywords.get("weights_only")
            if not (isinstance(safe, ast.Constant) and safe.value is True):
                found.append(f"{path}:{node.lineno}: {name} without weights_only=True")
        trc = keywords.get("trust_remote_code")
        if isinstance(trc, ast.Constant) and trc.value is True:
            found.append(f"{path}:{node.lineno}: trust_remote_code=True")
    return found


def test_no_unsafe_loader_or_remote_code_anywhere_in_the_code():
    assert len(SOURCES) > 50
    assert [hit for path in SOURCES for hit in _unsafe_calls(path)] == []


def test_the_scan_finds_what_it_looks_for(tmp_path):
    planted = tmp_path / "bad.py"
    planted.write_text("import yaml, torch\nyaml.load(s, Loader=yaml.Loader)\ntorch.load(p)\n"
                       "f(x, trust_remote_code=True)\nyaml.safe_load(s)\ntorch.load(p, weights_only=True)\n")
    hits = [h.split(": ", 1)[1] for h in _unsafe_calls(planted, tmp_path)]
    assert hits == ["yaml.load", "torch.load without weights_only=True", "trust_remote_code=True"]


class _Payload:
    """Unpickling this creates a file: proof that a loader executed code from data."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


YAML_BOMB = "x: !!python/object/apply:os.system ['touch {marker}']\n"


@pytest.mark.parametrize("entry", ["recipe", "suite", "mapping", "build"])
def test_yaml_tags_never_execute(entry, tiny_model_dirs, tmp_path, capsys):
    marker = tmp_path / "executed"
    config = tmp_path / "c.yaml"
    config.write_text(YAML_BOMB.format(marker=marker))
    argv = {
        "recipe": ["grpo", "--config", str(config)],
        "suite": ["eval", "--model", str(tiny_model_dirs["qwen2_5_vl"]), "--suite", str(config), "--out", str(tmp_path / "o")],
        "mapping": ["data", "convert", "--format", "jsonl", "--input", str(config), "--mapping", str(config),
                    "--out", str(tmp_path / "o")],
        "build": ["data", "build", "--config", str(config), "--out", str(tmp_path / "o")],
    }[entry]
    try:
        code = medgrpo(argv)
    except SystemExit as exc:  # argparse-level refusals exit 2 too
        code = exc.code
    assert code == 2 and not marker.exists() and not (tmp_path / "o").exists()
    assert "Traceback" not in capsys.readouterr().err


@pytest.fixture
def pickle_model(tiny_model_dirs, tmp_path) -> tuple[Path, Path]:
    """A model folder whose only weights are a pickle that would create ``marker`` when loaded."""
    folder, marker = tmp_path / "pickled", tmp_path / "executed"
    folder.mkdir()
    (folder / "config.json").write_text((tiny_model_dirs["qwen2_5_vl"] / "config.json").read_text())
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps(_Payload(marker)))
    return folder, marker


def test_pickle_weights_are_refused_by_the_loader(pickle_model):
    folder, marker = pickle_model
    with pytest.raises(ModelLoadError, match=r"weights are pickle files \(\*\.bin\), which medgrpo does not load"):
        load_model(folder)
    assert not marker.exists()


@pytest.mark.parametrize("command", ["eval", "export", "grpo"])
def test_pickle_weights_are_refused_by_every_cli(command, pickle_model, synth_dir, tmp_path, capsys):
    folder, marker = pickle_model
    argv = {
        "eval": ["eval", "--model", str(folder), "--suite", str(synth_dir), "--out", str(tmp_path / "o")],
        "export": ["export", "--model", str(folder), "--out", str(tmp_path / "o")],
        "grpo": ["grpo", "--config", str(REPO / "recipes/tiny/con_grpo.yaml"), "--model_name_or_path", str(folder),
                 "--dataset_path", str(synth_dir), "--output_dir", str(tmp_path / "o")],
    }[command]
    assert medgrpo(argv) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("medgrpo:")]
    assert len(lines) == 1 and "pickle" in lines[0], lines
    assert not marker.exists() and not (tmp_path / "o").exists()


def test_pickle_adapter_is_never_executed(tiny_model_dirs, tmp_path):
    folder, marker = tmp_path / "adapter", tmp_path / "executed"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "base_model_name_or_path": str(tiny_model_dirs["qwen2_5_vl"]), "r": 2,
        "lora_alpha": 4, "target_modules": ["q_proj"], "task_type": "CAUSAL_LM"}))
    (folder / "adapter_model.bin").write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(Exception):  # noqa: B017 - whatever refuses it, the payload must not run
        load_model(folder)
    assert not marker.exists()


def test_trust_remote_code_is_off_unless_a_recipe_field_turns_it_on(tiny_model_dirs, synth_dir, tmp_path,
                                                                     monkeypatch):
    for recipe in (REPO / "recipes").glob("*/*.yaml"):
        assert "trust_remote_code" not in yaml.safe_load(recipe.read_text()), recipe
    for config in (ConGRPOConfig, MedSFTConfig):
        assert config.__dataclass_fields__["trust_remote_code"].default is False

    seen = []

    def spy(path, **kwargs):
        seen.append(kwargs["trust_remote_code"])
        raise ValueError("stop before loading")

    monkeypatch.setattr(modeling, "load_model", spy)
    argv = ["--config", str(REPO / "recipes/tiny/con_grpo.yaml"), "--model_name_or_path",
            str(tiny_model_dirs["qwen2_5_vl"]), "--dataset_path", str(synth_dir), "--output_dir", str(tmp_path / "o")]
    assert con_grpo.main(argv) == 2 and con_grpo.main([*argv, "--trust_remote_code", "true"]) == 2
    assert seen == [False, True]


# ---- image paths confined to the dataset root ----------------------------------------------------------------------

def test_a_symlinked_image_folder_escaping_the_root_is_refused(synth_dir, tmp_path):
    """A whole ``images/`` folder that is a symlink to elsewhere (the file-level case is in test_record.py)."""
    outside, root = tmp_path / "outside", tmp_path / "root"
    outside.mkdir()
    root.mkdir()
    record = load_records(synth_dir, split="train")[0]
    Image.open(synth_dir / record.images[0]).save(outside / "scan.png")
    os.symlink(outside, root / "images")
    record.images = ["images/scan.png"]
    write_records([record], root / "train.jsonl")
    with pytest.raises(RecordError, match=r"train.jsonl:1: .*images.*resolves outside the dataset root"):
        load_records(root, split="train")
    with pytest.raises(ImageError, match="resolves outside the dataset root"):
        prepare_images(record, root, ImageGrid("abs"))


# ---- no DICOM identifying value in any artifact --------------------------------------------------------------------

PHI = {"PatientName": "Zyxwv^Quintessa", "PatientID": "PID-73914-Q", "PatientBirthDate": "19410923",
       "StudyDate": "20230517", "AccessionNumber": "ACC88112277", "InstitutionName": "Fernhollow Clinic",
       "ReferringPhysicianName": "Okonkwo^Berit"}
NEEDLES = sorted({v for value in PHI.values() for v in (value, value.replace("^", " "))}
                 | {"Zyxwv", "Quintessa", "73914", "88112277", "Fernhollow", "Okonkwo"})


def _texts(path: Path) -> list[str]:
    """Every readable form of a file: its bytes as text, plus decoded members of zips and parquet tables."""
    data = path.read_bytes()
    texts = [data.decode("latin-1"), data.decode("utf-16-le", errors="ignore")]
    if zipfile.is_zipfile(io.BytesIO(data)):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            texts += [archive.read(name).decode("latin-1") for name in archive.namelist()]
    if path.suffix == ".parquet":
        texts.append(pd.read_parquet(path).to_json())
    return texts


def test_no_dicom_identifier_in_any_artifact_of_a_whole_run(tiny_model_dirs, synth_dir, tmp_path, capfd):
    """convert -> SFT -> Con-GRPO -> eval -> export on DICOMs whose headers carry patient identifiers; then every
    file written (datasets, cards, prompts, logs, trainer_state, completion tables, TensorBoard events, checkpoints,
    predictions, reports, exports) and all console output are searched for each identifying value."""
    source = tmp_path / "source"
    (source / "scans").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", 8), ("test", 4)):
        rows = []
        for i in range(n):
            write_dicom(source / "scans" / f"{split}{i}.dcm", rng.integers(-1000, 1000, (96, 96)).astype(np.int16),
                        window=(40.0, 400.0), extra=PHI)
            rows.append({"id": f"{split}-{i}", "image": f"scans/{split}{i}.dcm", "question": "Is there a lesion?",
                         "options": ["yes", "no"], "answer": "AB"[i % 2], "task": "Anomaly Detection",
                         "modality": "CT", "region": "chest"})
        (source / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    data, sft, grpo = out / "data", out / "sft", out / "grpo"
    tiny = str(tiny_model_dirs["qwen2_5_vl"])
    common = ["--dataset_path", str(data), "--max_steps", "2", "--save_steps", "1", "--logging_steps", "1",
              "--report_to", "tensorboard", "--image_cache_dir", str(out / "cache")]
    stages = [
        ["data", "convert", "--format", "medad_mcq", "--input", str(source), "--out", str(data)],
        ["sft", "--config", str(REPO / "recipes/tiny/sft.yaml"), "--model_name_or_path", tiny,
         "--output_dir", str(sft), "--per_device_train_batch_size", "2", *common],
        ["grpo", "--config", str(REPO / "recipes/tiny/con_grpo.yaml"), "--model_name_or_path", str(sft),
         "--output_dir", str(grpo), "--per_device_train_batch_size", "4", "--num_generations", "2",
         "--max_completion_length", "12", "--log_completions", "true", *common],
        ["eval", "--model", str(grpo), "--suite", str(data), "--out", str(out / "eval"), "--max-new-tokens", "12",
         "--no-progress"],
        ["export", "--model", str(grpo), "--out", str(out / "export"), "--metrics", str(out / "eval/metrics.json")],
    ]
    console = []
    for argv in stages:
        assert medgrpo(argv) == 0, (argv[0], capfd.readouterr().err[-3000:])
        captured = capfd.readouterr()
        console.append(captured.out + captured.err)
    (out / "console.log").write_text("\n".join(console))

    kinds = {p.suffix or p.name for p in out.rglob("*") if p.is_file()}
    assert {".parquet", ".jsonl", ".safetensors", ".log", ".md", ".pt"} <= kinds, kinds  # the scan saw them all
    assert list(grpo.glob("runs/*/events.out.tfevents.*")) and (out / "eval/predictions.jsonl").is_file()
    leaks = [f"{path.relative_to(out)}: {needle}" for path in out.rglob("*")
             if path.is_file() and path.suffix != ".dcm"  # the dataset's own images are the patient data
             for text in _texts(path) for needle in NEEDLES if needle in text]
    assert leaks == []
    assert all(value in (source / "scans/train0.dcm").read_bytes().decode("latin-1") for value in PHI.values())
