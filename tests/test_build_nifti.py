"""NIfTI volumes through the ``mask_pairs`` layout: slice choice, orientation, boxes and the rendered PNG.

Volumes are written by nibabel in the test (array axes x, y, z as NIfTI stores them); the reader renders the
axial slice with the largest mask area, transposed so that x runs along the image columns.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

nibabel = pytest.importorskip("nibabel")  # the `nifti` extra; `make test` installs it

from medgrpo.data.build.readers import BuildError, load_mask, make_reader  # noqa: E402

X, Y, Z = 48, 40, 6


def _save(array: np.ndarray, path: Path) -> None:
    nibabel.save(nibabel.Nifti1Image(array, np.eye(4)), str(path))


@pytest.fixture
def volumes(tmp_path) -> Path:
    """``tumour``: a blob at x 30..37, y 8..13 covering most area in slice 4 (a smaller one in slice 1);
    ``clear``: an empty mask."""
    root = tmp_path / "vols"
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    rng = np.random.default_rng(0)
    for name in ("tumour", "clear"):
        image = rng.normal(100.0, 20.0, size=(X, Y, Z)).astype(np.float32)
        image[:, :, 4] += np.linspace(0, 50, X, dtype=np.float32)[:, None]  # x-dependent: shows orientation
        _save(image, root / "images" / f"{name}.nii.gz")
        mask = np.zeros((X, Y, Z), dtype=np.uint8)
        if name == "tumour":
            mask[30:38, 8:14, 4] = 1
            mask[2:4, 2:4, 1] = 1
        _save(mask, root / "masks" / f"{name}_mask.nii.gz")
    return root


def test_reader_picks_the_largest_mask_slice_and_keeps_x_along_columns(volumes):
    items = {i.id: i for i in make_reader("mask_pairs", volumes, {"finding": "tumour", "mask_suffix": "_mask"}).read()}
    assert sorted(items) == ["clear", "tumour"]
    tumour, clear = items["tumour"], items["clear"]
    assert tumour.slice_index == 4 and tumour.labels == ["tumour"]
    assert clear.slice_index == Z // 2 and clear.labels == []  # empty mask: normal, the middle slice
    mask = load_mask(tumour)
    assert mask.shape == (Y, X)  # rows are y, columns are x
    rows, cols = np.nonzero(mask)
    assert (rows.min(), rows.max(), cols.min(), cols.max()) == (8, 13, 30, 37)


def test_build_renders_the_slice_and_boxes_it(volumes, tmp_path):
    from PIL import Image

    from medgrpo.data import load_records
    from medgrpo.data.build import build_dataset, load_config

    config_path = tmp_path / "nifti.yaml"
    config_path.write_text(
        f"source: nifti-test\nlayout: mask_pairs\nroot: {volumes}\n"
        "reader:\n  finding: tumour\n  mask_suffix: _mask\nmodality: MRI\nanatomy: brain\n"
    )
    config = load_config(config_path)
    config.splits = {"train": 1.0}
    config.tasks = ("lesion_localization", "anomaly_detection")
    summary = build_dataset(config, tmp_path / "out")
    records = load_records(tmp_path / "out")
    assert summary.records["train"] == len(records) > 0
    localization = [r for r in records if r.task == "lesion_localization"]
    assert len(localization) == 1
    record = localization[0]
    assert record.bbox == [[30.0, 8.0, 38.0, 14.0]]  # pixel-edge box of x 30..37, y 8..13
    assert record.evidence["abnormal"] is True and record.evidence["finding"] == "tumour"
    with Image.open(tmp_path / "out" / record.images[0]) as im:
        assert im.size == (X, Y) and im.format == "PNG"
        pixels = np.asarray(im.convert("L"), dtype=np.float32)
    # the slice's brightness rises with x, so the rendered columns must too (a transposed render would not)
    assert pixels[:, -8:].mean() > pixels[:, :8].mean() + 30
    normal = [r for r in records if r.task == "anomaly_detection" and not r.evidence["abnormal"]]
    assert len(normal) == 1 and normal[0].bbox is None


def test_unreadable_volume_is_one_line(volumes):
    (volumes / "masks" / "tumour_mask.nii.gz").write_bytes(b"not a volume")
    with pytest.raises(BuildError, match=r"tumour_mask.nii.gz: not a readable NIfTI volume"):
        make_reader("mask_pairs", volumes, {"finding": "tumour", "mask_suffix": "_mask"}).read()


def test_a_volume_that_is_not_3d_is_one_line(volumes):
    _save(np.zeros((X, Y), dtype=np.uint8), volumes / "masks" / "clear_mask.nii.gz")
    with pytest.raises(BuildError, match=r"clear_mask.nii.gz: expected a 3-D volume \(x, y, z\), got shape \(48, 40\)"):
        make_reader("mask_pairs", volumes, {"finding": "tumour", "mask_suffix": "_mask"}).read()
