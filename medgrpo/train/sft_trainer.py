"""Stage 1 trainer: TRL's ``SFTTrainer`` with checkpoint resume that really restores the weights."""

from __future__ import annotations

from trl import SFTTrainer

from medgrpo.train.checkpoints import ResumeWeightsMixin


class MedSFTTrainer(ResumeWeightsMixin, SFTTrainer):
    """``SFTTrainer`` whose resume goes through :class:`~medgrpo.train.checkpoints.ResumeWeightsMixin`.

    transformers 5 saves Qwen-VL checkpoints under the Hub's key names but reloads them into the renamed module
    tree with ``strict=False``, so a plain resume silently restarts from the initial weights with step-N optimizer
    state; the mixin reloads them through ``from_pretrained``'s key mapping instead.
    """
