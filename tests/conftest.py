"""Session fixtures: the tiny models and a small MedAD-Synth are built once per test session.

Tests run offline and single-threaded (the same settings as CI and the demo).
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The training rows the builders stream to disk go to a session folder, not the user's ~/.cache (subprocesses
# inherit it; a run the fault tests kill -9 leaves its rows folder there).
import atexit  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

if "HF_DATASETS_CACHE" not in os.environ:
    os.environ["HF_DATASETS_CACHE"] = tempfile.mkdtemp(prefix="medgrpo-tests-datasets-")
    atexit.register(shutil.rmtree, os.environ["HF_DATASETS_CACHE"], True)

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

ARCHS = ("qwen2_5_vl", "qwen2_vl", "qwen3_vl")


@pytest.fixture(scope="session")
def tiny_model_dirs(tmp_path_factory) -> dict[str, Path]:
    """arch -> folder of a saved ``ci``-preset tiny model (random init, real architecture)."""
    from medgrpo.models.tiny import build_tiny_model

    root = tmp_path_factory.mktemp("tiny-models")
    return {arch: build_tiny_model(arch, "ci", root / arch, seed=0) for arch in ARCHS}


@pytest.fixture(scope="session")
def synth_dir(tmp_path_factory) -> Path:
    """A small MedAD-Synth dataset folder (every task family, train and test splits)."""
    from medgrpo.data.synth import generate_synth

    return generate_synth(tmp_path_factory.mktemp("synth") / "medad-synth", n_train=60, n_test=30, seed=0)
