"""DICOM decoding on synthetic files written with pydicom: rescale, windowing (file, preset, percentile
fallback), MONOCHROME1, bit depths, multi-frame, RGB/YBR, compression, and the bad-input errors."""

import numpy as np
import pydicom
import pytest
from pydicom.encaps import encapsulate
from pydicom.pixels import convert_color_space
from pydicom.uid import JPEGLSLossless

from medgrpo.data.dicom import CT_PRESETS, DicomError, linear_window, parse_window, read_dicom, write_dicom

HU = np.linspace(-1000, 1000, 32 * 32).reshape(32, 32).round()  # integer HU, exactly storable


def _ct(tmp_path, name="ct.dcm", **kw):
    return write_dicom(tmp_path / name, (HU + 1024).astype(np.uint16), rescale=(1.0, -1024.0), **kw)


def test_rescale_then_preset_window_in_hounsfield_units(tmp_path):
    path = _ct(tmp_path)
    center, width = CT_PRESETS["brain"]
    out = read_dicom(path, window="brain")[0]
    assert out.dtype == np.uint8 and out.shape == (32, 32)
    np.testing.assert_array_equal(out, linear_window(HU.astype(np.float32), center, width))
    assert out[HU < center - width / 2].max() == 0 and out[HU > center + width / 2].min() == 255
    # the same pixels under a different preset give a different image
    assert not np.array_equal(out, read_dicom(path, window="lung")[0])


def test_file_window_then_percentile_fallback(tmp_path):
    with_window = read_dicom(_ct(tmp_path, "w.dcm", window=(-600, 1500)))[0]
    np.testing.assert_array_equal(with_window, read_dicom(_ct(tmp_path, "p.dcm"), window="-600,1500")[0])
    fallback = read_dicom(_ct(tmp_path, "n.dcm"))[0]  # no window tags: 0.5/99.5 percentiles -> 0/255
    assert fallback.min() == 0 and fallback.max() == 255
    assert (fallback == 0).mean() < 0.02 and (fallback == 255).mean() < 0.02


def test_voi_lut_sequence_is_applied(tmp_path):
    raw = np.arange(64 * 32, dtype=np.uint16).reshape(32, 64)
    path = write_dicom(tmp_path / "lut.dcm", raw, window=(0, 10))  # the LUT must win over the window
    ds = pydicom.dcmread(path)
    item = pydicom.Dataset()
    lut = (65535 - np.arange(2048) * 32).astype(np.uint16)  # an inverting 16-bit table over 0..2047
    item.LUTDescriptor = [2048, 0, 16]
    item.add_new(0x00283006, "US", lut.tolist())  # LUT Data (ambiguous VR: state US)
    ds.VOILUTSequence = [item]
    ds.save_as(path)
    np.testing.assert_array_equal(read_dicom(path)[0], np.rint(lut[raw] / 65535 * 255).astype(np.uint8))


def test_monochrome1_is_inverted(tmp_path):
    mono2 = read_dicom(_ct(tmp_path, "m2.dcm", window=(0, 2000)))[0]
    mono1 = read_dicom(_ct(tmp_path, "m1.dcm", window=(0, 2000), photometric="MONOCHROME1"))[0]
    np.testing.assert_array_equal(mono1, 255 - mono2)


@pytest.mark.parametrize("dtype,bits", [(np.uint8, 8), (np.uint16, 12), (np.uint16, 16), (np.int16, 16)])
def test_bit_depths_and_signed_data(tmp_path, dtype, bits):
    lo = -(2 ** (bits - 1)) if np.issubdtype(dtype, np.signedinteger) else 0
    raw = np.linspace(lo, lo + 2**bits - 1, 64 * 48).reshape(48, 64).astype(dtype)
    out = read_dicom(write_dicom(tmp_path / "b.dcm", raw, bits_stored=bits), window=f"{raw.mean()},{2**bits}")[0]
    assert out.shape == (48, 64)
    assert np.all(np.diff(out.astype(int).ravel()) >= 0)  # monotone in the stored value, signed included
    assert out[0, 0] < 5 and out[-1, -1] > 250


def test_multi_frame_middle_default_and_explicit_list(tmp_path):
    frames = np.stack([np.full((8, 8), v * 100, np.uint16) for v in range(5)])
    path = write_dicom(tmp_path / "mf.dcm", frames, window=(200, 400))
    (middle,) = read_dicom(path)
    np.testing.assert_array_equal(middle, read_dicom(path, frames=(2,))[0])
    picked = read_dicom(path, frames=(0, 4))
    assert [int(f[0, 0]) for f in picked] == [0, 255]
    assert len(read_dicom(path, frames="all")) == 5
    with pytest.raises(DicomError, match="frame 7 does not exist"):
        read_dicom(path, frames=(7,))


def test_rgb_and_ybr(tmp_path):
    rgb = np.random.default_rng(0).integers(0, 256, (12, 10, 3), dtype=np.uint8)
    np.testing.assert_array_equal(read_dicom(write_dicom(tmp_path / "rgb.dcm", rgb))[0], rgb)
    ybr = convert_color_space(rgb, "RGB", "YBR_FULL")
    back = read_dicom(write_dicom(tmp_path / "ybr.dcm", ybr, photometric="YBR_FULL"))[0]
    assert back.shape == (12, 10, 3) and np.abs(back.astype(int) - rgb).max() <= 2


def test_rle_compressed_decodes(tmp_path):
    raw = (HU + 1024).astype(np.uint16)
    plain = read_dicom(write_dicom(tmp_path / "a.dcm", raw, window=(1024, 2000)))[0]
    rle = write_dicom(tmp_path / "rle.dcm", raw, window=(1024, 2000), compress=True)
    assert pydicom.dcmread(rle).file_meta.TransferSyntaxUID.is_compressed
    np.testing.assert_array_equal(read_dicom(rle)[0], plain)


def test_unsupported_transfer_syntax_names_missing_handler(tmp_path):
    path = _ct(tmp_path)
    ds = pydicom.dcmread(path)
    ds.file_meta.TransferSyntaxUID = JPEGLSLossless
    ds.PixelData = encapsulate([b"\xff\xd8not-really-jpeg-ls"])
    ds.save_as(path, enforce_file_format=True)
    with pytest.raises(DicomError) as err:
        read_dicom(path)
    msg = str(err.value)
    assert "JPEG-LS Lossless" in msg and "not installed" in msg and "pylibjpeg" in msg and "\n" not in msg


def test_truncated_and_pixelless_files(tmp_path):
    path = _ct(tmp_path)
    data = path.read_bytes()
    (tmp_path / "trunc.dcm").write_bytes(data[: len(data) - 700])
    with pytest.raises(DicomError, match=r"trunc\.dcm: .*(cannot be decoded|not a readable)"):
        read_dicom(tmp_path / "trunc.dcm")
    (tmp_path / "head.dcm").write_bytes(data[:200])
    with pytest.raises(DicomError, match=r"head\.dcm"):
        read_dicom(tmp_path / "head.dcm")
    ds = pydicom.dcmread(path)
    del ds.PixelData
    ds.save_as(tmp_path / "nopix.dcm")
    with pytest.raises(DicomError, match="no pixel data"):
        read_dicom(tmp_path / "nopix.dcm")


def test_window_spec_parsing():
    assert parse_window("auto") is None
    assert parse_window("bone") == CT_PRESETS["bone"]
    assert parse_window("40,400") == (40.0, 400.0)
    with pytest.raises(ValueError, match="not 'auto', a preset"):
        parse_window("liver-ish")
