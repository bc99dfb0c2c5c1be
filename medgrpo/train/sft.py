"""Stage 1, cognitive injection: SFT on think-then-answer targets with TRL's ``SFTTrainer``.

    accelerate launch -m medgrpo.train sft --config recipes/tiny/sft.yaml [--field value ...]
    medgrpo sft --config recipes/tiny/sft.yaml

Each record's gold ``cot`` and answer become the completion in the output grammar (:func:`medgrpo.prompts.
build_target`); the loss covers the completion only (prompt/completion data), and nothing is truncated.
"""

from __future__ import annotations

from pathlib import Path

from medgrpo.data import to_sft_dataset
from medgrpo.train.args import DataArguments, MedModelConfig
from medgrpo.train.run import cli, parse_args, train_stage
from medgrpo.train.sft_config import MedSFTConfig
from medgrpo.train.sft_trainer import MedSFTTrainer


def train_sft(data_args: DataArguments, training_args: MedSFTConfig, model_args: MedModelConfig) -> Path:
    """Run stage 1 and save the model (or LoRA adapter), processor and ``medgrpo_run.json`` to ``output_dir``."""
    return train_stage("sft", to_sft_dataset, MedSFTTrainer, data_args, training_args, model_args)


def _run(argv: list[str] | None) -> None:
    train_sft(*parse_args((DataArguments, MedSFTConfig, MedModelConfig), argv, prog="medgrpo sft"))


def main(argv: list[str] | None = None) -> int:
    return cli(_run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
