"""Evaluation harness: suites, batched generation, metrics from the reward verifiers, reports.

``evaluate(model_path, suite_or_dataset, out_dir)`` is the Python entry point and ``medgrpo eval`` the CLI;
``metrics.json``'s schema is documented in :mod:`medgrpo.eval.aggregate`. Importing this package does not
import torch.
"""

from medgrpo.eval.aggregate import SCHEMA_VERSION
from medgrpo.eval.evaluate import EvalError, evaluate
from medgrpo.eval.generate import ModelLoadError
from medgrpo.eval.report import compare
from medgrpo.eval.suites import DatasetSpec, Suite, SuiteError, load_suite

__all__ = ["SCHEMA_VERSION", "DatasetSpec", "EvalError", "ModelLoadError", "Suite", "SuiteError", "compare",
           "evaluate", "load_suite"]
