"""Metric functions against hand-computed values and against scikit-learn on random data."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from sklearn.calibration import calibration_curve
from sklearn.metrics import f1_score, recall_score

from medgrpo.eval import aggregate as A
from medgrpo.eval import metrics as M


def test_macro_f1_and_confusion_by_hand():
    y_true = ["a", "a", "b", "b"]
    y_pred = ["a", "b", "b", M.NO_ANSWER]
    # a: P=1, R=1/2 -> F1 2/3; b: P=1/2, R=1/2 -> F1 1/2; the no-answer row is a miss of class b
    assert M.macro_f1(y_true, y_pred, ["a", "b"]) == pytest.approx((2 / 3 + 1 / 2) / 2)
    assert M.confusion(y_true, y_pred, ["a", "b", M.NO_ANSWER]) == [[1, 1, 0], [0, 1, 1], [0, 0, 0]]


def test_binary_rates_by_hand_and_vs_sklearn():
    assert M.binary_rates([True, True, False, False, False], [True, False, False, True, False]) == {
        "sensitivity": 0.5, "specificity": pytest.approx(2 / 3)}
    assert M.binary_rates([False, False], [True, False])["sensitivity"] is None
    rng = np.random.default_rng(1)
    t, p = rng.random(200) < 0.4, rng.random(200) < 0.5
    rates = M.binary_rates(t.tolist(), p.tolist())
    assert rates["sensitivity"] == pytest.approx(recall_score(t, p, pos_label=True))
    assert rates["specificity"] == pytest.approx(recall_score(t, p, pos_label=False))


def test_auroc_by_hand():
    # positives 0.35, 0.8 vs negatives 0.1, 0.4: 3 of 4 pairs ranked right
    assert M.auroc([False, False, True, True], [0.1, 0.4, 0.35, 0.8]) == pytest.approx(0.75)
    assert M.auroc([True, True], [0.2, 0.3]) is None


def test_reliability_by_hand_and_vs_sklearn():
    out = M.reliability([True, False, True, True], [0.05, 0.15, 0.95, 0.9], n_bins=2)
    # bin [0, .5): mean p 0.1, 1/2 positive; bin [.5, 1]: mean p 0.925, all positive
    assert out["ece"] == pytest.approx(0.5 * abs(0.5 - 0.1) + 0.5 * abs(1.0 - 0.925))
    assert [b["count"] for b in out["bins"]] == [2, 2]
    rng = np.random.default_rng(2)
    p = rng.random(500)
    y = rng.random(500) < p
    out = M.reliability(y.tolist(), p.tolist(), n_bins=10)
    frac, mean_p = calibration_curve(y, p, n_bins=10, strategy="uniform")
    ours = [b for b in out["bins"] if b["count"]]
    assert [b["frac_positive"] for b in ours] == pytest.approx(frac.tolist())
    assert [b["mean_prob"] for b in ours] == pytest.approx(mean_p.tolist())


def test_pass_at_k_matches_enumeration():
    for n, c, k in [(5, 2, 1), (5, 2, 3), (6, 0, 2), (4, 4, 4), (7, 3, 5)]:
        draws = list(itertools.combinations([1] * c + [0] * (n - c), k))
        assert M.pass_at_k(n, c, k) == pytest.approx(sum(any(d) for d in draws) / len(draws))
    with pytest.raises(ValueError):
        M.pass_at_k(3, 4, 1)


def test_bootstrap_ci_properties():
    assert M.bootstrap_ci([]) is None
    assert M.bootstrap_ci([1.0, 1.0, 1.0]) == (1.0, 1.0)
    x = [1.0] * 30 + [0.0] * 70
    lo, hi = M.bootstrap_ci(x, seed=3)
    assert lo < 0.3 < hi
    # normal-approximation half width of a proportion: 1.96 * sqrt(p(1-p)/n) = 0.0898
    assert (hi - lo) / 2 == pytest.approx(1.96 * math.sqrt(0.3 * 0.7 / 100), rel=0.15)
    assert M.bootstrap_ci(x, seed=3) == (lo, hi)  # deterministic per seed
    lo_big, hi_big = M.bootstrap_ci(x * 16, seed=3)
    assert hi_big - lo_big < (hi - lo) / 2  # 16x the data: about a quarter of the width


def test_stat_skips_not_applicable():
    s = M.stat([1.0, None, 0.0, None], n_boot=200)
    assert s["value"] == 0.5 and s["n"] == 2 and s["ci_low"] <= 0.5 <= s["ci_high"]
    assert M.stat([None, None])["value"] is None


def test_paired_delta_ci():
    a = [0.0] * 50 + [1.0] * 50
    b = [1.0] * 80 + [0.0] * 20
    delta, lo, hi = M.paired_delta_ci(a, b, n_boot=500)
    assert delta == pytest.approx(0.3) and lo < 0.3 < hi
    assert M.paired_delta_ci(a, a) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError):
        M.paired_delta_ci([1.0], [1.0, 0.0])


def test_votes_and_baselines():
    assert M.majority_vote(["B", None, "A", "B", "A"]) == "B"  # tie 2-2: the earliest sample's answer
    assert M.majority_vote([None, ""]) is None
    assert M.random_option_accuracy([4, 2, 0]) == pytest.approx((0.25 + 0.5) / 2)
    assert M.majority_answers([("t", "CT"), ("t", "mri"), ("t", "ct"), ("u", "x")]) == {"t": "ct", "u": "x"}
    assert M.is_normal_option("No abnormality") and M.is_normal_option("Normal")
    assert not M.is_normal_option("Abnormal: a mass") and not M.is_normal_option("Yes, a nodule")


def _row(rid, task, options, answer, pred, scores, abnormal=None, letter_probs=None):
    row = {"dataset": "d", "id": rid, "task": task, "modality": "CT", "source": "s", "answer": answer,
           "options": options, "abnormal": abnormal, "completion": "", "pred": pred, "completion_tokens": 10,
           "scores": scores}
    if letter_probs:
        row["letter_probs"] = letter_probs
    return row


def _scores(acc, fmt=1.0, grounding=None):
    return {"format": fmt, "accuracy": acc, "consistency": 1.0, "evidence": 0.5, "grounding": grounding}


def test_row_metrics_missing_answer_is_wrong_and_format_failure():
    row = _row("1", "other", ["x", "y"], "A", None, {"format": 0.0, "accuracy": None, "grounding": 0.6})
    m = A.row_metrics(row)
    assert m["accuracy"] == 0.0 and m["format_failure_rate"] == 1.0
    assert m["grounding_iou"] == 0.6 and m["grounding_acc50"] == 1.0 and m["consistency"] is None


def test_classification_and_anomaly_by_hand():
    yes_no = ["No abnormality", "Yes, a lesion"]
    rows = [
        _row("1", "anomaly_detection", yes_no, "B", "B", _scores(1.0), True, {"A": 0.2, "B": 0.8}),
        _row("2", "anomaly_detection", yes_no, "B", "A", _scores(0.0), True, {"A": 0.6, "B": 0.4}),
        _row("3", "anomaly_detection", yes_no, "A", "A", _scores(1.0), False, {"A": 0.7, "B": 0.3}),
        _row("4", "anomaly_detection", yes_no, "A", None, _scores(0.0, fmt=0.0), False, {"A": 0.9, "B": 0.1}),
    ]
    an = A.anomaly(rows, n_boot=100)
    assert an["sensitivity"]["value"] == 0.5
    assert an["specificity"]["value"] == 0.5  # the unanswered normal case counts as a false positive
    # P(abnormal) = P(B): positives 0.8, 0.4 vs negatives 0.3, 0.1 -> every pair ranked right
    assert an["auroc"] == 1.0 and an["n_scored"] == 4
    cls = A.classification(rows)["anomaly_detection"]
    assert cls["labels"] == ["no abnormality", "yes, a lesion", M.NO_ANSWER]
    assert cls["confusion"] == [[1, 0, 1], [1, 1, 0], [0, 0, 0]]
    assert cls["macro_f1"] == pytest.approx(f1_score(
        ["yes", "yes", "no", "no"], ["yes", "no", "no", "none"], labels=["no", "yes"], average="macro"))


def test_dataset_metrics_groups_and_baselines():
    opts = ["CT", "MRI", "X-ray", "Ultrasound"]
    rows = [_row(str(i), "modality_classification", opts, "A" if i < 3 else "B", "A", _scores(float(i < 3)))
            for i in range(4)]
    rows.append(_row("9", "other", [], "liver", "liver", _scores(1.0, grounding=0.3)))
    ds = A.dataset_metrics(rows, fit=[("modality_classification", "mri"), ("other", "liver")], n_boot=100)
    assert ds["overall"]["n"] == 5 and ds["overall"]["accuracy"]["value"] == pytest.approx(4 / 5)
    assert ds["by_task"]["modality_classification"]["accuracy"]["value"] == pytest.approx(3 / 4)
    assert ds["overall"]["grounding_acc50"] == {"value": 0.0, "ci_low": 0.0, "ci_high": 0.0, "n": 1}
    assert ds["baselines"]["random_option"]["accuracy"] == 0.25
    # majority fit on train: "mri" (right once of 4 modality rows) and "liver" (right once): 2 of 5
    assert ds["baselines"]["majority_answer"] == {"accuracy": 0.4, "answers": {
        "modality_classification": "mri", "other": "liver"}, "fit_on": "train"}
    assert ds["anomaly"] is None and ds["sampling"] is None and "other" not in ds["classification"]
    # chance within each group: the open-ended row has no options, and "liver" is its task's majority answer
    assert ds["by_task"]["other"]["chance"] == {"random_option": None, "majority_answer": 1.0}
    assert ds["by_task"]["modality_classification"]["chance"] == {"random_option": 0.25, "majority_answer": 0.25}


def test_sampling_metrics_by_hand():
    row = _row("1", "other", ["a", "b"], "A", "A", _scores(1.0))
    row["samples"] = [{"pred": "B", "accuracy": 0.0}, {"pred": "A", "accuracy": 1.0}, {"pred": "B", "accuracy": 0.0}]
    sm = A.sampling([row], n_boot=0)
    assert sm["k"] == 3 and sm["pass@1"]["value"] == pytest.approx(1 / 3)
    assert sm["pass@k"]["value"] == 1.0 and sm["self_consistency"]["value"] == 0.0  # the vote says B
