"""Source readers: one small class per public dataset layout, each turning a release folder into
:class:`SourceItem` rows (image, positive labels, leakage group, boxes or mask).

Every reader documents the layout it expects in its docstring; a missing file, folder or column raises
:class:`BuildError` with one line naming it. Readers never write anything: the builder copies images later.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".dcm", ".dicom")
NIFTI_SUFFIXES = (".nii", ".nii.gz")


class BuildError(ValueError):
    """Bad build input (config, source layout, labels). One line naming the file, row and field."""


@dataclass
class SourceItem:
    """One labelled image of a source, before questions are asked about it.

    ``labels`` holds the positive source labels (empty = normal image); ``boxes`` maps a label to its boxes in
    ORIGINAL pixels ``[x1, y1, x2, y2]``; ``group`` is the leakage unit (patient, lesion, else the image itself).
    A volume (NIfTI) item names the axial ``slice_index`` the builder renders.
    """

    id: str
    image: Path
    labels: list[str]
    group: str
    boxes: dict[str, list[list[float]]] = field(default_factory=dict)
    mask: Path | None = None
    slice_index: int | None = None


def _safe_id(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "item"


def _need(path: Path, what: str) -> Path:
    if not path.exists():
        raise BuildError(f"{path}: {what} does not exist")
    return path


def _read_csv(path: Path, columns: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """Rows of a CSV as ``(line, row)``; a missing column is one error line naming the file and the column."""
    _need(path, "CSV file")
    with open(path, newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        header = [h.strip() for h in reader.fieldnames or []]
        reader.fieldnames = header
        for name in columns:
            if name not in header:
                raise BuildError(f"{path}: missing column '{name}' (columns: {', '.join(h for h in header if h)})")
        for line, row in enumerate(reader, start=2):
            yield line, {k: (v or "").strip() for k, v in row.items() if k is not None}


def _images_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


class Reader:
    """A source layout. Subclasses set :attr:`layout`, take their options as keyword arguments (the YAML
    ``reader:`` block) and implement :meth:`read`."""

    layout: ClassVar[str]

    def __init__(self, root: Path) -> None:
        self.root = _need(Path(root), "source folder")

    def read(self) -> list[SourceItem]:
        raise NotImplementedError


class ImageFolderReader(Reader):
    """Generic image folder per class::

        ROOT/<class>/<image>.png|jpg|dcm ...   (nested folders inside a class are searched too)

    Args:
        normal_classes: folders whose images are normal (no finding).
        ignore: folders to skip (e.g. an unlabelled ``pred`` folder).
        group_pattern: regex with one group that pulls the patient id out of the file name; without it each
            image is its own leakage group.
    """

    layout = "image_folder"

    def __init__(self, root: Path, normal_classes: list[str] | tuple[str, ...] = ("normal",),
                 ignore: list[str] | tuple[str, ...] = (), group_pattern: str | None = None) -> None:
        super().__init__(root)
        self.normal = set(normal_classes)
        self.ignore = set(ignore)
        self.group_re = re.compile(group_pattern) if group_pattern else None

    def read(self) -> list[SourceItem]:
        classes = sorted(p.name for p in self.root.iterdir() if p.is_dir() and p.name not in self.ignore)
        if not classes:
            raise BuildError(f"{self.root}: no class folders (expected ROOT/<class>/<image>)")
        items = []
        for name in classes:
            for path in _images_under(self.root / name):
                rel = path.relative_to(self.root).as_posix()
                group = rel
                if self.group_re:
                    m = self.group_re.search(path.name)
                    if not m:
                        raise BuildError(f"{path}: file name does not match group_pattern '{self.group_re.pattern}'")
                    group = m.group(1)
                labels = [] if name in self.normal else [name]
                items.append(SourceItem(_safe_id(rel.rsplit(".", 1)[0]), path, labels, group))
        return items


class Br35HReader(ImageFolderReader):
    """Br35H :: Brain Tumor Detection 2020 (Kaggle)::

        ROOT/yes/y0.jpg ...   tumour
        ROOT/no/no0.jpg ...   no tumour
        ROOT/pred/...         unlabelled (ignored)

    No patient ids are published: each image is its own leakage group.
    """

    layout = "br35h"

    def __init__(self, root: Path) -> None:
        super().__init__(root, normal_classes=("no",), ignore=("pred",))
        for name in ("yes", "no"):
            _need(self.root / name, f"Br35H class folder '{name}'")


ISIC_CLASSES = ("MEL", "NV", "BCC", "AKIEC", "BKL", "DF", "VASC")


class ISIC2018Reader(Reader):
    """ISIC 2018 task 3 (HAM10000) lesion diagnosis::

        ROOT/ISIC2018_Task3_Training_Input/ISIC_0024306.jpg ...
        ROOT/ISIC2018_Task3_Training_GroundTruth/ISIC2018_Task3_Training_GroundTruth.csv
            image,MEL,NV,BCC,AKIEC,BKL,DF,VASC      (one-hot, 0.0 / 1.0)
        ROOT/HAM10000_metadata.csv (optional)  lesion_id,image_id,dx,...

    With the metadata file, images of the same lesion share a leakage group (HAM10000 holds several images of
    many lesions); without it each image is its own group.
    """

    layout = "isic2018"

    def __init__(self, root: Path, images: str = "ISIC2018_Task3_Training_Input",
                 ground_truth: str = "ISIC2018_Task3_Training_GroundTruth/ISIC2018_Task3_Training_GroundTruth.csv",
                 metadata: str | None = None, normal_classes: list[str] | tuple[str, ...] = ()) -> None:
        super().__init__(root)
        self.images = _need(self.root / images, "ISIC image folder")
        self.ground_truth = self.root / ground_truth
        self.metadata = self.root / metadata if metadata else None
        self.normal = set(normal_classes)

    def read(self) -> list[SourceItem]:
        lesion: dict[str, str] = {}
        if self.metadata is not None:
            lesion = {r["image_id"]: r["lesion_id"] for _, r in _read_csv(self.metadata, ("lesion_id", "image_id"))}
        items = []
        for line, row in _read_csv(self.ground_truth, ("image", *ISIC_CLASSES)):
            where = f"{self.ground_truth}:{line}"
            try:
                hot = [c for c in ISIC_CLASSES if float(row[c]) >= 0.5]
            except ValueError:
                raise BuildError(f"{where}: field 'label': not a number in the one-hot columns") from None
            if len(hot) != 1:
                raise BuildError(f"{where}: field 'label': expected exactly one positive class, got {len(hot)}")
            name = row["image"]
            path = self.images / f"{name}.jpg"
            if not path.is_file():
                raise BuildError(f"{where}: field 'image': {path} does not exist")
            labels = [] if hot[0] in self.normal else hot
            items.append(SourceItem(_safe_id(name), path, labels, lesion.get(name, name)))
        return items


NIH_NORMAL = "No Finding"
NIH_BOX_ALIASES = {"Infiltrate": "Infiltration"}  # BBox_List_2017.csv spells one label differently


class ChestXray14Reader(Reader):
    """NIH ChestX-ray8 / ChestX-ray14::

        ROOT/Data_Entry_2017.csv   Image Index,Finding Labels,Follow-up #,Patient ID,...
                                   (labels pipe-separated, 'No Finding' for normal)
        ROOT/BBox_List_2017.csv    Image Index,Finding Label,Bbox [x,y,w,h]   (optional; about 1,000 boxes)
        ROOT/images/00000001_000.png ...   (also images_001/images/... : searched recursively)

    Leakage group: ``Patient ID``. Boxes (x, y, w, h) become ``[x, y, x + w, y + h]``.

    Args:
        on_missing_image: ``error`` or ``skip`` (a partial download of the 12 image archives).
    """

    layout = "chestxray14"

    def __init__(self, root: Path, data_entry: str = "Data_Entry_2017.csv",
                 bbox_list: str | None = "BBox_List_2017.csv", images: str = ".",
                 on_missing_image: str = "error") -> None:
        super().__init__(root)
        if on_missing_image not in ("error", "skip"):
            raise BuildError(f"reader option 'on_missing_image': must be error or skip, not '{on_missing_image}'")
        self.data_entry = self.root / data_entry
        self.bbox_list = self.root / bbox_list if bbox_list else None
        self.images = _need(self.root / images, "image folder")
        self.on_missing = on_missing_image
        self.skipped = 0

    def _boxes(self) -> dict[str, dict[str, list[list[float]]]]:
        out: dict[str, dict[str, list[list[float]]]] = {}
        if self.bbox_list is None or not self.bbox_list.is_file():
            return out
        cols = ("Image Index", "Finding Label", "Bbox [x", "y", "w", "h]")
        for line, row in _read_csv(self.bbox_list, cols):
            try:
                x, y, w, h = (float(row[c]) for c in cols[2:])
            except ValueError:
                raise BuildError(f"{self.bbox_list}:{line}: field 'Bbox': not a number") from None
            if w <= 0 or h <= 0:
                raise BuildError(f"{self.bbox_list}:{line}: field 'Bbox': width and height must be positive")
            label = NIH_BOX_ALIASES.get(row["Finding Label"], row["Finding Label"])
            out.setdefault(row["Image Index"], {}).setdefault(label, []).append([x, y, x + w, y + h])
        return out

    def read(self) -> list[SourceItem]:
        boxes = self._boxes()
        on_disk = {p.name: p for p in _images_under(self.images)}
        items = []
        for line, row in _read_csv(self.data_entry, ("Image Index", "Finding Labels", "Patient ID")):
            name = row["Image Index"]
            path = on_disk.get(name)
            if path is None:
                if self.on_missing == "skip":
                    self.skipped += 1
                    continue
                raise BuildError(f"{self.data_entry}:{line}: field 'Image Index': {name} not found under {self.images}")
            labels = [x.strip() for x in row["Finding Labels"].split("|") if x.strip() and x.strip() != NIH_NORMAL]
            if not row["Patient ID"]:
                raise BuildError(f"{self.data_entry}:{line}: field 'Patient ID': empty")
            own = {k: v for k, v in boxes.get(name, {}).items() if k in labels}
            items.append(SourceItem(_safe_id(name.rsplit(".", 1)[0]), path, labels, f"patient-{row['Patient ID']}", own))
        return items


class CSVLabelsReader(Reader):
    """Generic CSV of labels::

        ROOT/<csv>     <image_column>,<label_column>[,<patient_column>][,x1,y1,x2,y2]
        ROOT/<images>/<path in image_column>

    Args:
        csv: the CSV file, relative to ROOT.
        image_column / label_column: the image path (relative to ``images``) and its label(s).
        separator: splits a multi-label cell (e.g. ``"|"``); None = one label per row.
        normal_labels: labels meaning "no finding".
        patient_column: leakage group column (else each image is its own group).
        box_columns: four columns ``x1, y1, x2, y2`` of one box in original pixels (blank = no box).
    """

    layout = "csv_labels"

    def __init__(self, root: Path, csv: str, image_column: str = "image", label_column: str = "label",
                 images: str = ".", separator: str | None = None,
                 normal_labels: list[str] | tuple[str, ...] = ("normal",), patient_column: str | None = None,
                 box_columns: list[str] | None = None) -> None:
        super().__init__(root)
        self.csv = self.root / csv
        self.images = _need(self.root / images, "image folder")
        self.image_column, self.label_column, self.separator = image_column, label_column, separator
        self.normal = set(normal_labels)
        self.patient_column = patient_column
        if box_columns is not None and len(box_columns) != 4:
            raise BuildError("reader option 'box_columns': needs four column names x1, y1, x2, y2")
        self.box_columns = box_columns

    def read(self) -> list[SourceItem]:
        cols = (self.image_column, self.label_column, *([self.patient_column] if self.patient_column else []),
                *(self.box_columns or []))
        items = []
        for line, row in _read_csv(self.csv, cols):
            where = f"{self.csv}:{line}"
            rel = row[self.image_column]
            path = self.images / rel
            if not rel or not path.is_file():
                raise BuildError(f"{where}: field '{self.image_column}': image '{rel}' does not exist")
            cell = row[self.label_column]
            raw = cell.split(self.separator) if self.separator else [cell]
            labels = [x.strip() for x in raw if x.strip() and x.strip() not in self.normal]
            if not cell:
                raise BuildError(f"{where}: field '{self.label_column}': empty label")
            group = row[self.patient_column] if self.patient_column else rel
            if self.patient_column and not group:
                raise BuildError(f"{where}: field '{self.patient_column}': empty patient id")
            boxes: dict[str, list[list[float]]] = {}
            if self.box_columns and any(row[c] for c in self.box_columns):
                try:
                    box = [float(row[c]) for c in self.box_columns]
                except ValueError:
                    raise BuildError(f"{where}: field '{self.box_columns[0]}': box coordinates must be numbers") from None
                if len(labels) != 1:
                    raise BuildError(f"{where}: field '{self.label_column}': a box needs exactly one abnormal label")
                boxes[labels[0]] = [box]
            items.append(SourceItem(_safe_id(rel.rsplit(".", 1)[0]), path, labels, str(group), boxes))
        return items


def _strip_suffix(name: str) -> str:
    for suffix in (*NIFTI_SUFFIXES, *IMAGE_SUFFIXES):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return name


def load_nifti(path: Path) -> np.ndarray:
    """A NIfTI volume as a numpy array (x, y, z); needs the optional ``nibabel`` package."""
    try:
        import nibabel
    except ImportError:
        raise BuildError(f"{path}: reading NIfTI needs the optional package nibabel (pip install nibabel)") from None
    try:
        volume = np.asarray(nibabel.load(str(path)).dataobj)
    except Exception as exc:  # nibabel, gzip and zlib each raise their own kind for a damaged file
        raise BuildError(f"{path}: not a readable NIfTI volume ({type(exc).__name__}: {exc})") from None
    while volume.ndim > 3 and volume.shape[-1] == 1:  # (x, y, z, 1): a single-frame series
        volume = volume[..., 0]
    if volume.ndim != 3:
        raise BuildError(f"{path}: expected a 3-D volume (x, y, z), got shape {volume.shape}")
    return volume


def load_mask(item: SourceItem) -> np.ndarray:
    """The item's binary mask as a (height, width) bool array (the chosen axial slice for a volume)."""
    assert item.mask is not None
    if item.slice_index is not None:
        return load_nifti(item.mask)[:, :, item.slice_index].T > 0
    from PIL import Image

    with Image.open(item.mask) as im:
        return np.asarray(im.convert("L")) > 0


class MaskPairsReader(Reader):
    """Image + binary mask pairs (segmentation releases such as BraTS slices, ISIC task 1, LiverCT)::

        ROOT/<images>/<name>.png            ROOT/<masks>/<name><mask_suffix>.png
        ROOT/<images>/<name>.nii.gz         ROOT/<masks>/<name><mask_suffix>.nii.gz   (optional extra: nibabel)

    A non-empty mask marks the image abnormal with ``finding``; boxes, laterality and size come from the mask
    (:mod:`medgrpo.data.build.evidence`). For a volume, the axial slice with the largest mask area is used
    (the middle slice when the mask is empty).

    Args:
        finding: the source label of the masked structure (e.g. ``tumor``).
        group_pattern: regex with one group that pulls the patient id out of the file name.
    """

    layout = "mask_pairs"

    def __init__(self, root: Path, finding: str, images: str = "images", masks: str = "masks",
                 mask_suffix: str = "", group_pattern: str | None = None) -> None:
        super().__init__(root)
        self.images = _need(self.root / images, "image folder")
        self.masks = _need(self.root / masks, "mask folder")
        self.finding, self.mask_suffix = finding, mask_suffix
        self.group_re = re.compile(group_pattern) if group_pattern else None

    def _mask_for(self, image: Path) -> Path:
        stem = _strip_suffix(image.name)
        suffix = image.name[len(stem):]
        path = self.masks / f"{stem}{self.mask_suffix}{suffix}"
        if not path.is_file():
            raise BuildError(f"{image}: no mask {path}")
        return path

    def read(self) -> list[SourceItem]:
        files = sorted(p for p in self.images.iterdir() if p.is_file()
                       and (p.suffix.lower() in IMAGE_SUFFIXES or p.name.lower().endswith(NIFTI_SUFFIXES)))
        if not files:
            raise BuildError(f"{self.images}: no images")
        items = []
        for path in files:
            mask = self._mask_for(path)
            stem = _strip_suffix(path.name)
            group = stem
            if self.group_re:
                m = self.group_re.search(path.name)
                if not m:
                    raise BuildError(f"{path}: file name does not match group_pattern '{self.group_re.pattern}'")
                group = m.group(1)
            item = SourceItem(_safe_id(stem), path, [], group, mask=mask)
            if path.name.lower().endswith(NIFTI_SUFFIXES):
                volume = load_nifti(mask) > 0
                area = volume.reshape(-1, volume.shape[2]).sum(axis=0)
                item.slice_index = int(area.argmax()) if area.max() > 0 else volume.shape[2] // 2
            if load_mask(item).any():
                item.labels = [self.finding]
            items.append(item)
        return items


READERS: dict[str, type[Reader]] = {
    r.layout: r for r in (Br35HReader, ISIC2018Reader, ChestXray14Reader, ImageFolderReader, CSVLabelsReader,
                          MaskPairsReader)
}
"""Layout name (the YAML ``layout:``) -> reader class."""


def make_reader(layout: str, root: Path, options: dict[str, Any] | None = None) -> Reader:
    """Build the reader of ``layout`` with the YAML ``reader:`` options; unknown names fail in one line."""
    if layout not in READERS:
        raise BuildError(f"config field 'layout': unknown layout '{layout}' (one of: {', '.join(READERS)})")
    try:
        return READERS[layout](Path(root), **(options or {}))
    except TypeError as exc:
        raise BuildError(f"config field 'reader': {exc}") from None
