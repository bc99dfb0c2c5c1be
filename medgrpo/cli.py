"""The ``medgrpo`` command: one subcommand per pipeline stage, each implemented as ``main(argv)`` in its module.

Subcommands are imported lazily so that ``medgrpo --help`` and light commands never import torch.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "synth": ("medgrpo.data.synth", "generate the embedded MedAD-Synth benchmark (offline)"),
    "tiny-model": ("medgrpo.models.tiny", "build a tiny random-init Qwen-VL model + processor (offline)"),
    "data": ("medgrpo.data.cli", "validate, convert and build datasets"),
    "sft": ("medgrpo.train.sft", "stage 1: SFT cognitive injection (TRL SFTTrainer)"),
    "grpo": ("medgrpo.train.con_grpo", "stage 2: Con-GRPO (TRL GRPOTrainer subclass)"),
    "eval": ("medgrpo.eval.cli", "evaluate a model on a suite of datasets"),
    "ablate": ("medgrpo.train.ablate", "compare GRPO variants: Con-GRPO per variant x seed, held-out eval, table"),
    "export": ("medgrpo.export", "export a checkpoint to the Hugging Face Hub format"),
    "demo": ("medgrpo.demo", "the whole pipeline on the embedded default, offline on CPU"),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: medgrpo <command> [options]   (medgrpo <command> --help for its options)", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"medgrpo: unknown command '{name}'\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
