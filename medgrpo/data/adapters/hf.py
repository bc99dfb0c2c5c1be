"""Hugging Face ``datasets`` on disk: a ``save_to_disk`` folder (Dataset or DatasetDict) or parquet files, with
columns mapped by a YAML mapping (:mod:`medgrpo.data.adapters.mapping`). Image columns may hold encoded images
(``Image`` feature / ``{bytes, path}`` structs, written out as files) or paths relative to the input folder.
Parquet splits come from the file names (``train-00000-of-00001.parquet`` -> train) or, in the Hub's parquet export
(``default/<split>/0000.parquet``), from the folder names.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from medgrpo.data.adapters.base import Adapter, AdapterError, SourceRow, norm_split
from medgrpo.data.adapters.mapping import check_columns, rows_from_table

_SPLIT_RE = re.compile(r"(train|test|validation|valid|val|dev)\b")


def split_of(file: Path, base: Path) -> str | None:
    """The split a parquet file holds: from its name (``data/test-00000-of-00001.parquet``, the Hub's upload
    layout) or, failing that, from the nearest folder named for a split (``default/test/0000.parquet``, the
    Hub's parquet export)."""
    for name in (file.stem, *(p.name for p in file.relative_to(base).parents if p.name)):
        match = _SPLIT_RE.match(name)
        if match:
            return norm_split(match.group(1))
    return None


def _parquet(path: Path, mapping: dict[str, Any]) -> Iterator[SourceRow]:
    import pyarrow.parquet as pq

    files = sorted(path.rglob("*.parquet")) if path.is_dir() else [path]
    if not files:
        raise AdapterError(f"{path}: no .parquet files and no save_to_disk dataset")
    base = path if path.is_dir() else path.parent
    for file in files:
        try:
            table = pq.read_table(file)
        except Exception as exc:  # pyarrow raises several types for a broken file
            raise AdapterError(f"{file}: not a readable parquet file ({type(exc).__name__})") from None
        check_columns(mapping, table.column_names, str(file))
        # ids from the file's path under the input, not its name alone: every split of the Hub's export holds a
        # 0000.parquet
        label = "-".join(file.relative_to(base).with_suffix("").parts) if path.is_dir() else file.stem
        yield from rows_from_table(table.to_pylist(), mapping, str(file), base, split_of(file, base), label)


def _saved(path: Path, mapping: dict[str, Any]) -> Iterator[SourceRow]:
    import datasets

    loaded = datasets.load_from_disk(str(path))
    splits = loaded.items() if isinstance(loaded, datasets.DatasetDict) else [(None, loaded)]
    for split, ds in splits:
        check_columns(mapping, ds.column_names, f"{path} [{split or 'dataset'}]")
        for name, feature in ds.features.items():
            if isinstance(feature, datasets.Image):  # keep the encoded bytes: no decode/re-encode round trip
                ds = ds.cast_column(name, datasets.Image(decode=False))
        yield from rows_from_table(ds, mapping, f"{path}/{split or 'dataset'}", path, split and norm_split(split))


def read(path: Path, mapping: dict[str, Any] | None = None) -> Iterator[SourceRow]:
    if mapping is None:
        raise AdapterError(f"{path}: the 'hf' format needs --mapping YAML (record field -> column)")
    if not path.exists():
        raise AdapterError(f"{path}: no such file or folder")
    saved = path.is_dir() and ((path / "dataset_info.json").is_file() or (path / "dataset_dict.json").is_file())
    return _saved(path, mapping) if saved else _parquet(path, mapping)


ADAPTER = Adapter(
    name="hf",
    source="Hugging Face datasets",
    licence="unspecified (set 'licence' in the mapping)",
    homepage="-",
    layout="a datasets.save_to_disk folder, a .parquet file or a folder of them; --mapping YAML",
    read=read,
)
