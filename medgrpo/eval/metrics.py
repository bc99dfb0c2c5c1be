"""Metric functions of the evaluation harness: pure functions of lists, tested against hand values and sklearn.

Where a formula comes from a paper it is named: the percentile bootstrap (Efron & Tibshirani, "An Introduction
to the Bootstrap", 1993), the unbiased pass@k estimator (Chen et al., "Evaluating Large Language Models Trained
on Code", 2021), self-consistency by majority vote (Wang et al., "Self-Consistency Improves Chain of Thought
Reasoning in Language Models", 2023) and the expected calibration error (Guo et al., "On Calibration of Modern
Neural Networks", 2017).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

NO_ANSWER = "(no valid answer)"
"""The predicted class of a completion whose answer is missing or not an option letter: always wrong."""

_NORMAL_RE = re.compile(
    r"\b(no|not|none|normal|healthy|unremarkable|absent|negative|without)\b", re.IGNORECASE
)


def mean_or_none(values: Sequence[float | None]) -> float | None:
    """Mean of the applicable values (None = not applicable), or None when there are none."""
    kept = [float(v) for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def bootstrap_ci(
    values: Sequence[float | None], n_boot: int = 1000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float] | None:
    """Percentile-bootstrap ``(low, high)`` interval of the mean (Efron & Tibshirani 1993).

    None values are dropped first; None is returned when nothing is left. Deterministic for a given ``seed``.
    Resamples are drawn in chunks so memory stays bounded for large evaluation sets.
    """
    x = np.asarray([v for v in values if v is not None], dtype=np.float64)
    if x.size == 0:
        return None
    if x.size == 1 or np.all(x == x[0]):
        return float(x[0]), float(x[0])
    rng = np.random.default_rng(seed)
    chunk = max(1, min(n_boot, 2_000_000 // x.size))
    means = []
    for start in range(0, n_boot, chunk):
        idx = rng.integers(0, x.size, size=(min(chunk, n_boot - start), x.size))
        means.append(x[idx].mean(axis=1))
    boot = np.concatenate(means)
    return float(np.quantile(boot, alpha / 2)), float(np.quantile(boot, 1 - alpha / 2))


def paired_delta_ci(
    a: Sequence[float], b: Sequence[float], n_boot: int = 1000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float, float]:
    """``(mean(b - a), low, high)``: the difference of two models scored on the same items, with a paired
    percentile-bootstrap interval (items are resampled together, so per-item difficulty cancels)."""
    if len(a) != len(b) or not len(a):
        raise ValueError(f"paired_delta_ci needs two equal, non-empty lists, got {len(a)} and {len(b)}")
    diff = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    ci = bootstrap_ci(diff.tolist(), n_boot=n_boot, alpha=alpha, seed=seed)
    assert ci is not None
    return float(diff.mean()), ci[0], ci[1]


def stat(values: Sequence[float | None], n_boot: int = 1000, seed: int = 0) -> dict[str, float | int | None]:
    """``{"value", "ci_low", "ci_high", "n"}`` of the mean of the applicable values: the metrics.json cell."""
    kept = [v for v in values if v is not None]
    ci = bootstrap_ci(kept, n_boot=n_boot, seed=seed) if n_boot else None
    return {
        "value": mean_or_none(kept),
        "ci_low": ci[0] if ci else None,
        "ci_high": ci[1] if ci else None,
        "n": len(kept),
    }


def macro_f1(y_true: Sequence[str], y_pred: Sequence[str], labels: Sequence[str]) -> float:
    """Macro-averaged F1 over ``labels`` (the gold classes): a prediction outside them is a miss of its gold
    class, and a class never predicted scores F1 0 (scikit-learn's ``zero_division=0``)."""
    from sklearn.metrics import f1_score

    return float(f1_score(list(y_true), list(y_pred), labels=list(labels), average="macro", zero_division=0))


def confusion(y_true: Sequence[str], y_pred: Sequence[str], labels: Sequence[str]) -> list[list[int]]:
    """Confusion matrix, rows = gold class, columns = predicted class, in ``labels`` order (scikit-learn)."""
    import warnings

    from sklearn.metrics import confusion_matrix

    with warnings.catch_warnings():  # one class only is fine here: ``labels`` fixes the shape
        warnings.simplefilter("ignore", UserWarning)
        return confusion_matrix(list(y_true), list(y_pred), labels=list(labels)).tolist()


def binary_rates(y_true: Sequence[bool], y_pred: Sequence[bool]) -> dict[str, float | None]:
    """Sensitivity (recall of positives) and specificity (recall of negatives); None when a class is absent."""
    tp = sum(1 for t, p in zip(y_true, y_pred, strict=True) if t and p)
    fn = sum(1 for t, p in zip(y_true, y_pred, strict=True) if t and not p)
    tn = sum(1 for t, p in zip(y_true, y_pred, strict=True) if not t and not p)
    fp = sum(1 for t, p in zip(y_true, y_pred, strict=True) if not t and p)
    return {
        "sensitivity": tp / (tp + fn) if tp + fn else None,
        "specificity": tn / (tn + fp) if tn + fp else None,
    }


def auroc(y_true: Sequence[bool], scores: Sequence[float]) -> float | None:
    """Area under the ROC curve of ``scores`` for the positive class (scikit-learn); None with one class only."""
    if len(set(bool(t) for t in y_true)) < 2:
        return None
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score([bool(t) for t in y_true], list(scores)))


def reliability(y_true: Sequence[bool], probs: Sequence[float], n_bins: int = 10) -> dict[str, object]:
    """Reliability diagram bins and expected calibration error (Guo et al. 2017).

    Equal-width bins over [0, 1]; ECE = sum_b (n_b / N) * |accuracy_b - confidence_b|, here for the positive
    class probability (confidence_b = mean predicted probability, accuracy_b = fraction positive).
    """
    p = np.clip(np.asarray(probs, dtype=np.float64), 0.0, 1.0)
    y = np.asarray([bool(t) for t in y_true], dtype=np.float64)
    which = np.minimum((p * n_bins).astype(int), n_bins - 1)
    bins, ece = [], 0.0
    for b in range(n_bins):
        mask = which == b
        count = int(mask.sum())
        mean_p = float(p[mask].mean()) if count else None
        frac = float(y[mask].mean()) if count else None
        if count:
            ece += count / len(p) * abs(frac - mean_p)
        bins.append({"low": b / n_bins, "high": (b + 1) / n_bins, "count": count, "mean_prob": mean_p,
                     "frac_positive": frac})
    return {"bins": bins, "ece": float(ece) if len(p) else None}


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct: 1 - C(n-c, k) / C(n, k) (Chen et al. 2021)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def majority_vote(answers: Sequence[str | None]) -> str | None:
    """The most frequent non-missing answer (self-consistency, Wang et al. 2023); ties go to the earliest sample."""
    kept = [a for a in answers if a]
    if not kept:
        return None
    counts = Counter(kept)
    best = max(counts.values())
    return next(a for a in kept if counts[a] == best)


def is_normal_option(text: str) -> bool:
    """True when an anomaly-detection option states a normal / negative finding ("No", "Normal", "No lesion")."""
    return bool(_NORMAL_RE.search(text))


def random_option_accuracy(n_options: Sequence[int]) -> float | None:
    """Expected accuracy of picking an option uniformly at random: mean of 1 / (number of options)."""
    kept = [1.0 / n for n in n_options if n > 0]
    return sum(kept) / len(kept) if kept else None


def majority_answers(fit: Sequence[tuple[str, str]]) -> dict[str, str]:
    """The most frequent gold answer per task family, from ``(task, answer)`` pairs of the fitting split."""
    by_task: dict[str, Counter] = {}
    for task, answer in fit:
        by_task.setdefault(task, Counter())[answer.strip().lower()] += 1
    # sorted() first so that ties break alphabetically, not by file order
    return {task: max(sorted(counts), key=counts.__getitem__) for task, counts in sorted(by_task.items())}
