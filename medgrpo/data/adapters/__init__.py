"""Source-format adapters: public medical VQA layouts -> a validated MedAD dataset folder.

``ADAPTERS`` maps a format name (``medgrpo data convert --format NAME``) to its :class:`Adapter`; each lives in
its own module. :func:`convert` runs one and writes the folder atomically with a dataset card.
"""

from __future__ import annotations

from pathlib import Path

from medgrpo.data.adapters import hf, jsonl, medad_mcq, omnimedvqa, pathvqa, pmc_vqa, slake, vqa_rad
from medgrpo.data.adapters.base import Adapter, AdapterError, ConvertReport, write_dataset
from medgrpo.data.adapters.mapping import load_mapping

ADAPTERS: dict[str, Adapter] = {
    m.ADAPTER.name: m.ADAPTER for m in (vqa_rad, slake, pathvqa, pmc_vqa, omnimedvqa, medad_mcq, jsonl, hf)
}


def convert(fmt: str, input_path: str | Path, out: str | Path, mapping: str | Path | None = None,
            version: str | None = None) -> ConvertReport:
    """Convert ``input_path`` in format ``fmt`` into a dataset folder at ``out``.

    Args:
        fmt: a key of :data:`ADAPTERS`.
        input_path: the source release folder or file.
        out: the output folder (must not exist, or be empty).
        mapping: a column-mapping YAML (``jsonl``/``hf``; optional override elsewhere).
        version: which release version to read, for a format published in several (PMC-VQA: ``1`` or ``2``).

    Raises:
        AdapterError: unknown format, unreadable source, bad mapping, or no usable rows.
    """
    if fmt not in ADAPTERS:
        raise AdapterError(f"unknown format '{fmt}' (one of: {', '.join(ADAPTERS)})")
    adapter = ADAPTERS[fmt]
    input_path = Path(input_path)
    if not input_path.exists():
        raise AdapterError(f"{input_path}: no such file or folder")
    loaded = load_mapping(mapping) if mapping is not None else None
    if version is not None and not adapter.versions:
        raise AdapterError(f"format '{fmt}' is published in one version: drop --version")
    rows = adapter.read(input_path, loaded, version) if adapter.versions else adapter.read(input_path, loaded)
    return write_dataset(adapter, rows, input_path, Path(out), loaded)


__all__ = ["ADAPTERS", "Adapter", "AdapterError", "ConvertReport", "convert"]
