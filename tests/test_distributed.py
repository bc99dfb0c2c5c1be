"""Two real ranks on CPU (gloo) through ``accelerate launch``: stage 1 and Con-GRPO on the ci tiny model.

What multi-process training must keep true, checked on runs that really start 2 processes
(``recipes/accelerate_configs/cpu_2proc.yaml`` + the tiny recipes' ``use_cpu: true``):

* both ranks train as one data-parallel group (the logged epoch advances by the global batch);
* a GRPO group split across the ranks is normalised with the statistics of the whole group: TRL gathers the
  rewards of every process before normalising, and each rank keeps its slice of the advantages;
* the GRPO variants' state (HA-DW anchor, DRPO history, AR3PO per-prompt buffer) is the same on every rank;
* the checkpoints a 2-rank run saves load back;
* every accelerate config loads through accelerate's own parser, and the FSDP one wraps the decoder layers and
  vision blocks of every supported architecture.

The Con-GRPO runs go through this file as the launched script (``__main__`` below): it wraps two trainer methods
to write what each rank saw and computed to ``probe-rank<N>.jsonl``, then runs ``medgrpo.train.con_grpo.main``,
the function ``python -m medgrpo.train con_grpo`` calls. Stage 1 runs through ``-m medgrpo.train`` itself.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ACCELERATE_CONFIG = REPO / "recipes/accelerate_configs/cpu_2proc.yaml"
WORLD = 2
G = 4  # num_generations


def _free_port() -> int:
    """A free TCP port, so 2-rank runs of several people on one machine do not share a rendezvous."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(target: list[str], cwd: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(ACCELERATE_CONFIG),
           "--main_process_port", str(_free_port()), *target]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def log_history(out: Path) -> list[dict]:
    return json.loads((out / "trainer_state.json").read_text())["log_history"]


def read_probe(out: Path) -> dict[int, list[dict]]:
    """rank -> one row per generation step, as written by the probe in ``__main__``."""
    ranks = {}
    for path in sorted(out.glob("probe-rank*.jsonl")):
        ranks[int(path.stem.removeprefix("probe-rank"))] = [json.loads(line) for line in path.read_text().splitlines()]
    return ranks


@pytest.fixture(scope="module")
def short_data(synth_dir, tmp_path_factory) -> Path:
    """One task family with the one-sentence gold reasoning (no ``cot``), so a completion fits in 24 tokens and a
    briefly fine-tuned ci model writes the grammar often but picks the right letter only sometimes: groups then
    have reward variance, without which a normalisation check could not tell global from local statistics."""
    from medgrpo.data import load_records, write_records

    data = tmp_path_factory.mktemp("short") / "data"
    (data / "images").mkdir(parents=True)
    records = [r for r in load_records(synth_dir, split="train") if r.task == "modality_classification"]
    for record in records:
        record.cot = None
        for image in record.images:
            (data / image).write_bytes((synth_dir / image).read_bytes())
    write_records(records, data / "train.jsonl")
    return data


@pytest.fixture(scope="module")
def sft_run(tiny_model_dirs, short_data, tmp_path_factory) -> Path:
    """Stage 1 with 2 ranks: 60 steps at lr 1e-2 teach the ci model the grammar (about 0.9 well-formed at T=1)."""
    out = tmp_path_factory.mktemp("sft") / "sft"
    launch(["-m", "medgrpo.train", "sft", "--config", str(REPO / "recipes/tiny/sft.yaml"),
            "--model_name_or_path", str(tiny_model_dirs["qwen2_5_vl"]), "--dataset_path", str(short_data),
            "--output_dir", str(out), "--max_steps", "60", "--per_device_train_batch_size", "2",
            "--learning_rate", "1e-2", "--warmup_steps", "0", "--report_to", "none", "--save_strategy", "no",
            "--logging_steps", "20"], cwd=out.parent)
    return out


def grpo(sft: Path, data: Path, out: Path, *extra: str) -> Path:
    launch([__file__, str(out), "--config", str(REPO / "recipes/tiny/con_grpo.yaml"),
            "--model_name_or_path", str(sft), "--dataset_path", str(data), "--output_dir", str(out),
            "--num_generations", str(G), "--max_completion_length", "24", "--reward_funcs", "format", "accuracy",
            "--reward_weights", "1", "1", "--report_to", "none", "--logging_steps", "1", *extra], cwd=out.parent)
    return out


@pytest.fixture(scope="module")
def split_run(sft_run, short_data, tmp_path_factory) -> Path:
    """Con-GRPO, plain TRL advantages, 2 completions per rank: every group of 4 is split across the two ranks
    (so no group edit: the recipe's GCPO injection needs whole groups on each rank)."""
    out = tmp_path_factory.mktemp("grpo") / "split"
    return grpo(sft_run, short_data, out, "--per_device_train_batch_size", "2", "--max_steps", "4",
                "--save_strategy", "steps", "--save_steps", "4", "--golden_injection", "false")


@pytest.fixture(scope="module")
def variants_run(sft_run, short_data, tmp_path_factory) -> Path:
    """Con-GRPO with HA-DW, DRPO and AR3PO reuse (group edits need whole groups per rank: 4 completions each)."""
    out = tmp_path_factory.mktemp("grpo") / "variants"
    # a hotter policy than the recipe's (1.0, not 0.5): the briefly fine-tuned ci model favours one letter, and the reuse buffer
    # needs a correct completion of the policy's own in these three steps
    return grpo(sft_run, short_data, out, "--per_device_train_batch_size", "4", "--max_steps", "3",
                "--save_strategy", "no", "--hadw", "true", "--drpo_scaling", "true", "--response_reuse", "true",
                "--temperature", "1.0")


def test_sft_two_ranks_train_as_one_group(sft_run, short_data):
    n_records = len((short_data / "train.jsonl").read_text().splitlines())
    last = log_history(sft_run)[-1]
    # Two independent single-process runs would each log 60 * 2 / n epochs; one 2-rank group logs twice that.
    assert last["step"] == 60
    assert last["epoch"] == pytest.approx(60 * 2 * WORLD / n_records)
    from medgrpo.models.loading import load_model

    assert load_model(sft_run).config.model_type == "qwen2_5_vl"


def test_grpo_both_ranks_ran(split_run):
    ranks = read_probe(split_run)
    assert sorted(ranks) == list(range(WORLD))
    for rank, rows in ranks.items():
        assert len(rows) == 4 and all(row["rank"] == rank and row["world"] == WORLD for row in rows)
        assert all(len(row["ids"]) == 2 and len(row["advantages"]) == 2 for row in rows)


def test_every_rank_closes_its_process_group(split_run, variants_run):
    """``main`` destroys the process group on each rank before returning, instead of leaving gloo's threads to an
    interpreter shutdown that can abort a rank after a run that succeeded (seen once in CI)."""
    for run in (split_run, variants_run):
        closed = {path.name: json.loads(path.read_text()) for path in run.glob("closed-rank*")}
        assert closed == {f"closed-rank{rank}": True for rank in range(WORLD)}


def _group_advantages(rewards: list[list[float]], weights: list[float], size: int) -> list[float]:
    """TRL's default advantage (sum_then_normalize, scale_rewards="group"): (r - group mean) / (group std + 1e-4),
    the std with Bessel's correction, over consecutive groups of ``size`` rows."""
    import torch

    total = (torch.tensor(rewards) * torch.tensor(weights)).sum(dim=1).view(-1, size)
    mean, std = total.mean(dim=1, keepdim=True), total.std(dim=1, keepdim=True)
    return ((total - mean) / (std + 1e-4)).flatten().tolist()


def test_split_groups_are_normalised_over_the_global_group(split_run):
    ranks = read_probe(split_run)
    informative = 0
    for step, (row0, row1) in enumerate(zip(ranks[0], ranks[1], strict=True)):
        # Each rank holds the rewards of the WHOLE batch (gathered), and both hold the same tensor.
        assert len(row0["rewards"]) == WORLD * len(row0["ids"]) == G
        assert row0["rewards"] == row1["rewards"]
        # The group really is split: the same prompt on both ranks.
        assert len(set(row0["ids"] + row1["ids"])) == 1, (step, row0["ids"], row1["ids"])
        expected = _group_advantages(row0["rewards"], row0["weights"], G)
        assert row0["advantages"] + row1["advantages"] == pytest.approx(expected, abs=1e-5), step
        local = _group_advantages(row0["rewards"][:2], row0["weights"], 2) + \
            _group_advantages(row0["rewards"][2:], row0["weights"], 2)
        informative += local != pytest.approx(expected, abs=1e-3)
    # Only a group whose rewards differ between the halves tells global from per-rank statistics apart.
    assert informative, "no step had a split group whose local and global advantages differ: check is vacuous"


def test_two_rank_checkpoints_load(split_run):
    from medgrpo.models.loading import load_model, load_processor

    for folder in (split_run, split_run / "checkpoint-4"):
        assert load_model(folder).config.model_type == "qwen2_5_vl"
    assert load_processor(split_run).image_processor.size["longest_edge"] > 0
    assert log_history(split_run)[-1]["step"] == 4


def test_hadw_and_drpo_state_identical_across_ranks(variants_run):
    ranks = read_probe(variants_run)
    assert len(ranks[0]) == len(ranks[1]) == 3
    for row0, row1 in zip(ranks[0], ranks[1], strict=True):
        assert row0["ids"] != row1["ids"]  # whole, different groups per rank
        assert row0["hadw"] == row1["hadw"] and row0["drpo"] == row1["drpo"]
    assert ranks[0][-1]["hadw"]["steps"] == 3 and ranks[0][-1]["drpo"]["history"]  # the state really moved


def test_reuse_buffer_identical_across_ranks(variants_run):
    ranks = read_probe(variants_run)
    assert any(row["reuse"]["store"] for rows in ranks.values() for row in rows), "no correct completion stored"
    for row0, row1 in zip(ranks[0], ranks[1], strict=True):
        assert row0["reuse"] == row1["reuse"]


GPU_CONFIGS = {"ddp": "MULTI_GPU", "zero2": "DEEPSPEED", "zero3": "DEEPSPEED", "fsdp": "FSDP"}


@pytest.mark.parametrize("name", [*GPU_CONFIGS, "cpu_2proc"])
def test_accelerate_configs_load(name):
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(REPO / f"recipes/accelerate_configs/{name}.yaml"))  # unknown keys raise
    assert config.distributed_type.value == GPU_CONFIGS.get(name, "MULTI_GPU")
    assert config.mixed_precision == ("no" if name == "cpu_2proc" else "bf16")
    if name.startswith("zero"):
        assert config.deepspeed_config["zero_stage"] == int(name[-1])


def test_fsdp_config_wraps_every_architecture(tiny_model_dirs, monkeypatch):
    """The settings ``accelerate launch --config_file fsdp.yaml`` exports become an FSDP2 plugin whose wrap policy
    finds the transformer blocks (from each model's ``_no_split_modules``) of all three Qwen-VL architectures."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils import FullyShardedDataParallelPlugin, prepare_multi_gpu_env
    from transformers import AutoModelForImageTextToText

    args = launch_command_parser().parse_args(
        ["--config_file", str(REPO / "recipes/accelerate_configs/fsdp.yaml"), "-m", "medgrpo.train"])
    for key, value in prepare_multi_gpu_env(_validate_launch_command(args)[0]).items():
        monkeypatch.setenv(key, value)
    for arch, path in tiny_model_dirs.items():
        plugin = FullyShardedDataParallelPlugin()
        assert plugin.fsdp_version == 2
        model = AutoModelForImageTextToText.from_pretrained(path)
        plugin.set_auto_wrap_policy(model)
        wrapped = {cls.__name__ for cls in plugin.auto_wrap_policy.keywords["transformer_layer_cls"]}
        assert any(n.endswith("DecoderLayer") for n in wrapped) and any("Vision" in n for n in wrapped), (arch, wrapped)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_use_vllm_without_vllm_is_a_one_line_error(tiny_model_dirs, synth_dir, tmp_path, capsys):
    from medgrpo.train import con_grpo

    code = con_grpo.main(["--config", str(REPO / "recipes/tiny/con_grpo.yaml"), "--use_vllm", "true",
                          "--model_name_or_path", str(tiny_model_dirs["qwen2_5_vl"]), "--dataset_path", str(synth_dir),
                          "--output_dir", str(tmp_path / "out"), "--report_to", "none"])
    err = capsys.readouterr().err
    assert code == 2 and "vllm" in err.lower() and "Loading weights" not in err


def _install_probe(out: Path) -> None:
    """Record, per rank and generation step, the ids, the gathered rewards, this rank's advantages and the variants'
    state, by wrapping (not replacing) the two trainer methods that produce them."""
    from medgrpo.train.con_grpo_trainer import ConGRPOTrainer

    calculate_rewards = ConGRPOTrainer._calculate_rewards
    generate_and_score = ConGRPOTrainer._generate_and_score_completions

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self._probe_rewards = calculate_rewards(self, inputs, prompts, completions, completion_ids_list)
        return self._probe_rewards

    def _generate_and_score_completions(self, inputs):
        output = generate_and_score(self, inputs)
        row = {
            "rank": self.accelerator.process_index,
            "world": self.accelerator.num_processes,
            "ids": [example["id"] for example in inputs],
            "rewards": self._probe_rewards.tolist(),
            "weights": self.reward_weights.tolist(),
            "advantages": output["advantages"].tolist(),
            **{name: obj.state_dict() for name, obj in (("hadw", self._hadw), ("drpo", self._drpo),
                                                        ("reuse", self._reuse)) if obj is not None},
        }
        with open(out / f"probe-rank{row['rank']}.jsonl", "a") as fh:
            fh.write(json.dumps(row) + "\n")
        return output

    ConGRPOTrainer._calculate_rewards = _calculate_rewards
    ConGRPOTrainer._generate_and_score_completions = _generate_and_score_completions


if __name__ == "__main__":  # launched by accelerate: probe-output folder, then Con-GRPO's own arguments
    from medgrpo.train import con_grpo

    probe_dir = Path(sys.argv[1])
    probe_dir.mkdir(parents=True, exist_ok=True)
    _install_probe(probe_dir)
    code = con_grpo.main(sys.argv[2:])
    import torch.distributed as dist

    # What main left behind: a process group still open at interpreter shutdown can abort the rank (SIGABRT).
    (probe_dir / f"closed-rank{os.environ['RANK']}").write_text(json.dumps(not dist.is_initialized()))
    sys.exit(code)
