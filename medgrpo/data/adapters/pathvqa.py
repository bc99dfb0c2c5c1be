"""PathVQA (He et al., 2020): pathology VQA, yes/no (closed) and open questions.

Read from its published Hugging Face layouts (``flaviagiammarino/path-vqa``): the upload's
``data/{train,validation,test}-*.parquet`` and the Hub's parquet export ``default/{train,validation,test}/*.parquet``
(the split from the folder), with columns ``image`` (``{bytes, path}``), ``question`` and ``answer``. The original
release's pickled question files are not read: unpickling runs arbitrary code.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from medgrpo.data.adapters import hf
from medgrpo.data.adapters.base import Adapter, SourceRow

MAPPING = {"columns": {"images": "image", "question": "question", "answer": "answer"}, "task": "other",
           "_file": "<pathvqa mapping>"}


def read(path: Path, mapping: dict[str, Any] | None = None) -> Iterator[SourceRow]:
    for row in hf.read(path, mapping or MAPPING):
        if not row.drop:
            row.record["id"] = f"pathvqa-{row.record['id']}"
        yield row


ADAPTER = Adapter(
    name="pathvqa",
    source="PathVQA",
    licence="MIT (as published on the Hugging Face dataset card)",
    homepage="https://huggingface.co/datasets/flaviagiammarino/path-vqa",
    layout="the HF parquet layouts: data/<split>-*.parquet or default/<split>/*.parquet, with image, question, answer",
    read=read,
)
