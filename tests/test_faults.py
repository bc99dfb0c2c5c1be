"""Faults a training run must survive: kill -9 at random steps, half-written checkpoints, unusable output folders.

The kill loop runs the real CLI (``python -m medgrpo.train con_grpo``) on the ``ci`` tiny model. GCPO golden-answer
injection is on so that every group has reward variance: a random-init policy otherwise scores 0 everywhere, its
gradient is zero, and "same final weights" would hold trivially.
"""

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file
from transformers import AutoModelForImageTextToText

from medgrpo.train import con_grpo
from medgrpo.train.checkpoints import checkpoint_problem, load_checkpoint_weights, resume_checkpoint
from medgrpo.train.con_grpo_config import ConGRPOConfig
from medgrpo.train.run import disk_estimate, weights_bytes

REPO = Path(__file__).resolve().parents[1]
MAX_STEPS = 8
KILLS = 3


def grpo_cmd(model: Path, data: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "medgrpo.train", "con_grpo", "--config", str(REPO / "recipes/tiny/con_grpo.yaml"),
            "--model_name_or_path", str(model), "--dataset_path", str(data), "--output_dir", str(out),
            "--max_steps", str(MAX_STEPS), "--save_steps", "2", "--per_device_train_batch_size", "4",
            "--num_generations", "2", "--max_completion_length", "12", "--max_train_samples", "16",
            "--golden_injection", "true", "--report_to", "none", "--logging_steps", "1"]


@pytest.fixture(scope="module")
def reference(tiny_model_dirs, synth_dir, tmp_path_factory):
    """An uninterrupted run: its output folder (final weights, every checkpoint, trainer_state.json)."""
    out = tmp_path_factory.mktemp("faults") / "reference"
    subprocess.run(grpo_cmd(tiny_model_dirs["qwen2_5_vl"], synth_dir, out), check=True, capture_output=True,
                   timeout=300)
    return out


def _kill_at_step(cmd: list[str], step: int, timeout: float = 240) -> str:
    """Start ``cmd``; SIGKILL its whole process group once the progress bar shows ``step``; return its stderr."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    seen: list[bytes] = []
    reached = threading.Event()
    pattern = re.compile(rb"(\d+)/%d \[" % MAX_STEPS)

    def read() -> None:
        while chunk := os.read(proc.stderr.fileno(), 4096):
            seen.append(chunk)
            steps = [int(m) for m in pattern.findall(b"".join(seen[-2:]))]
            if steps and max(steps) >= step:
                reached.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    finished = not reached.wait(timeout)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    reader.join(5)
    err = b"".join(seen).decode(errors="replace")
    assert not finished and proc.returncode == -signal.SIGKILL, f"run ended before step {step}:\n{err[-2000:]}"
    return err


def test_kill9_loop_resumes_to_the_uninterrupted_weights(reference, tiny_model_dirs, synth_dir, tmp_path):
    """Three kill -9s at random steps, each followed by the same command; the end state matches a clean run.

    Measured on CPU (float32, one thread): bit-identical weights and per-step logs, because the checkpoint restores
    weights, AdamW moments, the LR schedule and every RNG, and the prompt sampler is seeded, so the resumed steps
    redo exactly the generations of the clean run. No tolerance is needed; any drift fails the test.
    """
    seed = int(os.environ.get("MEDGRPO_FAULT_SEED", time.time_ns() % 10_000))
    rng = random.Random(seed)
    out = tmp_path / "killed"
    cmd = grpo_cmd(tiny_model_dirs["qwen2_5_vl"], synth_dir, out)
    for kill in range(KILLS):
        start = resume_checkpoint(str(out), None)
        done = int(start.rsplit("-", 1)[1]) if start else 0
        # the first kill comes after checkpoint-2 exists, so that at least one restart really resumes
        err = _kill_at_step(cmd, rng.randint(max(done + 1, 3), MAX_STEPS - 1))
        if start:
            assert f"medgrpo: resuming from {start}" in err, f"seed {seed}, kill {kill}: {err[-1500:]}"
    # A crash while a folder was being rewritten can leave a short file next to a whole trainer_state.json.
    newest = resume_checkpoint(str(out), None)
    if newest:
        with open(Path(newest) / "optimizer.pt", "r+b") as fh:
            fh.truncate(100)
    final = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert final.returncode == 0, f"seed {seed}: {final.stderr[-2000:]}"
    if newest:
        assert f"skipping incomplete {newest}: optimizer.pt is truncated" in final.stderr

    got, want = load_file(out / "model.safetensors"), load_file(reference / "model.safetensors")
    initial = load_file(tiny_model_dirs["qwen2_5_vl"] / "model.safetensors")
    assert any(not want[k].equal(initial[k]) for k in want), "the clean run did not train: the test proves nothing"
    different = [k for k in want if not got[k].equal(want[k])]
    assert not different, f"seed {seed}: {len(different)} tensors differ after kill/resume, e.g. {different[:3]}"

    def per_step(run: Path) -> list[tuple]:
        history = json.loads((run / "trainer_state.json").read_text())["log_history"]
        return [(e["step"], e["grad_norm"], e["reward"]) for e in history if "grad_norm" in e]

    assert per_step(out) == per_step(reference) and len(per_step(out)) == MAX_STEPS


def test_checkpoint_weights_load_back(reference, tiny_model_dirs):
    """The Trainer's own resume load misses every key of a transformers-5 Qwen-VL checkpoint; ours loads them all."""
    checkpoint = reference / f"checkpoint-{MAX_STEPS - 2}"
    saved = load_file(checkpoint / "model.safetensors")
    model = AutoModelForImageTextToText.from_pretrained(tiny_model_dirs["qwen2_5_vl"])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = model.load_state_dict(saved, strict=False)  # what Trainer._load_from_checkpoint does
    assert result.unexpected_keys and all(model.state_dict()[k].equal(v) for k, v in before.items())
    load_checkpoint_weights(model, str(checkpoint))
    want = AutoModelForImageTextToText.from_pretrained(checkpoint).state_dict()
    assert all(v.equal(want[k]) for k, v in model.state_dict().items())
    assert any(not v.equal(before[k]) for k, v in model.state_dict().items())


@pytest.fixture
def checkpoints(reference, tmp_path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    return out


@pytest.mark.parametrize("name, size, reason", [
    ("model.safetensors", 5000, "model.safetensors is truncated"),
    ("model.safetensors", 4, "model.safetensors is truncated"),
    ("optimizer.pt", 1000, "optimizer.pt is truncated"),
    ("rng_state.pth", 0, "rng_state.pth is truncated"),
    ("trainer_state.json", 50, "trainer_state.json is not valid JSON"),
    ("config.json", 10, "config.json is not valid JSON"),
])
def test_truncated_checkpoint_is_never_picked_up(checkpoints, capsys, name, size, reason):
    newest = checkpoints / f"checkpoint-{MAX_STEPS}"
    with open(newest / name, "r+b") as fh:
        fh.truncate(size)
    assert checkpoint_problem(newest).startswith(reason)
    assert resume_checkpoint(str(checkpoints), None) == str(checkpoints / f"checkpoint-{MAX_STEPS - 2}")
    assert f"skipping incomplete {newest}: {reason}" in capsys.readouterr().err
    with pytest.raises(ValueError, match=f"resume_from_checkpoint {newest}: {reason}"):
        resume_checkpoint(str(checkpoints), str(newest))


def test_interrupted_saves_are_skipped_and_whole_ones_pass(checkpoints):
    for folder in checkpoints.glob("checkpoint-*"):
        assert checkpoint_problem(folder) is None, folder
    (checkpoints / f"checkpoint-{MAX_STEPS}" / "trainer_state.json").unlink()  # killed before the last write
    half = checkpoints / f"checkpoint-{MAX_STEPS + 2}"
    half.mkdir()  # killed right after the folder was created
    assert resume_checkpoint(str(checkpoints), None).endswith(f"checkpoint-{MAX_STEPS - 2}")
    for folder in list(checkpoints.glob("checkpoint-*")):
        shutil.rmtree(folder)
    assert resume_checkpoint(str(checkpoints), None) is None


def test_disk_estimate_by_hand():
    args = ConGRPOConfig(output_dir="x", max_steps=8, save_steps=2, save_total_limit=2, report_to="none",
                         use_cpu=True, bf16=False)
    # 4 saves, 3 kept at once (limit + the one being written), each weights + 2 AdamW moments, plus final weights.
    assert disk_estimate(args, 100) == 100 * (1 + 3 * 3)
    args.save_only_model = True
    assert disk_estimate(args, 100) == 100 * (1 + 3)
    assert disk_estimate(args, 100, use_peft=True) == 0


def test_disk_estimate_counts_epoch_runs_at_their_limit_and_zero_checkpoints_at_7x(monkeypatch):
    """The GPU recipes train by epochs under ZeRO-2: a checkpoint there holds fp32 master weights and moments
    beside the bf16 weights (about 7x), and save_total_limit + 1 of them can exist at once."""
    args = ConGRPOConfig(output_dir="x", num_train_epochs=1, save_steps=200, save_total_limit=2, report_to="none",
                         use_cpu=True, bf16=False)
    assert disk_estimate(args, 100) == 100 * (1 + 3 * 3)
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    assert disk_estimate(args, 100) == 100 * (1 + 7 * 3)


def test_weights_of_an_adapter_run_are_its_bases(tiny_model_dirs, tmp_path):
    """A stage-1 LoRA folder is merged on load: stage 2 holds and saves the full base weights."""
    base = tiny_model_dirs["qwen2_5_vl"]
    adapter = tmp_path / "sft"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(base)}))
    (adapter / "adapter_model.safetensors").write_bytes(b"x" * 10)
    assert weights_bytes(str(adapter)) == weights_bytes(str(base)) == (base / "model.safetensors").stat().st_size
    assert weights_bytes("Qwen/Qwen2.5-VL-3B-Instruct") == 0  # a Hub id: unknown, only writability is checked


def _refused(tiny_model_dirs, synth_dir, out: Path, capsys) -> str:
    argv = grpo_cmd(tiny_model_dirs["qwen2_5_vl"], synth_dir, out)[4:]
    assert con_grpo.main(argv) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("medgrpo:")]
    assert len(lines) == 1 and "Traceback" not in err and "Loading weights" not in err, err[-2000:]
    return lines[0]


def test_output_dir_under_a_file_is_refused_before_training(tiny_model_dirs, synth_dir, tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    line = _refused(tiny_model_dirs, synth_dir, tmp_path / "afile" / "run", capsys)
    assert line == f"medgrpo: output_dir {tmp_path}/afile/run: {tmp_path}/afile is a file, not a folder"


def test_unwritable_output_dir_is_refused_before_training(tiny_model_dirs, synth_dir, capsys):
    # Tests run as root in CI, where permission bits do not stop writes; /proc refuses new files even for root.
    line = _refused(tiny_model_dirs, synth_dir, Path("/proc/medgrpo-run"), capsys)
    assert line.startswith("medgrpo: output_dir /proc/medgrpo-run: /proc is not writable")


def test_full_disk_is_refused_before_training(tiny_model_dirs, synth_dir, tmp_path, capsys, monkeypatch):
    real = shutil.disk_usage
    monkeypatch.setattr("medgrpo.train.run.shutil.disk_usage", lambda p: real(p)._replace(free=1_000_000))
    line = _refused(tiny_model_dirs, synth_dir, tmp_path / "run", capsys)
    assert re.fullmatch(r"medgrpo: output_dir \S+: needs about 0\.0\d GiB for checkpoints and weights, 0\.00 GiB "
                        r"free on that disk \(lower save_total_limit or free space\)", line), line
    assert not (tmp_path / "run").exists() and not list(tmp_path.glob(".medgrpo-write-probe-*"))
