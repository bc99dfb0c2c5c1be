"""Verifiers and Con-GRPO rewards: format, accuracy, reasoning-answer consistency, evidence-aware consistency
(MedAD-R1's five criteria) and box grounding.

:func:`verify` is the pure function evaluation uses; :data:`REWARDS` / :func:`build_reward_funcs` wrap it as
TRL reward functions.
"""

from medgrpo.rewards.columns import records_from_columns
from medgrpo.rewards.parsing import ParsedCompletion, choice_of, completion_text, parse_completion
from medgrpo.rewards.registry import REWARD_NAMES, REWARDS, RewardFunction, build_reward_funcs
from medgrpo.rewards.settings import CRITERIA, METRICS, JudgeSettings, RewardSettings, RewardSettingsError
from medgrpo.rewards.verify import KEYS, shape, total_reward, verify, verify_batch

__all__ = [
    "CRITERIA",
    "KEYS",
    "METRICS",
    "REWARDS",
    "REWARD_NAMES",
    "JudgeSettings",
    "ParsedCompletion",
    "RewardFunction",
    "RewardSettings",
    "RewardSettingsError",
    "build_reward_funcs",
    "choice_of",
    "completion_text",
    "parse_completion",
    "records_from_columns",
    "shape",
    "total_reward",
    "verify",
    "verify_batch",
]
