"""Box coordinate conventions: original image pixels <-> what each Qwen-VL architecture writes.

Records always store boxes in ORIGINAL pixels. Models write them in their own convention:

* Qwen2.5-VL: absolute pixels of the *resized* model input (the ``smart_resize`` grid).
* Qwen2-VL and Qwen3-VL: integers on a 0-1000 grid, independent of the input size.

:class:`BoxFrame` carries what is needed to convert one image's boxes both ways; the dataset builders store it
as columns (``image_size``, ``model_image_size``, ``box_format``) so the grounding reward can undo it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

BoxFormat = Literal["abs", "rel1000"]

BOX_FORMATS: dict[str, BoxFormat] = {
    "qwen2_5_vl": "abs",
    "qwen2_vl": "rel1000",
    "qwen3_vl": "rel1000",
}
"""Box convention per ``config.model_type``."""


def box_format_for(model_type: str) -> BoxFormat:
    """The box convention of a Qwen-VL ``model_type`` (``abs`` for Qwen2.5-VL, ``rel1000`` otherwise)."""
    if model_type not in BOX_FORMATS:
        raise ValueError(f"unsupported model_type '{model_type}' (supported: {', '.join(BOX_FORMATS)})")
    return BOX_FORMATS[model_type]


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """The Qwen-VL resize rule (``qwen_vl_utils.smart_resize``, the processors' own): both sides multiples of
    ``factor``, area within [min_pixels, max_pixels], aspect ratio kept as closely as the grid allows. Returns
    ``(height, width)``; a size that is not positive, or an aspect ratio past 200, is a one-line ``ValueError``."""
    if height <= 0 or width <= 0:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    from qwen_vl_utils import (
        smart_resize as qwen_smart_resize,  # imports torchvision: only where images are sized
    )

    return qwen_smart_resize(height, width, factor, min_pixels, max_pixels)


@dataclass(frozen=True)
class ImageGrid:
    """How one processor sees images: resize factor, pixel limits, and the model's box convention."""

    box_format: BoxFormat
    factor: int = 28
    min_pixels: int = 56 * 56
    max_pixels: int = 28 * 28 * 1280

    @classmethod
    def from_processor(cls, processor: Any, model_type: str) -> ImageGrid:
        """Read the pixel limits and patch geometry from a Qwen-VL processor (the one training uses)."""
        ip = getattr(processor, "image_processor", processor)
        size = getattr(ip, "size", None) or {}
        min_pixels = size.get("shortest_edge") or getattr(ip, "min_pixels", None) or 56 * 56
        max_pixels = size.get("longest_edge") or getattr(ip, "max_pixels", None) or 28 * 28 * 1280
        factor = int(getattr(ip, "patch_size", 14)) * int(getattr(ip, "merge_size", 2))
        return cls(box_format_for(model_type), factor, int(min_pixels), int(max_pixels))

    def resized_size(self, width: int, height: int) -> tuple[int, int]:
        """``(width, height)`` of the model input for an original ``width x height`` image."""
        h, w = smart_resize(height, width, self.factor, self.min_pixels, self.max_pixels)
        return w, h

    def frame(self, width: int, height: int) -> BoxFrame:
        mw, mh = self.resized_size(width, height)
        return BoxFrame(self.box_format, width, height, mw, mh)


@dataclass(frozen=True)
class BoxFrame:
    """The coordinate frame of one image: original size, model-input size, and the model's box format."""

    box_format: BoxFormat
    width: int
    height: int
    model_width: int
    model_height: int

    def _scale(self) -> tuple[float, float]:
        if self.box_format == "abs":
            return self.model_width / self.width, self.model_height / self.height
        return 1000.0 / self.width, 1000.0 / self.height

    def to_model(self, box: list[float]) -> list[int]:
        """Original pixels -> the model's integer coordinates."""
        sx, sy = self._scale()
        x1, y1, x2, y2 = box
        return [round(x1 * sx), round(y1 * sy), round(x2 * sx), round(y2 * sy)]

    def to_original(self, box: list[float]) -> list[float]:
        """The model's coordinates -> original pixels, clamped to the image."""
        sx, sy = self._scale()
        x1, y1, x2, y2 = box
        x1, x2 = sorted((min(max(x1 / sx, 0.0), self.width), min(max(x2 / sx, 0.0), self.width)))
        y1, y2 = sorted((min(max(y1 / sy, 0.0), self.height), min(max(y2 / sy, 0.0), self.height)))
        return [x1, y1, x2, y2]

    def to_columns(self) -> dict[str, Any]:
        """The dataset columns the grounding reward reads back with :meth:`from_columns`."""
        return {
            "box_format": self.box_format,
            "image_size": [self.width, self.height],
            "model_image_size": [self.model_width, self.model_height],
        }

    @classmethod
    def from_columns(cls, box_format: str, image_size: list[int], model_image_size: list[int]) -> BoxFrame:
        return cls(box_format, int(image_size[0]), int(image_size[1]), int(model_image_size[0]),  # type: ignore[arg-type]
                   int(model_image_size[1]))


def iou(a: list[float], b: list[float]) -> float:
    """Intersection over union of two ``[x1, y1, x2, y2]`` boxes (0 when either is degenerate)."""
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0
