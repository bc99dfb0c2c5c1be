"""What the code assumes about a checkpoint holds for the real Qwen-VL ones the tiny models imitate: evaluation
decodes as it says whatever generation_config ships, option letters are scored across the tokenizer's merges,
the completion budget follows training, and GRPO-CARE finds the answer however the tag is tokenized."""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch
from PIL import Image

from medgrpo.eval.generate import Prompt, TransformersGenerator, candidate_scores
from medgrpo.models.loading import trained_completion_length
from medgrpo.prompts import ANSWER_CLOSE, SYSTEM_PROMPT


def _prompt() -> Prompt:
    messages = [{"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": "Is there an abnormality?\nOptions:\nA. Yes\nB. No"}]
    return Prompt(messages, [Image.new("RGB", (128, 128), (90, 60, 30))])


@pytest.mark.parametrize("arch", ["qwen2_5_vl", "qwen3_vl"])
def test_evaluation_decodes_the_same_whatever_generation_config_ships(tiny_model_dirs, tmp_path, arch):
    """Greedy evaluation ignores the checkpoint's sampling defaults, repetition penalty and length limits (the
    vLLM backend passes its own sampling parameters too), and stops at any token of the EOS list."""
    plain = tmp_path / "plain"
    shutil.copytree(tiny_model_dirs[arch], plain)
    config = json.loads((plain / "generation_config.json").read_text())
    assert config["do_sample"] and isinstance(config["eos_token_id"], list)  # as the real checkpoints ship
    # a random model may stop at once: stop at a token it never writes instead, in both, to see whole outputs
    video = json.loads((plain / "config.json").read_text())["video_token_id"]
    neutral = {"bos_token_id": config["bos_token_id"], "eos_token_id": [video], "pad_token_id": config["pad_token_id"]}
    (plain / "generation_config.json").write_text(json.dumps(neutral))
    loud = tmp_path / "loud"
    shutil.copytree(tiny_model_dirs[arch], loud)
    (loud / "generation_config.json").write_text(json.dumps(
        {**config, "eos_token_id": [video], "repetition_penalty": 3.0, "no_repeat_ngram_size": 1,
         "max_new_tokens": 2, "temperature": 5.0}
    ))
    out = {}
    for name, folder in (("plain", plain), ("loud", loud)):
        gen = TransformersGenerator(folder, device="cpu")
        gen.generate([_prompt()], max_new_tokens=4)  # the evaluation path runs
        inputs = gen._encode([_prompt(), _prompt()])
        with torch.inference_mode():  # what generate() does, with the ids to compare
            out[name] = gen.model.generate(**inputs, max_new_tokens=24, do_sample=False).tolist()
        prompt_len = inputs["input_ids"].shape[1]
    assert out["plain"] == out["loud"]
    assert len(out["plain"][0]) == prompt_len + 24  # the checkpoint's max_new_tokens=2 did not apply


def test_candidate_scores_sum_where_the_candidates_differ():
    ids = [[1, 2, 3, 10, 11], [1, 2, 3, 12], [1, 2, 3, 13, 14, 15]]
    logps = [[0, -5, -5, -1, -1], [0, -5, -5, -3], [0, -5, -5, -1, -1, -1]]
    assert candidate_scores(ids, logps) == [-2, -3, -3]


def test_letter_probabilities_score_whole_answer_blocks_across_merged_tokens(tiny_model_dirs):
    """The letter merges with the tag's ">" in the tokenizer: each candidate block is scored as a sequence, and
    the batched, left-padded computation equals the one candidate at a time."""
    gen = TransformersGenerator(tiny_model_dirs["qwen2_5_vl"], device="cpu")
    tok = gen.processor.tokenizer
    assert "A" not in tok.convert_ids_to_tokens(tok("<answer>A</answer>")["input_ids"])
    prefix = "<think>A brain MRI with a mass.</think>\n<answer>"
    probs = gen.letter_probs([_prompt()], [prefix], ["AB"])[0]
    assert set(probs) == {"A", "B"} and sum(probs.values()) == pytest.approx(1.0)
    singles = []
    for letter in "AB":
        inputs = gen._encode([_prompt()], [prefix + letter + ANSWER_CLOSE])
        with torch.inference_mode():
            logits = gen.model(**inputs).logits[0, :-1].float()
        ids = inputs["input_ids"][0]
        singles.append((ids.tolist(), [0.0] + torch.log_softmax(logits, -1).gather(-1, ids[1:, None])[:, 0].tolist()))
    scores = candidate_scores([s[0] for s in singles], [s[1] for s in singles])
    expected = math.exp(scores[0]) / (math.exp(scores[0]) + math.exp(scores[1]))
    assert probs["A"] == pytest.approx(expected, abs=1e-4)


def test_the_completion_budget_follows_the_recipe_it_trained_with():
    assert trained_completion_length({"recipe": {"max_completion_length": 512}}) == 512
    assert trained_completion_length({"recipe": {"max_completion_length": None}}) is None
    assert trained_completion_length(None) is None
    assert trained_completion_length({"recipe": {"max_completion_length": True}}) is None


def test_a_thinking_template_that_prefills_think_stops_before_the_model_loads(tiny_model_dirs, tmp_path):
    """Qwen3-VL Thinking checkpoints share model_type with Instruct and pre-fill "<think>\\n": refused, in one
    line naming the folder, by every loader of a processor (training, evaluation, export)."""
    from medgrpo.eval.generate import ModelLoadError
    from medgrpo.models.loading import load_processor

    folder = tmp_path / "thinking"
    shutil.copytree(tiny_model_dirs["qwen3_vl"], folder)
    template = (folder / "chat_template.jinja").read_text()
    assert "<|im_start|>assistant\\n' }}" in template or "<|im_start|>assistant" in template
    prefilled = template.replace("{{- '<|im_start|>assistant\\n' }}", "{{- '<|im_start|>assistant\\n<think>\\n' }}")
    assert prefilled != template
    (folder / "chat_template.jinja").write_text(prefilled)
    with pytest.raises(ModelLoadError, match="pre-fills '<think>'") as err:
        load_processor(folder)
    assert str(folder) in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ModelLoadError, match="pre-fills"):
        TransformersGenerator(folder, device="cpu")
    load_processor(tiny_model_dirs["qwen3_vl"])  # the Instruct template passes
