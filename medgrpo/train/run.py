"""Plumbing shared by the stage scripts: parsing, up-front checks, data loading, the stage run itself, run
metadata and one-line errors. (Checkpoint validation and resume live in :mod:`medgrpo.train.checkpoints`.)"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch.distributed as dist
import yaml
from accelerate import PartialState  # .print: once per machine, not once per rank
from trl import TrlParser, get_peft_config

from medgrpo.data import LoadReport, MedADRecord, RecordError, load_records
from medgrpo.data.builders import BuildReport, release_rows
from medgrpo.models.loading import MAX_ADAPTER_DEPTH, RUN_INFO, adapter_base, locate
from medgrpo.train.args import DataArguments
from medgrpo.train.checkpoints import resume_checkpoint
from medgrpo.train.modeling import check_model_path, load_for_training


def parse_args(dataclass_types: tuple[type, ...], argv: list[str] | None, prog: str) -> tuple[Any, ...]:
    """Parse ``--config recipe.yaml`` plus CLI overrides into the given dataclasses (TRL's ``TrlParser``).

    The output folder is checked here too (:func:`check_output_dir`), so a run that could never save fails in one
    line before any data or model loads rather than after hours of training.
    """
    check_known_keys(dataclass_types, sys.argv[1:] if argv is None else argv)
    parser = TrlParser(dataclass_types, prog=prog)
    docs = {name: text for cls in dataclass_types for name, text in field_docs(cls).items()}
    for action in parser._actions:  # --help shows each medgrpo field's docstring, not its one-line stub
        if action.dest in docs:
            action.help = docs[action.dest].replace("%", "%%") + " (default: %(default)s)"
    parsed = parser.parse_args_and_config(args=argv)
    training = next((a for a in parsed if hasattr(a, "output_dir") and hasattr(a, "save_strategy")), None)
    model = next((a for a in parsed if hasattr(a, "model_name_or_path")), None)
    if training is not None and training.output_dir:
        check_output_dir(training, getattr(model, "model_name_or_path", None), getattr(model, "use_peft", False))
    return parsed


_FIELD_DOC = re.compile(r"^ {8}(\w+(?:, \w+)*) \(`[^\n]*\):\n((?: {12}.*\n?)+)", re.MULTILINE)


def field_docs(cls: type) -> dict[str, str]:
    """Field name -> its docstring text (one paragraph), from the TRL-style ``Parameters`` sections of ``cls`` and
    the medgrpo classes it inherits (``name (`type`, defaults to `x`):`` then the text indented below it)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not klass.__module__.startswith("medgrpo"):
            continue  # TRL's and transformers' fields keep their own help
        for match in _FIELD_DOC.finditer(klass.__doc__ or ""):
            text = " ".join(match.group(2).split())
            for name in match.group(1).split(", "):
                docs[name] = text
    return docs


class UnknownKeyError(ValueError):
    """A recipe key or command-line option that no configuration field has (a typo would otherwise train with the
    default silently, or stop with TRL's advice to edit the dataclass)."""


def check_known_keys(dataclass_types: tuple[type, ...], argv: list[str]) -> None:
    """Every ``--key`` on the command line and every key of ``--config`` names a field of one of the dataclasses;
    else one line naming the key, where it came from, and the closest field.

    Raises:
        UnknownKeyError: the first unknown key.
    """
    import difflib
    from dataclasses import fields

    known = {f.name for cls in dataclass_types for f in fields(cls)} | {"config", "help", "h"}
    given: list[tuple[str, str]] = []
    for i, arg in enumerate(argv):
        if arg.startswith("--") and len(arg) > 2:
            given.append((arg[2:].split("=", 1)[0].replace("-", "_"), "on the command line"))
        if arg == "--config" and i + 1 < len(argv) or arg.startswith("--config="):
            path = Path(arg.split("=", 1)[1] if "=" in arg else argv[i + 1])
            try:
                recipe = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            except (OSError, yaml.YAMLError):
                continue  # TrlParser reports an unreadable recipe itself
            if isinstance(recipe, dict):
                given += [(str(key), f"in {path}") for key in recipe if key != "env"]
    for key, where in given:
        if key not in known and key.removeprefix("no_") not in known:  # --no_X: HfArgumentParser's False of X
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise UnknownKeyError(f"unknown option '{key}' {where}{hint}")


class OutputDirError(ValueError):
    """The output folder cannot take the run (not a folder, not writable, or too little free space)."""


def _existing_ancestor(path: Path) -> Path:
    path = path.absolute()
    while not path.exists():
        path = path.parent
    return path


def weights_bytes(model_path: str | None, _depth: int = 0) -> int:
    """Bytes of the ``*.safetensors`` weights a local model folder trains as (0 when unknown, e.g. a Hub id).

    A LoRA folder is merged into its base on load, so its base's weights are what training holds and saves.
    """
    if not model_path or not Path(model_path).is_dir() or _depth > MAX_ADAPTER_DEPTH:
        return 0
    folder = Path(model_path)
    base = adapter_base(folder)
    if base is not None:
        return weights_bytes(str(locate(base, folder) or ""), _depth + 1)
    return sum(f.stat().st_size for f in folder.glob("*.safetensors"))


def disk_estimate(training_args: Any, model_bytes: int, use_peft: bool = False) -> int:
    """Bytes a run writes at its peak: the checkpoints kept at once plus the final weights.

    A full-weight checkpoint holds the weights and AdamW's two moment buffers of the same size (3x); under
    DeepSpeed ZeRO it also holds the fp32 master weights and fp32 moments (12 bytes per parameter beside the
    2-byte bf16 weights: 7x). While a new checkpoint is written before the oldest is rotated out,
    ``save_total_limit + 1`` exist; an epoch-based run (no ``max_steps``) saves an unknown number of times, so it
    is counted at that limit too. A LoRA run saves adapters whose size is unknown before the model loads, so only
    the final merged-or-adapter weights are counted for it.
    """
    if use_peft:
        return 0
    strategy = getattr(training_args.save_strategy, "value", training_args.save_strategy)
    if strategy == "no":
        return model_bytes
    max_steps, save_steps = training_args.max_steps, training_args.save_steps
    limit = training_args.save_total_limit
    if max_steps > 0 and save_steps >= 1:
        saves = int(max_steps // save_steps)
        kept = min(saves, limit + 1) if limit else saves
    else:
        kept = limit + 1 if limit else 1
    if training_args.save_only_model:
        per_checkpoint = 1
    else:
        per_checkpoint = 7 if (training_args.deepspeed or os.environ.get("ACCELERATE_USE_DEEPSPEED") == "true") else 3
    return model_bytes * (1 + per_checkpoint * kept)


def check_output_dir(training_args: Any, model_path: str | None = None, use_peft: bool = False) -> None:
    """Refuse, in one line, an output folder that is not a folder, not writable, or on a disk too full.

    Nothing is created: writability is probed with a temporary file in the nearest existing folder (as root,
    permission bits say nothing, so only a real write tells). Free space is compared with :func:`disk_estimate`.
    """
    out = Path(training_args.output_dir)
    if out.exists() and not out.is_dir():
        raise OutputDirError(f"output_dir {out}: exists and is not a folder")
    anchor = _existing_ancestor(out)
    if not anchor.is_dir():
        raise OutputDirError(f"output_dir {out}: {anchor} is a file, not a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".medgrpo-write-probe-", dir=anchor)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise OutputDirError(f"output_dir {out}: {anchor} is not writable ({e.strerror or e})") from None
    needed = disk_estimate(training_args, weights_bytes(model_path), use_peft)
    free = shutil.disk_usage(anchor).free
    if needed > free:
        raise OutputDirError(f"output_dir {out}: needs about {needed / 2**30:.2f} GiB for checkpoints and weights, "
                             f"{free / 2**30:.2f} GiB free on that disk (lower save_total_limit or free space)")


def check_dataset_path(data_args: DataArguments) -> None:
    path = Path(data_args.dataset_path)
    if not path.exists():
        raise RecordError(f"{path}: no such dataset folder or file (make one with medgrpo synth / data convert)")


def load_training_records(data_args: DataArguments) -> list[MedADRecord]:
    """The training split, validated; bad rows stop the run or are skipped and reported, per ``on_bad_record``."""
    report = LoadReport(path=data_args.dataset_path)
    records = load_records(
        data_args.dataset_path,
        split=data_args.train_split if Path(data_args.dataset_path).is_dir() else None,
        on_bad_record=data_args.on_bad_record,  # type: ignore[arg-type]
        report=report,
    )
    if report.skipped:
        PartialState().print(f"medgrpo: skipped {len(report.skipped)} bad record(s); first: {report.skipped[0]}",
                             file=sys.stderr)
    if data_args.tasks:
        kept = [r for r in records if r.task in data_args.tasks]
        PartialState().print(f"medgrpo: training on {len(kept)} of {len(records)} records "
                             f"(tasks: {', '.join(data_args.tasks)})")
        if records and not kept:
            raise RecordError(f"{data_args.dataset_path}: no training records of tasks {', '.join(data_args.tasks)}")
        records = kept
    if data_args.max_train_samples is not None:
        records = records[: data_args.max_train_samples]
    if not records:
        raise RecordError(f"{data_args.dataset_path}: no usable training records")
    return records


def oversample_rows(dataset: Any, records: list[MedADRecord], report: BuildReport,
                    data_args: DataArguments) -> Any:
    """The dataset with the rows of ``oversample_tasks`` listed ``oversample_factor`` times (an index over rows built
    once, so images are prepared once and ids stay unique); ``records`` are those the dataset was built from, and
    ``report`` names the ones it skipped."""
    if not data_args.oversample_tasks or data_args.oversample_factor == 1:
        return dataset
    skipped = {record_id for record_id, _ in report.skipped}
    tasks = [r.task for r in records if r.id not in skipped]  # the dataset's rows, in order
    repeated = [i for i, task in enumerate(tasks) if task in data_args.oversample_tasks]
    indices = list(range(len(tasks))) + repeated * (data_args.oversample_factor - 1)
    PartialState().print(f"medgrpo: {len(repeated)} rows of {', '.join(data_args.oversample_tasks)} listed "
          f"x{data_args.oversample_factor}, {len(indices)} rows in all")
    return dataset.select(indices)


def train_stage(
    stage: str,
    build_dataset: Callable[..., Any],
    trainer_cls: type,
    data_args: DataArguments,
    training_args: Any,
    model_args: Any,
) -> Path:
    """Run one training stage end to end; ``sft.py`` and ``con_grpo.py`` differ only in what they pass here.

    Paths are checked before anything loads; records are validated (``on_bad_record``); the model is loaded
    (LoRA stage-1 outputs merged) with the recipe's pixel limits; the dataset is built by ``build_dataset``
    (``to_sft_dataset`` or ``to_grpo_dataset``); training resumes from the last complete checkpoint; the model (or
    adapter), ``trainer_state.json``, the processor and ``medgrpo_run.json`` are saved to ``output_dir``.
    """
    check_dataset_path(data_args)
    check_model_path(model_args.model_name_or_path)
    records = load_training_records(data_args)
    model, processor, grid = load_for_training(model_args, data_args, training_args.trust_remote_code)
    report = BuildReport()
    dataset = build_dataset(
        records,
        data_args.root,
        grid,
        settings=data_args.image_settings(),
        system_prompt=data_args.system_prompt_text(),
        on_bad_record=data_args.on_bad_record,
        report=report,
    )
    dataset = oversample_rows(dataset, records, report, data_args)
    try:
        trainer = trainer_cls(
            model=model,
            args=training_args,
            train_dataset=dataset,
            processing_class=processor,
            peft_config=get_peft_config(model_args),
        )
        trainer.train(resume_from_checkpoint=resume_checkpoint(training_args.output_dir,
                                                               training_args.resume_from_checkpoint))
    finally:
        release_rows(dataset)  # the resized images on disk; the weights hold what training learned
    trainer.save_model(training_args.output_dir)
    trainer.save_state()  # trainer_state.json with the whole log history, next to the weights
    if trainer.accelerator.is_main_process:
        processor.save_pretrained(training_args.output_dir)
        write_run_info(training_args.output_dir, stage, model_args, training_args, data_args)
    return Path(training_args.output_dir)


def write_run_info(output_dir: str, stage: str, model_args: Any, training_args: Any, data_args: DataArguments) -> None:
    """``medgrpo_run.json``: the stage, base model, dataset and recipe, read by the exporter's model card."""
    recipe = {k: v for k, v in training_args.to_dict().items() if not k.startswith("_") and "token" not in k}
    info = {
        "stage": stage,
        "base_model": model_args.model_name_or_path,
        "datasets": [data_args.dataset_path],
        "data": asdict(data_args),
        "model": {k: v for k, v in asdict(model_args).items() if k != "model_name_or_path"},
        "recipe": recipe,
    }
    path = Path(output_dir) / RUN_INFO
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(info, indent=2, default=str))
    tmp.replace(path)


def cli(run: Callable[[list[str] | None], Any], argv: list[str] | None) -> int:
    """Run a stage, turning configuration and data errors into one line on stderr and exit code 2."""
    try:
        run(argv)
    except yaml.YAMLError as exc:  # a recipe that is not plain YAML (syntax, or a tag such as !!python/object)
        mark = getattr(exc, "problem_mark", None)
        where = f"{mark.name}:{mark.line + 1}" if mark is not None else "recipe"
        print(f"medgrpo: {where}: not a plain YAML recipe ({getattr(exc, 'problem', None) or exc})", file=sys.stderr)
        return 2
    except (ValueError, RecordError, FileNotFoundError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"medgrpo: {message}", file=sys.stderr)
        return 2
    _close_process_group()
    return 0


def _close_process_group() -> None:
    """After a run that succeeded, let every rank finish its writes, then destroy the process group.

    Left to interpreter shutdown, gloo's worker threads can still hold tensors whose release needs the GIL of a
    dying interpreter: the rank then dies with SIGABRT ("terminate called without an active exception") after
    the run has saved everything, and ``accelerate launch`` reports the whole run as failed (seen in a 2-rank CI
    run). PyTorch asks scripts to call ``destroy_process_group`` at the end of ``main``. Only on success: after an
    error the other ranks may still be inside a collective, and a barrier there would hang instead of failing.
    """
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
