"""Stage 2 trainer: Con-GRPO, a subclass of TRL's ``GRPOTrainer`` (never a fork).

What it adds to TRL, and where:

* the medgrpo verifiers as reward functions, built from the config (``__init__``);
* per-task-family logging of every reward component (``_calculate_rewards``), next to TRL's own
  ``rewards/<name>/mean`` and ``frac_reward_zero_std``; the evidence reward logs its five criteria itself;
* the GRPO variants of the literature (config fields documented on :class:`ConGRPOConfig`, all off by default):
  advantage estimators (:mod:`medgrpo.train.advantages`) recomputed from the globally gathered rewards after TRL has
  built the batch (``_generate_and_score_completions``), of which each process keeps its slice; zero-signal group
  edits (:mod:`medgrpo.train.group_edits`) applied to the token ids in ``_generate``, so TRL computes log-probs and
  rewards of the edited completions itself; SCOPE-RL's term added to TRL's own loss and TIC-GRPO's trajectory
  ratio reduced as TRL reduces for ``loss_type`` (``_compute_loss``, :mod:`medgrpo.train.losses`; a loss field TIC
  cannot honour stops the config); the GRPO-CARE bonus as an extra reward component. Their state (HA-DW anchor, DRPO
  history, AR3PO buffer, SCOPE temperature) is saved as ``medgrpo_variants_state.json`` in every checkpoint and
  restored on resume. Each logs ``variants/...``: how many groups it touched, rollouts spent, anchor, temperature.

The private TRL methods overridden, tested with TRL 1.16.0 (pyproject pins ``trl>=1.16,<2``; they have moved
between releases, and ``tests/test_train.py`` / ``tests/test_variants_train.py`` exercise each on a real tiny
model, the loss paths against TRL's own ``_compute_loss`` on the same batch):

* ``GRPOTrainer._generate`` (zero-signal group edits), ``_generate_and_score_completions`` (variant advantages),
  ``_calculate_rewards`` (per-family logging, the CARE bonus), ``_compute_loss`` and
  ``_get_per_token_logps_and_entropies`` (SCOPE-RL, TIC-GRPO);
* ``transformers.Trainer._save_checkpoint``, ``_load_optimizer_and_scheduler`` (variant state) and
  ``_load_from_checkpoint`` (:class:`~medgrpo.train.checkpoints.ResumeWeightsMixin`).
"""

from __future__ import annotations

import copy
import json
import os
import warnings
from typing import Any

import torch
from accelerate.utils import gather_object
from safetensors.torch import load_model, save_model
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer

from medgrpo.prompts import ANSWER_OPEN
from medgrpo.train import group_edits, losses
from medgrpo.train.advantages import AdvantageSpec, DRPOState, HADWState, compute_advantages
from medgrpo.train.checkpoints import ResumeWeightsMixin
from medgrpo.train.con_grpo_config import ConGRPOConfig

# TRL 1.16 reads transformers' deprecated ``model.is_gradient_checkpointing`` on every generation
# (trl.models.utils.unwrap_model_for_generation); nothing a user sets changes it, so the warning is TRL's to fix.
warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)

VARIANTS_STATE = "medgrpo_variants_state.json"
CARE_EMA_WEIGHTS = "medgrpo_care_ema.safetensors"
_MM_KEYS = ("pixel_values", "image_grid_thw", "num_images", "pixel_attention_mask", "spatial_shapes", "num_tiles",
            "image_sizes", "token_type_ids", "mm_token_type_ids", "image_position_ids")


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


class ConGRPOTrainer(ResumeWeightsMixin, GRPOTrainer):
    """TRL ``GRPOTrainer`` with medgrpo's verifiers as rewards, per-task logging and advantage variants.

    Args:
        model: a model or a model path (as for ``GRPOTrainer``).
        args: the :class:`ConGRPOConfig`.
        reward_funcs: reward functions; default: ``build_reward_funcs(args.reward_funcs, settings)``, the accuracy
            reward paid on ``args.accuracy_tasks`` only when that is set.
        **kwargs: passed on to ``GRPOTrainer`` (``train_dataset``, ``processing_class``, ``peft_config``, ...).
    """

    def __init__(self, model: Any, args: ConGRPOConfig, reward_funcs: Any = None, **kwargs: Any) -> None:
        if reward_funcs is None:
            from medgrpo.rewards import build_reward_funcs

            tasks = {"accuracy": args.accuracy_tasks} if args.accuracy_tasks is not None else None
            reward_funcs = build_reward_funcs(args.reward_funcs, reward_settings_from_config(args), tasks)
        elif args.accuracy_tasks is not None:
            raise ValueError("accuracy_tasks applies to medgrpo's own rewards: leave reward_funcs unset, or pass "
                             "RewardFunction('accuracy', settings, tasks=[...])")
        super().__init__(model=model, reward_funcs=reward_funcs, args=args, **kwargs)
        self._init_variants(args)

    # ---- GRPO variants: setup and checkpointed state ------------------------------------------------------------

    def _init_variants(self, args: ConGRPOConfig) -> None:
        self._hadw = HADWState(eta=args.hadw_eta, window=args.hadw_window) if args.hadw else None
        self._drpo = DRPOState(decay=args.drpo_decay, max_scale=args.drpo_max_scale) if args.drpo_scaling else None
        self._reuse = group_edits.ReuseBuffer(args.reuse_per_prompt) if args.response_reuse else None
        self._scope_temp = None
        if args.scope_coef > 0:
            low, high = args.scope_entropy_band
            t_min, t_max = args.scope_temperature_range
            self._scope_temp = losses.AdaptiveTemperature(args.temperature, low, high, args.scope_temperature_rate,
                                                          t_min, t_max)
        self._scope_entropy: list[float] = []
        self._captured: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self._ema_model = None
        if args.care_bonus > 0:
            self._ema = losses.ema_copy(self.accelerator.unwrap_model(self.model), args.care_ema_decay)
            self._ema_model = self._ema.module
            self._ema_step = 0
        self._accuracy_index = args.reward_funcs.index("accuracy") if "accuracy" in args.reward_funcs else None
        if args.edits_groups or args.care_bonus > 0:
            from medgrpo.rewards import RewardFunction

            self._accuracy_fn = RewardFunction("accuracy", reward_settings_from_config(args))
            local_batch = args.per_device_train_batch_size * args.steps_per_generation
            if local_batch % self.num_generations:
                raise ValueError(f"group edits need whole groups on each process: per_device_train_batch_size x "
                                 f"steps_per_generation ({local_batch}) must be a multiple of num_generations "
                                 f"({self.num_generations})")
        self._variant_inputs: list[dict[str, Any]] | None = None
        self._variant_skip: list[bool] | None = None
        self._variant_rewards: torch.Tensor | None = None

    def variants_state(self) -> dict[str, Any]:
        """The variants' state that must survive a restart (saved in each checkpoint)."""
        state: dict[str, Any] = {}
        for name, obj in (("hadw", self._hadw), ("drpo", self._drpo), ("reuse", self._reuse),
                          ("scope_temperature", self._scope_temp)):
            if obj is not None:
                state[name] = obj.state_dict()
        if self._ema_model is not None:  # its weights go in their own file (CARE_EMA_WEIGHTS)
            state["care_ema_step"] = self._ema_step
        return state

    def load_variants_state(self, state: dict[str, Any]) -> None:
        for name, obj in (("hadw", self._hadw), ("drpo", self._drpo), ("reuse", self._reuse),
                          ("scope_temperature", self._scope_temp)):
            if obj is not None and name in state:
                obj.load_state_dict(state[name])
        if self._ema_model is not None and "care_ema_step" in state:
            self._ema_step = state["care_ema_step"]
        if self._scope_temp is not None:
            self._set_sampling_temperature(self._scope_temp.temperature)

    def _save_checkpoint(self, model, trial):
        # Written first: trainer_state.json (written last by super) is what marks a checkpoint complete, so a kill
        # in between never leaves a "complete" checkpoint without the variants' state.
        state = self.variants_state()
        if state and self.args.should_save:
            folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
            os.makedirs(folder, exist_ok=True)
            if self._ema_model is not None:  # GRPO-CARE's reference: a resume must not restart it from the policy
                tmp = os.path.join(folder, CARE_EMA_WEIGHTS + ".tmp")
                save_model(self._ema_model, tmp)  # save_model, not save_file: tied embeddings share storage
                os.replace(tmp, os.path.join(folder, CARE_EMA_WEIGHTS))
            tmp = os.path.join(folder, VARIANTS_STATE + ".tmp")
            with open(tmp, "w") as fh:
                json.dump(state, fh)
            os.replace(tmp, os.path.join(folder, VARIANTS_STATE))
        super()._save_checkpoint(model, trial)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        path = os.path.join(checkpoint, VARIANTS_STATE) if checkpoint is not None else None
        if path is not None and os.path.isfile(path):
            with open(path) as fh:
                self.load_variants_state(json.load(fh))
        ema = os.path.join(checkpoint, CARE_EMA_WEIGHTS) if checkpoint is not None else None
        if self._ema_model is not None and ema is not None and os.path.isfile(ema):
            load_model(self._ema_model, ema, device=str(next(self._ema_model.parameters()).device))

    def _log_variant(self, name: str, value: float) -> None:
        mode = "train" if self.model.training else "eval"
        self._metrics[mode][f"variants/{name}"].append(float(value))

    def _global_count(self, value: float) -> float:
        return float(self.accelerator.gather(torch.tensor([float(value)], device=self.accelerator.device)).sum())

    def _global_max(self, value: int) -> int:
        return int(self.accelerator.gather(torch.tensor([float(value)], device=self.accelerator.device)).max())

    # ---- group edits (GCPO, DAVID-GRPO, AR3PO, DAPO/GDEPO resampling) -------------------------------------------

    def _generate_and_score_completions(self, inputs):
        self._variant_inputs = inputs  # _generate sees only the prompts; the edits need the records' columns
        self._variant_skip = None
        if self._scope_temp is not None and self._scope_entropy and self.model.training:
            self._set_sampling_temperature(self._scope_temp.update(sum(self._scope_entropy) / len(self._scope_entropy)))
            self._scope_entropy.clear()
        output = super()._generate_and_score_completions(inputs)
        if self.args.recomputes_advantages and self.model.training:
            output["advantages"] = self._variant_advantages(inputs, output)
        return output

    def _set_sampling_temperature(self, temperature: float) -> None:
        """SCOPE-RL: sample hotter or cooler. Log-probs stay at the config temperature (TRL's fused LM head), so the
        loss trains the policy on positives drawn from the tempered distribution, as SCOPE-RL prescribes."""
        self.generation_config.temperature = temperature
        self.generation_kwargs["temperature"] = temperature
        self._log_variant("scope_temperature", temperature)

    def _accuracy(self, inputs: list[dict[str, Any]], completions: list[Any]) -> list[float | None]:
        columns = {k: [row[k] for row in inputs] for k in inputs[0] if k not in ("prompt", "images")}
        return self._accuracy_fn(prompts=[row["prompt"] for row in inputs], completions=completions, **columns)

    def _as_completion(self, text: str, like: Any) -> Any:
        return [{"role": "assistant", "content": text}] if isinstance(like, list) else text

    def _generate(self, prompts: list):
        result = super()._generate(prompts)
        if not (self.args.edits_groups and self.model.training):
            return result
        prompt_ids, completion_ids, tool_mask, completions, logprobs, extra, images, tool_images = result
        inputs, g = self._variant_inputs, self.num_generations
        completion_ids, completions = list(completion_ids), list(completions)
        logprobs = list(logprobs) if logprobs is not None else None
        correct = group_edits.is_correct(self._accuracy(inputs, completions))
        rollouts = len(completion_ids)
        for _ in range(self.args.dynamic_sampling_tries):
            todo = group_edits.zero_variance_groups(correct, g)
            most = self._global_max(len(todo))
            if most == 0:
                break
            # every process generates as many groups as the one with the most to resample: collectives under
            # DeepSpeed, and a vLLM server that slices its results by process_index * len(prompts), need the same
            # count on every rank; the groups padded in are regenerated and discarded
            padded = todo + [todo[0] if todo else 0] * (most - len(todo))
            rows = [i for grp in padded for i in range(grp * g, (grp + 1) * g)]
            new_ids, new_logps = self._resample([prompts[i] for i in rows])
            rollouts += len(rows)  # spent even when discarded
            rows = rows[: len(todo) * g]
            if not todo:
                continue
            texts = self.processing_class.batch_decode(new_ids, skip_special_tokens=True)
            for j, i in enumerate(rows):
                completion_ids[i] = new_ids[j]
                completions[i] = self._as_completion(texts[j], completions[i])
                if logprobs is not None:
                    logprobs[i] = new_logps[j] if new_logps is not None else [None] * len(new_ids[j])
            sub = self._accuracy([inputs[i] for i in rows], [completions[i] for i in rows])
            for j, ok in enumerate(group_edits.is_correct(sub)):
                correct[rows[j]] = ok
        keys = [str(row.get("id", i // g)) for i, row in enumerate(inputs)]
        if self._reuse is not None:  # every rank remembers every rank's correct completions: one buffer, one state
            texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
            group_edits.remember_correct(self._reuse, gather_object(list(correct)), gather_object(keys),
                                         gather_object([list(x) for x in completion_ids]), gather_object(texts))
        gold = [self._gold(row) for row in inputs]
        plan = group_edits.plan_edits(
            correct, keys, gold, g,
            seed_gold=self.state.global_step < self.args.gold_seed_steps,
            reuse=self._reuse, inject_gold=self.args.golden_injection,
        )
        for rep in plan.replacements:
            completion_ids[rep.index] = rep.ids
            completions[rep.index] = self._as_completion(rep.text, completions[rep.index])
            if logprobs is not None:  # unknown sampler log-probs: TRL reads None as "no IS correction"
                logprobs[rep.index] = [None] * len(rep.ids)
            correct[rep.index] = True
        if self.args.skip_zero_variance:
            flat = set(group_edits.zero_variance_groups(correct, g))
            self._variant_skip = [i // g in flat for i in range(len(correct))]
            self._log_variant("skipped_groups", self._global_count(len(flat)))
        for name, count in plan.counts.items():
            if name == "gold_seeded" and self.args.gold_seed_steps == 0:
                continue
            if name == "reused" and self._reuse is None:
                continue
            if name == "gold_injected" and not self.args.golden_injection:
                continue
            self._log_variant(f"{name}_groups", self._global_count(count))
        self._log_variant("rollouts", self._global_count(rollouts))
        return prompt_ids, completion_ids, tool_mask, completions, logprobs, extra, images, tool_images

    def _resample(self, prompts: list) -> tuple[list[list[int]], list | None]:
        """New completions for whole groups of prompts (DAPO dynamic sampling), through TRL's generation path."""
        prompt_ids, images, multimodal_fields = self._tokenize_prompts(copy.deepcopy(prompts))
        completion_ids, logprobs = self._generate_single_turn(prompt_ids, images, multimodal_fields,
                                                              self.num_generations)
        return [list(x) for x in completion_ids], logprobs

    def _gold(self, row: dict[str, Any]) -> tuple[list[int], str] | None:
        """The record's gold completion (``target`` column) as token ids ending in EOS, and its text; None on a
        family ``accuracy_tasks`` leaves unpaid: a label the policy cannot perceive teaches it nothing but a letter
        (demo report, experiment 24)."""
        text = row.get("target") or ""
        paid = self.args.accuracy_tasks
        if not text or (paid is not None and row.get("task") not in paid):
            return None
        ids = self._tokenizer(text, add_special_tokens=False)["input_ids"]
        return list(ids) + [self.eos_token_ids[0]], text

    # ---- advantage variants and the GRPO-CARE bonus --------------------------------------------------------------

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        # rewards_per_func is gathered over processes; gather the task names in the same order.
        tasks = gather_object([example.get("task", "") for example in inputs])
        self._log_task_metrics(rewards_per_func, tasks)
        if self.args.recomputes_advantages:
            self._variant_rewards = rewards_per_func
            if self.args.ips_scaling:
                from medgrpo.rewards import parse_completion

                self._variant_outcomes = gather_object([parse_completion(c).answer or "" for c in completions])
            if self.args.drpo_scaling:
                self._variant_modalities = gather_object([row.get("modality") or "" for row in inputs])
        return rewards_per_func

    def _variant_advantages(self, inputs: list[dict[str, Any]], output: dict[str, Any]) -> torch.Tensor:
        """Advantages recomputed from the GLOBAL rewards with the configured variants; returns this process's slice."""
        args = self.args
        rewards = self._variant_rewards
        weights = self.reward_weights.to(rewards.device)
        if args.care_bonus > 0:
            bonus = self._care_bonus(output, rewards)
            rewards = torch.cat([rewards, bonus.unsqueeze(1)], dim=1)
            weights = torch.cat([weights, weights.new_ones(1)])
            self._metrics["train"]["rewards/care/mean"].append(bonus.mean().item())
        estimator = args.advantage_estimator
        if estimator == "grpo" and args.multi_objective_aggregation == "normalize_then_sum":
            estimator = "gdpo"
        spec = AdvantageSpec(
            estimator=estimator, scope=args.scale_rewards, accuracy_index=self._accuracy_index,
            equal_right_margin=args.equal_right_margin, taros_std_ref=args.taros_std_ref,
            taros_sparsity=args.taros_sparsity, ips=args.ips_scaling, ips_max_scale=args.ips_max_scale,
            hadw=args.hadw, hadw_lambda=args.hadw_lambda, drpo=args.drpo_scaling,
        )
        advantages, stats = compute_advantages(
            rewards, weights, self.num_generations, spec,
            outcomes=getattr(self, "_variant_outcomes", None) if args.ips_scaling else None,
            modalities=getattr(self, "_variant_modalities", None) if args.drpo_scaling else None,
            hadw_state=self._hadw, drpo_state=self._drpo,
        )
        if self._variant_skip is not None:
            skip = self.accelerator.gather(torch.tensor(self._variant_skip, device=advantages.device))
            advantages = advantages.masked_fill(skip.to(advantages.device), 0.0)
        for name, value in stats.items():
            self._metrics["train"][name].append(value)
        n = len(inputs)
        start = self.accelerator.process_index * n
        return advantages[start:start + n].to(output["completion_ids"].device)

    def _care_bonus(self, output: dict[str, Any], rewards: torch.Tensor) -> torch.Tensor:
        """GRPO-CARE: answer likelihood under the EMA reference -> consistency bonus for every global completion."""
        if self.state.global_step - self._ema_step >= self.args.care_ema_every:
            self._ema.update_parameters(self.accelerator.unwrap_model(self.model))
            self._ema_step = self.state.global_step
        ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        attention = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        with torch.no_grad():
            logps, _, _ = self._get_per_token_logps_and_entropies(
                self._ema_model, ids, attention, output["completion_ids"].size(1),
                batch_size=self.args.per_device_train_batch_size,
                **{k: output.get(k) for k in _MM_KEYS},
            )
        pieces = [self._tokenizer.batch_decode([[t] for t in row]) for row in output["completion_ids"].tolist()]
        tokens = losses.answer_mask(output["completion_mask"], pieces, ANSWER_OPEN)
        likelihood = self.accelerator.gather(losses.answer_logp(logps, tokens))
        accuracy = rewards[:, self._accuracy_index]
        return losses.care_bonus(likelihood.to(accuracy.device), accuracy, self.num_generations, self.args.care_bonus)

    # ---- TIC-GRPO / SCOPE-RL loss path -------------------------------------------------------------------------

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self._captured is not None:  # inside _compute_loss with SCOPE-RL on: keep the policy's log-probs
            self._captured.append(out[:2])
        return out

    def _compute_loss(self, model, inputs):
        args = self.args
        if args.trajectory_ratio:
            return self._trajectory_loss(model, inputs)
        if args.scope_coef <= 0:
            return super()._compute_loss(model, inputs)
        # SCOPE-RL: TRL's own loss (every GRPOConfig loss field applies) plus the positive-sample NLL, read from the
        # log-probs TRL computed for it, so no second forward pass
        self._captured = []
        try:
            loss = super()._compute_loss(model, inputs)
            logps, entropies = self._captured[0]
        finally:
            self._captured = None
        mask = inputs["completion_mask"] * inputs.get("tool_mask", 1)
        advantages = inputs["advantages"]
        nll = losses.positive_nll(logps, advantages if advantages.dim() == 1 else advantages[:, 0], mask)
        mode = "train" if self.model.training else "eval"
        loss = loss + args.scope_coef * nll / (self.current_gradient_accumulation_steps if mode == "train" else 1.0)
        self._metrics[mode]["variants/scope_positive_nll"].append(nll.item())
        if mode == "train":  # the mean over ranks, so that every rank moves to the same temperature
            entropy = (entropies * mask).sum() / mask.sum().clamp(min=1.0)
            self._scope_entropy.append(self.accelerator.gather(entropy.detach().reshape(1)).mean().item())
        return loss

    def _trajectory_loss(self, model, inputs: dict[str, Any]) -> torch.Tensor:
        """TIC-GRPO's trajectory-ratio surrogate from TRL's own per-token log-probs, reduced as TRL reduces for
        ``loss_type`` (the config stops first on any loss field it cannot honour)."""
        args, mode = self.args, "train" if self.model.training else "eval"
        completion_ids, mask = inputs["completion_ids"], inputs["completion_mask"]
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        logps, entropies, _ = self._get_per_token_logps_and_entropies(
            model,
            torch.cat([inputs["prompt_ids"], completion_ids], dim=1),
            torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1),
            completion_ids.size(1),
            compute_entropy=True,
            **{k: inputs.get(k) for k in _MM_KEYS},
        )
        old = inputs.get("old_per_token_logps")
        old = logps.detach() if old is None else old
        accumulation = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        num_items = None
        if args.loss_type == "dapo":  # TRL's normaliser: the generation batch's tokens, per process and window
            num_items = float(inputs["num_items_in_batch"].clamp(min=1.0)) / self.accelerator.num_processes
            if mode == "train":
                num_items = num_items * accumulation / args.steps_per_generation
        loss, stats = losses.trajectory_ratio_loss(logps, old, inputs["advantages"], mask, self.epsilon_low,
                                                   self.epsilon_high, args.tic_log_ratio_clamp, args.loss_type,
                                                   self.max_completion_length, num_items)
        self._metrics[mode]["variants/tic_log_ratio_mean"].append(stats["log_ratio_mean"])
        self._metrics[mode]["variants/clip_ratio"].append(stats["clip_ratio"])
        self._metrics[mode]["entropy"].append(((entropies * mask).sum() / mask.sum().clamp(min=1.0)).item())
        return loss if args.loss_type == "dapo" else loss / accumulation

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
