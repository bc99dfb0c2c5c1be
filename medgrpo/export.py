"""Export a stage-1 or stage-2 output folder to the Hugging Face Hub format, verify it, push it.

The export is one folder that ``AutoModelForImageTextToText.from_pretrained`` and
``AutoProcessor.from_pretrained`` load offline with nothing but transformers installed: safetensors weights
(a LoRA adapter is merged with peft's ``merge_and_unload`` unless kept), config, generation config, the
processor exactly as training used it (image pixel limits, tokenizer, chat template), a model card
(:mod:`medgrpo.model_card`), the sanitised provenance ``medgrpo_run.json`` and a manifest of sha256 hashes.
It is written to a temporary sibling folder and renamed into place, so a failure never leaves half an export.

``--verify`` reloads an export and the source checkpoint and checks that greedy generation on held-out
samples is token-for-token identical. ``--push-to-hub`` uploads the folder in one commit with huggingface_hub.

::

    medgrpo export --model OUT/con_grpo --out OUT/export [--metrics OUT/eval/metrics.json] [--keep-adapter]
                   [--overwrite] [--push-to-hub ORG/NAME [--private] [--revision BRANCH] [--dry-run]]
    medgrpo export --verify OUT/export --source OUT/con_grpo --dataset data/medad-synth
    medgrpo export --out OUT/export --push-to-hub ORG/NAME     # push an export made (and verified) earlier
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medgrpo import __version__
from medgrpo.model_card import (
    HUB_ID_RE,
    RUN_INFO,
    CardError,
    build_model_card,
    hub_id,
    locate,
    read_metrics,
    read_run_info,
    root_base_model,
    scrub,
    stage_chain,
)
from medgrpo.models.loading import (
    ADAPTER_CONFIG,
    ModelLoadError,
    adapter_base,
    check_model_dir,
    load_model,
    load_processor,
    resolve_name,
    trained_system_prompt,
)

MANIFEST = "medgrpo_manifest.json"
_PATH_KEYS = ("_name_or_path", "name_or_path", "base_model_name_or_path")
_LOAD_STATE_KEYS = ("is_local", "local_files_only")  # how this machine loaded the model, not part of it
_VOCAB_FILES = {"tokenizer.json", "vocab.json", "merges.txt"}
_TEXT_SUFFIXES = {".json", ".jinja", ".md", ".txt", ".yaml", ".yml", ".py"}


class ExportError(ValueError):
    """The export cannot be made, verified or pushed; the message is one line naming the file or option."""


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]


# --------------------------------------------------------------------------- loading the source checkpoint


def _check_model_dir(run_dir: Path) -> None:
    if not run_dir.is_dir():
        raise ExportError(f"--model {run_dir}: no such folder")
    try:
        check_model_dir(run_dir)
    except ModelLoadError as e:
        raise ExportError(f"--model {e}") from None


def load_source(run_dir: str | Path, merge: bool = True) -> tuple[Any, Any]:
    """Load a training output folder as ``(model, processor)`` with :mod:`medgrpo.models.loading` (an adapter
    goes onto its base, merged when ``merge``; the processor carries the run's pixel limits)."""
    run_dir = Path(run_dir)
    _check_model_dir(run_dir)
    try:
        model = load_model(run_dir, merge=merge)
        processor = load_processor(run_dir)
    except (OSError, ValueError, KeyError) as e:
        raise ExportError(f"cannot load the model in {run_dir}: {_first_line(e)}") from None
    model.eval()
    return model, processor


# --------------------------------------------------------------------------- the folder: hygiene and manifest


def _scrub_json_paths(folder: Path, near: Path) -> None:
    """Replace local paths that transformers/peft record (``_name_or_path`` & co.) by a Hub id or nothing, and
    drop the loading state transformers writes back (``local_files_only`` would follow the model to the Hub)."""
    for path in folder.rglob("*.json"):
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            continue
        changed = bool([data.pop(key) for key in _LOAD_STATE_KEYS if key in data])
        for key in _PATH_KEYS:
            value = data.get(key)
            if isinstance(value, str) and value and hub_id(value, near) is None:
                data[key] = None if key == "base_model_name_or_path" else ""
                changed = True
        if changed:
            path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _set_adapter_base(path: Path, base: str | None) -> None:
    config = json.loads(path.read_text(encoding="utf-8"))
    config["base_model_name_or_path"] = base
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _scannable_text(path: Path) -> str | None:
    """The text of a file that could carry a path: text files whole, the JSON header of a safetensors file.

    Vocabularies are skipped: a real tokenizer has tokens such as ``/home`` or ``/work`` that are not paths.
    """
    if path.name in _VOCAB_FILES:
        return None
    if path.suffix in _TEXT_SUFFIXES:
        return path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".safetensors":
        with open(path, "rb") as fh:
            size = int.from_bytes(fh.read(8), "little")
            return fh.read(min(size, 100_000_000)).decode("utf-8", errors="replace")
    return None


def find_local_paths(folder: Path, forbidden: list[str]) -> list[str]:
    """``file: path`` for every occurrence of one of the ``forbidden`` local directories in the folder."""
    found = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        text = _scannable_text(path)
        if text is None:
            continue
        found += [f"{path.relative_to(folder)}: {f}" for f in forbidden if f in text]
    return found


def _local_roots(*paths: Path | str | None) -> list[str]:
    """The machine-specific directories that must not appear in an export (as given and resolved)."""
    roots: set[str] = set()
    for p in (*paths, Path.home(), Path.cwd()):
        if p is None:
            continue
        for q in (Path(p).absolute(), Path(p).resolve()):
            if len(q.parts) > 1:
                roots.add(str(q))
    return sorted(roots)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(folder: str | Path) -> dict[str, Any]:
    """Write ``medgrpo_manifest.json``: sha256 and size of every other file in the folder."""
    folder = Path(folder)
    files = {
        p.relative_to(folder).as_posix(): {"sha256": _sha256(p), "bytes": p.stat().st_size}
        for p in sorted(folder.rglob("*")) if p.is_file() and p.name != MANIFEST
    }
    manifest = {"schema_version": 1, "medgrpo_version": __version__, "files": files}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def check_manifest(folder: str | Path) -> list[str]:
    """Problems found comparing the folder with its manifest (missing, extra or changed files); [] when intact."""
    folder = Path(folder)
    path = folder / MANIFEST
    try:
        files = json.loads(path.read_text(encoding="utf-8"))["files"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
        return [f"{path}: cannot read the manifest ({_first_line(e)})"]
    present = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST}
    problems = [f"{name}: missing" for name in sorted(set(files) - present)]
    problems += [f"{name}: not in the manifest" for name in sorted(present - set(files))]
    problems += [f"{name}: sha256 differs from the manifest" for name in sorted(present & set(files))
                 if _sha256(folder / name) != files[name]["sha256"]]
    return problems


# --------------------------------------------------------------------------- export


def _prepare_out(out_dir: Path, run_dir: Path, overwrite: bool) -> None:
    out, run = out_dir.resolve(), run_dir.resolve()
    if out == run or out in run.parents:
        raise ExportError(f"--out {out_dir} would replace --model {run_dir}: choose another folder")
    if out_dir.exists() and not out_dir.is_dir():
        raise ExportError(f"--out {out_dir} is a file, not a folder")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not overwrite:
        raise ExportError(f"--out {out_dir} is not empty: pass --overwrite to replace it")


def _replace_dir(tmp: Path, out_dir: Path) -> None:
    """Move the finished ``tmp`` folder to ``out_dir``, replacing what was there only once ``tmp`` is complete."""
    old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
    if out_dir.exists():
        out_dir.rename(old)
    tmp.rename(out_dir)
    shutil.rmtree(old, ignore_errors=True)


def export_model(
    model_dir: str | Path,
    out_dir: str | Path,
    *,
    metrics: str | Path | None = None,
    keep_adapter: bool = False,
    overwrite: bool = False,
    repo_id: str | None = None,
    license: str = "apache-2.0",
) -> Path:
    """Export a training output folder (full weights or LoRA adapter) to a self-contained Hub model folder.

    Args:
        model_dir: a stage-1 or stage-2 output folder (or one of its ``checkpoint-N`` folders).
        out_dir: the export folder; must be empty or absent unless ``overwrite``.
        metrics: a ``metrics.json`` from ``medgrpo eval`` for the card's eval table and ``model-index``.
        keep_adapter: keep a LoRA run as an adapter instead of merging it into the base weights.
        overwrite: replace a non-empty ``out_dir`` (only after the new export is complete).
        repo_id: the Hub repo the card's usage snippet loads from (default: the folder name).
        license: the card's license identifier.

    Returns the export folder. Raises :class:`ExportError` with a one-line reason.
    """
    run_dir, out_dir = Path(model_dir), Path(out_dir)
    _check_model_dir(run_dir)
    _prepare_out(out_dir, run_dir, overwrite)
    try:
        metrics_data = read_metrics(Path(metrics)) if metrics else None
        chain = stage_chain(run_dir)
    except CardError as e:
        raise ExportError(str(e)) from None
    base = adapter_base(run_dir)
    adapter_of = base if keep_adapter else None
    model, processor = load_source(run_dir, merge=not keep_adapter)

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        (tmp / "README.md").unlink(missing_ok=True)  # peft writes its own stub card for adapters
        if not (tmp / "generation_config.json").exists():  # adapters save none; users still want greedy defaults
            model.generation_config.save_pretrained(tmp)
        processor.save_pretrained(tmp)
        if adapter_of:  # peft records the weights' origin, which is not the base of a stage-2 adapter
            _set_adapter_base(tmp / ADAPTER_CONFIG, hub_id(adapter_of, run_dir))
        _scrub_json_paths(tmp, run_dir)
        if chain:
            (tmp / RUN_INFO).write_text(json.dumps(scrub(chain[-1]), indent=2) + "\n", encoding="utf-8")
        ip = getattr(processor, "image_processor", None)
        size = getattr(ip, "size", None) or {}
        limits = (size.get("shortest_edge"), size.get("longest_edge"))
        card = build_model_card(
            model_id=repo_id or f"./{out_dir.name}",
            model_type=model.config.model_type,
            chain=chain,
            base_model=root_base_model(chain, base),
            metrics=metrics_data,
            license=license,
            adapter_of=adapter_of,
            pixel_limits=(int(limits[0]), int(limits[1])) if all(limits) else None,
            near=run_dir,
        )
        (tmp / "README.md").write_text(card, encoding="utf-8")
        leaks = find_local_paths(tmp, _local_roots(run_dir, locate(base, run_dir) if base else None, out_dir, tmp))
        if leaks:
            raise ExportError(f"the export would contain a local path ({leaks[0]}); nothing was written")
        for path in tmp.rglob("*"):  # safetensors writes 0600 temp files; an export is meant to be shared
            path.chmod(0o755 if path.is_dir() else 0o644)
        write_manifest(tmp)
        _replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


# --------------------------------------------------------------------------- push


def upload_files(folder: str | Path) -> list[str]:
    """Exactly the files ``HfApi.upload_folder`` uploads from ``folder`` (its default ignore patterns applied)."""
    from huggingface_hub.utils import DEFAULT_IGNORE_PATTERNS, filter_repo_objects

    folder = Path(folder)
    paths = sorted(p.relative_to(folder).as_posix() for p in folder.glob("**/*") if p.is_file())
    return list(filter_repo_objects(paths, ignore_patterns=list(DEFAULT_IGNORE_PATTERNS)))


def _offline() -> bool:
    from huggingface_hub import constants

    flag = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return constants.HF_HUB_OFFLINE or flag.upper() in {"1", "ON", "YES", "TRUE"}


def push_to_hub(
    folder: str | Path,
    repo_id: str,
    *,
    private: bool = False,
    revision: str | None = None,
    dry_run: bool = False,
) -> list[str] | str:
    """Upload an export folder to the Hub in one commit; returns the commit URL (the file list when ``dry_run``).

    The token is huggingface_hub's usual one (``HF_TOKEN`` or ``hf auth login``). The folder must match its
    manifest, so what is pushed is what was exported.
    """
    folder = Path(folder)
    if not HUB_ID_RE.match(repo_id):
        raise ExportError(f"--push-to-hub {repo_id}: expected a Hub repo id ORG/NAME")
    problems = check_manifest(folder)
    if problems:
        raise ExportError(f"{folder} does not match its manifest ({problems[0]}); export it again")
    files = upload_files(folder)
    if dry_run:
        return files
    if _offline():
        raise ExportError(f"cannot push to {repo_id}: HF_HUB_OFFLINE is set (unset it to reach the Hub)")
    from huggingface_hub import HfApi, get_token
    from huggingface_hub.errors import HfHubHTTPError

    token = get_token()
    if not token:
        raise ExportError(f"cannot push to {repo_id}: no Hugging Face token (set HF_TOKEN or run `hf auth login`)")
    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, private=private, exist_ok=True)
        if revision:
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        info = api.upload_folder(
            repo_id=repo_id, folder_path=folder, revision=revision,
            commit_message=f"Upload {repo_id.split('/')[-1]} (medgrpo {__version__} export)",
        )
    except HfHubHTTPError as e:  # the Hub answered: bad token, no write access, invalid card metadata, ...
        raise ExportError(f"push to {repo_id} failed: {_first_line(e)}") from None
    except Exception as e:  # connection errors come from httpx and others, with no common base class
        raise ExportError(f"push to {repo_id} failed: cannot reach {api.endpoint} "
                          f"({type(e).__name__}: {_first_line(e)})") from None
    return str(info.commit_url)


# --------------------------------------------------------------------------- verify


@dataclass
class SampleCheck:
    id: str
    same_prompt: bool
    same_output: bool
    source_text: str
    export_text: str


@dataclass
class VerifyReport:
    manifest_problems: list[str] = field(default_factory=list)
    samples: list[SampleCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.manifest_problems and bool(self.samples) and all(
            s.same_prompt and s.same_output for s in self.samples
        )


def _greedy(model: Any, processor: Any, records: list[Any], root: Path, system_prompt: str | None,
            settings: Any, max_new_tokens: int) -> list[tuple[list[int], list[int], str]]:
    """``(prompt ids, generated ids, text)`` per record, built as training builds prompts."""
    import torch
    from trl.data_utils import prepare_multimodal_messages

    from medgrpo.data.boxes import ImageGrid
    from medgrpo.data.preprocess import prepare_images
    from medgrpo.prompts import build_prompt

    grid = ImageGrid.from_processor(processor, model.config.model_type)
    results = []
    for record in records:
        images, frame = prepare_images(record, root, grid, settings)
        messages = prepare_multimodal_messages(build_prompt(record, frame, system_prompt), images)
        text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        inputs = processor(text=[text], images=images, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**inputs, do_sample=False, max_new_tokens=max_new_tokens)
        prompt_ids = inputs["input_ids"][0].tolist()
        generated = out[0, len(prompt_ids):].tolist()
        results.append((prompt_ids, generated, processor.decode(generated, skip_special_tokens=True)))
    return results


def _load_export(export_dir: Path, source_dir: Path) -> tuple[Any, Any]:
    """Load an export the way its users will: transformers alone, or base + adapter for a kept adapter."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    try:
        processor = AutoProcessor.from_pretrained(export_dir)
        if (export_dir / ADAPTER_CONFIG).is_file():
            from peft import PeftModel

            base = load_model(resolve_name(adapter_base(source_dir), source_dir))
            model = PeftModel.from_pretrained(base, export_dir)
        else:
            model = AutoModelForImageTextToText.from_pretrained(export_dir, dtype="auto")
    except (OSError, ValueError, KeyError) as e:
        raise ExportError(f"cannot load the export {export_dir}: {_first_line(e)}") from None
    model.eval()
    return model, processor


def verify_export(
    export_dir: str | Path,
    source_dir: str | Path,
    dataset_dir: str | Path,
    *,
    samples: int = 4,
    max_new_tokens: int = 32,
    split: str = "test",
) -> VerifyReport:
    """Check an export: manifest hashes, then greedy generation on the first ``samples`` held-out records
    of ``dataset_dir`` (its ``split``), token for token against the source checkpoint (adapter unmerged).

    The two models are loaded one after the other, so peak memory is one model.
    """
    from medgrpo.data.record import load_records

    export_dir, source_dir, dataset_dir = Path(export_dir), Path(source_dir), Path(dataset_dir)
    if not export_dir.is_dir():
        raise ExportError(f"--verify {export_dir}: no such folder")
    report = VerifyReport(manifest_problems=check_manifest(export_dir))
    records = load_records(dataset_dir, split=split if dataset_dir.is_dir() else None)[:samples]
    if not records:
        raise ExportError(f"--dataset {dataset_dir}: no {split} records to verify on")
    root = dataset_dir if dataset_dir.is_dir() else dataset_dir.parent
    try:
        chain = stage_chain(source_dir)
        system_prompt = trained_system_prompt(chain[-1] if chain else None)
    except CardError as e:
        raise ExportError(str(e)) from None
    from medgrpo.data.preprocess import ImageSettings

    try:
        run_data = (read_run_info(source_dir) or {}).get("data") or {}
    except CardError as e:
        raise ExportError(str(e)) from None
    settings = ImageSettings(window=run_data.get("dicom_window") or "auto")

    model, processor = load_source(source_dir, merge=False)
    expected = _greedy(model, processor, records, root, system_prompt, settings, max_new_tokens)
    del model
    model, processor = _load_export(export_dir, source_dir)
    got = _greedy(model, processor, records, root, system_prompt, settings, max_new_tokens)
    report.samples = [
        SampleCheck(r.id, e[0] == g[0], e[1] == g[1], e[2], g[2]) for r, e, g in zip(records, expected, got, strict=True)
    ]
    return report


# --------------------------------------------------------------------------- CLI


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="medgrpo export",
        description="Export a training output folder to the Hugging Face Hub format (or verify an export).",
    )
    p.add_argument("--model", type=Path, help="a stage-1/stage-2 output folder (full weights or LoRA adapter)")
    p.add_argument("--out", type=Path, help="the export folder to write")
    p.add_argument("--metrics", type=Path, help="metrics.json from `medgrpo eval` for the model card")
    p.add_argument("--keep-adapter", action="store_true", help="keep a LoRA run as an adapter (do not merge)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty --out")
    p.add_argument("--license", default="apache-2.0", help="license id for the card (match the base model's)")
    p.add_argument("--push-to-hub", metavar="ORG/NAME", help="upload the export to this Hub repo in one commit")
    p.add_argument("--private", action="store_true", help="create the Hub repo private")
    p.add_argument("--revision", metavar="BRANCH", help="Hub branch to push to (created if missing)")
    p.add_argument("--dry-run", action="store_true", help="list the files --push-to-hub would upload; upload nothing")
    p.add_argument("--verify", type=Path, metavar="DIR", help="verify an export against --source on --dataset")
    p.add_argument("--source", type=Path, help="with --verify: the training output folder it was exported from")
    p.add_argument("--dataset", type=Path, help="with --verify: a dataset folder whose held-out split is used")
    p.add_argument("--split", default="test", help="with --verify: the held-out split (default: test)")
    p.add_argument("--samples", type=int, default=4, help="with --verify: how many samples (default: 4)")
    p.add_argument("--max-new-tokens", type=int, default=32, help="with --verify: tokens per sample (default: 32)")
    return p


def _run_verify(args: argparse.Namespace) -> int:
    if not args.source or not args.dataset:
        raise ExportError("--verify needs --source RUN_DIR and --dataset DATA_DIR")
    report = verify_export(args.verify, args.source, args.dataset, samples=args.samples,
                           max_new_tokens=args.max_new_tokens, split=args.split)
    for problem in report.manifest_problems:
        print(f"manifest: {problem}")
    for s in report.samples:
        status = "identical" if s.same_prompt and s.same_output else (
            "DIFFERENT PROMPT" if not s.same_prompt else "DIFFERENT OUTPUT")
        print(f"{s.id}: {status}")
        if not s.same_output:
            print(f"  source: {s.source_text!r}\n  export: {s.export_text!r}")
    n_same = sum(s.same_prompt and s.same_output for s in report.samples)
    print(f"manifest: {'ok' if not report.manifest_problems else 'FAILED'}; "
          f"greedy generation identical on {n_same}/{len(report.samples)} samples")
    if not report.ok:
        print(f"medgrpo: verify failed for {args.verify}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.verify:
            return _run_verify(args)
        if not args.out or not (args.model or args.push_to_hub):
            raise ExportError("export needs --model RUN_DIR and --out DIR (or --out DIR --push-to-hub ORG/NAME "
                              "to push an existing export, or --verify DIR)")
        if (args.private or args.revision or args.dry_run) and not args.push_to_hub:
            raise ExportError("--private, --revision and --dry-run go with --push-to-hub ORG/NAME")
        if args.push_to_hub and not HUB_ID_RE.match(args.push_to_hub):
            raise ExportError(f"--push-to-hub {args.push_to_hub}: expected a Hub repo id ORG/NAME")
        out = args.out
        if args.model:
            out = export_model(args.model, args.out, metrics=args.metrics, keep_adapter=args.keep_adapter,
                               overwrite=args.overwrite, repo_id=args.push_to_hub, license=args.license)
            print(f"exported {args.model} -> {out}")
        elif not (out / MANIFEST).is_file():
            raise ExportError(f"--out {out}: no {MANIFEST}: not a medgrpo export (pass --model to make one)")
        if args.push_to_hub:
            result = push_to_hub(out, args.push_to_hub, private=args.private, revision=args.revision,
                                 dry_run=args.dry_run)
            if isinstance(result, list):
                where = f"{args.push_to_hub}@{args.revision or 'main'}"
                print(f"dry run: would upload {len(result)} files to {where} in one commit:")
                print("\n".join(f"  {name}" for name in result))
            else:
                print(f"pushed: {result}")
    except ValueError as e:  # ExportError, RecordError and the other one-line input errors
        print(f"medgrpo: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
