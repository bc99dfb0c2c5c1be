"""Configuration of stage 2, Con-GRPO: TRL's ``GRPOConfig`` plus medgrpo's reward and variant fields."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import GRPOConfig

DEFAULT_REWARDS = ["format", "accuracy", "consistency", "evidence", "grounding"]


@dataclass
class ConGRPOConfig(GRPOConfig):
    r"""Configuration for :class:`~medgrpo.train.con_grpo_trainer.ConGRPOTrainer`.

    Every field of TRL's ``GRPOConfig`` applies unchanged (``num_generations``, ``beta``, ``loss_type``,
    ``scale_rewards``, ``multi_objective_aggregation``, ``use_vllm``, ...). The fields below are medgrpo's.

    Parameters:
        > Rewards (Con-GRPO, MedAD-R1)

        reward_funcs (`list[str]`, defaults to `["format", "accuracy", "consistency", "evidence", "grounding"]`):
            Names from :data:`medgrpo.rewards.REWARDS`. ``consistency`` is reasoning-answer consistency and
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
        metadata={"help": "Reward names from medgrpo.rewards.REWARDS."},
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
    judge_model: str | None = field(default=None, metadata={"help": "Judge model (local folder or served name)."})
    judge_base_url: str | None = field(default=None, metadata={"help": "OpenAI-compatible judge endpoint."})
    judge_api_key_env: str | None = field(default=None, metadata={"help": "Env var holding the judge's token."})

    def __post_init__(self) -> None:
        super().__post_init__()
        from medgrpo.rewards import REWARDS

        unknown = [name for name in self.reward_funcs if name not in REWARDS]
        if unknown:
            raise ValueError(f"reward_funcs: unknown reward '{unknown[0]}' (available: {', '.join(REWARDS)})")
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
        if self.evidence_backend == "judge" and not self.judge_model:
            raise ValueError("evidence_backend='judge' needs judge_model (a local folder or a served model name)")
