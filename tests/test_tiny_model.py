"""Tiny-model factory: real architectures that reload offline, generate from an image, and build deterministically."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor, AutoTokenizer
from trl.chat_template_utils import get_training_chat_template, has_generation_markers
from trl.data_utils import prepare_multimodal_messages

from medgrpo.data.boxes import ImageGrid
from medgrpo.models import MODEL_CLASSES, PRESETS, TinyModelError, build_tiny_model, parameter_counts
from medgrpo.models import tiny as tiny_module
from medgrpo.models.corpus import ANATOMIES, APPEARANCES, FINDINGS, MODALITIES, corpus_texts
from medgrpo.prompts import GRAMMAR_TOKENS, SYSTEM_PROMPT

ARCHS = tuple(MODEL_CLASSES)
MESSAGES = [
    {"role": "system", "content": SYSTEM_PROMPT},
    {"role": "user", "content": "Which organ is shown?\nOptions:\nA. brain\nB. liver"},
]


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny")
    return {arch: build_tiny_model(arch, "ci", root / arch, seed=0) for arch in ARCHS}


def _image(width: int = 128, height: int = 128) -> Image.Image:
    return Image.fromarray(np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8))


def _sha256(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("arch", ARCHS)
def test_reloads_offline_and_generates_from_an_image(model_dirs: dict[str, Path], arch: str) -> None:
    processor = AutoProcessor.from_pretrained(model_dirs[arch])
    model = AutoModelForImageTextToText.from_pretrained(model_dirs[arch])
    assert type(model) is MODEL_CLASSES[arch]
    assert model.config.model_type == arch

    image = _image()
    text = processor.apply_chat_template(
        prepare_multimodal_messages(MESSAGES, [image]), tokenize=False, add_generation_prompt=True
    )
    inputs = processor(text=[text], images=[image], return_tensors="pt")
    grid = ImageGrid.from_processor(processor, arch)
    w, h = grid.resized_size(128, 128)
    n_image_tokens = (inputs["input_ids"] == model.config.image_token_id).sum().item()
    assert n_image_tokens == w * h // grid.factor**2 == 16

    out = model.generate(**inputs, max_new_tokens=5, do_sample=False)
    assert out.shape[1] > inputs["input_ids"].shape[1]
    new = processor.batch_decode(out[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    assert isinstance(new[0], str)


@pytest.mark.parametrize("arch", ARCHS)
def test_image_grid_matches_the_processor_on_non_square_images(
    model_dirs: dict[str, Path], arch: str
) -> None:
    processor = AutoProcessor.from_pretrained(model_dirs[arch])
    grid = ImageGrid.from_processor(processor, arch)
    patch = processor.image_processor.patch_size
    for width, height in ((96, 128), (200, 60), (30, 30)):
        thw = processor.image_processor(images=[_image(width, height)], return_tensors="pt")[
            "image_grid_thw"
        ][0]
        assert grid.resized_size(width, height) == (int(thw[2]) * patch, int(thw[1]) * patch)


@pytest.mark.parametrize("arch", ARCHS)
def test_token_ids_are_consistent_across_config_tokenizer_and_generation(
    model_dirs: dict[str, Path], arch: str
) -> None:
    tok = AutoTokenizer.from_pretrained(model_dirs[arch])
    model = AutoModelForImageTextToText.from_pretrained(model_dirs[arch])
    cfg, gen = model.config, model.generation_config
    ids = tok.convert_tokens_to_ids
    assert cfg.image_token_id == ids("<|image_pad|>")
    assert cfg.video_token_id == ids("<|video_pad|>")
    assert cfg.vision_start_token_id == ids("<|vision_start|>")
    assert cfg.vision_end_token_id == ids("<|vision_end|>")
    assert cfg.get_text_config().vocab_size == len(tok) == model.get_input_embeddings().num_embeddings
    # as the real generation_config.json: <|im_end|> then <|endoftext|> stop generation, and sampling defaults
    # (which evaluation must not inherit) are set
    assert gen.eos_token_id == [tok.eos_token_id, ids("<|endoftext|>")] and tok.eos_token_id == ids("<|im_end|>")
    assert gen.pad_token_id == tok.pad_token_id == ids("<|endoftext|>")
    assert gen.do_sample and {k: getattr(gen, k) for k in tiny_module.REAL[arch]["sampling"]} == (
        tiny_module.REAL[arch]["sampling"]
    )
    assert cfg.get_text_config().max_position_embeddings == tiny_module.REAL[arch]["max_position_embeddings"]
    assert tok.model_max_length == tiny_module.REAL[arch]["model_max_length"]
    # every special id lies inside the embedding table, and none collides with a learned token
    specials = [ids(t) for t in tiny_module.SPECIAL_TOKENS]
    assert len(set(specials)) == len(specials) and max(specials) < len(tok)


@pytest.mark.parametrize("arch", ARCHS)
def test_the_grammar_is_tokenized_as_the_real_checkpoints_do(model_dirs: dict[str, Path], arch: str) -> None:
    """Qwen2-VL and Qwen2.5-VL hold no grammar token (``<answer>A`` splits before the letter's merge with ``>``);
    Qwen3-VL adds ``<think>``/``</think>`` only, as non-special tokens. Decoding keeps the grammar either way."""
    tok = AutoTokenizer.from_pretrained(model_dirs[arch])
    added = {t for t in GRAMMAR_TOKENS if tok(t)["input_ids"] == [tok.convert_tokens_to_ids(t)]}
    assert added == ({"<think>", "</think>"} if arch == "qwen3_vl" else set())
    assert not set(GRAMMAR_TOKENS) & set(tok.all_special_tokens)
    pieces = tok.convert_ids_to_tokens(tok("<answer>C</answer>")["input_ids"])
    assert "C" not in pieces  # the letter shares a token with the tag's ">": no token boundary after "<answer>"
    text = (
        "<think>An MRI of the brain with a mass at <box>[12, 345, 67, 890]</box>.</think>\n<answer>C</answer>"
    )
    ids = tok(text)["input_ids"]
    assert tok.decode(ids, skip_special_tokens=True) == text
    wrapped = tok("<|im_start|>assistant\n" + text + "<|im_end|>")["input_ids"]
    assert tok.decode(wrapped, skip_special_tokens=True) == "assistant\n" + text
    # numbers are written digit by digit, as in Qwen
    assert tok.convert_ids_to_tokens(tok("345")["input_ids"]) == ["3", "4", "5"]


def test_tokenizer_covers_the_medical_lexicon(model_dirs: dict[str, Path]) -> None:
    tok = AutoTokenizer.from_pretrained(model_dirs["qwen2_vl"])
    words = [w for group in (MODALITIES, ANATOMIES, FINDINGS, APPEARANCES) for w in group if " " not in w]
    single = [w for w in words if len(tok(" " + w)["input_ids"]) == 1]
    assert len(single) / len(words) > 0.9
    assert 1000 < len(tok) < 8192  # a few thousand at most: the embedding must not dominate a tiny model


@pytest.mark.parametrize("arch", ARCHS)
def test_chat_template_renders_plain_strings_and_trl_content_lists_alike(
    model_dirs: dict[str, Path], arch: str
) -> None:
    processor = AutoProcessor.from_pretrained(model_dirs[arch])
    conversation = [*MESSAGES, {"role": "assistant", "content": "<think>x</think>\n<answer>A</answer>"}]
    plain = processor.apply_chat_template(conversation, tokenize=False)
    listed = processor.apply_chat_template(
        prepare_multimodal_messages(conversation, [_image()]), tokenize=False
    )
    image = "<|vision_start|><|image_pad|><|vision_end|>"
    assert listed == plain.replace("<|im_start|>user\n", "<|im_start|>user\n" + image)
    assert plain.startswith("<|im_start|>system\n" + SYSTEM_PROMPT + "<|im_end|>\n<|im_start|>user\n")
    assert plain.endswith("<|im_start|>assistant\n<think>x</think>\n<answer>A</answer><|im_end|>\n")
    prompt = processor.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|im_end|>\n<|im_start|>assistant\n")
    # the real template, read from TRL's wheel: no generation markers, and TRL supplies its training variant
    assert processor.chat_template == tiny_module.chat_template(arch)
    assert not has_generation_markers(processor.chat_template)
    assert has_generation_markers(get_training_chat_template(processor))
    # without a system turn the real Qwen template inserts its default one
    bare = processor.apply_chat_template(MESSAGES[1:], tokenize=False, add_generation_prompt=True)
    assert bare.startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n") or arch == "qwen3_vl"


@pytest.mark.parametrize("arch", ARCHS)
def test_same_seed_gives_identical_files_and_another_seed_other_weights(tmp_path: Path, arch: str) -> None:
    first = _sha256(build_tiny_model(arch, "ci", tmp_path / "a", seed=3))
    again = _sha256(build_tiny_model(arch, "ci", tmp_path / "b", seed=3))
    other = _sha256(build_tiny_model(arch, "ci", tmp_path / "c", seed=4))
    assert first == again
    assert {"model.safetensors", "tokenizer.json", "config.json", "chat_template.jinja"} <= set(first)
    assert other["model.safetensors"] != first["model.safetensors"]
    assert other["tokenizer.json"] == first["tokenizer.json"]


def test_build_leaves_the_callers_rng_alone(tmp_path: Path) -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_tiny_model("qwen2_vl", "ci", tmp_path / "m", seed=0)
    assert torch.equal(torch.rand(3), expected)


def test_corpus_is_deterministic_and_uses_the_prompt_wording() -> None:
    texts = corpus_texts(50, seed=1)
    assert texts == corpus_texts(50, seed=1) != corpus_texts(50, seed=2)
    assert texts[0] == SYSTEM_PROMPT
    assert any("Options:\nA. " in t for t in texts)
    assert any("<answer>" in t for t in texts)  # the grammar is text, as in the real vocabularies


@pytest.mark.parametrize("arch", ARCHS)
def test_parameter_counts_match_the_loaded_model(model_dirs: dict[str, Path], arch: str) -> None:
    counts = parameter_counts(model_dirs[arch])
    model = AutoModelForImageTextToText.from_pretrained(model_dirs[arch])
    assert counts["total"] == sum(p.numel() for p in model.parameters())  # tied embeddings counted once
    assert counts["vision"] == sum(p.numel() for p in model.model.visual.parameters())
    assert 150_000 < counts["total"] < 500_000  # the ci preset's target band


@pytest.mark.parametrize("arch", ARCHS)
def test_demo_preset_is_larger_and_sees_a_128px_image_as_16_tokens(tmp_path: Path, arch: str) -> None:
    folder = build_tiny_model(arch, "demo", tmp_path / arch)
    assert 1_200_000 < parameter_counts(folder)["total"] < 5_000_000
    text = AutoConfig.from_pretrained(folder).get_text_config()
    head_dim = text.hidden_size // text.num_attention_heads
    assert sum(text.rope_parameters["mrope_section"]) == head_dim // 2
    grid = ImageGrid.from_processor(AutoProcessor.from_pretrained(folder), arch)
    assert grid.resized_size(128, 128) == ((112, 112) if grid.factor == 28 else (128, 128))


def test_cli_builds_and_prints_parameter_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m"
    assert tiny_module.main(["--arch", "qwen2_5_vl", "--preset", "ci", "--out", str(out), "--seed", "1"]) == 0
    printed = capsys.readouterr().out
    total = parameter_counts(out)["total"]
    assert f"{total:,} total" in printed
    assert (out / "model.safetensors").is_file() and not list(tmp_path.glob(".m.*"))


@pytest.mark.parametrize("contents", [{"keep.txt": "mine"}, {"config.json": "{}", "model.safetensors": "w"}])
def test_cli_refuses_a_folder_it_did_not_build(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], contents: dict[str, str]
) -> None:
    out = tmp_path / "notes"
    out.mkdir()
    for name, text in contents.items():  # user files, or a trained checkpoint that must not be clobbered
        (out / name).write_text(text)
    assert tiny_module.main(["--arch", "qwen2_vl", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("medgrpo: ") and str(out) in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes"]
    assert {p.name: p.read_text() for p in out.iterdir()} == contents


def test_rebuilding_replaces_a_previous_model_folder(tmp_path: Path) -> None:
    out = tmp_path / "m"
    build_tiny_model("qwen2_vl", "ci", out, seed=0)
    first = _sha256(out)
    build_tiny_model("qwen2_vl", "ci", out, seed=1)
    assert _sha256(out)["model.safetensors"] != first["model.safetensors"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
    umask = os.umask(0)
    os.umask(umask)
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o666 & ~umask for p in out.iterdir())


def test_unknown_arch_or_preset_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(TinyModelError, match="unknown arch 'llava'"):
        build_tiny_model("llava", "ci", tmp_path / "x")
    with pytest.raises(TinyModelError, match="unknown preset 'huge'"):
        build_tiny_model("qwen2_vl", "huge", tmp_path / "x")
    assert not (tmp_path / "x").exists()
    assert set(PRESETS) == {"ci", "demo"}


def test_mrope_split_follows_the_real_models_at_their_head_dim() -> None:
    assert tiny_module._mrope_section("qwen2_5_vl", 128) == [16, 24, 24]  # Qwen2/2.5-VL config.json
    assert tiny_module._mrope_section("qwen3_vl", 128) == [24, 20, 20]  # Qwen3-VL config.json
    for arch in ARCHS:
        for head_dim in (16, 32, 64):
            assert sum(tiny_module._mrope_section(arch, head_dim)) == head_dim // 2
