"""Models: the tiny random-init Qwen-VL factory (tests, offline demo) and the one checkpoint loader (loading.py)."""

from medgrpo.models.tiny import MODEL_CLASSES, PRESETS, TinyModelError, build_tiny_model, parameter_counts

__all__ = ["MODEL_CLASSES", "PRESETS", "TinyModelError", "build_tiny_model", "parameter_counts"]
