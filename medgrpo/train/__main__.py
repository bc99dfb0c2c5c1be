"""``python -m medgrpo.train {sft,con_grpo} --config recipe.yaml``: the entry point for ``accelerate launch -m``."""

import sys

from medgrpo.train import con_grpo, sft

STAGES = {"sft": sft.main, "con_grpo": con_grpo.main, "grpo": con_grpo.main}

if len(sys.argv) < 2 or sys.argv[1] not in STAGES:
    print("usage: python -m medgrpo.train {sft,con_grpo} --config recipe.yaml [--field value ...]", file=sys.stderr)
    sys.exit(2)
sys.exit(STAGES[sys.argv[1]](sys.argv[2:]))
