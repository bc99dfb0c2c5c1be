"""Configuration of stage 2, Con-GRPO: TRL's ``GRPOConfig`` plus medgrpo's reward fields (the GRPO variants' fields
come from :class:`~medgrpo.train.variants_config.GRPOVariantsMixin`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import GRPOConfig

from medgrpo.train.args import rename_checkpointing
from medgrpo.train.variants_config import GRPOVariantsMixin

DEFAULT_REWARDS = ["format", "accuracy", "consistency", "evidence", "grounding"]


@dataclass
class ConGRPOConfig(GRPOVariantsMixin, GRPOConfig):
    r"""Configuration for :class:`~medgrpo.train.con_grpo_trainer.ConGRPOTrainer`.

    Every field of TRL's ``GRPOConfig`` applies unchanged (``num_generations``, ``beta``, ``loss_type``,
    ``scale_rewards``, ``multi_objective_aggregation``, ``use_vllm``, ...). The fields below are medgrpo's reward
    fields; the GRPO variants of the literature (all off by default) are documented on
    :class:`~medgrpo.train.variants_config.GRPOVariantsMixin`.

    Parameters:
        > Rewards (Con-GRPO, MedAD-R1)

        reward_funcs (`list[str]`, defaults to `["format", "accuracy", "consistency", "evidence", "grounding"]`):
            Names from :data:`medgrpo.rewards.REWARDS`, or a function of yours as ``package.module:function`` (TRL's
            reward signature; weighted and logged like the others). ``consistency`` is reasoning-answer consistency and
            ``evidence`` MedAD-R1's Evidence-Aware Consistency Reward; ``grounding`` (box IoU) returns None, i.e. "not
            applicable", on records without a box. TRL's ``reward_weights`` weighs them (equal when unset).
        evidence_backend (`str`, defaults to `"rule"`):
            ``rule`` scores the five evidence criteria against the record's structured evidence with the shipped
            medical lexicon (fast, deterministic); ``judge`` asks a judge model (see ``judge_*``).
        evidence_weights (`list[float]` or `None`, defaults to `None`):
            Weights of the five criteria, in the order visual_grounding, question_relevance, answer_support,
            no_hallucination, no_contradiction; None weighs them equally. MedAD-R1 does not publish its weights.
        gate_on_correct (`bool`, defaults to `True`):
            Consistency and evidence pay only when the answer is correct, so that a fluent, self-consistent but
            wrong rationale earns nothing extra (otherwise the policy can trade accuracy for consistency).
        zero_on_format_failure (`bool`, defaults to `True`):
            Every reward except ``format`` is 0 for a completion that breaks the grammar; partial credit for broken
            outputs was measured to be gamed by longer outputs (research brief, section 4).
        grounding_metric (`str`, defaults to `"iou"`):
            ``iou``, or ``giou`` rescaled to [0, 1] so that a box that misses the lesion still gets a gradient
            towards it.
        accuracy_tasks (`list[str]` or `None`, defaults to `None`):
            Task families whose completions are paid the ``accuracy`` reward; on the others it is None ("not
            applicable", as ``grounding`` on a record without a box), so they still earn the format, consistency,
            evidence and grounding rewards. None pays it everywhere. For a policy at chance on some families (the
            tiny demo model cannot see lesions) a 0/1 reward there is noise that drifts their answers to a letter
            prior; training only the other families (``tasks``) instead leaves their reasoning free to drift from
            their answer (eval/results/demo-report.md, experiments 16 and 17). Gold completions (golden injection,
            gold seeding) go to all-wrong groups of the paid families only (on the others it taught the demo model
            letters its reasoning did not name, experiment 24); the advantage variants that read accuracy treat
            an unpaid group as one without it (see :mod:`medgrpo.train.advantages`).
        judge_model (`str` or `None`, defaults to `None`):
            For ``evidence_backend="judge"``: a local model folder (transformers), or the model name served at
            ``judge_base_url``.
        judge_base_url (`str` or `None`, defaults to `None`):
            An OpenAI-compatible endpoint (e.g. a vLLM server); None uses ``judge_model`` locally. Nothing but the
            completion text and the record's text fields is sent, and only to this host.
        judge_api_key_env (`str` or `None`, defaults to `None`):
            Name of the environment variable holding the endpoint's bearer token (never the token itself, so that
            recipes can be shared).
    """

    reward_funcs: list[str] = field(
        default_factory=lambda: list(DEFAULT_REWARDS),
        metadata={"help": "Reward names from medgrpo.rewards.REWARDS, or package.module:function."},
    )
    evidence_backend: str = field(default="rule", metadata={"help": "rule or judge."})
    evidence_weights: list[float] | None = field(
        default=None, metadata={"help": "Weights of the five evidence criteria (None: equal)."}
    )
    gate_on_correct: bool = field(
        default=True, metadata={"help": "Consistency/evidence pay only on a correct answer."}
    )
    zero_on_format_failure: bool = field(
        default=True, metadata={"help": "All rewards but format are 0 when the grammar breaks."}
    )
    grounding_metric: str = field(default="iou", metadata={"help": "iou or giou (rescaled to [0, 1])."})
    accuracy_tasks: list[str] | None = field(
        default=None, metadata={"help": "Task families paid the accuracy reward (None: all)."}
    )
    judge_model: str | None = field(default=None, metadata={"help": "Judge model (local folder or served name)."})
    judge_base_url: str | None = field(default=None, metadata={"help": "OpenAI-compatible judge endpoint."})
    judge_api_key_env: str | None = field(default=None, metadata={"help": "Env var holding the judge's token."})

    def __post_init__(self) -> None:
        rename_checkpointing(self)
        super().__post_init__()
        if self.use_vllm:
            from trl.import_utils import is_vllm_available

            if not is_vllm_available():
                raise ValueError("use_vllm: vLLM is not installed: pip install 'medgrpo[vllm]' or set use_vllm: false")
        from medgrpo.rewards import REWARDS
        from medgrpo.rewards.registry import import_reward

        for name in self.reward_funcs:
            if ":" in name:
                import_reward(name)  # a user reward by import path: it must import now, not after the model loads
            elif name not in REWARDS:
                raise ValueError(f"reward_funcs: unknown reward '{name}' (available: {', '.join(REWARDS)}, or a "
                                 "function of yours as 'package.module:function')")
        if self.reward_weights is not None and len(self.reward_weights) != len(self.reward_funcs):
            raise ValueError(
                f"reward_weights has {len(self.reward_weights)} values but reward_funcs names "
                f"{len(self.reward_funcs)} rewards: give one weight per reward"
            )
        if self.evidence_weights is not None and len(self.evidence_weights) != 5:
            raise ValueError(f"evidence_weights needs 5 values (one per criterion), got {len(self.evidence_weights)}")
        if self.evidence_backend not in ("rule", "judge"):
            raise ValueError(f"evidence_backend must be 'rule' or 'judge', not '{self.evidence_backend}'")
        if self.grounding_metric not in ("iou", "giou"):
            raise ValueError(f"grounding_metric must be 'iou' or 'giou', not '{self.grounding_metric}'")
        from medgrpo.data.record import TASKS

        unknown = [t for t in self.accuracy_tasks or () if t not in TASKS]
        if unknown:
            raise ValueError(f"accuracy_tasks: unknown task '{unknown[0]}' (one of: {', '.join(TASKS)})")
        if self.accuracy_tasks is not None and "accuracy" not in self.reward_funcs:
            raise ValueError("accuracy_tasks needs the 'accuracy' reward in reward_funcs")
        if self.evidence_backend == "judge" and not self.judge_model:
            raise ValueError("evidence_backend='judge' needs judge_model (a local folder or a served model name)")
        self._check_variants()
