"""Image pipeline throughput: PNG load+resize, DICOM 512x512 16-bit CT decode+window+resize, cached re-read.

Targets (issue 3): >= 200 DICOM images/s on one core; a cached re-read >= 20x faster than decoding.
Run single-threaded, as training data loading would be per worker::

    OMP_NUM_THREADS=1 .venv/bin/python eval/bench_images.py [--n 200] [--max-pixels 1003520]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from medgrpo.data.boxes import ImageGrid
from medgrpo.data.dicom import write_dicom
from medgrpo.data.preprocess import ImageSettings, load_resized


def _ct_slice(rng: np.random.Generator) -> np.ndarray:
    """A 512x512 CT-like slice in stored values (HU + 1024): air, a body disc, noise."""
    yy, xx = np.mgrid[:512, :512]
    body = ((xx - 256) ** 2 + (yy - 256) ** 2) < 200**2
    hu = np.where(body, 40, -1000) + rng.normal(0, 20, (512, 512))
    return np.clip(hu + 1024, 0, 4095).astype(np.uint16)


def _rate(paths: list[Path], grid: ImageGrid, settings: ImageSettings) -> tuple[float, float]:
    """(images per CPU second of this process, images per wall second). On a shared machine the CPU-time
    figure is the one-core throughput; wall time also counts time other processes held the core."""
    cpu, wall = time.process_time(), time.perf_counter()
    for path in paths:
        load_resized(path, grid, settings)
    return len(paths) / (time.process_time() - cpu), len(paths) / (time.perf_counter() - wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="images per measurement")
    parser.add_argument("--max-pixels", type=int, default=28 * 28 * 1280, help="grid max_pixels (Qwen default)")
    args = parser.parse_args()
    grid = ImageGrid("abs", 28, 56 * 56, args.max_pixels)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        pngs, dicoms = [], []
        for i in range(args.n):
            Image.fromarray(rng.integers(0, 256, (512, 512, 3), dtype=np.uint8)).save(root / f"{i}.png")
            pngs.append(root / f"{i}.png")
            dicoms.append(write_dicom(root / f"{i}.dcm", _ct_slice(rng), rescale=(1.0, -1024.0), window=(40, 400)))
        settings = ImageSettings(window="lung")
        cached = ImageSettings(window="lung", cache_dir=str(root / "cache"))
        png_rate = _rate(pngs, grid, ImageSettings())
        dicom_rate = _rate(dicoms, grid, settings)
        dicom_auto = _rate(dicoms, grid, ImageSettings())
        _rate(dicoms, grid, cached)  # fill the cache
        cached_rate = _rate(dicoms, grid, cached)
    size = grid.resized_size(512, 512)
    print(f"{args.n} images of 512x512 -> {size[0]}x{size[1]}, one thread")
    print(f"{'pipeline':<46}{'img/CPU-s':>10}{'img/wall-s':>11}")
    rows = [("PNG RGB load + resize", png_rate, ""),
            ("DICOM 16-bit CT decode + lung preset + resize", dicom_rate, "target >= 200"),
            ("DICOM 16-bit CT decode + file window + resize", dicom_auto, ""),
            ("cached re-read (DICOM entries)", cached_rate,
             f"{cached_rate[0] / dicom_rate[0]:.0f}x decoding; target >= 20x")]
    for name, (cpu, wall), note in rows:
        print(f"{name:<46}{cpu:>10.0f}{wall:>11.0f}   {note}")

if __name__ == "__main__":
    main()
