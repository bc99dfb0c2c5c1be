"""Evaluation suites: a YAML list of datasets (in the MedAD record format) with split, limit and prompt settings.

A suite file looks like::

    name: medad-synth
    max_new_tokens: 256          # generation budget for every dataset of the suite
    datasets:
      - name: medad-synth
        path: data/medad-synth   # a dataset folder (train.jsonl/test.jsonl/images) or one .jsonl file
        split: test              # which <split>.jsonl of the folder to score
        limit: null              # score only the first N records (null = all)
        make: medgrpo synth --out data/medad-synth   # how to create `path` when it is missing
        system_prompt: default   # "default" (the one the model trained with), null (none) or a string
        image: {}                # medgrpo.data.preprocess.ImageSettings fields (DICOM window, frames, ...)
        on_bad_record: error     # or skip: drop invalid rows and count them

Relative paths resolve against the working directory, like every other medgrpo path. A dataset whose path does
not exist stops the run with one line naming the expected path and the command (``make``) that creates it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medgrpo.data.yaml_config import read_yaml_mapping

AS_TRAINED = "default"
"""``system_prompt: default``: the system turn the evaluated model trained with (its ``medgrpo_run.json`` records
it; medgrpo's :data:`~medgrpo.prompts.SYSTEM_PROMPT` for a model without one), so a model trained without the
system turn, or with its own, is not scored on a prompt it never saw."""


class SuiteError(ValueError):
    """A suite file or one of its datasets is invalid or missing; the message is one line."""


@dataclass
class DatasetSpec:
    """One dataset of a suite."""

    name: str
    path: str
    split: str | None = "test"
    limit: int | None = None
    make: str = ""
    system_prompt: str | None = AS_TRAINED
    image: dict[str, Any] = field(default_factory=dict)
    on_bad_record: str = "error"

    def check_exists(self) -> Path:
        """The dataset path, or :class:`SuiteError` naming the expected path and the command that creates it."""
        path = Path(self.path)
        if path.exists():
            return path
        how = f"; create it with: {self.make}" if self.make else ""
        raise SuiteError(f"dataset '{self.name}': expected local data at {path.resolve()} (not found){how}")


@dataclass
class Suite:
    """A named list of datasets scored with one generation budget."""

    name: str
    datasets: list[DatasetSpec]
    max_new_tokens: int = 256


_DATASET_KEYS = {"name", "path", "split", "limit", "make", "system_prompt", "image", "on_bad_record"}
_SUITE_KEYS = {"name", "description", "max_new_tokens", "datasets"}


def _dataset(raw: Any, where: str) -> DatasetSpec:
    if not isinstance(raw, dict):
        raise SuiteError(f"{where}: must be a mapping with at least 'name' and 'path'")
    unknown = sorted(set(raw) - _DATASET_KEYS)
    if unknown:
        raise SuiteError(f"{where}: unknown key '{unknown[0]}' (allowed: {', '.join(sorted(_DATASET_KEYS))})")
    for key in ("name", "path"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise SuiteError(f"{where}: field '{key}' must be a non-empty string")
    limit = raw.get("limit")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise SuiteError(f"{where}: field 'limit' must be a positive integer or null")
    split = raw.get("split", "test")
    if split is not None and not isinstance(split, str):
        raise SuiteError(f"{where}: field 'split' must be a string or null")
    system_prompt = raw.get("system_prompt", AS_TRAINED)
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise SuiteError(f"{where}: field 'system_prompt' must be 'default', null or a string")
    image = raw.get("image") or {}
    if not isinstance(image, dict):
        raise SuiteError(f"{where}: field 'image' must be a mapping of image settings")
    on_bad = raw.get("on_bad_record", "error")
    if on_bad not in ("error", "skip"):
        raise SuiteError(f"{where}: field 'on_bad_record' must be 'error' or 'skip'")
    return DatasetSpec(
        name=raw["name"],
        path=raw["path"],
        split=split,
        limit=limit,
        make=str(raw.get("make") or ""),
        system_prompt=system_prompt,
        image=dict(image),
        on_bad_record=on_bad,
    )


def load_suite(path: str | Path) -> Suite:
    """Read and validate a suite YAML file.

    Raises:
        SuiteError: one line naming the file, the dataset and the field.
    """
    path = Path(path)
    raw = read_yaml_mapping(path, _SUITE_KEYS, SuiteError, "suite file (suites ship under eval/suites/)")
    datasets = raw.get("datasets")
    if not isinstance(datasets, list) or not datasets:
        raise SuiteError(f"{path}: field 'datasets' must be a non-empty list")
    specs = [_dataset(d, f"{path}: datasets[{i}]") for i, d in enumerate(datasets)]
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise SuiteError(f"{path}: dataset names must be unique, got {names}")
    max_new_tokens = raw.get("max_new_tokens", 256)
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 1:
        raise SuiteError(f"{path}: field 'max_new_tokens' must be a positive integer")
    return Suite(name=str(raw.get("name") or path.stem), datasets=specs, max_new_tokens=max_new_tokens)


def suite_for_path(dataset_path: str | Path, split: str | None = "test", limit: int | None = None) -> Suite:
    """A one-dataset suite for a dataset folder or JSONL file given directly (``evaluate(model, "data/x")``)."""
    path = Path(dataset_path)
    name = path.stem if path.suffix == ".jsonl" else path.name
    return Suite(name=name, datasets=[DatasetSpec(name=name, path=str(path), split=split, limit=limit)])
