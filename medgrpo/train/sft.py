"""Stage 1, cognitive injection: SFT on think-then-answer targets with TRL's ``SFTTrainer``.

    accelerate launch -m medgrpo.train sft --config recipes/tiny/sft.yaml [--field value ...]
    medgrpo sft --config recipes/tiny/sft.yaml

Each record's gold ``cot`` and answer become the completion in the output grammar (:func:`medgrpo.prompts.
build_target`); the loss covers the completion only (prompt/completion data), and nothing is truncated.
"""

from __future__ import annotations

from pathlib import Path

from trl import get_peft_config

from medgrpo.data import to_sft_dataset
from medgrpo.train.args import DataArguments, MedModelConfig
from medgrpo.train.modeling import check_model_path, load_for_training
from medgrpo.train.run import (
    check_dataset_path,
    cli,
    load_training_records,
    parse_args,
    resume_checkpoint,
    write_run_info,
)
from medgrpo.train.sft_config import MedSFTConfig
from medgrpo.train.sft_trainer import MedSFTTrainer


def train_sft(data_args: DataArguments, training_args: MedSFTConfig, model_args: MedModelConfig) -> Path:
    """Run stage 1 and save the model (or LoRA adapter), processor and ``medgrpo_run.json`` to ``output_dir``."""
    check_dataset_path(data_args)
    check_model_path(model_args.model_name_or_path)
    records = load_training_records(data_args)
    model, processor, grid = load_for_training(model_args, data_args, training_args.trust_remote_code)
    dataset = to_sft_dataset(
        records,
        data_args.root,
        grid,
        settings=data_args.image_settings(),
        system_prompt=data_args.system_prompt_text(),
        on_bad_record=data_args.on_bad_record,
    )
    trainer = MedSFTTrainer(
        model=model,
        args=training_args,
        train_dataset=dataset,
        processing_class=processor,
        peft_config=get_peft_config(model_args),
    )
    trainer.train(resume_from_checkpoint=resume_checkpoint(training_args.output_dir,
                                                           training_args.resume_from_checkpoint))
    trainer.save_model(training_args.output_dir)
    trainer.save_state()  # trainer_state.json with the whole log history, next to the weights
    if trainer.accelerator.is_main_process:
        processor.save_pretrained(training_args.output_dir)
        write_run_info(training_args.output_dir, "sft", model_args, training_args, data_args)
    return Path(training_args.output_dir)


def _run(argv: list[str] | None) -> None:
    data_args, training_args, model_args = parse_args(
        (DataArguments, MedSFTConfig, MedModelConfig), argv, prog="medgrpo sft"
    )
    train_sft(data_args, training_args, model_args)


def main(argv: list[str] | None = None) -> int:
    return cli(_run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
