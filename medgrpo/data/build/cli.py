"""``medgrpo data build --config SOURCE.yaml --out DIR [--seed S] [--cot template|teacher]``.

:func:`configure` plugs into ``medgrpo data``'s subcommand registry; :func:`main` runs it standalone
(``python -m medgrpo.data.build.cli``). Bad input exits 2 with one line: ``medgrpo: <reason>``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable
from pathlib import Path


def configure(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """Add the build options to ``parser``; returns the runner (``args -> exit code``)."""
    parser.add_argument("--config", required=True, type=Path, help="source YAML (see data/sources/*.yaml)")
    parser.add_argument("--out", required=True, type=Path, help="output dataset folder (must not exist or be empty)")
    parser.add_argument("--seed", type=int, default=0, help="seed for splits, questions and CoT phrasing")
    parser.add_argument("--cot", choices=("template", "teacher"), default=None,
                        help="CoT backend (default: the YAML's 'cot', else template)")

    def run(args: argparse.Namespace) -> int:
        from medgrpo.data.build.pipeline import build_dataset, load_config

        command = "medgrpo data build " + shlex.join(
            ["--config", str(args.config), "--out", str(args.out), "--seed", str(args.seed),
             *(["--cot", args.cot] if args.cot else [])])
        summary = build_dataset(load_config(args.config), args.out, args.seed, args.cot, command)
        kept = ", ".join(f"{split} {n}" for split, n in summary.records.items())
        dropped = summary.qc.get("dropped", 0)
        print(f"wrote {summary.out}: {kept} record(s); QC dropped {dropped} (counts in {summary.out}/README.md)")
        return 0

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="medgrpo data build",
                                     description="build MedAD-style training data from a labelled public source")
    run = configure(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except (ValueError, OSError) as exc:  # BuildError/RecordError/ImageError are ValueErrors
        print(f"medgrpo: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
