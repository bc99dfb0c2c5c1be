"""Configuration of stage 1, cognitive injection: TRL's ``SFTConfig`` with medgrpo's safe defaults."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import SFTConfig

from medgrpo.train.args import rename_checkpointing


@dataclass
class MedSFTConfig(SFTConfig):
    r"""TRL's ``SFTConfig`` for think-then-answer SFT on image + prompt/completion data.

    Every ``SFTConfig`` field applies. Defaults that differ from TRL's:

    Parameters:
        max_length (`int` or `None`, defaults to `None`):
            No truncation. A truncated sequence can cut image placeholder tokens away from their pixel features (a
            crash) or cut the ``<answer>`` block off the target (a silent format lesson); filter long rows instead.
    """

    max_length: int | None = field(default=None, metadata={"help": "Maximum tokenized length; None = no truncation."})

    def __post_init__(self) -> None:
        rename_checkpointing(self)
        super().__post_init__()
        if self.packing:
            raise ValueError("packing: not supported with image data (each row keeps its own image tokens); set it false")
