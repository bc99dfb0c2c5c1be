"""Training: stage 1 (SFT cognitive injection) and stage 2 (Con-GRPO), with their configs."""
