"""The GPU recipes start on 80 GB cards under their documented accelerate configs, by arithmetic
(:mod:`medgrpo.train.memory`), and every vLLM recipe caps vLLM's context."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from medgrpo.train.memory import (
    RECIPE_MODELS,
    SHAPES,
    check_recipe,
    estimate,
    launch_config,
    table,
    vllm_kv_fits,
)

REPO = Path(__file__).resolve().parents[1]
RECIPES = [REPO / "recipes" / folder / f"{stage}.yaml" for folder in sorted(RECIPE_MODELS)
           for stage in ("sft", "con_grpo", "con_grpo_zero")]


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_gpu_recipe_fits_an_80gb_card(path):
    config = REPO / "recipes/accelerate_configs" / launch_config(path)
    assert check_recipe(path, config) == []
    recipe = yaml.safe_load(path.read_text())
    if recipe.get("use_vllm"):
        assert recipe["vllm_max_model_length"] >= recipe["max_completion_length"] + 512 + 300


def test_an_uncapped_vllm_context_does_not_fit_the_7b_and_4b_recipes(tmp_path):
    """Without vllm_max_model_length, colocated vLLM at 0.3 of the card must hold the whole context's KV cache:
    128,000 tokens of Qwen2.5-VL-7B or 262,144 of Qwen3-VL-4B do not fit beside their weights."""
    for folder in ("qwen2.5-vl-7b", "qwen3-vl-4b"):
        recipe = yaml.safe_load((REPO / "recipes" / folder / "con_grpo.yaml").read_text())
        recipe.pop("vllm_max_model_length")
        fits, need, left = vllm_kv_fits(recipe, SHAPES[RECIPE_MODELS[folder]], 8)
        assert not fits and need > left
        copy = tmp_path / folder / "con_grpo.yaml"
        copy.parent.mkdir()
        copy.write_text(yaml.safe_dump(recipe))
        problems = check_recipe(copy, REPO / "recipes/accelerate_configs/zero2.yaml")
        assert any("vllm_max_model_length" in p for p in problems) and any("KV cache" in p for p in problems)


def test_the_estimate_follows_the_zero_stage_and_the_reference_model():
    recipe = yaml.safe_load((REPO / "recipes/qwen2.5-vl-7b/con_grpo.yaml").read_text())
    shape = SHAPES["Qwen/Qwen2.5-VL-7B-Instruct"]
    ddp = estimate(recipe, shape, {"distributed_type": "MULTI_GPU"}, 8)
    zero2 = estimate(recipe, shape, {"distributed_type": "DEEPSPEED", "deepspeed_config": {"zero_stage": 2}}, 8)
    zero3 = estimate(recipe, shape, {"distributed_type": "DEEPSPEED", "deepspeed_config": {"zero_stage": 3}}, 8)
    assert zero3["weights"] == pytest.approx(zero2["weights"] / 8) and zero2["optimizer"] < ddp["optimizer"] * 3
    assert estimate({**recipe, "beta": 0.0}, shape, {}, 8).get("reference model") is None
    assert 7.5e9 < shape.language_params() + shape.vision_params() < 8.8e9  # Qwen2.5-VL-7B has ~8.3B
    assert "| qwen2.5-vl-7b/con_grpo | zero2.yaml |" in table(REPO)


ARCH = {"qwen2.5-vl-3b": "qwen2_5_vl", "qwen2.5-vl-7b": "qwen2_5_vl", "qwen3-vl-4b": "qwen3_vl"}


@pytest.mark.parametrize("folder", sorted(RECIPE_MODELS))
def test_rl_from_the_instruct_checkpoint_teaches_the_grammar_through_the_real_template(folder, tiny_model_dirs):
    """The Con-GRPO recipe without stage 1 starts from the Hub's Instruct checkpoint and puts the grammar in its
    system prompt; rendered through the real chat template (the tiny model of that architecture carries it), the
    prompt holds the system turn, the question with its options and the format instruction, and ends at an empty
    assistant turn (no pre-filled <think>)."""
    from transformers import AutoProcessor

    from medgrpo.data.record import MedADRecord
    from medgrpo.prompts import build_prompt
    from medgrpo.train.args import DataArguments, MedModelConfig
    from medgrpo.train.con_grpo_config import ConGRPOConfig
    from medgrpo.train.run import parse_args

    path = REPO / "recipes" / folder / "con_grpo_zero.yaml"
    data_args, training_args, model_args = parse_args(
        (DataArguments, ConGRPOConfig, MedModelConfig), ["--config", str(path), "--bf16", "false", "--use_vllm", "false"], "t")
    assert model_args.model_name_or_path == RECIPE_MODELS[folder]
    system = data_args.system_prompt_text()
    assert "<think></think>" in system and "<answer></answer>" in system
    record = MedADRecord(id="1", images=["a.png"], question="Which organ is shown?", options=["Liver", "Brain"],
                         answer="B", task="anatomy_identification")
    processor = AutoProcessor.from_pretrained(tiny_model_dirs[ARCH[folder]])
    messages = build_prompt(record, system_prompt=system)
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\n" + system + "<|im_end|>\n<|im_start|>user\n")
    assert "Options:\nA. Liver\nB. Brain" in text and text.endswith("<|im_start|>assistant\n")
