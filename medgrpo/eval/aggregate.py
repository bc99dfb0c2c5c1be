"""From prediction rows to ``metrics.json``: the versioned schema every report, comparison and model card reads.

Schema (``schema_version`` 1)::

    {
      "schema_version": 1,
      "model": "<model path>", "suite": "<suite name>", "created": "<UTC ISO time>",
      "generation": {"backend", "max_new_tokens", "num_samples", "temperature", ...},
      "overall": GROUP,                 # every row of every dataset pooled
      "datasets": {
        "<dataset name>": {
          "path": "...", "split": "test", "skipped_records": int,
          "system_prompt": "<the system turn the prompts carried>" | null,
          "overall": GROUP,
          "by_task": {"<task family>": GROUP}, "by_modality": {"<modality>": GROUP},
          "by_source": {"<source>": GROUP},
          "classification": {"<task family>": {"labels": [...], "macro_f1": float, "confusion": [[int]]}},
          "anomaly": ANOMALY | null,
          "baselines": {"random_option": {"accuracy": float | null},
                        "majority_answer": {"accuracy": float | null, "answers": {"<task>": "<answer>"},
                                            "fit_on": "train" | "eval"}},
          "sampling": {"k": int, "pass@1": STAT, "pass@k": STAT, "self_consistency": STAT} | null
        }
      }
    }
    GROUP = {"n": int, "<metric>": STAT, ...,
             "chance": {"random_option": float | null, "majority_answer": float | null}}  # not in the pooled one
        with metrics accuracy, format_failure_rate, consistency, reasoning_accuracy, evidence,
        evidence/<criterion> (five),
        grounding_iou, grounding_acc50, completion_tokens
    STAT  = {"value": float | null, "ci_low": float | null, "ci_high": float | null, "n": int}
        (mean over the rows where the metric applies, percentile-bootstrap 95% interval; value null = none apply)
    ANOMALY = {"sensitivity": STAT, "specificity": STAT, "auroc": float | null, "ece": float | null,
               "reliability": [{"low", "high", "count", "mean_prob", "frac_positive"}], "n_scored": int}

So the model card reads ``metrics["datasets"][name]["overall"]["accuracy"]["value"]`` (or the pooled
``metrics["overall"]``). A completion without a valid answer counts as wrong (accuracy 0) and as a format failure.
"""

from __future__ import annotations

from typing import Any

from medgrpo.data.record import LETTERS
from medgrpo.eval import metrics as M

SCHEMA_VERSION = 1

EVIDENCE_CRITERIA = ("visual_grounding", "question_relevance", "answer_support", "no_hallucination",
                     "no_contradiction")
HEADLINE = ("accuracy", "format_failure_rate", "consistency", "reasoning_accuracy", "evidence", "grounding_iou",
            "grounding_acc50")
"""The metrics shown first in reports and compared by ``--compare``."""


def row_metrics(row: dict[str, Any]) -> dict[str, float | None]:
    """The per-row values that group metrics average (None = not applicable to this row)."""
    scores = row["scores"]
    grounding = scores.get("grounding")
    values: dict[str, float | None] = {
        # accuracy always applies: a missing verdict is a wrong answer, never a skipped row
        "accuracy": float(scores.get("accuracy") or 0.0),
        "format_failure_rate": 1.0 - float(scores.get("format") or 0.0),
        "consistency": scores.get("consistency"),
        "reasoning_accuracy": scores.get("reasoning_accuracy"),
        "evidence": scores.get("evidence"),
    }
    for name in EVIDENCE_CRITERIA:
        values[f"evidence/{name}"] = scores.get(f"evidence/{name}")
    values["grounding_iou"] = grounding
    values["grounding_acc50"] = None if grounding is None else float(grounding >= 0.5)
    values["completion_tokens"] = float(row["completion_tokens"])
    return values


def group(rows: list[dict[str, Any]], n_boot: int = 1000, answers: dict[str, str] | None = None) -> dict[str, Any]:
    """GROUP: every metric's mean and bootstrap interval over ``rows``, plus chance on the same rows when the
    per-task majority ``answers`` are given (so every table shows chance beside the model)."""
    per_row = [row_metrics(r) for r in rows]
    out: dict[str, Any] = {"n": len(rows)}
    for name in per_row[0] if per_row else ():
        out[name] = M.stat([v[name] for v in per_row], n_boot=n_boot)
    if answers is not None:
        out["chance"] = {
            "random_option": M.random_option_accuracy([len(r["options"]) for r in rows if r["options"]]),
            "majority_answer": M.mean_or_none(
                [float(answers.get(r["task"]) == _answer_text(r).strip().lower()) for r in rows]),
        }
    return out


def _by(rows: list[dict[str, Any]], key: str, n_boot: int, answers: dict[str, str]) -> dict[str, Any]:
    buckets: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        buckets.setdefault(r.get(key) or "unknown", []).append(r)
    return {k: group(v, n_boot, answers) for k, v in sorted(buckets.items())}


def predicted_class(row: dict[str, Any]) -> str:
    """The option text the completion chose (lower-cased), or :data:`metrics.NO_ANSWER`."""
    pred, options = row.get("pred"), row["options"]
    if pred and pred in LETTERS[: len(options)]:
        return options[LETTERS.index(pred)].strip().lower()
    return M.NO_ANSWER


def gold_class(row: dict[str, Any]) -> str:
    return row["options"][LETTERS.index(row["answer"])].strip().lower()


def classification(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Macro-F1 and confusion matrix per MCQ task family (``other`` excluded: its label space is open)."""
    out: dict[str, Any] = {}
    tasks = sorted({r["task"] for r in rows if r["options"] and r["task"] != "other"})
    for task in tasks:
        sub = [r for r in rows if r["task"] == task and r["options"]]
        y_true = [gold_class(r) for r in sub]
        y_pred = [predicted_class(r) for r in sub]
        gold_labels = sorted(set(y_true))
        extra = sorted(set(y_pred) - set(gold_labels) - {M.NO_ANSWER})
        labels = gold_labels + extra + ([M.NO_ANSWER] if M.NO_ANSWER in y_pred else [])
        out[task] = {
            "labels": labels,
            "macro_f1": M.macro_f1(y_true, y_pred, gold_labels),
            "confusion": M.confusion(y_true, y_pred, labels),
        }
    return out


def _is_abnormal(row: dict[str, Any]) -> bool:
    if row.get("abnormal") is not None:
        return bool(row["abnormal"])
    return not M.is_normal_option(row["options"][LETTERS.index(row["answer"])])


def anomaly(rows: list[dict[str, Any]], n_boot: int = 1000) -> dict[str, Any] | None:
    """Sensitivity / specificity of the chosen option, AUROC and calibration of P(abnormal option).

    P(abnormal) sums the option-letter probabilities (read after ``<answer>``) of the options that do not state a
    normal finding. An invalid answer counts as the wrong class for both rates.
    """
    sub = [r for r in rows if r["task"] == "anomaly_detection" and r["options"]]
    if not sub:
        return None
    truth = [_is_abnormal(r) for r in sub]
    said = []
    for r, t in zip(sub, truth, strict=True):
        cls = predicted_class(r)
        said.append(not t if cls == M.NO_ANSWER else not M.is_normal_option(cls))
    scored = [(t, _p_abnormal(r)) for r, t in zip(sub, truth, strict=True) if r.get("letter_probs")]
    y, p = [t for t, _ in scored], [s for _, s in scored]
    calib = M.reliability(y, p) if scored else {"bins": [], "ece": None}
    return {
        "sensitivity": M.stat([float(s) for s, t in zip(said, truth, strict=True) if t], n_boot=n_boot),
        "specificity": M.stat([float(not s) for s, t in zip(said, truth, strict=True) if not t], n_boot=n_boot),
        "auroc": M.auroc(y, p) if scored else None,
        "ece": calib["ece"],
        "reliability": calib["bins"],
        "n_scored": len(scored),
    }


def _p_abnormal(row: dict[str, Any]) -> float:
    probs = row["letter_probs"]
    return float(sum(probs.get(LETTERS[i], 0.0) for i, text in enumerate(row["options"])
                     if not M.is_normal_option(text)))


def majority_fit(rows: list[dict[str, Any]], fit: list[tuple[str, str]] | None) -> dict[str, str]:
    """The per-task majority answers: fit on the train split when the dataset has one, otherwise on the
    evaluated rows themselves (which flatters the baseline)."""
    return M.majority_answers(fit if fit else [(r["task"], _answer_text(r)) for r in rows])


def _answer_text(row: dict[str, Any]) -> str:
    return gold_class(row) if row["options"] else row["answer"]


def sampling(rows: list[dict[str, Any]], n_boot: int = 1000) -> dict[str, Any] | None:
    """pass@1, pass@k (Chen et al. 2021) and self-consistency accuracy (majority vote over the k samples)."""
    sub = [r for r in rows if r.get("samples")]
    if not sub:
        return None
    k = min(len(r["samples"]) for r in sub)
    p1, pk, sc = [], [], []
    for r in sub:
        correct = [float(s["accuracy"] or 0.0) >= 1.0 for s in r["samples"]]
        n, c = len(correct), sum(correct)
        p1.append(c / n)
        pk.append(M.pass_at_k(n, c, k))
        vote = M.majority_vote([s["pred"] for s in r["samples"]])
        sc.append(float(next((ok for s, ok in zip(r["samples"], correct, strict=True) if s["pred"] == vote),
                             False)))
    return {"k": k, "pass@1": M.stat(p1, n_boot=n_boot), "pass@k": M.stat(pk, n_boot=n_boot),
            "self_consistency": M.stat(sc, n_boot=n_boot)}


def dataset_metrics(
    rows: list[dict[str, Any]], fit: list[tuple[str, str]] | None = None, n_boot: int = 1000
) -> dict[str, Any]:
    """Everything metrics.json holds for one dataset (see the module docstring)."""
    answers = majority_fit(rows, fit)
    overall = group(rows, n_boot, answers)
    return {
        "overall": overall,
        "by_task": _by(rows, "task", n_boot, answers),
        "by_modality": _by(rows, "modality", n_boot, answers),
        "by_source": _by(rows, "source", n_boot, answers),
        "classification": classification(rows),
        "anomaly": anomaly(rows, n_boot),
        "baselines": {
            "random_option": {"accuracy": overall["chance"]["random_option"]},
            "majority_answer": {"accuracy": overall["chance"]["majority_answer"], "answers": answers,
                                "fit_on": "train" if fit else "eval"},
        },
        "sampling": sampling(rows, n_boot),
    }


def build_metrics(
    datasets: dict[str, tuple[dict[str, Any], list[dict[str, Any]], list[tuple[str, str]] | None]],
    header: dict[str, Any],
    n_boot: int = 1000,
) -> dict[str, Any]:
    """The whole metrics.json: ``datasets`` maps name -> (info such as path/split, rows, majority-fit pairs)."""
    all_rows: list[dict[str, Any]] = []
    out: dict[str, Any] = {"schema_version": SCHEMA_VERSION, **header, "datasets": {}}
    for name, (info, rows, fit) in datasets.items():
        all_rows.extend(rows)
        out["datasets"][name] = {**info, **dataset_metrics(rows, fit, n_boot)}
    out["overall"] = group(all_rows, n_boot)
    return out

