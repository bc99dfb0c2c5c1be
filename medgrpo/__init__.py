"""medgrpo: grounded, self-consistent medical VLM reasoning with SFT + Con-GRPO on TRL."""

__version__ = "0.1.0"
