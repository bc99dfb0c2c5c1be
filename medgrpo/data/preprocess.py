"""Image preprocessing, in one place: decode, resize ONCE to the model grid, convert to RGB, cache.

The trainer, the evaluator and vLLM all call :func:`prepare_images`, so every stage sees the same pixel grid
(the processor's ``smart_resize`` rule through :class:`~medgrpo.data.boxes.ImageGrid`). Because images arrive
already at the grid size, the processor's own resize is then the identity and image-token counts cannot drift
between training and generation.

The cache stores decoded + resized pixels (and nothing else: no header, no path) under a content key made of
the file's identity (resolved path, size and modification time), the pixel-relevant settings and the grid, so a
second epoch or run never decodes DICOM again, and a change in any setting reads as a miss.
"""

from __future__ import annotations

import hashlib
import os
import struct
import tempfile
from dataclasses import dataclass, fields
from pathlib import Path

from PIL import Image

from medgrpo.data.boxes import BoxFrame, ImageGrid
from medgrpo.data.dicom import DEFAULT_PERCENTILES, parse_window
from medgrpo.data.images import ImageError, load_image
from medgrpo.data.record import MedADRecord

CACHE_VERSION = 1
_MAGIC = b"MGPX"
_HEADER = struct.Struct("<4sHH")  # magic, version, number of frames
_FRAME = struct.Struct("<IIIIB")  # original w, h; model w, h; channels (1 = L, 3 = RGB)
_RESAMPLE = {"bicubic": Image.Resampling.BICUBIC, "bilinear": Image.Resampling.BILINEAR,
             "lanczos": Image.Resampling.LANCZOS, "nearest": Image.Resampling.NEAREST}


@dataclass(frozen=True)
class ImageSettings:
    """How a dataset's images become model input. Selectable per dataset (recipe YAML or CLI).

    Attributes:
        window: DICOM windowing: ``"auto"`` (the file's VOI LUT / window, else percentile fallback), a CT preset
            (``lung``, ``mediastinum``, ``soft_tissue``, ``bone``, ``brain``) or ``"center,width"``.
        frames: multi-frame choice: ``"middle"``, ``"all"`` or a list of 0-based indices. Every chosen frame
            becomes one image of the record; boxes refer to the first.
        percentiles: the low/high percentiles of the fallback window (also used for 16-bit PNG/TIFF).
        resample: PIL filter for the one resize (``bicubic`` like the Qwen-VL processors).
        cache_dir: where decoded + resized pixels are cached; None disables the cache.
    """

    window: str = "auto"
    frames: str | tuple[int, ...] = "middle"
    percentiles: tuple[float, float] = DEFAULT_PERCENTILES
    resample: str = "bicubic"
    cache_dir: str | None = None

    def __post_init__(self) -> None:
        parse_window(self.window)  # raises ValueError naming the bad window
        if isinstance(self.frames, list):
            object.__setattr__(self, "frames", tuple(int(i) for i in self.frames))
        if isinstance(self.frames, str) and self.frames not in ("middle", "all"):
            raise ValueError(f"frames must be 'middle', 'all' or a list of indices, not '{self.frames}'")
        lo, hi = (float(p) for p in self.percentiles)
        if not 0.0 <= lo < hi <= 100.0:
            raise ValueError(f"percentiles must satisfy 0 <= low < high <= 100, got {self.percentiles!r}")
        object.__setattr__(self, "percentiles", (lo, hi))
        if self.resample not in _RESAMPLE:
            raise ValueError(f"resample must be one of {', '.join(_RESAMPLE)}, not '{self.resample}'")

    def fingerprint(self) -> str:
        """Everything that changes pixels (not ``cache_dir``), as a stable string for cache keys."""
        return repr({f.name: getattr(self, f.name) for f in fields(self) if f.name != "cache_dir"})


class ImageCache:
    """A directory of decoded + resized frames, one file per (image file, settings, grid)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def key(self, path: Path, settings: ImageSettings, grid: ImageGrid) -> str:
        stat = path.stat()
        ident = (f"v{CACHE_VERSION}|{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{settings.fingerprint()}|"
                 f"{grid.factor},{grid.min_pixels},{grid.max_pixels}")
        return hashlib.sha256(ident.encode()).hexdigest()

    def _file(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.px"

    def get(self, key: str) -> list[tuple[Image.Image, tuple[int, int]]] | None:
        """The cached ``(resized image, original size)`` frames, or None on a miss or an unreadable entry."""
        try:
            data = self._file(key).read_bytes()
        except OSError:
            return None
        try:
            magic, version, n = _HEADER.unpack_from(data, 0)
            if magic != _MAGIC or version != CACHE_VERSION:
                return None
            offset, out = _HEADER.size, []
            for _ in range(n):
                w, h, mw, mh, ch = _FRAME.unpack_from(data, offset)
                offset += _FRAME.size
                size = mw * mh * ch
                im = Image.frombytes("L" if ch == 1 else "RGB", (mw, mh), data[offset: offset + size])
                offset += size
                out.append((im, (w, h)))
            return out
        except (struct.error, ValueError):
            return None  # a torn or foreign file is a miss; the next put overwrites it

    def put(self, key: str, frames: list[tuple[Image.Image, tuple[int, int]]]) -> None:
        """Write atomically (temp file + rename), so concurrent readers never see half an entry."""
        target = self._file(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        parts = [_HEADER.pack(_MAGIC, CACHE_VERSION, len(frames))]
        for im, (w, h) in frames:
            ch = 1 if im.mode == "L" else 3
            parts += [_FRAME.pack(w, h, im.width, im.height, ch), im.tobytes()]
        fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(b"".join(parts))
        os.replace(tmp, target)


def _decode_resized(path: Path, grid: ImageGrid, settings: ImageSettings) -> list[tuple[Image.Image, tuple[int, int]]]:
    out = []
    for im in load_image(path, window=settings.window, frames=settings.frames, percentiles=settings.percentiles):
        size = im.size
        try:
            target = grid.resized_size(*size)
        except ValueError as exc:  # e.g. an aspect ratio past 200, which the Qwen-VL processors refuse too
            raise ImageError(f"{path}: {exc}") from None
        if target != size:
            im = im.resize(target, _RESAMPLE[settings.resample])
        im.info = {}
        out.append((im, size))
    return out


def resolve_image(root: str | Path, rel: str) -> Path:
    """``root/rel``, refusing absolute paths and paths that resolve outside ``root`` (symlinks followed)."""
    root = Path(root)
    if Path(rel).is_absolute():
        raise ImageError(f"'{rel}' is absolute; image paths are relative to the dataset root")
    full = root / rel
    if not full.resolve().is_relative_to(root.resolve()):
        raise ImageError(f"'{rel}' resolves outside the dataset root {root}")
    return full


def load_resized(path: str | Path, grid: ImageGrid, settings: ImageSettings | None = None
                 ) -> list[tuple[Image.Image, tuple[int, int]]]:
    """Decoded and resized frames of one file as ``(L/RGB image at the grid size, original (w, h))``, cached."""
    settings = settings or ImageSettings()
    path = Path(path)
    if not path.is_file():
        raise ImageError(f"{path}: image file does not exist")
    cache = ImageCache(settings.cache_dir) if settings.cache_dir else None
    key = cache.key(path, settings, grid) if cache else ""
    frames = cache.get(key) if cache else None
    if frames is None:
        frames = _decode_resized(path, grid, settings)
        if cache:
            cache.put(key, frames)
    return frames


def prepare_images(
    record: MedADRecord, root: str | Path, grid: ImageGrid, settings: ImageSettings | None = None
) -> tuple[list[Image.Image], BoxFrame]:
    """Every image of ``record`` as RGB at the model grid size, and the box frame of ``images[0]``.

    Multi-frame files contribute one image per chosen frame. Boxes (``record.bbox`` and ``<box>`` in ``cot``)
    refer to the first frame of ``images[0]``; the frame maps them to the model's convention and back.

    Raises:
        ImageError: a path outside ``root``, or a missing/unreadable image (message names the file).
    """
    images: list[Image.Image] = []
    frame: BoxFrame | None = None
    for rel in record.images:
        for im, (w, h) in load_resized(resolve_image(root, rel), grid, settings):
            if frame is None:
                frame = grid.frame(w, h)
            images.append(im if im.mode == "RGB" else im.convert("RGB"))
    assert frame is not None  # a record holds at least one image (validated by record_from_dict)
    return images, frame
