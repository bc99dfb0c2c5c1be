"""MedAD-style training data from labelled public datasets: readers per source layout, five-task MCQ
questions, structured evidence from labels and masks, template/teacher chain-of-thought with verifier QC,
leakage-free splits and a dataset card. Entry point: :func:`build_dataset` (``medgrpo data build``)."""

from medgrpo.data.build.pipeline import BuildConfig, BuildSummary, build_dataset, load_config
from medgrpo.data.build.readers import READERS, BuildError, SourceItem, make_reader

__all__ = ["READERS", "BuildConfig", "BuildError", "BuildSummary", "SourceItem", "build_dataset", "load_config",
           "make_reader"]
