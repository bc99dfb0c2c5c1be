"""Models: the tiny random-init Qwen-VL factory used by tests and the offline demo."""

from medgrpo.models.tiny import MODEL_CLASSES, PRESETS, TinyModelError, build_tiny_model, parameter_counts

__all__ = ["MODEL_CLASSES", "PRESETS", "TinyModelError", "build_tiny_model", "parameter_counts"]
