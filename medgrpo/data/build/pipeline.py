"""``build_dataset``: one source YAML in, one validated MedAD dataset folder out.

read items (:mod:`.readers`) -> split by group (:mod:`.splits`) -> per item: copy the image, derive evidence
(:mod:`.evidence`), ask the five task families (:mod:`.questions`) -> CoT + QC (:mod:`.cot`) -> write
``<split>.jsonl``, ``images/`` and ``README.md`` (:mod:`.card`) into a temporary folder, validate it with
``load_records``, then rename it into place (never a half-written dataset).
"""

from __future__ import annotations

import os
import random
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medgrpo.data.build.card import render_card
from medgrpo.data.build.cot import make_teacher, synthesize
from medgrpo.data.build.evidence import build_evidence, clip_box, mask_boxes
from medgrpo.data.build.questions import ItemFacts, LetterBalancer, ask
from medgrpo.data.build.readers import BuildError, SourceItem, load_mask, load_nifti, make_reader
from medgrpo.data.build.splits import leaks, split_items
from medgrpo.data.record import MedADRecord, load_records, write_records
from medgrpo.data.yaml_config import read_yaml_mapping

FIVE_TASKS = ("anomaly_detection", "pathology_characterization", "lesion_localization",
              "modality_classification", "anatomy_identification")
_TASK_IDS = {"anomaly_detection": "ad", "pathology_characterization": "pc", "lesion_localization": "ll",
             "modality_classification": "mc", "anatomy_identification": "ai"}

DEFAULT_CLASSES: dict[str, dict[str, str]] = {
    "br35h": {"yes": "Tumour"},
    "isic2018": {"MEL": "Melanoma", "NV": "Melanocytic nevus", "BCC": "Basal cell carcinoma",
                 "AKIEC": "Actinic keratosis", "BKL": "Benign keratosis", "DF": "Dermatofibroma",
                 "VASC": "Vascular proliferation"},
}
"""Option texts of source labels where the raw label is a code; other labels read as themselves
(underscores as spaces). ``classes:`` in the YAML overrides these."""

_KEYS = {"source", "layout", "root", "reader", "modality", "anatomy", "laterality", "classes", "tasks", "splits",
         "cot", "teacher", "qc"}


@dataclass
class BuildConfig:
    """A source YAML (see ``data/sources/*.yaml``)."""

    source: str
    layout: str
    root: Path
    reader: dict[str, Any] = field(default_factory=dict)
    modality: str | None = None
    anatomy: str | None = None
    laterality: str = "image"
    classes: dict[str, str] = field(default_factory=dict)
    tasks: tuple[str, ...] = FIVE_TASKS
    splits: dict[str, float] = field(default_factory=lambda: {"train": 0.7, "test": 0.3})
    cot: str = "template"
    teacher: dict[str, Any] = field(default_factory=dict)
    qc: dict[str, Any] = field(default_factory=dict)

    def name_of(self, label: str) -> str:
        return self.classes.get(label) or DEFAULT_CLASSES.get(self.layout, {}).get(label) or label.replace("_", " ")

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "layout": self.layout, "root": str(self.root), "modality": self.modality,
                "anatomy": self.anatomy, "laterality": self.laterality}


def load_config(path: str | Path) -> BuildConfig:
    """Read and check a source YAML; relative ``root`` is taken from the YAML's folder."""
    path = Path(path)
    raw = read_yaml_mapping(path, _KEYS, BuildError, "source config file")
    for name in ("source", "layout", "root"):
        if not raw.get(name):
            raise BuildError(f"{path}: field '{name}': missing")
    bad = [t for t in raw.get("tasks", FIVE_TASKS) if t not in FIVE_TASKS]
    if bad:
        raise BuildError(f"{path}: field 'tasks': unknown task '{bad[0]}' (one of: {', '.join(FIVE_TASKS)})")
    if raw.get("laterality", "image") not in ("image", "patient"):
        raise BuildError(f"{path}: field 'laterality': must be image or patient")
    if raw.get("cot", "template") not in ("template", "teacher"):
        raise BuildError(f"{path}: field 'cot': must be template or teacher")
    root = Path(str(raw["root"])).expanduser()
    raw["root"] = root if root.is_absolute() else (path.parent / root).resolve()
    raw["tasks"] = tuple(raw.get("tasks", FIVE_TASKS))
    # YAML 1.1 reads an unquoted `yes:` / `no:` key (Br35H's folders) as a boolean
    raw["classes"] = {({True: "yes", False: "no"}.get(k, k) if isinstance(k, bool) else str(k)): str(v)
                      for k, v in (raw.get("classes") or {}).items()}
    return BuildConfig(**raw)


def _copy_image(item: SourceItem, out: Path) -> tuple[str, int, int]:
    """Put the item's image under ``out/images`` (a hard link where possible, else a copy; a volume slice is
    rendered to PNG); returns the relative path and the original size."""
    from PIL import Image

    from medgrpo.data.dicom import percentile_window
    from medgrpo.data.images import image_size

    if item.slice_index is not None:
        rel = f"images/{item.id}.png"
        pixels = load_nifti(item.image)[:, :, item.slice_index].T.astype("float32")
        Image.fromarray(percentile_window(pixels, (0.5, 99.5))).save(out / rel)
    else:
        rel = f"images/{item.id}{item.image.suffix.lower()}"
        try:
            os.link(item.image, out / rel)
        except OSError:
            shutil.copyfile(item.image, out / rel)
    width, height = image_size(out / rel)
    return rel, width, height


def _boxes(item: SourceItem, width: int, height: int) -> tuple[list[list[float]], float | None]:
    if item.mask is not None:
        mask = load_mask(item)
        if mask.shape != (height, width):
            raise BuildError(f"{item.mask}: mask is {mask.shape[1]}x{mask.shape[0]}, image {item.image} is "
                             f"{width}x{height}")
        return mask_boxes(mask), float(mask.sum())
    boxes = [b for label in item.labels for b in item.boxes.get(label, [])]
    return [c for b in boxes if (c := clip_box(b, width, height))], None


@dataclass
class BuildSummary:
    """What a build wrote: records per split, QC counts and questions not asked (with reasons)."""

    out: Path
    records: dict[str, int]
    qc: Counter
    skipped: Counter


def build_dataset(config: BuildConfig, out: str | Path, seed: int = 0, cot: str | None = None,
                  command: str = "") -> BuildSummary:
    """Build a MedAD dataset folder from one source (see the module docstring). ``cot`` overrides the YAML."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BuildError(f"{out}: output folder exists and is not empty")
    cot = cot or config.cot
    teacher = make_teacher(config.teacher) if cot == "teacher" else None
    reader = make_reader(config.layout, config.root, config.reader)
    items = reader.read()
    if not items:
        raise BuildError(f"{config.root}: the {config.layout} reader found no labelled images")
    skipped: Counter = Counter()
    if getattr(reader, "skipped", 0):
        skipped["reader: image listed but not on disk"] = reader.skipped
    splits = split_items(sorted(items, key=lambda i: i.id), config.splits, seed)
    found = leaks(splits)
    if found:
        raise BuildError(f"{config.root}: split leakage: {found[0]}")
    abnormal_names = sorted({config.name_of(label) for item in items for label in item.labels})
    has_normal = any(not i.labels for i in items)
    has_abnormal = bool(abnormal_names)
    attempts = int(config.qc.get("attempts", 3))
    min_evidence = float(config.qc.get("min_evidence", 1.0))

    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "images").mkdir(parents=True)
    qc_counts: Counter = Counter()
    records: dict[str, list[MedADRecord]] = {}
    try:
        for split, members in splits.items():
            rng = random.Random(f"{seed}:{split}:questions")
            balancer = LetterBalancer(rng)
            records[split] = []
            for item in members:
                rel, width, height = _copy_image(item, tmp)
                boxes, mask_area = _boxes(item, width, height)
                names = tuple(config.name_of(label) for label in item.labels)
                findings = [n.lower() for n in names]
                evidence = build_evidence(findings, boxes, width, height, config.modality, config.anatomy,
                                          config.laterality, mask_area)
                facts = ItemFacts(names, tuple(findings), evidence.get("location"), config.modality,
                                  config.anatomy)
                for task in config.tasks:
                    q = ask(task, facts, abnormal_names, has_normal, has_abnormal, rng, balancer, config.laterality)
                    if q is None:
                        skipped[f"{task}: not supported by this image's labels"] += 1
                        continue
                    record = MedADRecord(
                        id=f"{config.source}-{item.id}-{_TASK_IDS[task]}", images=[rel], question=q.question,
                        options=q.options, answer=q.answer, task=task, modality=config.modality,
                        anatomy=config.anatomy, evidence=evidence, bbox=boxes if findings and boxes else None,
                        source=config.source,
                    )
                    cot_rng = random.Random(f"{seed}:{record.id}:cot")
                    if synthesize(record, cot_rng, qc_counts, teacher, config.laterality, attempts, min_evidence):
                        records[split].append(record)
            write_records(records[split], tmp / f"{split}.jsonl")
        groups = {s: len({i.group for i in its}) for s, its in splits.items()}
        card = render_card(config.as_dict(), records, groups, qc_counts, skipped, seed, cot, command)
        (tmp / "README.md").write_text(card, encoding="utf-8")
        for split in records:
            load_records(tmp, split=split)  # the folder must pass the project's own validation
        if out.exists():
            out.rmdir()
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return BuildSummary(out, {s: len(r) for s, r in records.items()}, qc_counts, skipped)
