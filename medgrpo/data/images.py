"""Medical image loading: PNG/JPEG/TIFF/BMP through PIL and DICOM through pydicom, to a PIL image."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

DICOM_SUFFIXES = (".dcm", ".dicom")


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
