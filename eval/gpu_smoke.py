"""GPU smoke run: a few Con-GRPO steps in bf16 on one GPU, offline, for the ci tiny model and a random-init model
with the real Qwen2.5-VL-3B dimensions; prints step time, generation tokens/s, peak GPU memory and the share of a
step spent in generation, rewards and training.

    HF_HUB_OFFLINE=1 .venv/bin/python eval/gpu_smoke.py [--runs tiny:transformers,3b:vllm] [--steps 4] [--out f.json]

Nothing is downloaded. The 3B-shaped model is the tiny model's config with Qwen2.5-VL-3B-Instruct's dimensions
(36 layers, hidden 2048, 16 heads / 2 KV heads, MLP 11008, vocabulary 151936; vision 32 blocks of 1280) and random
bf16 weights, saved with the tiny tokenizer and processor, so memory and time are those of the real model while
its text is noise. Sampling is restricted to the tiny tokenizer's ids (the rest of the 151936-row head has no
token to decode). Its images are resized to 200704-401408 pixels (256-512 image tokens), as the 3B recipe does.

Each run is a child process (a vLLM engine cannot be torn down cleanly inside one process) going through the
medgrpo stage-2 building blocks with a subclass that times generation (``_generate_single_turn``, vLLM weight sync
included) and rewards (``_calculate_rewards``) inside each optimizer step; "training" is the rest of the step
(old-policy log-probs, forward, backward, optimizer). Figures are medians over the steps after the first, which
pays for warm-up. Runs: ``<model>:<backend>`` with model ``tiny`` or ``3b`` and backend ``transformers`` or
``vllm`` (colocate); the default uses vLLM for the 3B run when it is importable. Exits 2 at once, with one line,
when no CUDA GPU is visible.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]

# Qwen/Qwen2.5-VL-3B-Instruct's config.json (text and vision towers); token ids stay the tiny tokenizer's.
QWEN2_5_VL_3B_TEXT = {
    "hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36, "num_attention_heads": 16,
    "num_key_value_heads": 2, "max_position_embeddings": 128000, "rms_norm_eps": 1e-6, "vocab_size": 151936,
    "layer_types": ["full_attention"] * 36, "max_window_layers": 70,
    "rope_parameters": {"mrope_section": [16, 24, 24], "rope_theta": 1000000.0, "rope_type": "default"},
}
QWEN2_5_VL_3B_VISION = {
    "depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16, "out_hidden_size": 2048,
    "fullatt_block_indexes": [7, 15, 23, 31], "window_size": 112, "tokens_per_second": 2,
}
PIXELS_3B = ("200704", "401408")  # 256..512 merged image tokens (28 x 28 px each), the 3B recipe's max


def fail(message: str) -> int:
    print(f"medgrpo: {message}", file=sys.stderr)
    return 2


def vllm_importable() -> bool:
    if importlib.util.find_spec("vllm") is None:
        return False
    from trl.import_utils import is_vllm_available

    return bool(is_vllm_available())


def build_3b_shaped(tiny: Path, out: Path) -> Path:
    """Random bf16 weights with Qwen2.5-VL-3B's shapes, saved with the tiny model's tokenizer and processor."""
    import shutil

    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    config = AutoConfig.from_pretrained(tiny)
    for key, value in QWEN2_5_VL_3B_TEXT.items():
        setattr(config.text_config, key, value)
    for key, value in QWEN2_5_VL_3B_VISION.items():
        setattr(config.vision_config, key, value)
    with torch.device("cuda"):
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(out)
    for path in tiny.iterdir():
        if path.suffix in (".json", ".jinja") and path.name not in ("config.json", "generation_config.json"):
            shutil.copy(path, out / path.name)
    del model
    torch.cuda.empty_cache()
    return out


def run_one(model: Path, data: Path, out: Path, backend: str, steps: int, completion: int, pixels: list[str]) -> dict:
    """Train ``steps`` Con-GRPO steps in this process and return the timings (called in the child)."""
    import torch
    from transformers import TrainerCallback

    from medgrpo.data import to_grpo_dataset
    from medgrpo.train.args import DataArguments, MedModelConfig
    from medgrpo.train.con_grpo_config import ConGRPOConfig
    from medgrpo.train.con_grpo_trainer import ConGRPOTrainer
    from medgrpo.train.modeling import load_for_training
    from medgrpo.train.run import load_training_records, parse_args

    argv = ["--config", str(REPO / "recipes/tiny/con_grpo.yaml"), "--model_name_or_path", str(model),
            "--dataset_path", str(data), "--output_dir", str(out), "--dtype", "bfloat16", "--use_cpu", "false",
            "--bf16", "true", "--gradient_checkpointing", "true", "--learning_rate", "1e-6", "--max_steps", str(steps),
            "--per_device_train_batch_size", "16", "--num_generations", "4", "--max_completion_length", str(completion),
            "--report_to", "none", "--save_strategy", "no", "--logging_steps", "1", "--disable_tqdm", "true"]
    if pixels:
        argv += ["--min_pixels", pixels[0], "--max_pixels", pixels[1]]
    if backend == "vllm":
        argv += ["--use_vllm", "true", "--vllm_mode", "colocate", "--vllm_gpu_memory_utilization", "0.3",
                 "--vllm_max_model_length", "4096"]
    data_args, args, model_args = parse_args((DataArguments, ConGRPOConfig, MedModelConfig), argv, "gpu_smoke")
    policy, processor, grid = load_for_training(model_args, data_args, args.trust_remote_code)
    vocab = len(processor.tokenizer)
    no_sample = [policy.config.image_token_id, policy.config.video_token_id]
    if backend == "vllm":
        args.generation_kwargs = {"allowed_token_ids": [i for i in range(vocab) if i not in no_sample]}
    else:  # replaces TRL's own suppress list, which holds the image token only
        args.generation_kwargs = {"suppress_tokens": no_sample + list(range(vocab, policy.config.text_config.vocab_size))}
    dataset = to_grpo_dataset(load_training_records(data_args), data_args.root, grid,
                              settings=data_args.image_settings(), system_prompt=data_args.system_prompt_text())

    clock = {"generation_s": 0.0, "rewards_s": 0.0, "tokens": 0}
    rows: list[dict] = []

    def timed(key: str, fn, *a, **kw):
        torch.cuda.synchronize()
        start = time.perf_counter()
        result = fn(*a, **kw)
        torch.cuda.synchronize()
        clock[key] += time.perf_counter() - start
        return result

    class Timed(ConGRPOTrainer):
        def _generate_single_turn(self, *a, **kw):
            completion_ids, logprobs = timed("generation_s", super()._generate_single_turn, *a, **kw)
            clock["tokens"] += sum(len(ids) for ids in completion_ids)
            return completion_ids, logprobs

        def _calculate_rewards(self, *a, **kw):
            return timed("rewards_s", super()._calculate_rewards, *a, **kw)

    class Steps(TrainerCallback):
        def on_step_begin(self, *_a, **_kw):
            torch.cuda.synchronize()
            clock.update(generation_s=0.0, rewards_s=0.0, tokens=0, start=time.perf_counter())

        def on_step_end(self, *_a, **_kw):
            torch.cuda.synchronize()
            step = time.perf_counter() - clock["start"]
            rows.append({"step_s": step, "generation_s": clock["generation_s"], "rewards_s": clock["rewards_s"],
                         "tokens": clock["tokens"]})

    trainer = Timed(model=policy, args=args, train_dataset=dataset, processing_class=processor, callbacks=[Steps()])
    torch.cuda.reset_peak_memory_stats()
    trainer.train()
    free, total = torch.cuda.mem_get_info()
    timed_rows = rows[1:] or rows

    def median(key: str) -> float:
        return statistics.median(r[key] for r in timed_rows)

    step = median("step_s")
    return {
        "params_b": sum(p.numel() for p in policy.parameters()) / 1e9,
        "steps": len(rows),
        "step_s": step,
        "gen_tokens_per_s": statistics.median(r["tokens"] / r["generation_s"] for r in timed_rows),
        "share_generation": median("generation_s") / step,
        "share_rewards": median("rewards_s") / step,
        "share_training": (step - median("generation_s") - median("rewards_s")) / step,
        "peak_torch_gib": torch.cuda.max_memory_allocated() / 2**30,
        "device_used_gib": (total - free) / 2**30,
        "gpu": torch.cuda.get_device_name(),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", help="comma-separated <tiny|3b>:<transformers|vllm> (default: tiny:transformers and "
                                  "3b:vllm when vLLM is importable, else 3b:transformers)")
    p.add_argument("--steps", type=int, default=4, help="optimizer steps per run (the first is warm-up)")
    p.add_argument("--max-completion-length", type=int, default=128)
    p.add_argument("--timeout", type=int, default=420, help="seconds per run before it is reported as failed")
    p.add_argument("--out", type=Path, help="write the results as JSON")
    p.add_argument("--child", nargs=5, metavar=("NAME", "MODEL", "DATA", "BACKEND", "RESULT"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        return fail("gpu_smoke needs a CUDA GPU: torch.cuda.is_available() is False on this machine")
    if a.child:
        name, model, data, backend, result = a.child
        pixels = list(PIXELS_3B) if name == "3b" else []
        row = run_one(Path(model), Path(data), Path(result).with_suffix(".run"), backend, a.steps,
                      a.max_completion_length, pixels)
        Path(result).write_text(json.dumps(row))
        return 0

    has_vllm = vllm_importable()
    runs = [r.split(":") for r in (a.runs or f"tiny:transformers,3b:{'vllm' if has_vllm else 'transformers'}")
            .split(",")]
    for spec in runs:
        if len(spec) != 2 or spec[0] not in ("tiny", "3b") or spec[1] not in ("transformers", "vllm"):
            return fail(f"--runs: '{':'.join(spec)}' is not <tiny|3b>:<transformers|vllm>")
        if spec[1] == "vllm" and not has_vllm:
            return fail("--runs asks for vllm, which is not importable here: pip install 'medgrpo[vllm]'")

    from medgrpo.data.synth import generate_synth
    from medgrpo.models.tiny import build_tiny_model

    print(f"gpu: {torch.cuda.get_device_name()}  torch {torch.__version__}  vLLM importable: {has_vllm}", flush=True)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = generate_synth(root / "synth", n_train=32, n_test=4, seed=0)
        models = {"tiny": build_tiny_model("qwen2_5_vl", "ci", root / "tiny", seed=0)}
        if any(name == "3b" for name, _ in runs):
            start = time.perf_counter()
            models["3b"] = build_3b_shaped(models["tiny"], root / "3b")
            print(f"built the random 3B-shaped model in {time.perf_counter() - start:.0f} s", flush=True)
        for i, (name, backend) in enumerate(runs):
            result = root / f"result-{i}.json"
            cmd = [sys.executable, __file__, "--steps", str(a.steps), "--max-completion-length",
                   str(a.max_completion_length), "--child", name, str(models[name]), str(data), backend, str(result)]
            start = time.perf_counter()
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
                error = None if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["?"])[-1]
            except subprocess.TimeoutExpired:
                error = f"timed out after {a.timeout} s"
            row = {"model": name, "backend": backend, "wall_s": time.perf_counter() - start}
            row.update(json.loads(result.read_text()) if error is None else {"error": error[:300]})
            results.append(row)
            print(json.dumps(row), flush=True)

    print(f"\n{'model':<6} {'backend':<12} {'params':>7} {'s/step':>7} {'gen tok/s':>10} {'gen':>5} {'reward':>6} "
          f"{'train':>6} {'peak torch':>11} {'GPU used':>9}")
    for r in results:
        if "error" in r:
            print(f"{r['model']:<6} {r['backend']:<12} FAILED: {r['error']}")
            continue
        print(f"{r['model']:<6} {r['backend']:<12} {r['params_b']:>6.2f}B {r['step_s']:>7.2f} "
              f"{r['gen_tokens_per_s']:>10.0f} {r['share_generation']:>5.0%} {r['share_rewards']:>6.0%} "
              f"{r['share_training']:>6.0%} {r['peak_torch_gib']:>8.1f} GiB {r['device_used_gib']:>5.1f} GiB")
    if a.out:
        tmp_out = a.out.with_suffix(a.out.suffix + ".tmp")
        tmp_out.write_text(json.dumps(results, indent=1))
        tmp_out.replace(a.out)
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
