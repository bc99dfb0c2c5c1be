"""Reading a small YAML config file (a suite, a build source, a column mapping): one rule for all of them.

``yaml.safe_load`` only (a YAML tag never constructs an object), and every problem is one line naming the file and,
where it applies, the field.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml


def read_yaml_mapping(path: str | Path, allowed: Iterable[str], error: type[ValueError], what: str) -> dict[str, Any]:
    """The mapping a YAML file holds, with no key outside ``allowed``; else ``error`` in one line.

    Args:
        path: the YAML file.
        allowed: the top-level keys the file may use.
        error: the ``ValueError`` subclass to raise (each caller's own error type).
        what: what the file is, for the messages (e.g. "suite file").
    """
    path = Path(path)
    if not path.is_file():
        raise error(f"{path}: no such {what}")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise error(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise error(f"{path}: must be a YAML mapping of fields ({what})")
    unknown = sorted(set(raw) - set(allowed))
    if unknown:
        raise error(f"{path}: field '{unknown[0]}': unknown key (allowed: {', '.join(sorted(allowed))})")
    return raw
