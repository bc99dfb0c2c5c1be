"""The ``grounding`` verifier: does the box the reasoning cites cover the gold lesion?

Boxes are written in the model's convention (Qwen2.5-VL: pixels of the resized input; Qwen2-VL/Qwen3-VL: a
0-1000 grid) and converted back to original pixels with :meth:`BoxFrame.to_original`, which also clamps them
to the image, before they are compared with the record's boxes (as VLM-R1 rescales before its IoU reward).

Many-boxes policy: only the FIRST cited box is scored, against the best-matching gold box. Citing more boxes
can therefore never raise the score (a scatter of boxes is worth exactly its first one), and the evidence
verifier's ``no_hallucination`` criterion counts every extra box that misses the lesion against the
completion.
"""

from __future__ import annotations

import math

from medgrpo.data.boxes import BoxFrame
from medgrpo.rewards.facts import Box, RecordFacts


def to_original(box: Box, frame: BoxFrame | None) -> Box:
    """A cited box in original pixels, corners sorted; without a frame the box is taken as original pixels."""
    if frame is not None:
        x1, y1, x2, y2 = frame.to_original(list(box))
        return (x1, y1, x2, y2)
    x1, x2 = sorted((max(box[0], 0.0), max(box[2], 0.0)))
    y1, y2 = sorted((max(box[1], 0.0), max(box[3], 0.0)))
    return (x1, y1, x2, y2)


def box_iou(a: Box, b: Box) -> float:
    """Intersection over union of two corner-sorted boxes (0 when either is degenerate). ``torchvision.ops.box_iou``'s
    formula in plain Python: a tensor call per box pair costs about 75 us, most of a reward's 100 us per completion
    (measured; a test checks both against torchvision on random boxes)."""
    ix = min(a[2], b[2]) - max(a[0], b[0])
    iy = min(a[3], b[3]) - max(a[1], b[1])
    inter = ix * iy if ix > 0 and iy > 0 else 0.0
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    value = inter / union if union > 0 else 0.0
    return value if math.isfinite(value) else 0.0


def box_giou(a: Box, b: Box) -> float:
    """Generalized IoU (Rezatofighi et al., 2019): IoU minus the share of the enclosing box that neither
    covers; in [-1, 1]."""
    ix = min(a[2], b[2]) - max(a[0], b[0])
    iy = min(a[3], b[3]) - max(a[1], b[1])
    inter = ix * iy if ix > 0 and iy > 0 else 0.0
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    hull = (max(a[2], b[2]) - min(a[0], b[0])) * (max(a[3], b[3]) - min(a[1], b[1]))
    if union <= 0 or hull <= 0:
        return -1.0
    value = inter / union - (hull - union) / hull
    return min(1.0, max(-1.0, value)) if math.isfinite(value) else -1.0


def best_iou(box: Box, gold_boxes: tuple[Box, ...]) -> float:
    """The box's IoU with its best-matching gold box (most records have one: then no generator is built)."""
    if len(gold_boxes) == 1:
        return box_iou(box, gold_boxes[0])
    return max(box_iou(box, g) for g in gold_boxes)


def match_score(box: Box, gold_boxes: tuple[Box, ...], metric: str = "iou") -> float:
    """The box's score against its best-matching gold box, in [0, 1] (GIoU rescaled as (g + 1) / 2)."""
    if metric == "giou":
        return max((box_giou(box, g) + 1.0) / 2.0 for g in gold_boxes)
    return best_iou(box, gold_boxes)


def grounding_score(boxes: list[Box], facts: RecordFacts, metric: str = "iou") -> float | None:
    """IoU (or rescaled GIoU) of the first cited box (in original pixels: :func:`to_original`) with the best
    gold box; None when the record has no box, 0.0 when the reasoning cites none."""
    if not facts.gold_boxes:
        return None
    if not boxes:
        return 0.0
    return match_score(boxes[0], facts.gold_boxes, metric)
