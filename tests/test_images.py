"""Image loading through PIL: formats, 16-bit grayscale, multi-page files, metadata stripping, bad files."""

import numpy as np
import pytest
from PIL import Image, PngImagePlugin

from medgrpo.data.dicom import write_dicom
from medgrpo.data.images import ImageError, image_size, is_dicom, load_image


@pytest.mark.parametrize("suffix", ["png", "jpg", "tif", "bmp"])
def test_formats_load_as_8bit_at_original_size(tmp_path, suffix):
    arr = np.random.default_rng(1).integers(0, 256, (30, 50, 3), dtype=np.uint8)
    Image.fromarray(arr).save(tmp_path / f"a.{suffix}")
    (im,) = load_image(tmp_path / f"a.{suffix}")
    assert im.mode == "RGB" and im.size == (50, 30) == image_size(tmp_path / f"a.{suffix}")
    if suffix != "jpg":  # lossless formats keep pixels exactly
        np.testing.assert_array_equal(np.asarray(im), arr)


def test_16bit_png_goes_through_percentile_window(tmp_path):
    arr = np.linspace(0, 60000, 40 * 40).reshape(40, 40).astype(np.uint16)
    Image.fromarray(arr).save(tmp_path / "g16.png")
    (im,) = load_image(tmp_path / "g16.png")
    out = np.asarray(im)
    assert im.mode == "L" and out.min() == 0 and out.max() == 255
    assert np.all(np.diff(out.ravel().astype(int)) >= 0)


def test_palette_and_alpha_become_rgb_or_l(tmp_path):
    Image.new("P", (8, 8), 3).save(tmp_path / "p.png")
    Image.new("RGBA", (8, 8), (1, 2, 3, 4)).save(tmp_path / "a.png")
    Image.new("LA", (8, 8), (9, 200)).save(tmp_path / "la.png")
    assert [load_image(tmp_path / n)[0].mode for n in ("p.png", "a.png", "la.png")] == ["RGB", "RGB", "L"]


def test_multipage_tiff_frames(tmp_path):
    pages = [Image.new("L", (6, 6), v) for v in (10, 20, 30)]
    pages[0].save(tmp_path / "m.tif", save_all=True, append_images=pages[1:])
    assert np.asarray(load_image(tmp_path / "m.tif")[0])[0, 0] == 20
    assert [np.asarray(p)[0, 0] for p in load_image(tmp_path / "m.tif", frames=(0, 2))] == [10, 30]
    with pytest.raises(ImageError, match="frame 5 does not exist"):
        load_image(tmp_path / "m.tif", frames=(5,))


def test_text_chunks_do_not_travel(tmp_path):
    info = PngImagePlugin.PngInfo()
    info.add_text("PatientName", "DOE^JANE")
    Image.new("RGB", (8, 8)).save(tmp_path / "t.png", pnginfo=info)
    (im,) = load_image(tmp_path / "t.png")
    assert im.info == {}


def test_bad_files_are_one_line_errors(tmp_path):
    (tmp_path / "zero.png").write_bytes(b"")
    with pytest.raises(ImageError, match=r"zero\.png: not a readable image \(empty file\)"):
        load_image(tmp_path / "zero.png")
    Image.new("RGB", (64, 64), (5, 5, 5)).save(tmp_path / "ok.png")
    (tmp_path / "cut.png").write_bytes((tmp_path / "ok.png").read_bytes()[:60])
    with pytest.raises(ImageError, match=r"cut\.png: not a readable image"):
        load_image(tmp_path / "cut.png")
    with pytest.raises(ImageError, match="does not exist"):
        load_image(tmp_path / "missing.png")
    (tmp_path / "text.jpg").write_text("hello")
    with pytest.raises(ImageError) as err:
        load_image(tmp_path / "text.jpg")
    assert "\n" not in str(err.value)


def test_dicom_detection_and_loading(tmp_path):
    path = write_dicom(tmp_path / "noext", np.full((10, 12), 7, np.uint16), window=(7, 10))
    assert is_dicom(path) and not is_dicom(tmp_path / "missing")
    assert image_size(path) == (12, 10)
    (im,) = load_image(path)
    assert im.mode == "L" and im.size == (12, 10)
    (tmp_path / "bad.dcm").write_bytes(b"\0" * 10)
    with pytest.raises(ImageError, match=r"bad\.dcm"):
        load_image(tmp_path / "bad.dcm")
