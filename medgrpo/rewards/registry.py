"""The TRL reward functions: thin wrappers over :mod:`medgrpo.rewards.verify`, registered by name.

TRL (``GRPOTrainer._calculate_rewards``) calls each function as ``f(prompts=..., completions=...,
completion_ids=..., **dataset_columns, trainer_state=..., log_extra=..., log_metric=...)`` and logs
``rewards/<__name__>/mean``. Each function returns one float per completion, or None where it does not apply
(TRL turns None into NaN and ignores it). They never raise: a malformed completion or column scores like an
empty one; an unexpected internal error is logged once and scores 0 (None for grounding).
"""

from __future__ import annotations

import logging
from math import isfinite
from typing import Any

from medgrpo.rewards.columns import rows_from_columns
from medgrpo.rewards.parsing import completion_text
from medgrpo.rewards.settings import RewardSettings
from medgrpo.rewards.verify import CRITERION_KEYS, assemble

logger = logging.getLogger(__name__)

REWARD_NAMES: tuple[str, ...] = ("format", "accuracy", "consistency", "evidence", "grounding")


class BatchCache:
    """What the reward functions built together share within one TRL step: TRL calls them one after another with
    the same completions and the same column lists, so the first parses and verifies each completion once and the
    others read its results. Explicit, per set of functions (two trainers in one process never share one)."""

    def __init__(self) -> None:
        self.rows: list[Any] = [(), None]  # the column lists of the last call and the rows built from them
        self.results: list[Any] = [None, None]  # (texts, rows, settings) of the last batch scored, its results

    def __getstate__(self) -> dict[str, Any]:  # pickled (e.g. to a dataloader worker) empty: it is only a cache
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()


class RewardFunction:
    """One named reward for TRL's ``reward_funcs`` (a picklable callable; ``__name__`` is the reward name).

    ``settings``: the shaping and evidence backend (default: :class:`RewardSettings`'s defaults, the same as
    ``ConGRPOConfig``'s, so a plain ``trl.GRPOTrainer`` pays what ``ConGRPOTrainer`` pays). ``tasks``: the task
    families it is paid on; on a record of another family it returns None ("not applicable", which TRL leaves out
    of the weighted sum). None pays it on every family. ``cache``: the :class:`BatchCache` it shares with the
    functions built beside it (a new one when None).
    """

    def __init__(self, name: str, settings: RewardSettings | None = None,
                 tasks: list[str] | tuple[str, ...] | None = None, cache: BatchCache | None = None) -> None:
        if name not in REWARD_NAMES:
            raise ValueError(f"unknown reward '{name}' (available: {', '.join(REWARD_NAMES)})")
        self.__name__ = name
        self.settings = settings or RewardSettings()
        self.tasks = None if tasks is None else frozenset(tasks)
        self.cache = cache or BatchCache()
        self._warned = False

    def __repr__(self) -> str:
        return f"RewardFunction({self.__name__!r})"

    def __call__(self, prompts: Any = None, completions: Any = None, **columns: Any) -> list[float | None]:
        name, settings = self.__name__, self.settings
        completions = list(completions) if isinstance(completions, list | tuple) else []
        texts = [c if type(c) is str else completion_text(c) for c in completions]  # strings: the usual case
        rows = rows_from_columns(columns, len(texts), self.cache.rows)
        if name == "evidence" and settings.evidence_backend == "judge":
            from medgrpo.rewards.judge import judge_for

            judge = judge_for(settings.judge)
            judged = judge.score([(t, record) for t, (record, _, _) in zip(texts, rows, strict=True)])
            results, error = _assemble_all(texts, rows, settings, judged)
        else:
            results, error = _shared_results(texts, rows, settings, self.cache.results)
        if error is not None and not self._warned:  # never stop training over one completion; tests hunt it
            logger.error("reward '%s' failed on a completion; scoring it 0", name, exc_info=error)
            self._warned = True
        out = _values(results, name)
        if self.tasks is not None:
            out = [v if record.task in self.tasks else None for v, (record, _, _) in zip(out, rows, strict=True)]
        log_metric = columns.get("log_metric")
        if name == "accuracy" and callable(log_metric):  # beside accuracy: does the reasoning point to the gold?
            _log_mean(log_metric, results, "reasoning_accuracy")
        if name == "evidence" and callable(log_metric):
            for key in CRITERION_KEYS:
                _log_mean(log_metric, results, key)
            if settings.evidence_backend == "judge" and results:
                unscored = sum(r is None or r[key] is None for r in results for key in CRITERION_KEYS)
                log_metric("evidence/judge_unscored", unscored / (len(results) * len(CRITERION_KEYS)))
        return out


Results = list[dict[str, float | None] | None]


def _log_mean(log_metric: Any, results: Results, key: str) -> None:
    """Log the batch mean of ``key`` over the results where it applies (nothing when it applies nowhere)."""
    values = [r[key] for r in results if r is not None and r[key] is not None]
    if values:
        log_metric(key, sum(values) / len(values))


def _assemble_all(
    texts: list[str], rows: list, settings: RewardSettings, judged: list[Any]
) -> tuple[Results, Exception | None]:
    """Every completion's result dict (None where scoring raised) and the first exception raised."""
    results: Results = []
    error = None
    for text, (_, frame, facts), j in zip(texts, rows, judged, strict=True):
        try:
            results.append(assemble(text, facts, frame, settings, j))
        except Exception as e:
            error = error or e
            results.append(None)
    return results, error


def _shared_results(
    texts: list[str], rows: list, settings: RewardSettings, memo: list[Any]
) -> tuple[Results, Exception | None]:
    """:func:`_assemble_all` without a judge, shared by the reward functions TRL calls one after the other on
    the same batch: the next function finds the same texts, the same rows object (``rows_from_columns`` reuses
    it for the same columns) and equal settings in ``memo``, and takes the results instead of assembling them
    again."""
    key = (tuple(texts), rows, settings)
    held, results = memo
    if held is not None and held[1] is rows and held[0] == key[0] and held[2] == settings:
        return results
    results = _assemble_all(texts, rows, settings, [None] * len(texts))
    memo[:] = [key, results]
    return results


def _values(results: Results, name: str) -> list[float | None]:
    """Reward ``name`` of each result: None where it does not apply, 0.0 for a non-finite value or where
    scoring raised (None for grounding)."""
    failed = None if name == "grounding" else 0.0
    values = [failed if result is None else result[name] for result in results]
    return [v if v is None or isfinite(v) else 0.0 for v in values]


def import_reward(path: str) -> Any:
    """A user's reward function named by import path, ``package.module:function`` (TRL's reward signature:
    ``f(prompts, completions, **columns) -> list[float | None]``).

    Raises:
        ValueError: not ``module:function``, the module does not import, or the name is not a callable in it
            (one line).
    """
    import importlib

    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ValueError(f"reward '{path}': a user reward is named 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import failure is the user's module: say which and why, in one line
        raise ValueError(f"reward '{path}': cannot import {module_name} ({type(exc).__name__}: {exc})") from None
    func = getattr(module, attr, None)
    if not callable(func):
        raise ValueError(f"reward '{path}': {module_name} has no function '{attr}'")
    return func


def build_reward_funcs(names: list[str] | tuple[str, ...], settings: RewardSettings | None = None,
                       tasks: dict[str, list[str]] | None = None) -> list:
    """The TRL reward functions for ``names`` (e.g. a recipe's ``reward_funcs``): medgrpo's, sharing one settings
    object and one :class:`BatchCache`, and users' named by import path (``package.module:function``), passed to
    TRL as they are, so they are weighted by ``reward_weights`` and logged as ``rewards/<function>/mean`` like
    medgrpo's. ``tasks`` maps a medgrpo reward name to the task families it is paid on.

    Raises:
        ValueError: an unknown name (the message lists the available ones) or a user reward that does not import.
    """
    cache = BatchCache()
    return [import_reward(name) if ":" in name else RewardFunction(name, settings, (tasks or {}).get(name), cache)
            for name in names]


REWARDS: dict[str, RewardFunction] = dict(zip(REWARD_NAMES, build_reward_funcs(REWARD_NAMES), strict=True))
"""Name -> TRL reward function with the default settings (rule evidence backend; consistency and evidence gated
on a correct answer, nothing paid outside the grammar: ``ConGRPOConfig``'s defaults too)."""
