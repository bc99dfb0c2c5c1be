"""DICOM pixel decoding: modality LUT, windowing, photometric handling and frame choice, to 8-bit arrays.

Only pixel-relevant tags are read (rescale, VOI LUT / window, photometric interpretation, bit depth, frame
count). Nothing else from the header leaves this module, so no patient data can reach a prompt, a log line,
a cache entry or a saved dataset (PHI safety, issue 3). Errors name the file and never echo header values
other than the transfer syntax.

Windowing follows DICOM PS3.3 C.11.2.1.2.1 (linear VOI function). Order of precedence:

1. an explicit window: a named preset from :data:`CT_PRESETS` or ``"center,width"`` (in modality units, e.g. HU);
2. ``"auto"``: the file's VOI LUT Sequence, else its first Window Center/Width;
3. the fallback when the file has neither: percentile windowing, mapping the ``percentiles`` (default 0.5 and
   99.5) of the frame's values to black and white, which is robust to a few extreme pixels (metal, padding).

MONOCHROME1 images are inverted after windowing so that higher values are always brighter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

CT_PRESETS: dict[str, tuple[float, float]] = {
    "lung": (-600.0, 1500.0),
    "mediastinum": (50.0, 350.0),
    "soft_tissue": (40.0, 400.0),
    "bone": (400.0, 1800.0),
    "brain": (40.0, 80.0),
}
"""Named CT windows as (center, width) in Hounsfield units (common radiology defaults)."""

DEFAULT_PERCENTILES = (0.5, 99.5)


class DicomError(ValueError):
    """A DICOM file cannot be turned into pixels. One line naming the file and the reason."""


def parse_window(window: str) -> tuple[float, float] | None:
    """``"auto"`` -> None; a preset name or ``"center,width"`` -> (center, width). Raises ValueError otherwise."""
    if window == "auto":
        return None
    if window in CT_PRESETS:
        return CT_PRESETS[window]
    parts = window.split(",")
    try:
        center, width = (float(p) for p in parts)
    except ValueError:
        raise ValueError(
            f"window '{window}' is not 'auto', a preset ({', '.join(CT_PRESETS)}) or 'center,width'"
        ) from None
    if width < 1:
        raise ValueError(f"window '{window}': width must be at least 1")
    return center, width


def linear_window(values: np.ndarray, center: float, width: float) -> np.ndarray:
    """DICOM linear VOI function (PS3.3 C.11.2.1.2.1) mapped to uint8 0..255."""
    if width <= 1:
        return np.where(values > center - 0.5, 255, 0).astype(np.uint8)
    scaled = (values - (center - 0.5)) / (width - 1) + 0.5
    return (np.clip(scaled, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def percentile_window(values: np.ndarray, percentiles: tuple[float, float]) -> np.ndarray:
    """Map the given low/high percentiles of ``values`` to 0 and 255 (the documented fallback)."""
    lo, hi = np.percentile(values, percentiles)
    if hi <= lo:
        hi = lo + 1.0
    return (np.clip((values - lo) / (hi - lo), 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def _first(value: Any) -> float:
    """Window Center/Width may be multi-valued; the first pair is the default view."""
    from pydicom.multival import MultiValue

    return float(value[0]) if isinstance(value, MultiValue | list | tuple) else float(value)


def select_frames(n_frames: int, frames: str | tuple[int, ...]) -> list[int]:
    """Indices of the frames to keep: ``"middle"``, ``"all"`` or explicit 0-based indices. A single-frame file
    always gives its one frame (a frame choice applies to multi-frame files). Raises ValueError."""
    if n_frames == 1 or frames == "middle":
        return [n_frames // 2]
    if frames == "all":
        return list(range(n_frames))
    if isinstance(frames, str):
        raise ValueError(f"frames must be 'middle', 'all' or a list of indices, not '{frames}'")
    bad = [i for i in frames if not 0 <= i < n_frames]
    if bad:
        raise ValueError(f"frame {bad[0]} does not exist (the file has {n_frames} frame(s))")
    return list(frames)


def _check_decoder(ds: Any, path: Path) -> None:
    """Fail early, naming the missing handler, when the transfer syntax cannot be decoded here."""
    from pydicom.pixels.decoders.base import get_decoder

    ts = ds.file_meta.get("TransferSyntaxUID") if hasattr(ds, "file_meta") else None
    if ts is None or not ts.is_compressed:
        return
    try:
        decoder = get_decoder(ts)
    except NotImplementedError:
        raise DicomError(f"{path}: transfer syntax '{ts.name}' ({ts}) has no pixel-data decoder in pydicom") from None
    if not decoder.is_available:
        raise DicomError(
            f"{path}: transfer syntax '{ts.name}' needs a pixel-data handler that is not installed "
            f"(install one of: {'; '.join(decoder.missing_dependencies)})"
        )


def _window(
    values: np.ndarray,
    ds: Any,
    window: tuple[float, float] | None,
    percentiles: tuple[float, float],
    counts: np.ndarray | None,
) -> np.ndarray:
    """Modality values -> uint8 by the precedence in the module docstring. ``counts`` (how often each entry of
    ``values`` occurs) turns ``values`` into a lookup table: the percentiles are then taken from the histogram."""
    from pydicom.pixels import apply_voi_lut

    if window is not None:
        return linear_window(values, *window)
    if "VOILUTSequence" in ds:
        lut_bits = int(ds.VOILUTSequence[0].LUTDescriptor[2])
        table_input = np.rint(values).astype(np.int64)  # a LUT is indexed by integer modality values
        mapped = apply_voi_lut(table_input, ds, index=0, prefer_lut=True).astype(np.float32)
        return (np.clip(mapped / float(2**lut_bits - 1), 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    if "WindowCenter" in ds and "WindowWidth" in ds:
        return linear_window(values, _first(ds.WindowCenter), max(_first(ds.WindowWidth), 1.0))
    if counts is None:
        return percentile_window(values, percentiles)
    cdf = np.cumsum(counts) / counts.sum()
    lo, hi = (float(values[min(np.searchsorted(cdf, p / 100.0), len(values) - 1)]) for p in percentiles)
    hi = hi if hi > lo else lo + 1.0
    return (np.clip((values - lo) / (hi - lo), 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def _mono_to_uint8(
    raw: np.ndarray, ds: Any, window: tuple[float, float] | None, percentiles: tuple[float, float]
) -> np.ndarray:
    """Rescale (slope/intercept or Modality LUT), window, and invert MONOCHROME1.

    Integer pixels (the usual case) go through a lookup table over the stored value range: the rescale and
    window are computed once per distinct stored value and applied in one gather, several times faster than
    float arithmetic on every pixel, with identical results.
    """
    from pydicom.pixels import apply_modality_lut

    lo, hi = (int(raw.min()), int(raw.max())) if raw.dtype.kind in "iu" else (0, -1)
    if hi >= lo and hi - lo <= 1 << 17 and "ModalityLUTSequence" not in ds:  # a table of at most 128k entries
        index = raw - lo if raw.dtype.kind == "u" else np.subtract(raw, lo, dtype=np.int32)
        slope = float(ds.get("RescaleSlope", 1.0) or 1.0)
        intercept = float(ds.get("RescaleIntercept", 0.0) or 0.0)
        values = np.arange(lo, hi + 1, dtype=np.float64) * slope + intercept  # e.g. HU per stored value
        file_voi = "VOILUTSequence" in ds or ("WindowCenter" in ds and "WindowWidth" in ds)
        counts = None if window is not None or file_voi else np.bincount(index.ravel(), minlength=hi - lo + 1)
        out = _window(values, ds, window, percentiles, counts)[index]
    else:
        values = apply_modality_lut(raw, ds).astype(np.float32, copy=False)
        out = _window(values, ds, window, percentiles, None)
    if ds.get("PhotometricInterpretation", "MONOCHROME2") == "MONOCHROME1":
        out = 255 - out  # MONOCHROME1: minimum value is white
    return out


def _colour_to_uint8(raw: np.ndarray, ds: Any) -> np.ndarray:
    """RGB (pydicom already converts YBR_* to RGB) with more than 8 bits is scaled down to 8 bits."""
    bits = int(ds.get("BitsStored", 8))
    if raw.dtype == np.uint8 and bits <= 8:
        return raw
    return (raw.astype(np.float32) * (255.0 / float(2**bits - 1)) + 0.5).clip(0, 255).astype(np.uint8)


def read_dicom(
    path: str | Path,
    window: str = "auto",
    frames: str | tuple[int, ...] = "middle",
    percentiles: tuple[float, float] = DEFAULT_PERCENTILES,
) -> list[np.ndarray]:
    """Decode a DICOM file to 8-bit arrays, one per chosen frame: ``(H, W)`` grayscale or ``(H, W, 3)`` RGB.

    Args:
        path: the file.
        window: ``"auto"`` (file VOI, else percentile fallback), a :data:`CT_PRESETS` name, or ``"center,width"``.
            Ignored for colour images.
        frames: ``"middle"`` (default), ``"all"``, or explicit 0-based frame indices.
        percentiles: the fallback window's low/high percentiles.

    Raises:
        DicomError: unreadable or truncated file, no pixel data, a transfer syntax without installed handler,
            a frame index out of range.
    """
    import pydicom
    from pydicom.errors import InvalidDicomError

    path = Path(path)
    try:
        explicit = parse_window(window)
    except ValueError as exc:
        raise DicomError(f"{path}: {exc}") from None
    try:
        ds = pydicom.dcmread(path)
    except (InvalidDicomError, OSError, EOFError, ValueError, KeyError, TypeError) as exc:
        raise DicomError(f"{path}: not a readable DICOM file ({type(exc).__name__})") from None
    if "PixelData" not in ds:
        raise DicomError(f"{path}: no pixel data (tag 7FE0,0010 missing)")
    _check_decoder(ds, path)
    try:
        n_frames = int(ds.get("NumberOfFrames", 1) or 1)
        indices = select_frames(n_frames, frames)
    except ValueError as exc:
        raise DicomError(f"{path}: {exc}") from None
    try:
        if n_frames > 1 and len(indices) < n_frames:  # decode only the chosen frames of a long series
            from pydicom.pixels import pixel_array

            arrays = [pixel_array(ds, index=i) for i in indices]
        else:
            arr = ds.pixel_array
            arrays = [arr] if n_frames == 1 else list(arr)
    except Exception as exc:  # pydicom raises many types for truncated/inconsistent pixel data
        raise DicomError(f"{path}: pixel data cannot be decoded ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0][:160]})") from None
    if int(ds.get("SamplesPerPixel", 1)) == 1:
        return [_mono_to_uint8(a, ds, explicit, percentiles) for a in arrays]
    return [_colour_to_uint8(a, ds) for a in arrays]


def write_dicom(
    path: str | Path,
    pixels: np.ndarray,
    photometric: str | None = None,
    bits_stored: int | None = None,
    rescale: tuple[float, float] = (1.0, 0.0),
    window: tuple[float, float] | None = None,
    compress: bool = False,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write a synthetic DICOM file (secondary capture) from stored pixel values: for tests, benchmarks and
    examples, never real data.

    Args:
        path: output file.
        pixels: ``(H, W)`` or ``(frames, H, W)`` integers (signed dtype -> Pixel Representation 1), or
            ``(H, W, 3)`` / ``(frames, H, W, 3)`` uint8 for RGB.
        photometric: defaults to MONOCHROME2 (grayscale) or RGB.
        bits_stored: defaults to the dtype's bit width (use 12 for 12-bit data in 16-bit words).
        rescale: (slope, intercept) stored as Rescale Slope/Intercept.
        window: (center, width) stored as Window Center/Width, or None for no window tags.
        compress: store as RLE Lossless (pydicom encodes it natively) instead of uncompressed.
        extra: further tags by keyword (e.g. PatientName), written as given.
    """
    from pydicom.dataset import FileDataset, FileMetaDataset
    from pydicom.uid import ExplicitVRLittleEndian, RLELossless, SecondaryCaptureImageStorage, generate_uid

    colour = pixels.ndim >= 3 and pixels.shape[-1] == 3
    frames = pixels.shape[0] if pixels.ndim == (4 if colour else 3) else 1
    meta = FileMetaDataset()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    meta.MediaStorageSOPClassUID = SecondaryCaptureImageStorage
    meta.MediaStorageSOPInstanceUID = generate_uid()
    ds = FileDataset(str(path), {}, file_meta=meta, preamble=b"\0" * 128)
    ds.SOPClassUID, ds.SOPInstanceUID = meta.MediaStorageSOPClassUID, meta.MediaStorageSOPInstanceUID
    ds.Rows, ds.Columns = pixels.shape[-3:-1] if colour else pixels.shape[-2:]
    ds.SamplesPerPixel = 3 if colour else 1
    ds.PhotometricInterpretation = photometric or ("RGB" if colour else "MONOCHROME2")
    if colour:
        ds.PlanarConfiguration = 0
    if frames > 1:
        ds.NumberOfFrames = frames
    bits = pixels.dtype.itemsize * 8
    ds.BitsAllocated, ds.BitsStored = bits, bits_stored or bits
    ds.HighBit = ds.BitsStored - 1
    ds.PixelRepresentation = int(np.issubdtype(pixels.dtype, np.signedinteger))
    if rescale != (1.0, 0.0):
        ds.RescaleSlope, ds.RescaleIntercept = rescale
    if window is not None:
        ds.WindowCenter, ds.WindowWidth = window
    for keyword, value in (extra or {}).items():
        setattr(ds, keyword, value)
    ds.PixelData = np.ascontiguousarray(pixels).tobytes()
    if compress:
        ds.compress(RLELossless)
    ds.save_as(path, enforce_file_format=True)
    return Path(path)


PIXEL_KEYWORDS = (
    "SOPClassUID", "Modality", "Rows", "Columns", "SamplesPerPixel", "PhotometricInterpretation",
    "PlanarConfiguration", "BitsAllocated", "BitsStored", "HighBit", "PixelRepresentation", "NumberOfFrames",
    "RescaleSlope", "RescaleIntercept", "RescaleType", "ModalityLUTSequence", "VOILUTSequence", "WindowCenter",
    "WindowWidth", "VOILUTFunction", "PixelSpacing", "PixelPaddingValue", "PixelData",
)
"""The only tags a de-identified copy keeps: what decoding and windowing need (plus modality and spacing)."""


def deidentify_dicom(src: str | Path, dst: str | Path) -> Path:
    """Copy a DICOM file keeping only :data:`PIXEL_KEYWORDS` and fresh UIDs, so a converted dataset never
    carries patient names, IDs, dates, institutions or linkable instance UIDs.

    Raises:
        DicomError: the source is not a readable DICOM file.
    """
    import pydicom
    from pydicom.dataset import FileDataset, FileMetaDataset
    from pydicom.uid import generate_uid

    try:
        ds = pydicom.dcmread(src)
    except Exception as exc:  # any parse failure: report the file, not the parser's internals
        raise DicomError(f"{src}: not a readable DICOM file ({type(exc).__name__})") from None
    ts = ds.file_meta.get("TransferSyntaxUID") if hasattr(ds, "file_meta") else None
    meta = FileMetaDataset()
    meta.TransferSyntaxUID = ts or pydicom.uid.ExplicitVRLittleEndian
    meta.MediaStorageSOPClassUID = ds.get("SOPClassUID", pydicom.uid.SecondaryCaptureImageStorage)
    meta.MediaStorageSOPInstanceUID = generate_uid()
    out = FileDataset(str(dst), {}, file_meta=meta, preamble=b"\0" * 128)
    for keyword in PIXEL_KEYWORDS:
        if keyword in ds:
            out[keyword] = ds[keyword]
    out.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    out.save_as(dst, enforce_file_format=True)
    return Path(dst)
