"""Structured evidence from labels, boxes and masks: boxes of a mask, the coarse region (quadrant or
centre) and laterality of a finding, its size class, and the record's ``evidence`` dict.

Regions are coarse on purpose: MedAD-38K's lesion-localization questions ask for a region, not coordinates,
and the exact box travels separately in the record's ``bbox``. Left/right follow ``laterality_convention``:
``image`` (the viewer's left) or ``patient`` (radiological convention, the patient's right on the image
left, as for PA chest radiographs and axial CT/MRI).
"""

from __future__ import annotations

from typing import Any

import numpy as np

Box = list[float]

CENTRAL_BAND = (0.4, 0.6)
"""A box whose centre falls in this band of the width (height) is neither left nor right (upper nor lower)."""
SIZE_CLASSES = ((0.02, "small"), (0.10, "medium"), (1.01, "large"))
"""Size class by the finding's share of the image area: < 2 % small, < 10 % medium, else large."""
MIN_COMPONENT_SHARE = 0.01
"""Mask components smaller than this share of the largest one are speckle, not a lesion."""
REGIONS = ("upper left", "upper right", "lower left", "lower right", "central")
"""The coarse regions lesion-localization questions choose from."""


def mask_boxes(mask: np.ndarray) -> list[Box]:
    """One box ``[x1, y1, x2, y2]`` per connected component of a binary mask (8-connectivity), in pixel-edge
    coordinates (a single pixel at column 3, row 5 is ``[3, 5, 4, 6]``), largest component first."""
    from scipy import ndimage

    labels, n = ndimage.label(np.asarray(mask) > 0, structure=np.ones((3, 3), dtype=int))
    if n == 0:
        return []
    areas = np.bincount(labels.ravel())[1:]
    keep = [i for i in np.argsort(-areas, kind="stable") if areas[i] >= MIN_COMPONENT_SHARE * areas.max()]
    slices = ndimage.find_objects(labels)
    return [[float(slices[i][1].start), float(slices[i][0].start), float(slices[i][1].stop),
             float(slices[i][0].stop)] for i in keep]


def _side(centre: float, extent: float, low: str, high: str) -> str | None:
    share = centre / extent
    if share < CENTRAL_BAND[0]:
        return low
    if share > CENTRAL_BAND[1]:
        return high
    return None


def region_of(boxes: list[Box], width: int, height: int, convention: str = "image") -> tuple[str, str | None]:
    """``(location, laterality)`` of a finding from its boxes.

    Each box's centre gives a side (left / right / neither) and a level (upper / lower / neither); boxes on
    both sides make the laterality ``bilateral``. ``location`` is ``"<level> <side>"`` (e.g. ``upper left``),
    one of them alone, ``bilateral``, or ``central`` when the finding sits in the middle band both ways.
    """
    if convention not in ("image", "patient"):
        raise ValueError(f"laterality convention must be 'image' or 'patient', not '{convention}'")
    left, right = ("right", "left") if convention == "patient" else ("left", "right")
    sides = {_side((b[0] + b[2]) / 2, width, left, right) for b in boxes}
    levels = {_side((b[1] + b[3]) / 2, height, "upper", "lower") for b in boxes}
    side_set = sides - {None}
    laterality = "bilateral" if len(side_set) == 2 else (side_set.pop() if len(side_set) == 1 and None not in sides
                                                          else None)
    level = levels.pop() if len(levels) == 1 else None
    if laterality == "bilateral":
        return "bilateral", "bilateral"
    parts = [p for p in (level, laterality) if p]
    return (" ".join(parts) if parts else "central"), laterality


def size_class(area: float, width: int, height: int) -> str:
    """``small`` / ``medium`` / ``large`` from the finding's area in pixels (see :data:`SIZE_CLASSES`)."""
    share = area / float(width * height)
    return next(name for limit, name in SIZE_CLASSES if share < limit)


def clip_box(box: Box, width: int, height: int) -> Box | None:
    """Round a box to whole pixels inside the image (None when nothing is left): cited boxes are written as
    integers, so the gold box must be integral for a verbatim citation to score IoU 1."""
    x1, y1 = max(0, round(box[0])), max(0, round(box[1]))
    x2, y2 = min(width, round(box[2])), min(height, round(box[3]))
    return [float(x1), float(y1), float(x2), float(y2)] if x2 > x1 and y2 > y1 else None


def build_evidence(
    findings: list[str],
    boxes: list[Box],
    width: int,
    height: int,
    modality: str | None,
    anatomy: str | None,
    convention: str = "image",
    mask_area: float | None = None,
) -> dict[str, Any]:
    """The record's structured ``evidence`` (keys as in :data:`medgrpo.data.record.EVIDENCE_KEYS`).

    Args:
        findings: the finding texts of the image's positive labels (empty = normal).
        boxes: the findings' boxes in original pixels (already clipped).
        width, height: the original image size.
        modality, anatomy: source metadata.
        convention: left/right convention (module docstring).
        mask_area: the mask's pixel count when a mask exists (a truer size than the boxes).
    """
    evidence: dict[str, Any] = {"abnormal": bool(findings)}
    if findings:
        evidence["finding"] = " and ".join(findings)
    if findings and boxes:
        location, laterality = region_of(boxes, width, height, convention)
        evidence["location"] = location
        if laterality:
            evidence["laterality"] = laterality
        area = mask_area if mask_area is not None else sum((b[2] - b[0]) * (b[3] - b[1]) for b in boxes)
        evidence["size"] = size_class(area, width, height)
    if modality:
        evidence["modality"] = modality
    if anatomy:
        evidence["anatomy"] = anatomy
    return evidence
