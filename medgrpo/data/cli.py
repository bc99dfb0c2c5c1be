"""``medgrpo data <subcommand>``: validate and convert dataset folders.

Each subcommand is registered in :data:`SUBCOMMANDS` as ``name -> (help, "module:configure")``; ``configure``
adds the subcommand's options to its parser and returns the function that runs it (``args -> exit code``).
Modules are imported only when their subcommand runs, so a new subcommand is one line here plus its own module
(``build`` lives in :mod:`medgrpo.data.build.cli`).

Exit codes: 0 success, 1 ``validate`` found bad rows, 2 bad input (one line on stderr: ``medgrpo: <reason>``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

Runner = Callable[[argparse.Namespace], int]

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "validate": ("check every row of a dataset folder (file:line: field: reason)", "medgrpo.data.cli:configure_validate"),
    "convert": ("convert a public dataset layout into a MedAD dataset folder", "medgrpo.data.cli:configure_convert"),
    "build": ("build MedAD-style training data from a labelled public source", "medgrpo.data.build.cli:configure"),
}


_ORDER = {"train.jsonl": 0, "validation.jsonl": 1, "test.jsonl": 2}


def _splits(path: Path) -> list[Path]:
    """Every ``<split>.jsonl`` of a dataset folder, train first (a file path is its own split)."""
    return sorted(path.glob("*.jsonl"), key=lambda p: (_ORDER.get(p.name, 3), p.name)) if path.is_dir() else [path]


def _line_of(file: Path, record_id: str) -> int:
    """The line of ``file`` holding ``record_id`` (records do not carry their line; duplicates are rare)."""
    with open(file, encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, start=1):
            if f'"{record_id}"' in line and str(json.loads(line).get("id")) == record_id:
                return line_no
    return 0


def configure_validate(parser: argparse.ArgumentParser) -> Runner:
    parser.add_argument("path", type=Path, help="dataset folder (every *.jsonl in it) or one .jsonl file")
    parser.add_argument("--no-check-images", action="store_true", help="skip image existence/size checks")

    def run(args: argparse.Namespace) -> int:
        from medgrpo.data.record import LoadReport, RecordError, load_records

        files = _splits(args.path) if args.path.exists() else []
        if not files:
            raise RecordError(f"{args.path}: no dataset folder with *.jsonl files, and no .jsonl file")
        total, errors, seen = 0, [], {}
        for file in files:
            report = LoadReport(path=str(file))
            records = load_records(file, on_bad_record="skip", check_images=not args.no_check_images, report=report)
            errors += report.skipped
            for record in records:  # ids must be unique across splits too (no train/test leakage)
                if record.id in seen:
                    errors.append(f"{file}:{_line_of(file, record.id)}: field 'id': duplicate id '{record.id}' "
                                  f"(also in {seen[record.id]})")
                seen[record.id] = file.name
            total += len(records)
        for line in errors:
            print(line)
        if errors:
            print(f"{len(errors)} bad row(s), {total} valid, in {len(files)} file(s)", file=sys.stderr)
            return 1
        print(f"ok: {total} valid record(s) in {len(files)} file(s)")
        return 0

    return run


def configure_convert(parser: argparse.ArgumentParser) -> Runner:
    from medgrpo.data.adapters import ADAPTERS

    formats = "\n".join(f"  {name:<11} {a.source}: {a.layout}" for name, a in ADAPTERS.items())
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "formats:\n" + formats
    parser.add_argument("--format", required=True, choices=list(ADAPTERS), help="source layout (see below)")
    parser.add_argument("--input", required=True, type=Path, help="the source release folder or file")
    parser.add_argument("--out", required=True, type=Path, help="output dataset folder (must not exist or be empty)")
    parser.add_argument("--mapping", type=Path, default=None, help="YAML column mapping (jsonl/hf formats)")
    parser.add_argument("--version", default=None, help="release version, for a format published in several "
                                                        "(pmc_vqa: 1 or 2; required when both are present)")

    def run(args: argparse.Namespace) -> int:
        from medgrpo.data.adapters import convert

        report = convert(args.format, args.input, args.out, args.mapping, args.version)
        kept = ", ".join(f"{split} {n}" for split, n in sorted(report.kept.items()))
        print(f"wrote {args.out}: {kept}; dropped {len(report.dropped)} row(s) (reasons in {args.out}/README.md)")
        return 0

    return run


def _load(target: str) -> Callable[[argparse.ArgumentParser], Runner]:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="medgrpo data", description="validate, convert and build datasets")
    sub = parser.add_subparsers(dest="command", metavar="{" + ",".join(SUBCOMMANDS) + "}")
    for name, (help_, _) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_)
    if not argv or argv[0] not in SUBCOMMANDS:
        parser.parse_args(argv or ["--help"])  # --help, or argparse's own error (exit 2) for an unknown name
        return 2
    name = argv[0]
    subparser = argparse.ArgumentParser(prog=f"medgrpo data {name}", description=SUBCOMMANDS[name][0])
    run = _load(SUBCOMMANDS[name][1])(subparser)
    args = subparser.parse_args(argv[1:])
    try:
        return int(run(args))
    except (ValueError, OSError) as exc:  # RecordError/AdapterError/ImageError are ValueErrors
        print(f"medgrpo: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
