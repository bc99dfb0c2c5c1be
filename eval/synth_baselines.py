"""Is MedAD-Synth learnable from the pixels, and only from the pixels?

Trains small scikit-learn classifiers per task and prints, side by side, their test-set MCQ accuracy (the
classifier's most probable class among the record's four options) against two text-only baselines:

* pixels: logistic regression on simple image features. Modality and anatomy: 16x16 RGB thumbnails.
  Anomaly detection and localization: the residual of a 64x64 grey image against the median of its 15
  nearest training images (a lesion-free estimate of the background, as lesions sit in different places),
  max-pooled on an 8x8 grid. Pathology: a 24x24 residual crop around the strongest residual, plus its
  positive/negative energy. Each classifier trains on every training record that carries its label
  (e.g. the laterality of any training lesion), since the label, not the question, is what is learned.
* text TF-IDF: logistic regression from TF-IDF of the question and the lettered options to the letter.
* text prior: the option whose text was most often correct in training when shown (per task).

Pixels must be well above chance (25%) and text near it. Usage::

    OMP_NUM_THREADS=1 python eval/synth_baselines.py --n-train 3000 --n-test 1000 --seed 0
    OMP_NUM_THREADS=1 python eval/synth_baselines.py --data data/medad-synth
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image
from scipy.ndimage import gaussian_filter
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from medgrpo.data import MedADRecord, load_records
from medgrpo.data.record import LETTERS
from medgrpo.data.synth import DETECTION_OPTIONS, TASK_FAMILIES, difficulty_of, generate_synth

_SIDE = {None: DETECTION_OPTIONS[0], "left": DETECTION_OPTIONS[1], "right": DETECTION_OPTIONS[2],
         "bilateral": DETECTION_OPTIONS[3]}


def _single(r: MedADRecord) -> bool:
    return bool(r.evidence and r.evidence["abnormal"] and r.evidence["laterality"] != "bilateral")


LABELS: dict[str, Callable[[MedADRecord], str | None]] = {
    "modality_classification": lambda r: r.modality,
    "anatomy_identification": lambda r: r.anatomy,
    "anomaly_detection": lambda r: _SIDE[r.evidence["laterality"]] if r.evidence else None,
    "pathology_characterization": lambda r: r.evidence["finding"] if _single(r) else None,
    "lesion_localization": lambda r: r.evidence["location"] if _single(r) else None,
}
"""The class (= correct option text) each task's classifier learns, read from any record that carries it."""


def load_pixels(root: Path, records: list[MedADRecord]) -> tuple[np.ndarray, np.ndarray]:
    """(16x16 RGB thumbnails flattened, 64x64 grey images) in [0, 1]."""
    thumbs, greys = [], []
    for r in records:
        with Image.open(root / r.images[0]) as im:
            rgb = im.convert("RGB")
        thumbs.append(np.asarray(rgb.resize((16, 16), Image.Resampling.BOX), np.float32).ravel() / 255)
        greys.append(np.asarray(rgb.resize((64, 64), Image.Resampling.BOX), np.float32).mean(-1) / 255)
    return np.stack(thumbs), np.stack(greys)


def residuals(thumbs: np.ndarray, greys: np.ndarray, ref_thumbs: np.ndarray, ref_greys: np.ndarray,
              exclude_self: bool, k: int = 15) -> np.ndarray:
    """Each grey image minus the pixelwise median of its ``k`` nearest reference images (by thumbnail)."""
    out = np.empty_like(greys)
    ref_sq = (ref_thumbs**2).sum(1)
    for start in range(0, len(thumbs), 256):
        t = thumbs[start:start + 256]
        d = (t**2).sum(1)[:, None] - 2 * t @ ref_thumbs.T + ref_sq[None]
        if exclude_self:
            d[np.arange(len(t)), np.arange(start, start + len(t))] = np.inf
        nn = np.argpartition(d, k, axis=1)[:, :k]
        out[start:start + len(t)] = greys[start:start + len(t)] - np.median(ref_greys[nn], axis=1)
    return out


def grid_features(res: np.ndarray) -> np.ndarray:
    """Max of the smoothed absolute residual in each cell of an 8x8 grid: where something differs."""
    a = np.stack([gaussian_filter(np.abs(r), 1.5) for r in res])
    return a.reshape(len(res), 8, 8, 8, 8).max(axis=(2, 4)).reshape(len(res), -1)


def crop_features(res: np.ndarray, half: int = 12) -> np.ndarray:
    """The signed residual around its strongest point, plus its extremes and positive/negative energy."""
    feats = []
    for r in res:
        y, x = np.unravel_index(gaussian_filter(np.abs(r), 1.5).argmax(), r.shape)
        crop = np.pad(r, half)[y:y + 2 * half, x:x + 2 * half]
        stats = [r.max(), r.min(), np.clip(r, 0, None).sum(), np.clip(-r, 0, None).sum(), (r > 0.3).sum(),
                 (r < -0.15).sum()]
        feats.append(np.concatenate([crop.ravel(), stats]))
    return np.stack(feats)


def mcq_accuracy(proba: np.ndarray, classes: list[str], records: list[MedADRecord]) -> np.ndarray:
    """Per record: 1 if the most probable class among its options is the correct option, else 0."""
    index = {c: i for i, c in enumerate(classes)}
    hits = []
    for p, r in zip(proba, records, strict=True):
        scores = [p[index[o]] if o in index else -1.0 for o in r.options]
        hits.append(float(LETTERS[int(np.argmax(scores))] == r.answer))
    return np.array(hits)


def pixel_baseline(train: list[MedADRecord], test: list[MedADRecord], feats: dict[str, tuple]) -> dict:
    """Per task: MCQ hits of a logistic regression on that task's features."""
    hits = {}
    for task in TASK_FAMILIES:
        x_train, x_test = feats[task]
        rows = [i for i, r in enumerate(train) if LABELS[task](r) is not None]
        clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000, C=0.1))
        clf.fit(x_train[rows], [LABELS[task](train[i]) for i in rows])
        cols = [i for i, r in enumerate(test) if r.task == task]
        hits[task] = mcq_accuracy(clf.predict_proba(x_test[cols]), list(clf.classes_), [test[i] for i in cols])
    return hits


def cnn_baseline(train: list[MedADRecord], test: list[MedADRecord], root: Path, seed: int = 0,
                 epochs: int = 12) -> dict:
    """Per task: MCQ hits of a small CNN trained on the raw pixels alone (64x64 RGB, no background subtraction):
    three strided convolutions shared by one linear head per task, each head trained on every training record that
    carries its label. What a vision model of about the demo's size can learn from the pixels in a minute of CPU."""
    import torch
    from torch import nn

    torch.manual_seed(seed)

    def pixels(records: list[MedADRecord]) -> torch.Tensor:
        out = []
        for r in records:
            with Image.open(root / r.images[0]) as im:
                out.append(np.asarray(im.convert("RGB").resize((64, 64), Image.Resampling.BOX), np.float32) / 255)
        return torch.from_numpy(np.stack(out)).permute(0, 3, 1, 2)

    classes = {t: sorted({LABELS[t](r) for r in train if LABELS[t](r) is not None}) for t in TASK_FAMILIES}
    targets = {t: torch.tensor([classes[t].index(LABELS[t](r)) if LABELS[t](r) is not None else -100 for r in train])
               for t in TASK_FAMILIES}
    body = nn.Sequential(nn.Conv2d(3, 32, 5, 2, 2), nn.ReLU(), nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU(),
                         nn.Conv2d(64, 64, 3, 2, 1), nn.ReLU(), nn.Flatten())  # 64 x 8 x 8: where, and what
    heads = nn.ModuleDict({t: nn.Linear(64 * 8 * 8, len(c)) for t, c in classes.items()})
    opt = torch.optim.Adam([*body.parameters(), *heads.parameters()], lr=1e-3)
    x_train, x_test = pixels(train), pixels(test)
    loss_fn = nn.CrossEntropyLoss(ignore_index=-100)
    for _ in range(epochs):
        for idx in torch.randperm(len(train)).split(64):
            features = body(x_train[idx])
            loss = sum(loss_fn(heads[t](features), targets[t][idx]) for t in TASK_FAMILIES
                       if (targets[t][idx] >= 0).any())
            opt.zero_grad()
            loss.backward()
            opt.step()
    hits = {}
    with torch.no_grad():
        features = body(x_test)
        for task in TASK_FAMILIES:
            cols = [i for i, r in enumerate(test) if r.task == task]
            proba = heads[task](features[cols]).softmax(-1).numpy()
            hits[task] = mcq_accuracy(proba, classes[task], [test[i] for i in cols])
    return hits


def _text(r: MedADRecord) -> str:
    return r.question + " " + " ".join(f"({LETTERS[i]}) {o}" for i, o in enumerate(r.options))


def text_tfidf_baseline(train: list[MedADRecord], test: list[MedADRecord]) -> dict:
    """Per task: hits of TF-IDF(question + lettered options) -> answer letter."""
    hits = {}
    for task in TASK_FAMILIES:
        tr = [r for r in train if r.task == task]
        te = [r for r in test if r.task == task]
        clf = make_pipeline(TfidfVectorizer(ngram_range=(1, 2)), LogisticRegression(max_iter=2000))
        clf.fit([_text(r) for r in tr], [r.answer for r in tr])
        hits[task] = np.array(clf.predict([_text(r) for r in te]) == np.array([r.answer for r in te]), float)
    return hits


def text_prior_baseline(train: list[MedADRecord], test: list[MedADRecord]) -> dict:
    """Per task: pick the option whose text was correct most often, relative to how often it was shown."""
    shown: dict[str, Counter] = defaultdict(Counter)
    right: dict[str, Counter] = defaultdict(Counter)
    for r in train:
        shown[r.task].update(r.options)
        right[r.task][r.answer_text()] += 1
    hits = {}
    for task in TASK_FAMILIES:
        te = [r for r in test if r.task == task]
        rate = [[right[task][o] / max(shown[task][o], 1) for o in r.options] for r in te]
        hits[task] = np.array([LETTERS[int(np.argmax(s))] == r.answer for s, r in zip(rate, te, strict=True)],
                              float)
    return hits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="an existing MedAD-Synth folder (default: generate one)")
    parser.add_argument("--n-train", type=int, default=3000)
    parser.add_argument("--n-test", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--setting", choices=["visible", "realistic"], default="visible")
    parser.add_argument("--option-order", default="fixed", help="as medgrpo synth --option-order")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.data:
            root = Path(args.data)
        else:
            start = time.perf_counter()
            root = generate_synth(Path(tmp) / "synth", args.n_train, args.n_test, args.seed,
                                  option_order=args.option_order, setting=args.setting)
            n = args.n_train + args.n_test
            print(f"generated {n} records in {time.perf_counter() - start:.1f} s "
                  f"({n / (time.perf_counter() - start):.0f} records/s, validation included)")
        train, test = load_records(root, "train"), load_records(root, "test")
        start = time.perf_counter()
        thumbs_tr, greys_tr = load_pixels(root, train)
        thumbs_te, greys_te = load_pixels(root, test)
        cnn = cnn_baseline(train, test, root, args.seed)
    res_tr = residuals(thumbs_tr, greys_tr, thumbs_tr, greys_tr, exclude_self=True)
    res_te = residuals(thumbs_te, greys_te, thumbs_tr, greys_tr, exclude_self=False)
    grid = (grid_features(res_tr), grid_features(res_te))
    feats = {
        "modality_classification": (thumbs_tr, thumbs_te),
        "anatomy_identification": (thumbs_tr, thumbs_te),
        "anomaly_detection": grid,
        "pathology_characterization": (crop_features(res_tr), crop_features(res_te)),
        "lesion_localization": grid,
    }
    pixels = pixel_baseline(train, test, feats)
    tfidf, prior = text_tfidf_baseline(train, test), text_prior_baseline(train, test)
    levels = {t: np.array([difficulty_of(r.id) for r in test if r.task == t]) for t in TASK_FAMILIES}

    chance = {t: np.array([1 / len(r.options) for r in test if r.task == t]) for t in TASK_FAMILIES}
    print(f"MedAD-Synth baselines: {len(train)} train / {len(test)} test records, test MCQ accuracy")
    print("| task | n | chance | pixels CNN | pixels residual | residual easy / medium / hard | text TF-IDF | text prior |")
    print("|---|---:|---:|---:|---:|---|---:|---:|")
    for task in (*TASK_FAMILIES, "all"):
        if task == "all":
            c, n, p, f, q = (np.concatenate(list(h.values())) for h in (chance, cnn, pixels, tfidf, prior))
            by_level = "-"
        else:
            c, n, p, f, q = chance[task], cnn[task], pixels[task], tfidf[task], prior[task]
            by_level = " / ".join(f"{p[levels[task] == lv].mean():.0%}" if (levels[task] == lv).any() else "-"
                                  for lv in ("easy", "medium", "hard"))
        print(f"| {task} | {len(p)} | {c.mean():.0%} | {n.mean():.0%} | {p.mean():.0%} | {by_level} | {f.mean():.0%} "
              f"| {q.mean():.0%} |")
    print(f"(features + fits: {time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
