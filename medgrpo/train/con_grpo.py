"""Stage 2, Con-GRPO: GRPO with format, accuracy, consistency, evidence and grounding rewards.

    accelerate launch -m medgrpo.train con_grpo --config recipes/tiny/con_grpo.yaml [--field value ...]
    medgrpo grpo --config recipes/tiny/con_grpo.yaml

Starts from the stage-1 output (full weights, or a LoRA adapter that is merged on load), or trains LoRA on top when
the recipe sets ``use_peft: true``.
"""

from __future__ import annotations

from pathlib import Path

from medgrpo.data import to_grpo_dataset
from medgrpo.train.args import DataArguments, MedModelConfig
from medgrpo.train.con_grpo_config import ConGRPOConfig
from medgrpo.train.con_grpo_trainer import ConGRPOTrainer
from medgrpo.train.run import cli, parse_args, train_stage


def train_con_grpo(data_args: DataArguments, training_args: ConGRPOConfig, model_args: MedModelConfig) -> Path:
    """Run stage 2 and save the model (or adapter), processor and ``medgrpo_run.json`` to ``output_dir``."""
    return train_stage("con_grpo", to_grpo_dataset, ConGRPOTrainer, data_args, training_args, model_args)


def _run(argv: list[str] | None) -> None:
    train_con_grpo(*parse_args((DataArguments, ConGRPOConfig, MedModelConfig), argv, prog="medgrpo grpo"))


def main(argv: list[str] | None = None) -> int:
    return cli(_run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
