"""Medical image loading: PNG/JPEG/TIFF/BMP through PIL and DICOM through pydicom, to PIL images.

:func:`load_image` is the one decoder every path goes through (via :func:`medgrpo.data.preprocess.prepare_images`).
It returns 8-bit ``L`` or ``RGB`` images with no metadata attached: PNG text chunks, EXIF and DICOM headers are
dropped here so that nothing but pixels travels further (PHI safety).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from medgrpo.data.dicom import DEFAULT_PERCENTILES, DicomError, percentile_window, read_dicom, select_frames

DICOM_SUFFIXES = (".dcm", ".dicom")


class ImageError(ValueError):
    """An image cannot be read. One line naming the file and the reason."""


def is_dicom(path: str | Path) -> bool:
    """True for a ``.dcm``/``.dicom`` file or a file with the DICM preamble."""
    path = Path(path)
    if path.suffix.lower() in DICOM_SUFFIXES:
        return True
    try:
        with open(path, "rb") as fh:
            fh.seek(128)
            return fh.read(4) == b"DICM"
    except OSError:
        return False


def image_size(path: str | Path) -> tuple[int, int]:
    """``(width, height)`` of an image, reading only its header."""
    if is_dicom(path):
        import pydicom

        ds = pydicom.dcmread(path, stop_before_pixels=True)
        return int(ds.Columns), int(ds.Rows)
    with Image.open(path) as im:
        return im.size


def _to_8bit(im: Image.Image, percentiles: tuple[float, float]) -> Image.Image:
    """Bring any PIL mode to ``L`` or ``RGB``; 16-bit/float grayscale goes through percentile windowing."""
    if im.mode in ("L", "RGB"):
        return im
    if im.mode in ("I", "I;16", "I;16B", "I;16L", "F"):
        return Image.fromarray(percentile_window(np.asarray(im, dtype=np.float32), percentiles))
    if im.mode in ("1", "LA"):
        return im.convert("L")
    return im.convert("RGB")  # P, RGBA, CMYK, YCbCr, ...


def _load_pil(path: Path, frames: str | tuple[int, ...], percentiles: tuple[float, float]) -> list[Image.Image]:
    try:
        with Image.open(path) as im:
            out = []
            try:
                indices = select_frames(getattr(im, "n_frames", 1), frames)
            except ValueError as exc:
                raise ImageError(f"{path}: {exc}") from None
            for i in indices:
                im.seek(i)
                im.load()
                frame = _to_8bit(im, percentiles)
                frame = frame.copy() if frame is im else frame
                frame.info = {}  # drop text chunks / EXIF: pixels only
                out.append(frame)
            return out
    except ImageError:
        raise
    except FileNotFoundError:
        raise ImageError(f"{path}: image file does not exist") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        kind = "empty file" if path.is_file() and path.stat().st_size == 0 else type(exc).__name__
        raise ImageError(f"{path}: not a readable image ({kind})") from None


def load_image(
    path: str | Path,
    window: str = "auto",
    frames: str | tuple[int, ...] = "middle",
    percentiles: tuple[float, float] = DEFAULT_PERCENTILES,
) -> list[Image.Image]:
    """Decode one image file into 8-bit ``L``/``RGB`` PIL images, one per chosen frame (original size).

    Args:
        path: PNG/JPEG/TIFF/BMP (anything PIL reads) or DICOM.
        window: DICOM windowing (see :mod:`medgrpo.data.dicom`); 16-bit PNG/TIFF always use the percentile rule.
        frames: ``"middle"``, ``"all"`` or explicit indices, for multi-frame DICOM and multi-page TIFF/GIF.
        percentiles: the percentile-window fallback.

    Raises:
        ImageError: missing, empty, truncated or unreadable file (DICOM problems raise its subclass message).
    """
    path = Path(path)
    if not path.is_file():
        raise ImageError(f"{path}: image file does not exist")
    if is_dicom(path):
        try:
            arrays = read_dicom(path, window=window, frames=frames, percentiles=percentiles)
        except DicomError as exc:
            raise ImageError(str(exc)) from None
        return [Image.fromarray(a) for a in arrays]
    return _load_pil(path, frames, percentiles)
