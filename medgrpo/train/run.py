"""Plumbing shared by the stage scripts: parsing, data loading, resume, run metadata, one-line errors."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from trl import TrlParser

from medgrpo.data import LoadReport, MedADRecord, RecordError, load_records
from medgrpo.train.args import DataArguments

RUN_INFO = "medgrpo_run.json"


def parse_args(dataclass_types: tuple[type, ...], argv: list[str] | None, prog: str) -> tuple[Any, ...]:
    """Parse ``--config recipe.yaml`` plus CLI overrides into the given dataclasses (TRL's ``TrlParser``)."""
    parser = TrlParser(dataclass_types, prog=prog)
    return parser.parse_args_and_config(args=argv)


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
        print(f"medgrpo: skipped {len(report.skipped)} bad record(s); first: {report.skipped[0]}", file=sys.stderr)
    if data_args.max_train_samples is not None:
        records = records[: data_args.max_train_samples]
    if not records:
        raise RecordError(f"{data_args.dataset_path}: no usable training records")
    return records


def resume_checkpoint(output_dir: str, explicit: str | bool | None) -> str | None:
    """The checkpoint to resume from: the one named, else the last complete one in ``output_dir``, else None.

    Restarting a killed run with the same command therefore continues it. A checkpoint counts as complete only when
    its ``trainer_state.json`` (written last by the Trainer) is there, so a folder half-written by a kill during
    saving is passed over rather than picked up.
    """
    if isinstance(explicit, str) and explicit:
        return explicit
    if explicit is False or not Path(output_dir).is_dir():
        return None
    steps = []
    for child in Path(output_dir).iterdir():
        match = re.fullmatch(r"checkpoint-(\d+)", child.name)
        if match and child.is_dir() and (child / "trainer_state.json").is_file():
            steps.append((int(match.group(1)), child))
    if not steps:
        return None
    checkpoint = str(max(steps)[1])
    print(f"medgrpo: resuming from {checkpoint}", file=sys.stderr)
    return checkpoint


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
    except (ValueError, RecordError, FileNotFoundError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"medgrpo: {message}", file=sys.stderr)
        return 2
    return 0
