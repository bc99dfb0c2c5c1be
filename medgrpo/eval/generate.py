"""Batched generation for evaluation: transformers (default) or vLLM, over the exact inputs training sees.

Prompts come from :func:`medgrpo.prompts.build_prompt` and images from
:func:`medgrpo.data.preprocess.prepare_images` (already resized to the processor's grid); the messages are
turned into multimodal turns by TRL's own ``prepare_multimodal_messages``, so the token sequence matches what
``GRPOTrainer`` builds during training. Generation is greedy by default; sampling draws ``k`` completions per
prompt for pass@k and self-consistency. Batches are left-padded, and the image token is suppressed as TRL does
(a sampled ``<|image_pad|>`` would break the forward pass).

Decoding is exactly what the suite and the command line say, whatever the checkpoint's ``generation_config``
holds (real Qwen-VL checkpoints ship sampling defaults and a repetition penalty): the transformers backend builds
its own generation config from the model's token ids, and the vLLM backend passes its own sampling parameters,
so the two decode alike.

Option-letter probabilities (for anomaly-detection AUROC and calibration) score each option's whole answer block
(``<answer>X</answer>``) after the model's own reasoning: the sum of the log-probabilities of the tokens where
the candidates differ, renormalised over the options. Real Qwen tokenizers merge the letter with the tag
(``<answer>A`` is ``<``, ``answer``, ``>A``), so a next-token distribution after ``<answer>`` would score
continuations the model never writes.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from medgrpo.data.boxes import ImageGrid
from medgrpo.models.loading import ModelLoadError, load_model, load_processor, processor_source
from medgrpo.models.loading import check_model_dir as check_checkpoint
from medgrpo.prompts import ANSWER_CLOSE, ANSWER_OPEN


@dataclass
class Prompt:
    """One generation request: conversational messages (plain-string contents) and the images of the record."""

    messages: list[dict[str, Any]]
    images: list[Any]


@dataclass
class Completion:
    text: str
    n_tokens: int


class Generator(Protocol):
    grid: ImageGrid

    def generate(self, batch: list[Prompt], num_samples: int = 1, sample: bool = False, seed: int = 0,
                 max_new_tokens: int = 256, temperature: float = 1.0,
                 top_p: float = 1.0) -> list[list[Completion]]: ...

    def letter_probs(self, batch: list[Prompt], prefixes: list[str],
                     letters: list[str]) -> list[dict[str, float]]: ...


def check_model_dir(model_path: str | Path) -> Path:
    """Fail early, in one line, on a folder that is not a Qwen-VL checkpoint (full or LoRA) with its processor."""
    path = Path(model_path)
    check_checkpoint(path)
    processor_source(path)  # raises when neither the run nor its base model has a processor
    return path


def _seed_for(batch: list[Prompt], seed: int) -> int:
    """A seed per batch from its content, so a resumed run samples the same completions as an unbroken one."""
    return (seed * 1_000_003 + zlib.crc32(repr([p.messages for p in batch]).encode())) % (2**31)


def prefix_for_letters(completion: str) -> str:
    """The completion up to and including ``<answer>`` (``<answer>`` appended when the model never wrote it)."""
    head, found, _ = completion.partition(ANSWER_OPEN)
    return head + ANSWER_OPEN if found else completion.rstrip() + "\n" + ANSWER_OPEN


def candidate_scores(token_ids: list[list[int]], logps: list[list[float]]) -> list[float]:
    """Sequence scores of candidate continuations of one shared prefix: for each candidate's token ids and the
    log-probability of each of its tokens given the ones before, the sum over the tokens after the longest
    prefix all candidates share (those have equal probability in every candidate)."""
    shared = 0
    while all(len(ids) > shared for ids in token_ids) and len({ids[shared] for ids in token_ids}) == 1:
        shared += 1
    return [sum(lp[shared:]) for lp in logps]


def _softmax(scores: list[float]) -> list[float]:
    import math

    top = max(scores)
    if top == -math.inf:
        return [1.0 / len(scores)] * len(scores)
    z = sum(math.exp(v - top) for v in scores)
    return [math.exp(v - top) / z for v in scores]


def _decoding(model: Any, tokenizer: Any) -> Any:
    """A generation config with the model's token ids and nothing else: the checkpoint's sampling defaults,
    repetition penalty or length limits never reach evaluation."""
    from transformers import GenerationConfig

    own = model.generation_config
    return GenerationConfig(
        bos_token_id=own.bos_token_id,
        eos_token_id=own.eos_token_id if own.eos_token_id is not None else tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else own.pad_token_id,
    )


class TransformersGenerator:
    """Batched ``model.generate`` with left padding on one device."""

    def __init__(self, model_path: str | Path, device: str | None = None, dtype: str | None = None):
        import torch
        path = check_model_dir(model_path)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        torch_dtype = getattr(torch, dtype) if dtype else (torch.bfloat16 if self.device == "cuda" else torch.float32)
        self.processor = load_processor(path)
        self.processor.tokenizer.padding_side = "left"
        # A LoRA run is merged in memory, the way export merges it.
        self.model = load_model(path, dtype=torch_dtype).to(self.device).eval()
        self.grid = ImageGrid.from_processor(self.processor, self.model.config.model_type)
        tok = self.processor.tokenizer
        self._stop_ids = {i for i in (tok.eos_token_id, tok.pad_token_id) if i is not None}
        eos = self.model.generation_config.eos_token_id
        self._stop_ids |= set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        image_token = getattr(self.model.config, "image_token_id", None)
        self._suppress = [image_token] if image_token is not None else None
        # generate() fills what a passed config leaves unset from the model's own: replace that one instead
        self.model.generation_config = _decoding(self.model, tok)

    def _encode(self, batch: list[Prompt], suffixes: list[str] | None = None):
        from trl.data_utils import prepare_multimodal_messages

        texts = []
        for i, p in enumerate(batch):
            conversation = prepare_multimodal_messages(p.messages, p.images)
            text = self.processor.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
            texts.append(text + (suffixes[i] if suffixes else ""))
        images = [im for p in batch for im in p.images] or None
        inputs = self.processor(text=texts, images=images, padding=True, return_tensors="pt")
        return inputs.to(self.device)

    def _n_tokens(self, ids: list[int]) -> int:
        for i, t in enumerate(ids):
            if t in self._stop_ids:
                return i + 1  # the stop token is part of what the model wrote
        return len(ids)

    def generate(self, batch: list[Prompt], num_samples: int = 1, sample: bool = False, seed: int = 0,
                 max_new_tokens: int = 256, temperature: float = 1.0, top_p: float = 1.0) -> list[list[Completion]]:
        """``num_samples`` completions per prompt (greedy when ``sample`` is False; then ``num_samples`` is 1)."""
        import torch

        inputs = self._encode(batch)
        kwargs: dict[str, Any] = {"max_new_tokens": max_new_tokens, "suppress_tokens": self._suppress}
        if sample:
            torch.manual_seed(_seed_for(batch, seed))
            kwargs.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0,
                          num_return_sequences=num_samples)
        else:
            kwargs.update(do_sample=False)
        with torch.inference_mode():
            out = self.model.generate(**inputs, **kwargs)
        new = out[:, inputs["input_ids"].shape[1]:].tolist()
        texts = self.processor.batch_decode(new, skip_special_tokens=True)
        per = num_samples if sample else 1
        comps = [Completion(t.strip(), self._n_tokens(ids)) for t, ids in zip(texts, new, strict=True)]
        return [comps[i * per:(i + 1) * per] for i in range(len(batch))]

    def letter_probs(self, batch: list[Prompt], prefixes: list[str], letters: list[str]) -> list[dict[str, float]]:
        """P(answer block of each option letter) after each prefix, renormalised over that prompt's ``letters``
        (e.g. ``"ABCD"``); see :func:`candidate_scores`."""
        import torch

        flat = [(i, L) for i, opts in enumerate(letters) for L in opts]  # every candidate, one forward pass
        inputs = self._encode([batch[i] for i, _ in flat], [prefixes[i] + L + ANSWER_CLOSE for i, L in flat])
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        with torch.inference_mode():
            logits = self.model(**inputs).logits[:, :-1, :].float()
        token_logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None])[..., 0]
        token_logp = torch.cat([torch.zeros_like(token_logp[:, :1]), token_logp], dim=1)  # one per token
        per: list[list[tuple[list[int], list[float]]]] = [[] for _ in batch]
        for k, (i, _) in enumerate(flat):  # left padding: keep each candidate's real tokens
            real = mask[k].bool()
            per[i].append((ids[k][real].tolist(), token_logp[k][real].tolist()))
        return [
            dict(zip(opts, _softmax(candidate_scores([c[0] for c in cands], [c[1] for c in cands])), strict=True))
            for opts, cands in zip(letters, per, strict=True)
        ]


class VLLMGenerator:
    """vLLM's offline ``LLM`` engine with the training processor's pixel limits (``pip install medgrpo[vllm]``).

    Images arrive already resized to the grid; the same min/max pixels are passed to vLLM's processor so that it
    cannot resize them again differently (the image-token mismatch peers' users report).
    """

    def __init__(self, model_path: str | Path, max_images: int = 1, **llm_kwargs: Any):
        try:
            from vllm import LLM
        except ImportError:
            raise ModelLoadError("backend 'vllm' needs vLLM: pip install 'medgrpo[vllm]'") from None
        path = check_model_dir(model_path)
        self.processor = load_processor(path)  # the run's pixel limits, a LoRA run's too (not its base's)
        served = servable_folder(path)
        from transformers import AutoConfig

        self.grid = ImageGrid.from_processor(self.processor, AutoConfig.from_pretrained(served).model_type)
        self.llm = LLM(model=str(served), limit_mm_per_prompt={"image": max_images},
                       mm_processor_kwargs={"min_pixels": self.grid.min_pixels, "max_pixels": self.grid.max_pixels},
                       # vLLM's own defaults, not the checkpoint's generation_config: every sampling parameter
                       # is passed explicitly, as the transformers backend does
                       generation_config="vllm", **llm_kwargs)

    def _requests(self, batch: list[Prompt], suffixes: list[str] | None = None) -> list[dict[str, Any]]:
        from trl.data_utils import prepare_multimodal_messages

        reqs = []
        for i, p in enumerate(batch):
            conv = prepare_multimodal_messages(p.messages, p.images)
            text = self.processor.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
            reqs.append({"prompt": text + (suffixes[i] if suffixes else ""),
                         "multi_modal_data": {"image": p.images}})
        return reqs

    def generate(self, batch: list[Prompt], num_samples: int = 1, sample: bool = False, seed: int = 0,
                 max_new_tokens: int = 256, temperature: float = 1.0, top_p: float = 1.0) -> list[list[Completion]]:
        from vllm import SamplingParams

        params = SamplingParams(n=num_samples if sample else 1, temperature=temperature if sample else 0.0,
                                top_p=top_p if sample else 1.0, max_tokens=max_new_tokens,
                                seed=_seed_for(batch, seed) if sample else None, skip_special_tokens=True)
        outs = self.llm.generate(self._requests(batch), params, use_tqdm=False)
        return [[Completion(o.text.strip(), len(o.token_ids)) for o in out.outputs] for out in outs]

    def letter_probs(self, batch: list[Prompt], prefixes: list[str], letters: list[str]) -> list[dict[str, float]]:
        """Each option's answer block appended to the prefix; the prompt log-probabilities of its tokens, summed
        where the candidates differ, are its score (:func:`candidate_scores`)."""
        import math

        from vllm import SamplingParams

        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        flat = [(i, L) for i, opts in enumerate(letters) for L in opts]
        reqs = self._requests([batch[i] for i, _ in flat], [prefixes[i] + L + ANSWER_CLOSE for i, L in flat])
        outs = self.llm.generate(reqs, params, use_tqdm=False)
        per: list[list[tuple[list[int], list[float]]]] = [[] for _ in batch]
        for (i, _), out in zip(flat, outs, strict=True):
            ids = list(out.prompt_token_ids)
            lps = [0.0] + [
                (pos or {}).get(t).logprob if (pos or {}).get(t) is not None else -math.inf
                for pos, t in zip(out.prompt_logprobs[1:], ids[1:], strict=True)
            ]
            per[i].append((ids, lps))
        probs = []
        for opts, cands in zip(letters, per, strict=True):
            scores = candidate_scores([c[0] for c in cands], [c[1] for c in cands])
            probs.append(dict(zip(opts, _softmax(scores), strict=True)))
        return probs


def servable_folder(path: Path) -> Path:
    """A folder vLLM can load: ``path`` itself, or for a LoRA run its adapter merged onto the base, saved once
    beside it (``merged-for-vllm/``, with the run's processor and pixel limits) and reused while it is newer
    than the adapter."""
    from medgrpo.models.loading import adapter_base

    if adapter_base(path) is None:
        return path
    merged = path / "merged-for-vllm"
    adapter = max(f.stat().st_mtime for f in path.glob("adapter_model.safetensors"))
    if (merged / "config.json").is_file() and (merged / "config.json").stat().st_mtime >= adapter:
        return merged
    import shutil
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix=".merged-for-vllm.", dir=path))
    try:
        load_model(path, dtype="bfloat16").save_pretrained(tmp)
        load_processor(path).save_pretrained(tmp)
        if merged.exists():
            shutil.rmtree(merged)
        tmp.rename(merged)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return merged


def make_generator(backend: str, model_path: str | Path, **kwargs: Any) -> Generator:
    """``transformers`` (default) or ``vllm``."""
    if backend == "transformers":
        return TransformersGenerator(model_path, **kwargs)
    if backend == "vllm":
        return VLLMGenerator(model_path, **kwargs)
    raise ModelLoadError(f"unknown backend '{backend}' (transformers or vllm)")
