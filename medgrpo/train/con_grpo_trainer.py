"""Stage 2 trainer: Con-GRPO, a subclass of TRL's ``GRPOTrainer`` (never a fork).

What it adds to TRL, and where:

* the medgrpo verifiers as reward functions, built from the config (``__init__``);
* per-task-family logging of every reward component (``_calculate_rewards``), next to TRL's own
  ``rewards/<name>/mean`` and ``frac_reward_zero_std``; the evidence reward logs its five criteria itself;
* the advantage variants of :mod:`medgrpo.train.advantages`, applied to the globally gathered rewards after TRL has
  built the batch (``_generate_and_score_completions``), so TRL's generation, logprob and loss code is reused as is.

The two TRL methods overridden are private and have moved between TRL releases: pyproject pins ``trl>=1.16,<2``
and ``tests/test_con_grpo.py`` exercises both overrides on a real tiny model.
"""

from __future__ import annotations

from typing import Any

import torch
from accelerate.utils import gather_object
from trl import GRPOTrainer

from medgrpo.train.con_grpo_config import ConGRPOConfig


def reward_settings_from_config(args: ConGRPOConfig):
    """The :class:`medgrpo.rewards.RewardSettings` a Con-GRPO config describes."""
    from medgrpo.rewards import JudgeSettings, RewardSettings

    kwargs: dict[str, Any] = dict(
        evidence_backend=args.evidence_backend,
        gate_on_correct=args.gate_on_correct,
        zero_on_format_failure=args.zero_on_format_failure,
        grounding_metric=args.grounding_metric,
    )
    if args.evidence_weights is not None:
        kwargs["evidence_weights"] = tuple(args.evidence_weights)
    if args.evidence_backend == "judge":
        judge: dict[str, Any] = dict(model=args.judge_model, api_key_env=args.judge_api_key_env or "")
        if args.judge_base_url:
            judge.update(transport="http", base_url=args.judge_base_url)
        else:
            judge.update(transport="local")
        kwargs["judge"] = JudgeSettings(**judge)
    return RewardSettings(**kwargs)


class ConGRPOTrainer(GRPOTrainer):
    """TRL ``GRPOTrainer`` with medgrpo's verifiers as rewards, per-task logging and advantage variants.

    Args:
        model: a model or a model path (as for ``GRPOTrainer``).
        args: the :class:`ConGRPOConfig`.
        reward_funcs: reward functions; default: ``build_reward_funcs(args.reward_funcs, settings)``.
        **kwargs: passed on to ``GRPOTrainer`` (``train_dataset``, ``processing_class``, ``peft_config``, ...).
    """

    def __init__(self, model: Any, args: ConGRPOConfig, reward_funcs: Any = None, **kwargs: Any) -> None:
        if reward_funcs is None:
            from medgrpo.rewards import build_reward_funcs

            reward_funcs = build_reward_funcs(args.reward_funcs, reward_settings_from_config(args))
        super().__init__(model=model, reward_funcs=reward_funcs, args=args, **kwargs)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        # rewards_per_func is gathered over processes; gather the task names in the same order.
        tasks = gather_object([example.get("task", "") for example in inputs])
        self._log_task_metrics(rewards_per_func, tasks)
        return rewards_per_func

    def _log_task_metrics(self, rewards_per_func: torch.Tensor, tasks: list[str]) -> None:
        """``tasks/<task>/<reward>``: the mean of each reward component per task family (NaN = not applicable)."""
        mode = "train" if self.model.training else "eval"
        task_array = list(tasks)
        for task in sorted(set(task_array)):
            rows = torch.tensor([t == task for t in task_array], device=rewards_per_func.device)
            for i, name in enumerate(self.reward_func_names):
                values = rewards_per_func[rows, i]
                values = values[~torch.isnan(values)]
                if values.numel():
                    self._metrics[mode][f"tasks/{task}/{name}"].append(values.mean().item())
