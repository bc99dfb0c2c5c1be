"""prepare_images: one resize to the processor's grid, boxes round-trip, multi-image/multi-frame records, and the
content-hash cache (a second pass never decodes again; any setting change is a miss)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

import medgrpo.data.preprocess as pre
from medgrpo.data.boxes import BoxFrame, ImageGrid
from medgrpo.data.dicom import write_dicom
from medgrpo.data.images import ImageError
from medgrpo.data.preprocess import ImageSettings, load_resized, prepare_images
from medgrpo.data.record import MedADRecord

GRID = ImageGrid("abs", factor=28, min_pixels=56 * 56, max_pixels=28 * 28 * 64)


def _record(images, **kw):
    return MedADRecord(id="r1", images=images, question="Which modality?", options=["CT", "MRI"], answer="A",
                       task="modality_classification", **kw)


def test_grid_matches_transformers_qwen2vl_processor():
    from transformers import Qwen2VLImageProcessor

    processor = Qwen2VLImageProcessor(size={"shortest_edge": 56 * 56, "longest_edge": 28 * 28 * 64})
    grid = ImageGrid.from_processor(processor, "qwen2_vl")
    patch = processor.patch_size
    rng = np.random.default_rng(0)
    # sides >= factor / 2: transformers' rule and ours agree (below that, see the fixed-point check)
    sizes = [(int(w), int(h)) for w, h in rng.integers(14, 900, size=(12, 2))] + [(28, 28), (1000, 20)]
    thw = processor(images=[Image.new("RGB", s) for s in sizes], return_tensors="np")["image_grid_thw"]
    for (w, h), (_, gh, gw) in zip(sizes, thw, strict=True):
        assert grid.resized_size(w, h) == (gw * patch, gh * patch), (w, h)
    # what prepare_images hands over is a fixed point of the processor's own resize, for any size (also a
    # 10-pixel-high strip), so the trainer, vLLM and the evaluator count the same image tokens
    resized = [grid.resized_size(w, h) for w, h in sizes + [(606, 10), (9, 9)]]
    thw = processor(images=[Image.new("RGB", s) for s in resized], return_tensors="np")["image_grid_thw"]
    assert [(gw * patch, gh * patch) for _, gh, gw in thw] == resized


@settings(max_examples=200, deadline=None)
@given(
    w=st.integers(28, 1000), h=st.integers(28, 1000), fmt=st.sampled_from(["abs", "rel1000"]),
    fx=st.tuples(st.floats(0, 1), st.floats(0, 1)), fy=st.tuples(st.floats(0, 1), st.floats(0, 1)),
)
def test_box_round_trip_within_one_pixel(w, h, fmt, fx, fy):
    frame = ImageGrid(fmt).frame(w, h)
    box = [min(fx) * w, min(fy) * h, max(fx) * w, max(fy) * h]
    back = frame.to_original(frame.to_model(box))
    assert max(abs(a - b) for a, b in zip(back, box, strict=True)) <= 1.0


def test_resized_once_to_the_grid_and_rgb(tmp_path):
    Image.new("L", (300, 170), 90).save(tmp_path / "a.png")
    images, frame = prepare_images(_record(["a.png"]), tmp_path, GRID)
    assert frame == GRID.frame(300, 170)
    assert isinstance(frame, BoxFrame) and (frame.width, frame.height) == (300, 170)
    assert images[0].mode == "RGB" and images[0].size == (frame.model_width, frame.model_height)
    assert images[0].size[0] % 28 == 0 and images[0].size[1] % 28 == 0


def test_multi_image_and_multi_frame_records(tmp_path):
    Image.new("RGB", (120, 80)).save(tmp_path / "first.png")
    write_dicom(tmp_path / "mf.dcm", np.stack([np.full((40, 60), v, np.uint16) for v in (0, 50, 100)]),
                window=(50, 100))
    images, frame = prepare_images(_record(["first.png", "mf.dcm"]), tmp_path, GRID,
                                   ImageSettings(frames=[0, 2]))
    assert len(images) == 3 and (frame.width, frame.height) == (120, 80)
    assert images[1].size == GRID.resized_size(60, 40)
    assert np.asarray(images[1])[0, 0, 0] < np.asarray(images[2])[0, 0, 0]
    # the box frame is always that of images[0], even when images[0] is multi-frame
    _, frame = prepare_images(_record(["mf.dcm"]), tmp_path, GRID)
    assert (frame.width, frame.height) == (60, 40)


def test_paths_outside_the_root_are_refused(tmp_path):
    (tmp_path / "root").mkdir()
    Image.new("RGB", (30, 30)).save(tmp_path / "outside.png")
    with pytest.raises(ImageError, match="resolves outside the dataset root"):
        prepare_images(_record(["../outside.png"]), tmp_path / "root", GRID)
    with pytest.raises(ImageError, match="is absolute"):
        prepare_images(_record([str(tmp_path / "outside.png")]), tmp_path / "root", GRID)


def _counting(monkeypatch):
    calls = []
    real = pre.load_image

    def counted(path, **kw):
        calls.append(path)
        return real(path, **kw)

    monkeypatch.setattr(pre, "load_image", counted)
    return calls


def test_cache_second_pass_does_not_decode_and_invalidates(tmp_path, monkeypatch):
    calls = _counting(monkeypatch)
    hu = np.random.default_rng(0).integers(0, 2000, (64, 96)).astype(np.uint16)
    path = write_dicom(tmp_path / "ct.dcm", hu, rescale=(1.0, -1024.0))
    cached = ImageSettings(window="lung", cache_dir=str(tmp_path / "cache"))
    first = load_resized(path, GRID, cached)
    second = load_resized(path, GRID, cached)
    assert len(calls) == 1  # the second pass read the cache
    assert second[0][1] == (96, 64) and first[0][0].tobytes() == second[0][0].tobytes()
    assert load_resized(path, GRID, ImageSettings(window="lung"))[0][0].tobytes() == first[0][0].tobytes()
    assert len(calls) == 2  # no cache_dir: decoded
    load_resized(path, GRID, ImageSettings(window="bone", cache_dir=str(tmp_path / "cache")))
    assert len(calls) == 3  # another window is a miss
    load_resized(path, ImageGrid("abs", 28, 56 * 56, 28 * 28 * 16), cached)
    assert len(calls) == 4  # another grid is a miss
    write_dicom(path, hu + 1, rescale=(1.0, -1024.0))  # the file changed (size/mtime)
    load_resized(path, GRID, cached)
    assert len(calls) == 5
    load_resized(path, GRID, cached)
    assert len(calls) == 5


def test_a_torn_cache_entry_is_a_miss(tmp_path, monkeypatch):
    calls = _counting(monkeypatch)
    Image.new("RGB", (50, 50), (1, 2, 3)).save(tmp_path / "a.png")
    cached = ImageSettings(cache_dir=str(tmp_path / "cache"))
    load_resized(tmp_path / "a.png", GRID, cached)
    (entry,) = (tmp_path / "cache").rglob("*.px")
    entry.write_bytes(entry.read_bytes()[:20])
    (im, size), = load_resized(tmp_path / "a.png", GRID, cached)
    assert len(calls) == 2 and size == (50, 50) and im.getpixel((0, 0)) == (1, 2, 3)


def test_settings_are_checked():
    with pytest.raises(ValueError, match="window 'kidney'"):
        ImageSettings(window="kidney")
    with pytest.raises(ValueError, match="frames"):
        ImageSettings(frames="first")
    with pytest.raises(ValueError, match="percentiles"):
        ImageSettings(percentiles=(99, 1))
    assert ImageSettings(frames=[1, 2]).frames == (1, 2)
    assert ImageSettings(cache_dir="/a").fingerprint() == ImageSettings(cache_dir="/b").fingerprint()
