"""Dataclasses shared by both training stages, parsed by TRL's ``TrlParser`` next to ``SFTConfig``/``ConGRPOConfig``.

A recipe YAML sets fields of all three dataclasses at once; CLI flags override the YAML.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl import ModelConfig

from medgrpo.data.preprocess import ImageSettings
from medgrpo.data.record import TASKS
from medgrpo.prompts import SYSTEM_PROMPT


@dataclass
class DataArguments:
    """Where the data comes from and how its images are prepared.

    Parameters:
        dataset_path (`str`):
            A MedAD dataset folder (``train.jsonl``/``test.jsonl`` + ``images/``) or one JSONL file. Build one with
            ``medgrpo synth``, ``medgrpo data convert`` or ``medgrpo data build``.
        train_split (`str`, defaults to `"train"`):
            The ``<split>.jsonl`` to train on.
        tasks (`list[str]` or `None`, defaults to `None`):
            Train only on these task families (names from :data:`medgrpo.data.record.TASKS`); None keeps all. In a
            family the policy cannot yet perceive, the accuracy reward is noise and GRPO pushes the group toward a
            constant answer (demo report, experiments 15-16); this leaves such families out of a stage.
        max_train_samples (`int` or `None`, defaults to `None`):
            Keep only the first N records (quick experiments, applied after ``tasks``); None keeps all.
        oversample_tasks (`list[str]` or `None`, defaults to `None`):
            List the training rows of these families ``oversample_factor`` times (after ``tasks`` and
            ``max_train_samples``; a family that ``tasks`` leaves out has no rows to repeat), so each gets that many
            times its share of the updates. With Con-GRPO's ``accuracy_tasks`` the families whose accuracy is paid
            then get most of the updates, while the others still train format, consistency and evidence (demo
            report, experiment 19); None repeats nothing.
        oversample_factor (`int`, defaults to `2`):
            How many times each record of ``oversample_tasks`` is listed (1 leaves the data as it is).
        on_bad_record (`str`, defaults to `"error"`):
            ``error`` stops before training on the first bad row, naming it; ``skip`` drops bad rows (invalid fields,
            unreadable images) and reports their count and ids.
        system_prompt (`str` or `None`, defaults to `None`):
            Replaces medgrpo's default system prompt (:data:`medgrpo.prompts.SYSTEM_PROMPT`); an empty string drops
            the system turn.
        min_pixels (`int` or `None`, defaults to `None`):
            Lower pixel limit of the image processor; None keeps the processor's own. The same limits drive the
            resize in :func:`medgrpo.data.preprocess.prepare_images`, so trainer, vLLM and evaluator agree.
        max_pixels (`int` or `None`, defaults to `None`):
            Upper pixel limit of the image processor (the main memory knob for real models); None keeps the
            processor's own.
        dicom_window (`str`, defaults to `"auto"`):
            DICOM windowing: ``auto`` uses the file's own VOI LUT / window, or percentile windowing when it has none;
            a CT preset (``lung``, ``mediastinum``, ``soft_tissue``, ``bone``, ``brain``) or ``"center,width"``
            applies to every DICOM of the dataset.
        image_cache_dir (`str` or `None`, defaults to `None`):
            Cache of decoded and resized images (keyed by file and preprocessing settings) so DICOMs are decoded
            once across epochs and runs; None disables it.
    """

    dataset_path: str = field(default="data/medad-synth", metadata={"help": "MedAD dataset folder or JSONL file."})
    train_split: str = field(default="train", metadata={"help": "Split (<split>.jsonl) to train on."})
    tasks: list[str] | None = field(default=None, metadata={"help": "Train only on these task families."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep only the first N records."})
    oversample_tasks: list[str] | None = field(
        default=None, metadata={"help": "Repeat these families' records oversample_factor times."}
    )
    oversample_factor: int = field(default=2, metadata={"help": "Repeats of each oversample_tasks record."})
    on_bad_record: str = field(
        default="error", metadata={"help": "error: stop on a bad row; skip: drop, count and report it."}
    )
    system_prompt: str | None = field(default=None, metadata={"help": "Override the default system prompt."})
    min_pixels: int | None = field(default=None, metadata={"help": "Image processor lower pixel limit."})
    max_pixels: int | None = field(default=None, metadata={"help": "Image processor upper pixel limit."})
    dicom_window: str = field(default="auto", metadata={"help": "DICOM window: auto, a CT preset or 'c,w'."})
    image_cache_dir: str | None = field(default=None, metadata={"help": "Cache dir for decoded+resized images."})

    def __post_init__(self) -> None:
        if self.on_bad_record not in ("error", "skip"):
            raise ValueError(f"on_bad_record must be 'error' or 'skip', not '{self.on_bad_record}'")
        for name in ("tasks", "oversample_tasks"):
            unknown = [t for t in getattr(self, name) or () if t not in TASKS]
            if unknown:
                raise ValueError(f"{name}: unknown task '{unknown[0]}' (one of: {', '.join(TASKS)})")
        if self.oversample_factor < 1:
            raise ValueError(f"oversample_factor must be at least 1, got {self.oversample_factor}")
        self.image_settings()  # a bad window name fails here, before any model loads

    @property
    def root(self) -> Path:
        """The folder image paths are relative to."""
        path = Path(self.dataset_path)
        return path if path.is_dir() else path.parent

    def image_settings(self) -> ImageSettings:
        return ImageSettings(window=self.dicom_window, cache_dir=self.image_cache_dir)

    def system_prompt_text(self) -> str | None:
        """The system turn: medgrpo's default, the recipe's text, or none for an empty string."""
        return SYSTEM_PROMPT if self.system_prompt is None else (self.system_prompt or None)


@dataclass
class MedModelConfig(ModelConfig):
    """TRL's ``ModelConfig`` (model path, dtype, LoRA fields, ``trust_remote_code``) plus medgrpo's model options.

    Parameters:
        freeze_vision_tower (`bool`, defaults to `False`):
            Keep the vision encoder (and its merger) frozen. Peers freeze it for small data to avoid forgetting
            visual features; the tiny CPU models train it because they start from random weights.
    """

    freeze_vision_tower: bool = field(default=False, metadata={"help": "Freeze the vision encoder."})


def rename_checkpointing(config: Any) -> None:
    """Give ``gradient_checkpointing`` (TRL's default and the name recipes use) to ``activation_checkpointing``, its
    new name in transformers 5, before ``TrainingArguments`` resolves the alias: the same setting, without the
    deprecation warning every run would otherwise print first. A no-op where the new name does not exist."""
    if getattr(config, "activation_checkpointing", False) is None and config.gradient_checkpointing is not None:
        config.activation_checkpointing, config.gradient_checkpointing = config.gradient_checkpointing, None
        kwargs = getattr(config, "gradient_checkpointing_kwargs", None)
        if getattr(config, "activation_checkpointing_kwargs", False) is None and kwargs is not None:
            config.activation_checkpointing_kwargs, config.gradient_checkpointing_kwargs = kwargs, None

