"""Time per step with 1 and 2 data-parallel ranks on CPU (gloo), side by side: stage 1 and Con-GRPO on the ci model.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python eval/bench_distributed.py [--grpo-steps 12] [--sft-steps 30]

Every run goes through ``accelerate launch`` (1 rank: no config file; 2 ranks:
``recipes/accelerate_configs/cpu_2proc.yaml``) and ``-m medgrpo.train``, with the same per-device batch, so 2 ranks
do twice the work per step (weak scaling): the figures to compare are s/step and samples/s. Con-GRPO's step time
is TRL's ``step_time`` (generation, rewards and the update), median over the steps after the first; stage 1's is
``train_runtime / steps``. The untrained ci model always writes ``max_completion_length`` tokens, so every GRPO step
does the same work. On a shared 2-core machine the numbers move with the other load: the 1-minute load average is
printed next to each run.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(ranks: int, stage: str, argv: list[str], cwd: Path) -> float:
    """Run one stage; returns its wall time in seconds (process start-up included)."""
    config = ["--config_file", str(REPO / "recipes/accelerate_configs/cpu_2proc.yaml"),
              "--main_process_port", str(_free_port())] if ranks == 2 else ["--num_processes", "1"]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", *config, "-m", "medgrpo.train", stage, *argv]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"medgrpo: {stage} with {ranks} rank(s) failed:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - start


def measure(ranks: int, stage: str, model: Path, data: Path, out: Path, steps: int, batch: int) -> dict:
    common = ["--model_name_or_path", str(model), "--dataset_path", str(data), "--output_dir", str(out),
              "--max_steps", str(steps), "--per_device_train_batch_size", str(batch), "--report_to", "none",
              "--save_strategy", "no", "--logging_steps", "1", "--disable_tqdm", "true"]
    if stage == "sft":
        argv = ["--config", str(REPO / "recipes/tiny/sft.yaml"), *common]
    else:
        argv = ["--config", str(REPO / "recipes/tiny/con_grpo.yaml"), *common, "--num_generations", "4",
                "--max_completion_length", "24"]
    load = os.getloadavg()[0]
    wall = launch(ranks, stage, argv, out.parent)
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    runtime = history[-1]["train_runtime"]
    step_times = [e["step_time"] for e in history if "step_time" in e][1:]
    per_step = statistics.median(step_times) if step_times else runtime / steps
    return {"stage": stage, "ranks": ranks, "steps": steps, "s_per_step": per_step,
            "samples_per_s": batch * ranks / per_step, "train_runtime_s": runtime, "wall_s": wall, "load1": load}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--grpo-steps", type=int, default=12)
    p.add_argument("--sft-steps", type=int, default=30)
    p.add_argument("--out", type=Path, help="write the rows as JSON")
    a = p.parse_args(argv)
    from medgrpo.data.synth import generate_synth
    from medgrpo.models.tiny import build_tiny_model

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny_model("qwen2_5_vl", "ci", Path(tmp) / "tiny", seed=0)
        data = generate_synth(Path(tmp) / "synth", n_train=60, n_test=4, seed=0)
        for stage, steps, batch in (("sft", a.sft_steps, 4), ("con_grpo", a.grpo_steps, 16)):
            for ranks in (1, 2):
                rows.append(measure(ranks, stage, model, data, Path(tmp) / f"{stage}-{ranks}", steps, batch))
    unit = {"sft": "sequences", "con_grpo": "completions"}
    print(f"{'stage':<9} {'ranks':>5} {'per-device batch':>17} {'s/step':>7} {'samples/s':>10} {'wall s':>7} "
          f"{'load':>5}")
    for r in rows:
        batch = f"{4 if r['stage'] == 'sft' else 16} {unit[r['stage']]}"
        print(f"{r['stage']:<9} {r['ranks']:>5} {batch:>17} {r['s_per_step']:>7.3f} "
              f"{r['samples_per_s']:>10.1f} {r['wall_s']:>7.1f} {r['load1']:>5.2f}")
    if a.out:
        tmp_out = a.out.with_suffix(a.out.suffix + ".tmp")
        tmp_out.write_text(json.dumps(rows, indent=1))
        tmp_out.replace(a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
