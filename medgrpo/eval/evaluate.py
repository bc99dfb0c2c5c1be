"""``evaluate(model, suite, out_dir)``: generate, verify, aggregate, report, resumably.

Predictions stream to ``out_dir/predictions.jsonl`` (one JSON line per record, flushed after every batch), so
a run that is killed loses at most one batch: rerunning the same command skips every id already there.
``out_dir/run.json`` pins what the predictions were made with (model, backend, generation settings); a rerun
with different settings into the same folder is refused rather than silently mixing two models.
Scores come from :func:`medgrpo.rewards.verify`, the code the Con-GRPO rewards run, so what training
optimises and what evaluation reports cannot drift apart.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from medgrpo.data.record import LoadReport, MedADRecord, load_records
from medgrpo.eval.aggregate import build_metrics
from medgrpo.eval.generate import Generator, Prompt, make_generator, prefix_for_letters
from medgrpo.eval.predictions import PREDICTIONS, EvalError, read_predictions, write_atomic
from medgrpo.eval.report import write_report
from medgrpo.eval.suites import AS_TRAINED, DatasetSpec, Suite, SuiteError, load_suite, suite_for_path
from medgrpo.models.loading import read_run_info, trained_completion_length, trained_system_prompt
from medgrpo.prompts import build_prompt
from medgrpo.rewards.settings import METRICS, RewardSettings

RUN_FILE = "run.json"


@dataclass
class GenerationConfig:
    """What the predictions depend on; stored in ``run.json`` and checked on resume."""

    model: str
    backend: str = "transformers"
    max_new_tokens: int = 256
    num_samples: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    evidence_backend: str = "rule"


def _load_dataset(spec: DatasetSpec, limit: int | None) -> tuple[list[MedADRecord], LoadReport]:
    path = spec.check_exists()
    report = LoadReport(path=str(path))
    records = load_records(path, split=spec.split, on_bad_record=spec.on_bad_record, report=report)  # type: ignore[arg-type]
    caps = [c for c in (spec.limit, limit) if c]
    return (records[: min(caps)] if caps else records), report


def _majority_fit(spec: DatasetSpec) -> list[tuple[str, str]] | None:
    """(task, gold answer text) of the dataset's train split, when it has one distinct from the scored split."""
    path = Path(spec.path)
    if not path.is_dir() or spec.split == "train" or not (path / "train.jsonl").is_file():
        return None
    records = load_records(path, split="train", on_bad_record="skip", check_images=False)
    return [(r.task, r.answer_text().strip().lower()) for r in records] or None


def _row(dataset: str, record: MedADRecord, completion: str, n_tokens: int, scores: dict[str, Any],
         pred: str | None) -> dict[str, Any]:
    return {
        "dataset": dataset, "id": record.id, "task": record.task, "modality": record.modality or "",
        "anatomy": record.anatomy or "", "source": record.source, "answer": record.answer,
        "options": record.options,
        "abnormal": record.evidence.get("abnormal") if record.evidence else None,
        "completion": completion, "pred": pred, "completion_tokens": n_tokens, "scores": scores,
    }


def _score_batch(gen: Generator, spec: DatasetSpec, records: list[MedADRecord], root: Path, cfg: GenerationConfig,
                 image_settings: Any, reward_settings: RewardSettings, skipped: list[str]) -> list[dict[str, Any]]:
    """Generate, verify and (for anomaly detection) letter-score one batch; unreadable images go to ``skipped``
    under ``on_bad_record: skip`` and stop the run otherwise."""
    from medgrpo.data.images import ImageError
    from medgrpo.data.preprocess import prepare_images
    from medgrpo.rewards import parse_completion, verify_batch

    prompts, frames, kept = [], [], []
    for r in records:
        try:
            images, frame = prepare_images(r, root, gen.grid, image_settings)
        except ImageError as exc:
            if spec.on_bad_record == "error":
                raise EvalError(f"dataset '{spec.name}', record '{r.id}': field 'images': {exc}") from None
            skipped.append(f"record '{r.id}': {exc}")
            continue
        prompts.append(Prompt(build_prompt(r, frame, system_prompt=spec.system_prompt), images))
        frames.append(frame)
        kept.append(r)
    records = kept
    if not records:
        return []
    greedy = gen.generate(prompts, max_new_tokens=cfg.max_new_tokens)
    # one verify_batch call per batch: the judge backend then scores the whole batch in one request wave
    all_scores = verify_batch([c.text for (c,) in greedy], records, frames, reward_settings)
    rows = [_row(spec.name, r, c.text, c.n_tokens, scores, parse_completion(c.text).answer)
            for r, (c,), scores in zip(records, greedy, all_scores, strict=True)]
    if cfg.num_samples > 1:
        sampled = gen.generate(prompts, num_samples=cfg.num_samples, sample=True, seed=cfg.seed,
                               max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, top_p=cfg.top_p)
        flat = [(i, c) for i, comps in enumerate(sampled) for c in comps]
        # samples feed pass@k and self-consistency, which read accuracy only: no judge calls for them
        accuracy = verify_batch([c.text for _, c in flat], [records[i] for i, _ in flat],
                                [frames[i] for i, _ in flat], replace(reward_settings, evidence_backend="rule"))
        for (i, c), scores in zip(flat, accuracy, strict=True):
            rows[i].setdefault("samples", []).append(
                {"pred": parse_completion(c.text).answer, "accuracy": scores["accuracy"],
                 "completion_tokens": c.n_tokens})
    # option-letter probabilities only where they feed a metric: anomaly-detection AUROC and calibration
    scored = [i for i, r in enumerate(records) if r.task == "anomaly_detection" and r.is_mcq]
    if scored:
        probs = gen.letter_probs([prompts[i] for i in scored], [prefix_for_letters(rows[i]["completion"])
                                                                for i in scored],
                                 [records[i].letters for i in scored])
        for i, p in zip(scored, probs, strict=True):
            rows[i]["letter_probs"] = p
    return rows


def _check_run_file(out_dir: Path, cfg: GenerationConfig) -> None:
    """Refuse to resume into a folder whose predictions were made with other settings."""
    path = out_dir / RUN_FILE
    if not path.is_file():
        return
    have = json.loads(path.read_text(encoding="utf-8"))
    for key, value in asdict(cfg).items():
        if have.get(key) != value:
            raise EvalError(f"{out_dir}: holds predictions made with {key}={have.get(key)!r}, not {value!r}; "
                            "use another --out (or delete the folder) to start a new run")


def evaluate(
    model_path: str | Path,
    suite_or_dataset: str | Path | Suite,
    out_dir: str | Path,
    *,
    batch_size: int = 16,
    backend: str = "transformers",
    num_samples: int = 1,
    temperature: float = 1.0,
    top_p: float = 1.0,
    limit: int | None = None,
    max_new_tokens: int | None = None,
    seed: int = 0,
    n_boot: int = 1000,
    reward_settings: RewardSettings | None = None,
    generator: Generator | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Evaluate a model folder on a suite (YAML path or :class:`Suite`) or on one dataset folder / JSONL file.

    Writes ``predictions.jsonl``, ``metrics.json`` (schema in :mod:`medgrpo.eval.aggregate`), ``report.md`` and
    PNG plots under ``out_dir`` and returns the metrics dict. ``num_samples > 1`` adds k sampled completions per
    prompt (pass@k, self-consistency) beside the greedy one every metric uses. ``reward_settings``
    (:class:`medgrpo.rewards.settings.RewardSettings`) selects the evidence backend (``rule`` or ``judge``) and
    weights; grounding is always plain IoU here. ``generator`` lets a caller that already holds a loaded model
    (e.g. the demo) reuse it.

    Raises:
        EvalError, SuiteError, RecordError, ModelLoadError: one line each; nothing is half-written.
    """
    if isinstance(suite_or_dataset, Suite):
        suite = suite_or_dataset
    elif str(suite_or_dataset).endswith((".yaml", ".yml")):
        suite = load_suite(suite_or_dataset)
    else:
        suite = suite_for_path(suite_or_dataset)
    if batch_size < 1 or num_samples < 1 or (limit is not None and limit < 1):
        raise EvalError("batch_size, num_samples and limit must be positive")
    loaded = {spec.name: (spec, *_load_dataset(spec, limit)) for spec in suite.datasets}  # fail before the model
    run_info = read_run_info(Path(model_path))
    trained = trained_system_prompt(run_info)  # the model's own, for "default"
    # the budget the model trained with, unless the suite gives more or the caller says otherwise: a rationale
    # GRPO allowed 512 tokens must not lose its <answer> to a 256-token suite
    budget = max_new_tokens or max(suite.max_new_tokens, trained_completion_length(run_info) or 0)
    loaded = {name: (replace(spec, system_prompt=trained) if spec.system_prompt == AS_TRAINED else spec, *rest)
              for name, (spec, *rest) in loaded.items()}
    # metrics are the verifiers unshaped (a reward's gate is not a measurement), and reports promise IoU and
    # Acc@0.5: the GIoU training variant is a reward shaping, not a metric
    reward_settings = replace(reward_settings or METRICS, grounding_metric="iou", gate_on_correct=False,
                              zero_on_format_failure=False)
    cfg = GenerationConfig(model=str(Path(model_path).resolve()), backend=backend,
                           max_new_tokens=budget, num_samples=num_samples,
                           temperature=temperature, top_p=top_p, seed=seed,
                           evidence_backend=reward_settings.evidence_backend)
    out = Path(out_dir)
    _check_run_file(out, cfg)
    pred_path = out / PREDICTIONS
    done_rows = read_predictions(pred_path)
    done = {(r["dataset"], r["id"]) for r in done_rows}
    todo = {name: [r for r in records if (name, r.id) not in done] for name, (_, records, _) in loaded.items()}

    if any(todo.values()):
        # vLLM reserves memory per image slot: tell it the most images one record brings
        most = max(len(r.images) for records in todo.values() for r in records)
        gen = generator or make_generator(backend, model_path, **({"max_images": most} if backend == "vllm" else {}))
        out.mkdir(parents=True, exist_ok=True)  # only once the model loaded: a refused run leaves nothing behind
        if not (out / RUN_FILE).is_file():
            write_atomic(out / RUN_FILE, json.dumps(asdict(cfg), indent=2) + "\n")
        write_atomic(pred_path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in done_rows))  # drop a torn line
        with open(pred_path, "a", encoding="utf-8") as fh:
            for name, records in todo.items():
                spec = loaded[name][0]
                _generate_dataset(gen, spec, records, cfg, batch_size, fh, reward_settings, progress,
                                  loaded[name][2].skipped)
    out.mkdir(parents=True, exist_ok=True)

    by_id = {(r["dataset"], r["id"]): r for r in read_predictions(pred_path)}
    datasets = {}
    for name, (spec, records, report) in loaded.items():
        rows = [by_id[(name, r.id)] for r in records if (name, r.id) in by_id]
        info = {"path": spec.path, "split": spec.split, "skipped_records": len(report.skipped),
                "system_prompt": spec.system_prompt}
        datasets[name] = (info, rows, _majority_fit(spec))
    header = {"model": cfg.model, "suite": suite.name, "created": datetime.now(UTC).isoformat(timespec="seconds"),
              "generation": {k: v for k, v in asdict(cfg).items() if k != "model"}}
    metrics = build_metrics(datasets, header, n_boot=n_boot)
    write_report(metrics, out)
    return metrics


def _generate_dataset(gen: Generator, spec: DatasetSpec, records: list[MedADRecord], cfg: GenerationConfig,
                      batch_size: int, fh: Any, reward_settings: RewardSettings, progress: bool, skipped: list[str]) -> None:
    from tqdm.auto import tqdm

    from medgrpo.data.preprocess import ImageSettings

    try:
        image_settings = ImageSettings(**spec.image)
    except (TypeError, ValueError) as exc:
        raise SuiteError(f"dataset '{spec.name}': field 'image': {exc}") from None
    root = Path(spec.path) if Path(spec.path).is_dir() else Path(spec.path).parent
    # similar prompt lengths in one batch waste less compute on padding
    order = sorted(records, key=lambda r: (len(r.images), len(r.question) + sum(map(len, r.options))))
    bar = tqdm(total=len(order), desc=f"eval {spec.name}", unit="rec", disable=not progress, file=sys.stderr)
    for start in range(0, len(order), batch_size):
        batch = order[start:start + batch_size]
        rows = _score_batch(gen, spec, batch, root, cfg, image_settings, reward_settings, skipped)
        fh.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        fh.flush()
        bar.update(len(batch))
    bar.close()
