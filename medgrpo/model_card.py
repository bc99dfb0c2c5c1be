"""The model card (``README.md``) of an exported model: Hub YAML metadata, recipe, eval table, usage, limits.

Everything here is text built from three inputs: the training provenance (``medgrpo_run.json`` of each stage,
found by following ``base_model`` through local run folders), an optional ``metrics.json`` from
``medgrpo eval``, and the exported model's type and processor limits. No local absolute path and nothing read
from the data (image headers, predictions) reaches the card: local paths are reduced to their last component.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCardData

from medgrpo.data.boxes import BOX_FORMATS
from medgrpo.data.record import MedADRecord
from medgrpo.eval.aggregate import HEADLINE, SCHEMA_VERSION
from medgrpo.models.loading import RUN_INFO, ModelLoadError, is_local_path, locate, trained_system_prompt
from medgrpo.models.loading import read_run_info as _read_run_json
from medgrpo.prompts import SYSTEM_PROMPT, instruction

"""The provenance file the training stages write into their output folder (stage, base_model, recipe, datasets)."""

STAGE_TITLES = {"sft": "SFT (cognitive injection)", "con_grpo": "Con-GRPO (evidence-aware consistency RL)"}

# TRL/transformers settings worth a row in the recipe table; every setting that TRL does not define (the
# medgrpo rewards and variant switches) is listed as well, see `_recipe_rows`.
KEY_SETTINGS = (
    "learning_rate", "lr_scheduler_type", "warmup_ratio", "num_train_epochs", "max_steps",
    "per_device_train_batch_size", "gradient_accumulation_steps", "seed", "max_length", "num_generations",
    "max_completion_length", "temperature", "top_p", "beta", "epsilon", "epsilon_high", "loss_type",
    "scale_rewards", "importance_sampling_level", "multi_objective_aggregation", "mask_truncated_completions",
)
MODEL_SETTINGS = ("dtype", "use_peft", "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules",
                  "freeze_vision_tower")
DATA_SETTINGS = ("train_split", "tasks", "max_train_samples", "min_pixels", "max_pixels", "dicom_window")
# Never in a card: credentials, and where the run happened to write on the training machine.
_SECRET_RE = re.compile(r"token|secret|password|api_key|credential", re.IGNORECASE)
_DROPPED = {"output_dir", "logging_dir", "cache_dir", "hub_model_id", "resume_from_checkpoint"}
HUB_ID_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class CardError(ValueError):
    """A provenance or metrics file cannot be read; the message names the file and the field."""


def hub_id(name: str | None, near: Path | None = None) -> str | None:
    """``name`` when it reads as a Hub repo id (``org/name``) and is not a local folder, else None."""
    if not name or is_local_path(name) or not HUB_ID_RE.match(name) or locate(name, near) is not None:
        return None
    return name


def scrub(value: Any) -> Any:
    """A JSON-able copy of ``value`` without secrets or machine-specific directories, local paths cut to
    their last component (``/home/me/data/medad-synth`` -> ``medad-synth``)."""
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items() if not _SECRET_RE.search(k) and k not in _DROPPED}
    if isinstance(value, list | tuple):
        return [scrub(v) for v in value]
    if isinstance(value, str) and is_local_path(value):
        return Path(value.rstrip("/\\")).name or "<local>"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def read_run_info(run_dir: Path) -> dict[str, Any] | None:
    """The stage's ``medgrpo_run.json`` as a dict with its fields type-checked, or None when there is none.

    (Older runs' ``training_args.bin`` is deliberately not read: it is a pickle, and unpickling runs code.)
    """
    try:
        info = _read_run_json(run_dir)
    except ModelLoadError as e:
        raise CardError(str(e)) from None
    for key, kind in (("stage", str), ("base_model", str), ("recipe", dict), ("datasets", list)):
        if info is not None and info.get(key) is not None and not isinstance(info[key], kind):
            raise CardError(f"{run_dir / RUN_INFO}: field '{key}': expected {kind.__name__}, "
                            f"got {type(info[key]).__name__}")
    return info


def stage_chain(run_dir: Path, max_depth: int = 8) -> list[dict[str, Any]]:
    """The provenance of every stage that led to ``run_dir``, oldest first.

    A stage-2 run records the stage-1 output folder as its ``base_model``; following local ``base_model``
    folders that hold their own ``medgrpo_run.json`` recovers the whole recipe.
    """
    chain: list[dict[str, Any]] = []
    current: Path | None = run_dir
    while current is not None and len(chain) < max_depth:
        info = read_run_info(current)
        if info is None:
            break
        chain.append(info)
        base = info.get("base_model")
        current = locate(base, current) if base else None
    return chain[::-1]


def root_base_model(chain: list[dict[str, Any]], fallback: str | None) -> str | None:
    """The model the first stage started from (``fallback`` when no stage recorded one)."""
    return (chain[0].get("base_model") if chain else None) or fallback


def read_metrics(path: Path) -> dict[str, Any]:
    """Read a ``metrics.json`` written by ``medgrpo eval`` (``{"datasets": {name: {"overall": {...}}}}``)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CardError(f"{path}: cannot read metrics ({e})") from None
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        found = data.get("schema_version") if isinstance(data, dict) else None
        raise CardError(f"{path}: field 'schema_version': expected {SCHEMA_VERSION}, got {found!r}")
    datasets = data.get("datasets")
    if not isinstance(datasets, dict) or not datasets:
        raise CardError(f"{path}: field 'datasets': expected a non-empty object of per-dataset metrics")
    for name, block in datasets.items():
        if not isinstance(block, dict) or not isinstance(block.get("overall"), dict):
            raise CardError(f"{path}: field 'datasets.{name}.overall': expected an object of metrics")
    return data


def _number(x: Any) -> float | None:
    ok = isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
    return float(x) if ok else None


def _metrics_of(group: dict[str, Any]) -> list[tuple[str, float, float | None, float | None]]:
    """``(metric, value, ci_low, ci_high)`` for every metric of a ``GROUP`` of the ``medgrpo eval`` schema
    (``{"n": int, "<metric>": {"value", "ci_low", "ci_high", "n"}}``) that has a value."""
    rows = []
    for metric, stat in group.items():
        if isinstance(stat, dict) and _number(stat.get("value")) is not None:
            rows.append((metric, _number(stat["value"]), _number(stat.get("ci_low")), _number(stat.get("ci_high"))))
    return rows


def _fmt(value: float) -> str:
    return f"{value:.3f}"


def eval_results(metrics: dict[str, Any]) -> list[EvalResult]:
    """Hub ``model-index`` entries: the headline metrics of ``medgrpo eval`` (accuracy, format failures,
    consistency, reasoning accuracy, evidence, grounding) of every dataset; the card's table has the rest."""
    results = []
    for name, block in metrics["datasets"].items():
        for metric, value, _, _ in _metrics_of(block["overall"]):
            if metric not in HEADLINE:
                continue
            results.append(EvalResult(
                task_type="visual-question-answering", task_name="Medical VQA",
                dataset_type=hub_id(name) or name, dataset_name=name, dataset_split=block.get("split"),
                metric_type=metric, metric_name=metric.replace("_", " ").capitalize(),
                metric_value=round(value, 6),
            ))
    return results


def eval_table(metrics: dict[str, Any]) -> str:
    """Markdown: one row per (dataset, metric) with the value and its 95% confidence interval."""
    lines = ["| dataset | n | metric | value | 95% CI |", "|---|---|---|---|---|"]
    for name, block in metrics["datasets"].items():
        n = block["overall"].get("n", "")
        for metric, value, lo, hi in _metrics_of(block["overall"]):
            ci_text = f"[{_fmt(lo)}, {_fmt(hi)}]" if lo is not None and hi is not None else "-"
            lines.append(f"| {name} | {n} | {metric} | {_fmt(value)} | {ci_text} |")
    return "\n".join(lines)


def task_table(metrics: dict[str, Any]) -> str | None:
    """Markdown: accuracy per task family (``by_task``) of every dataset, when the metrics have it."""
    lines = ["| dataset | task | n | accuracy | 95% CI |", "|---|---|---|---|---|"]
    for name, block in metrics["datasets"].items():
        for task, group in (block.get("by_task") or {}).items():
            stat = {m: (v, lo, hi) for m, v, lo, hi in _metrics_of(group if isinstance(group, dict) else {})}
            if "accuracy" in stat:
                v, lo, hi = stat["accuracy"]
                ci_text = f"[{_fmt(lo)}, {_fmt(hi)}]" if lo is not None and hi is not None else "-"
                lines.append(f"| {name} | {task} | {group.get('n', '')} | {_fmt(v)} | {ci_text} |")
    return "\n".join(lines) if len(lines) > 2 else None


def _trl_fields(stage: str | None) -> set[str]:
    """Fields of the TRL config class a stage is built on (what is *not* medgrpo-specific)."""
    from trl import GRPOConfig, SFTConfig

    cls = SFTConfig if stage == "sft" else GRPOConfig
    return set(cls.__dataclass_fields__)


def _recipe_rows(info: dict[str, Any]) -> list[tuple[str, Any]]:
    """Key TRL settings, then every setting TRL does not define (medgrpo's rewards and variant switches),
    then the model (LoRA) and image settings of the stage."""
    recipe = scrub(info.get("recipe") or {})
    trl_fields = _trl_fields(info.get("stage"))
    rows = [(k, recipe[k]) for k in KEY_SETTINGS if recipe.get(k) is not None]
    rows += [(k, v) for k, v in sorted(recipe.items())
             if k not in trl_fields and k not in KEY_SETTINGS and k != "reward_funcs" and v is not None]
    model, data = scrub(info.get("model") or {}), scrub(info.get("data") or {})
    rows += [(k, model[k]) for k in MODEL_SETTINGS if model.get(k) is not None]
    rows += [(k, data[k]) for k in DATA_SETTINGS if data.get(k) is not None]
    return rows


def reward_table(recipe: dict[str, Any]) -> str | None:
    """Markdown table of the GRPO rewards and their weights (TRL's ``reward_weights``, 1.0 each by default)."""
    names = recipe.get("reward_funcs")
    if not isinstance(names, list) or not names:
        return None
    weights = recipe.get("reward_weights") or [1.0] * len(names)
    lines = ["| reward | weight |", "|---|---|"]
    lines += [f"| `{name}` | {weight} |" for name, weight in zip(names, weights, strict=False)]
    return "\n".join(lines)


def recipe_section(chain: list[dict[str, Any]]) -> str:
    """Markdown describing every training stage (settings, rewards and weights, variant switches, data)."""
    if not chain:
        return (f"No training provenance (`{RUN_INFO}`) was found in the run folder, so the recipe is not "
                "recorded here.")
    parts = []
    for i, info in enumerate(chain, 1):
        stage = info.get("stage") or "unknown"
        parts.append(f"### Stage {i}: {STAGE_TITLES.get(stage, stage)}")
        base = scrub(info.get("base_model"))
        if base:
            parts.append(f"Started from `{base}`.")
        datasets = scrub(info.get("datasets") or [])
        if datasets:
            parts.append("Data: " + ", ".join(f"`{json.dumps(d) if not isinstance(d, str) else d}`"
                                              for d in datasets) + ".")
        rewards = reward_table(scrub(info.get("recipe") or {}))
        if rewards:
            parts.append(rewards)
        rows = _recipe_rows(info)
        if rows:
            parts.append("| setting | value |\n|---|---|\n" + "\n".join(
                f"| `{k}` | `{json.dumps(v)}` |" for k, v in rows))
    return "\n\n".join(parts)


def _stages_text(chain: list[dict[str, Any]]) -> str:
    stages = [info.get("stage") for info in chain]
    sft = 'supervised fine-tuning on diagnostic chain-of-thought ("cognitive injection")'
    grpo = "Con-GRPO, TRL's GRPO with an evidence-aware consistency reward"
    if "sft" in stages and "con_grpo" in stages:
        return f"{sft}, then {grpo}"
    if stages and set(stages) <= {"sft"}:
        return sft
    if stages and set(stages) <= {"con_grpo"}:
        return grpo
    return f"its pipeline is {sft} then {grpo}; this export did not record which stages the model went through"


def usage_snippet(model_id: str, model_type: str, system_prompt: str | None = SYSTEM_PROMPT,
                  adapter_base: str | None = None) -> str:
    """A self-contained script (transformers + PIL, and peft for an adapter on ``adapter_base``) that asks the
    model one question in its trained format."""
    example = MedADRecord(
        id="example", images=["scan.png"], question="Is there an abnormality in this image?",
        options=["Yes", "No"], answer="A", task="anomaly_detection",
    )
    user_text = instruction(example, BOX_FORMATS.get(model_type, "abs"))
    system_turn = (f'\n    {{"role": "system", "content": [{{"type": "text", "text": {system_prompt!r}}}]}},'
                   if system_prompt else "")
    load = 'model = AutoModelForImageTextToText.from_pretrained(model_id, dtype="auto")'
    if adapter_base:
        load = (f'base = AutoModelForImageTextToText.from_pretrained({adapter_base!r}, dtype="auto")\n'
                "model = PeftModel.from_pretrained(base, model_id)")
    return f'''```python
import re

{"from peft import PeftModel" + chr(10) if adapter_base else ""}from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor

model_id = {model_id!r}
processor = AutoProcessor.from_pretrained(model_id)
{load}

image = Image.open("scan.png").convert("RGB")
messages = [{system_turn}
    {{"role": "user", "content": [
        {{"type": "image"}},
        {{"type": "text", "text": {user_text!r}}},
    ]}},
]
text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
inputs = processor(text=[text], images=[image], return_tensors="pt").to(model.device)
output = model.generate(**inputs, max_new_tokens=512, do_sample=False)
completion = processor.batch_decode(output[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)[0]
print(completion)
answer = re.search(r"<answer>(.*?)</answer>", completion, re.DOTALL)
print("answer:", answer.group(1).strip() if answer else None)
```'''


def _grammar_section(model_type: str, pixel_limits: tuple[int, int] | None) -> str:
    box_format = BOX_FORMATS.get(model_type, "abs")
    convention = (
        "absolute pixel coordinates of the resized model input (as the processor resizes it)"
        if box_format == "abs" else "integers on a 0-1000 grid relative to the image width and height"
    )
    limits = ""
    if pixel_limits:
        limits = (f" The processor resizes every image to between {pixel_limits[0]} and {pixel_limits[1]} "
                  "pixels (the limits used in training); keep them when you run the model.")
    return f"""```
<think> diagnostic reasoning; a region it relies on is cited as <box>[x1, y1, x2, y2]</box> </think>
<answer>C</answer>
```

`<answer>` holds one option letter (or a short free-text answer for open-ended questions). Boxes are written
as {convention}.{limits}"""


def build_model_card(
    *,
    model_id: str,
    model_type: str,
    chain: list[dict[str, Any]],
    base_model: str | None,
    metrics: dict[str, Any] | None = None,
    license: str = "apache-2.0",
    adapter_of: str | None = None,
    pixel_limits: tuple[int, int] | None = None,
    near: Path | None = None,
) -> str:
    """The full ``README.md``: YAML front matter the Hub validates, then the card body.

    Args:
        model_id: how the usage snippet loads the model (the Hub repo id, or a relative folder name).
        model_type: ``config.model_type`` (decides the box convention described).
        chain: the stage provenance from :func:`stage_chain`.
        base_model: the model training started from; only a Hub id goes into the metadata.
        metrics: a ``metrics.json`` dict from ``medgrpo eval`` for the eval table and ``model-index``.
        license: the license identifier (check the base model's license).
        adapter_of: for an export kept as a PEFT adapter, the model it goes on top of (None: merged weights).
        pixel_limits: the processor's ``(min_pixels, max_pixels)``.
        near: the run folder, for telling recorded local folders from Hub ids (:func:`locate`).
    """
    datasets = [d for d in (hub_id(x, near) for info in chain for x in info.get("datasets") or []
                            if isinstance(x, str)) if d]
    card_data = ModelCardData(
        license=license,
        base_model=hub_id(base_model, near),
        datasets=sorted(set(datasets)) or None,
        library_name="peft" if adapter_of else "transformers",
        pipeline_tag="image-text-to-text",
        tags=["medical", "medgrpo", "grpo", "con-grpo", "trl", "reasoning", "vision-language", model_type]
        + (["lora"] if adapter_of else []),
        model_name=model_id.rstrip("/").split("/")[-1],
        eval_results=eval_results(metrics) if metrics else None,
    )
    name = card_data.model_name
    system_prompt = trained_system_prompt(chain[-1] if chain else None)
    base_text = f"`{scrub(base_model)}`" if base_model else "a Qwen-VL model"
    adapter_note, adapter_ref = "", None
    if adapter_of:
        adapter_ref = hub_id(adapter_of, near) or f"path/to/{scrub(adapter_of)}"
        where = "" if hub_id(adapter_of, near) else (
            ", a local folder of the training run (export without `--keep-adapter` for standalone weights)")
        adapter_note = (
            "\n\nThis repository holds a LoRA adapter, not merged weights: loading it needs `peft` and the "
            f"model it was trained on, `{scrub(adapter_of)}`{where}."
        )
    eval_text = "No evaluation results were supplied with this export (`medgrpo export --metrics`)."
    if metrics:
        by_task = task_table(metrics)
        eval_text = "\n\n".join([eval_table(metrics), *([by_task] if by_task else []),
                                  "Values and 95% confidence intervals as computed by `medgrpo eval`."])
    measured = ("Accuracy was measured only on the datasets listed above" if metrics
                else "No evaluation results come with this export: measure the model on your own data")
    body = f"""
# {name}

{name} is a vision-language model for medical visual question answering that reasons before it answers,
trained from {base_text} with medgrpo, following MedAD-R1 (arXiv 2602.01081): {_stages_text(chain)}.{adapter_note}

> **Not for clinical use.** This is a research model. It has not been validated for diagnosis, triage,
> treatment or any other clinical decision, and it must not be used for them. Its reasoning can be wrong or
> inconsistent with the image even when it sounds confident.

## Output format

{_grammar_section(model_type, pixel_limits)}

## Usage

{usage_snippet(model_id, model_type, system_prompt, adapter_ref)}

## Training recipe

{recipe_section(chain)}

## Evaluation

{eval_text}

## Intended use

Research on grounded, self-consistent reasoning of medical vision-language models: benchmarking, ablations
of reward designs and GRPO variants, and teaching. Inputs are 2D medical images with a multiple-choice or
short-answer question.

## Limitations

- Not a medical device; outputs are not diagnoses. Do not use it on patients or to inform their care.
- {measured}; performance on other modalities, scanners,
  populations and question styles is unknown and may be much lower.
- A consistent reasoning trace is not a correct one: the rewards check agreement between reasoning, evidence
  and answer, not clinical truth (reasoning accuracy, where reported, is how often the reasoning itself pointed
  to the benchmark's answer). Cited boxes can be misplaced.
- Images must be preprocessed as in training (RGB, resized within the processor's pixel limits); volumes
  and multi-frame studies are seen as individual 2D images only.
"""
    return f"---\n{card_data.to_yaml()}\n---\n{body}"
