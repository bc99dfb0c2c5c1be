"""The GRPO variants of the literature as configuration switches, apart from the core Con-GRPO config.

:class:`GRPOVariantsMixin` holds their fields and checks; :class:`~medgrpo.train.con_grpo_config.ConGRPOConfig`
inherits it, so every field is set in the same recipe YAML or on the command line. The trainer's hooks that read
them are in :mod:`medgrpo.train.con_grpo_trainer` (listed in its docstring), their arithmetic in
:mod:`medgrpo.train.advantages`, :mod:`medgrpo.train.group_edits` and :mod:`medgrpo.train.losses`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class GRPOVariantsMixin:
    r"""GRPO variants as switches, every one off by default; each logs ``variants/...`` when on.

    Parameters:
        > GRPO variants (issue 6; every one is off by default; formulas in shared/docs/research-brief.md section 5,
        > code in medgrpo/train/advantages.py, group_edits.py and losses.py; each logs ``variants/...`` when on)

        The normalisation-scope ablation ("Why GRPO Needs Normalization", 2026) is TRL's ``scale_rewards``
        (``group`` / ``batch`` / ``none``) and GDPO per-component normalisation is TRL's
        ``multi_objective_aggregation="normalize_then_sum"``; both are honoured when a variant below recomputes
        the advantages from the global rewards.

        advantage_estimator (`str`, defaults to `"grpo"`):
            ``grpo`` keeps TRL's advantage. ``equal_right`` is GDEPO's equal-right advantage (2026, [inferred]
            form): accuracy sets the sign, the other components' in-group z-score the magnitude, so an auxiliary
            reward can never push a correct answer below a wrong one. ``taros`` is TaRoS-style (2025, [inferred]):
            per-component in-group z-scores, saturated components down-weighted, optional intra-group sparsity.
        equal_right_margin (`float`, defaults to `0.1`):
            GDEPO's epsilon: the magnitude floor, so a correct answer in a group with identical auxiliaries still
            gets a positive advantage.
        taros_std_ref (`float`, defaults to `0.5`):
            TaRoS saturation weight ``clip(std_k / std_ref, 0, 1)``; 0.5 is the largest std of a [0, 1] reward.
        taros_sparsity (`float`, defaults to `0.0`):
            TaRoS intra-group sparsity: members with ``|A| < taros_sparsity * max |A|`` in their group get 0.
        ips_scaling (`bool`, defaults to `False`):
            IPS-GRPO (2026, [inferred]): each reward divided by its outcome's (final answer's) frequency in the
            group before normalising, so the policy is not pulled to the modal answer merely by its frequency.
        ips_max_scale (`float`, defaults to `4.0`):
            Clamp of the IPS factor (bounds the variance a rare outcome adds).
        hadw (`bool`, defaults to `False`):
            HA-DW ("Your Group-Relative Advantage Is Biased", 2026): advantages multiplied by
            ``hadw_lambda * exp(-sign(A) sign(d) |d|)``, ``d`` = group accuracy minus a history-aware anchor of
            batch accuracy; corrects the bias of group-relative advantages on hard and easy prompts. The anchor is
            saved in every checkpoint (``medgrpo_variants_state.json``) and restored on resume.
        hadw_eta (`float`, defaults to `0.1`), hadw_window (`int`, defaults to `50`), hadw_lambda (`float`,
            defaults to `1.3`): the anchor's step size and std window, and the weight scale (reproduction values).
        drpo_scaling (`bool`, defaults to `False`):
            DRPO-style (QoQ-Med, [inferred]) per-modality scaling: advantages of modalities with a low running
            accuracy are scaled up, easy ones down (mean 1), so a majority modality cannot own the gradient.
        drpo_decay (`float`, defaults to `0.9`), drpo_max_scale (`float`, defaults to `2.0`):
            EMA decay of the per-modality accuracy history and the clamp of the factor.
        golden_injection (`bool`, defaults to `False`):
            GCPO (2025): in a group whose rollouts are all wrong, one member is replaced by the record's gold
            completion (the ``target`` column); TRL then scores it and computes its log-probs under the current
            policy like any rollout, and it earns a positive advantage.
        gold_seed_steps (`int`, defaults to `0`):
            DAVID-GRPO (2026): during the first N optimizer steps every group gets the gold completion in one member
            (a warm-up that anchors the grammar and the answer; with ``accuracy_tasks``, groups of those families
            only); 0 disables.
        response_reuse (`bool`, defaults to `False`):
            AR3PO (2025): past correct completions are kept per prompt; an all-wrong group reuses the latest one
            before any gold injection. The buffer is saved with the checkpoint state.
        reuse_per_prompt (`int`, defaults to `2`):
            Correct completions kept per prompt in the AR3PO buffer.
        dynamic_sampling_tries (`int`, defaults to `0`):
            DAPO dynamic sampling / GDEPO resampling: groups whose correctness does not vary (all right or all
            wrong) are regenerated up to this many times; the extra rollouts are counted in
            ``variants/rollouts``. 0 disables.
        skip_zero_variance (`bool`, defaults to `False`):
            Groups still without accuracy variance (after any resampling and group edits) get advantage 0, so
            they spend no gradient (DAPO drops them; GDEPO skips them).
        trajectory_ratio (`bool`, defaults to `False`):
            TIC-GRPO (2025): one importance ratio per completion, ``exp(sum_t log w_t)`` with the log-sum clamped,
            in the clipped surrogate (GSPO uses the mean; the sum is the true trajectory ratio), given to every token
            of its completion and reduced as TRL reduces for ``loss_type`` (grpo, bnpo, dr_grpo or dapo). It replaces
            TRL's ratio, so the loss fields it cannot honour (``beta``, ``delta``, ``top_entropy_quantile``,
            ``importance_sampling_level``, ``off_policy_mask_threshold``, vLLM importance sampling) stop the
            config with one line instead of being ignored.
        tic_log_ratio_clamp (`float`, defaults to `5.0`):
            Clamp of the trajectory log-ratio, so a long drifted sequence cannot overflow ``exp``.
        scope_coef (`float`, defaults to `0.0`):
            SCOPE-RL (2025, [inferred]): adds ``scope_coef * NLL`` of the positive-advantage completions, sampled at
            an adaptive temperature, to hold entropy up without a plain entropy bonus. 0 disables. Added to TRL's own
            loss, so every loss field applies; needs transformers generation (the temperature is adapted there).
        scope_entropy_band (`list[float]`, defaults to `[0.3, 2.0]`):
            The mean token entropy band; below it the sampling temperature rises by ``scope_temperature_rate``,
            above it falls.
        scope_temperature_rate (`float`, defaults to `0.05`), scope_temperature_range (`list[float]`, defaults to
            `[0.7, 1.5]`): the temperature's relative step and its absolute clamp, which must hold ``temperature``
            (checked: the first update would otherwise move the recipe's temperature into it). Both the band and
            the clamp are absolute: on a small policy whose token entropy sits below the band (the demo model's
            0.1-0.2) the temperature climbs to the clamp's top; in the seed-0 ablation run from the demo's SFT
            model at [0.7, 1.5] sampling reached 1.5 and the format reward collapsed to 0 within 30 steps.
        care_bonus (`float`, defaults to `0.0`):
            GRPO-CARE (2025): an extra reward ``care_bonus * accuracy`` for correct completions whose answer tokens an
            EMA copy of the policy finds at least as likely, given the completion's own reasoning, as their group's
            other correct answers ([inferred] threshold); logged as ``rewards/care/mean``. The paper uses 0.5 with
            KL off. 0 disables; the EMA copy costs one model's memory and is saved in each checkpoint
            (``medgrpo_care_ema.safetensors``), so a resumed run continues it instead of restarting it.
        care_ema_decay (`float`, defaults to `0.995`), care_ema_every (`int`, defaults to `10`):
            The EMA reference's decay and update interval in optimizer steps (the paper's values).
    """

    advantage_estimator: str = field(default="grpo", metadata={"help": "grpo, equal_right (GDEPO) or taros."})
    equal_right_margin: float = field(default=0.1, metadata={"help": "GDEPO magnitude floor."})
    taros_std_ref: float = field(default=0.5, metadata={"help": "TaRoS saturation reference std."})
    taros_sparsity: float = field(default=0.0, metadata={"help": "TaRoS intra-group sparsity threshold."})
    ips_scaling: bool = field(default=False, metadata={"help": "IPS inverse-outcome-frequency reward scaling."})
    ips_max_scale: float = field(default=4.0, metadata={"help": "Clamp of the IPS factor."})
    hadw: bool = field(default=False, metadata={"help": "HA-DW history-aware difficulty weighting."})
    hadw_eta: float = field(default=0.1, metadata={"help": "HA-DW anchor step size."})
    hadw_window: int = field(default=50, metadata={"help": "HA-DW anchor std window."})
    hadw_lambda: float = field(default=1.3, metadata={"help": "HA-DW weight scale."})
    drpo_scaling: bool = field(default=False, metadata={"help": "DRPO-style per-modality advantage scaling."})
    drpo_decay: float = field(default=0.9, metadata={"help": "DRPO per-modality accuracy EMA decay."})
    drpo_max_scale: float = field(default=2.0, metadata={"help": "DRPO factor clamp."})
    golden_injection: bool = field(default=False, metadata={"help": "GCPO gold completion in all-wrong groups."})
    gold_seed_steps: int = field(default=0, metadata={"help": "DAVID-GRPO: gold in every group for N steps."})
    response_reuse: bool = field(default=False, metadata={"help": "AR3PO reuse of past correct completions."})
    reuse_per_prompt: int = field(default=2, metadata={"help": "AR3PO buffer size per prompt."})
    dynamic_sampling_tries: int = field(default=0, metadata={"help": "DAPO/GDEPO resampling tries per group."})
    skip_zero_variance: bool = field(default=False, metadata={"help": "Advantage 0 for zero-variance groups."})
    trajectory_ratio: bool = field(default=False, metadata={"help": "TIC-GRPO trajectory-level ratio."})
    tic_log_ratio_clamp: float = field(default=5.0, metadata={"help": "TIC-GRPO log-ratio clamp."})
    scope_coef: float = field(default=0.0, metadata={"help": "SCOPE-RL positive-sample NLL coefficient."})
    scope_entropy_band: list[float] = field(default_factory=lambda: [0.3, 2.0],
                                            metadata={"help": "SCOPE-RL entropy band [low, high]."})
    scope_temperature_rate: float = field(default=0.05, metadata={"help": "SCOPE-RL temperature step."})
    scope_temperature_range: list[float] = field(default_factory=lambda: [0.7, 1.5],
                                                 metadata={"help": "SCOPE-RL temperature clamp [min, max]."})
    care_bonus: float = field(default=0.0, metadata={"help": "GRPO-CARE consistency bonus (paper: 0.5)."})
    care_ema_decay: float = field(default=0.995, metadata={"help": "GRPO-CARE EMA decay."})
    care_ema_every: int = field(default=10, metadata={"help": "GRPO-CARE EMA update interval (steps)."})

    @property
    def edits_groups(self) -> bool:
        """A zero-signal group mechanism is on (the trainer then edits rollouts in ``_generate``)."""
        return (self.golden_injection or self.gold_seed_steps > 0 or self.response_reuse
                or self.dynamic_sampling_tries > 0 or self.skip_zero_variance)

    @property
    def recomputes_advantages(self) -> bool:
        """An advantage variant is on (the trainer recomputes advantages from the global rewards)."""
        return (self.advantage_estimator != "grpo" or self.ips_scaling or self.hadw or self.drpo_scaling
                or self.skip_zero_variance or self.care_bonus > 0)

    def _check_variants(self) -> None:
        if self.advantage_estimator not in ("grpo", "equal_right", "taros"):
            raise ValueError(f"advantage_estimator must be 'grpo', 'equal_right' or 'taros', "
                             f"not '{self.advantage_estimator}'")
        if self.advantage_estimator != "grpo" and (self.ips_scaling or
                                                   self.multi_objective_aggregation != "sum_then_normalize"):
            raise ValueError(f"advantage_estimator='{self.advantage_estimator}' replaces GRPO's aggregation: drop "
                             "ips_scaling and multi_objective_aggregation")
        if self.ips_scaling and self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError("ips_scaling rescales the summed reward: it needs multi_objective_aggregation="
                             "'sum_then_normalize'")
        needs_accuracy = [name for name, on in (
            ("advantage_estimator", self.advantage_estimator != "grpo"), ("hadw", self.hadw),
            ("drpo_scaling", self.drpo_scaling), ("golden_injection", self.golden_injection),
            ("gold_seed_steps", self.gold_seed_steps > 0), ("response_reuse", self.response_reuse),
            ("dynamic_sampling_tries", self.dynamic_sampling_tries > 0),
            ("skip_zero_variance", self.skip_zero_variance), ("care_bonus", self.care_bonus > 0)) if on]
        if needs_accuracy and "accuracy" not in self.reward_funcs:
            raise ValueError(f"{needs_accuracy[0]} needs the 'accuracy' reward in reward_funcs")
        if self.hadw_window < 2:
            raise ValueError(f"hadw_window must be at least 2, got {self.hadw_window}")
        if min(self.gold_seed_steps, self.dynamic_sampling_tries, self.reuse_per_prompt - 1) < 0:
            raise ValueError("gold_seed_steps and dynamic_sampling_tries must be >= 0, reuse_per_prompt >= 1")
        if len(self.scope_entropy_band) != 2 or len(self.scope_temperature_range) != 2:
            raise ValueError("scope_entropy_band and scope_temperature_range need 2 values each: [low, high]")
        if self.trajectory_ratio:  # TIC-GRPO replaces TRL's ratio: the loss fields it cannot honour stop here
            from medgrpo.train.losses import TIC_LOSS_TYPES

            unhonoured = [name for name, on in (
                (f"loss_type='{self.loss_type}' (one of {', '.join(TIC_LOSS_TYPES)})",
                 self.loss_type not in TIC_LOSS_TYPES),
                ("beta != 0 (no KL term)", self.beta != 0.0), ("delta (two-sided clipping)", self.delta is not None),
                ("top_entropy_quantile < 1", self.top_entropy_quantile < 1.0),
                ("importance_sampling_level='sequence'", self.importance_sampling_level != "token"),
                ("off_policy_mask_threshold", self.off_policy_mask_threshold is not None),
                ("vllm_importance_sampling_correction with use_vllm",
                 self.use_vllm and self.vllm_importance_sampling_correction),
                ("use_liger_kernel", self.use_liger_kernel)) if on]
            if unhonoured:
                raise ValueError(f"trajectory_ratio (TIC-GRPO) computes its own ratio and cannot honour "
                                 f"{unhonoured[0]}: change that setting or drop trajectory_ratio")
        low, high = self.scope_temperature_range
        if self.scope_coef > 0 and not low <= self.temperature <= high:
            # the controller clamps to the range at its first update: the recipe's temperature would be
            # overridden silently (0.5 -> 0.7 at once, then up to 1.5 on a low-entropy policy)
            raise ValueError(f"scope_coef (SCOPE-RL): temperature {self.temperature} lies outside "
                             f"scope_temperature_range [{low}, {high}]; set a range around it (e.g. "
                             f"[{0.7 * self.temperature:.2f}, {1.5 * self.temperature:.2f}])")
        if self.scope_coef > 0 and self.use_vllm:
            raise ValueError("scope_coef (SCOPE-RL) steers the sampling temperature of transformers generation: "
                             "set use_vllm=false")
        if self.care_bonus > 0 and not 0 < self.care_ema_decay < 1:
            raise ValueError(f"care_ema_decay must be in (0, 1), got {self.care_ema_decay}")
