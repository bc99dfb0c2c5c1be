"""The tokenizer of the tiny models: a generated medical-VQA corpus and a byte-level BPE trained on it offline.

Real Qwen-VL checkpoints cannot be downloaded here, so the tiny models get their own small vocabulary. The corpus
is the text the pipeline actually feeds a model (the system prompt and instruction wording of
:mod:`medgrpo.prompts`, MedAD-style questions and options for the five task families, and gold reasoning with
modalities, anatomies, findings, locations, appearance words and box coordinates), so that a few thousand merges
cover it well. The pre-tokenizer and normaliser are Qwen2's (NFC, Qwen's split regex with single digits, byte
level), so numbers are written digit by digit as in the real models and any text still encodes.
"""

from __future__ import annotations

import functools
import random

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from medgrpo.data.record import LETTERS, MedADRecord
from medgrpo.prompts import SYSTEM_PROMPT, build_target, instruction

MODALITIES = (
    "MRI", "CT", "OCT", "ultrasound", "dermoscopy", "CE-MRI", "endoscopy", "fundus photography", "X-ray",
    "microscopy", "PET", "mammography", "histopathology",
)  # fmt: skip
"""MedAD-38K's ten modalities plus a few common ones."""

ANATOMIES = (
    "brain", "chest", "lung", "liver", "abdomen", "skin", "retina", "eye", "breast", "kidney", "knee", "colon",
    "heart", "spine", "pelvis", "stomach", "thyroid", "prostate", "bone", "cell", "gallbladder", "pancreas",
    "spleen", "bladder", "uterus", "ovary", "hip", "shoulder", "wrist", "ankle", "femur", "skull", "sinus",
    "orbit", "optic disc", "macula", "fovea", "esophagus", "duodenum", "rectum", "aorta", "trachea",
    "mediastinum", "diaphragm", "rib", "vertebra", "cerebellum", "ventricle", "thalamus", "basal ganglia",
    "white matter", "gray matter", "lymph node", "epidermis", "dermis", "cervix", "tissue",
)  # fmt: skip

FINDINGS = (
    "tumor", "glioma", "meningioma", "metastasis", "hemorrhage", "infarct", "stroke lesion", "nodule", "mass",
    "cyst", "pneumonia", "effusion", "pneumothorax", "fracture", "melanoma", "nevus", "polyp", "ulcer",
    "drusen", "macular edema", "calcification", "consolidation", "opacity", "carcinoma", "abscess",
    "lesion", "atrophy", "fibrosis", "stone", "aneurysm", "pleural effusion", "cardiomegaly", "atelectasis",
    "emphysema", "edema", "infiltration", "hernia", "pneumoperitoneum", "hydrocephalus", "ischemia",
    "demyelination", "plaque", "stenosis", "thrombus", "embolism", "hematoma", "contusion", "dislocation",
    "osteophyte", "osteoporosis", "arthritis", "tear", "lipoma", "hemangioma", "adenoma",
    "hepatocellular carcinoma", "cirrhosis", "steatosis", "cholelithiasis", "hydronephrosis", "appendicitis",
    "diverticulitis", "basal cell carcinoma", "squamous cell carcinoma", "keratosis", "dermatofibroma",
    "vascular lesion", "glaucoma", "cataract", "diabetic retinopathy", "choroidal neovascularization",
    "retinal detachment", "microaneurysm", "hard exudate", "papilledema", "adenocarcinoma",
    "invasive carcinoma", "carcinoma in situ", "benign tissue", "inflammation", "COVID-19 pneumonia",
    "tuberculosis", "ground-glass opacity", "pituitary adenoma", "schwannoma", "lymphoma", "sarcoma",
)  # fmt: skip

LOCATIONS = (
    "upper left", "upper right", "lower left", "lower right", "central", "peripheral", "upper", "lower",
    "left", "right", "anterior", "posterior", "medial", "lateral", "superior", "inferior", "frontal lobe",
    "temporal lobe", "parietal lobe", "occipital lobe", "apex", "base", "hilum", "cortex",
)  # fmt: skip

LATERALITIES = ("left", "right", "bilateral", "midline")

APPEARANCES = (
    "hyperintense", "hypointense", "hyperdense", "hypodense", "hyperechoic", "hypoechoic", "isointense",
    "well-circumscribed", "ill-defined", "irregular", "round", "oval", "lobulated", "spiculated",
    "heterogeneous", "homogeneous", "ring-enhancing", "pigmented", "bright", "dark", "sharp margins",
    "blurred margins", "cystic", "solid", "calcified", "necrotic", "enhancing", "non-enhancing", "diffuse",
    "focal", "multifocal", "patchy", "linear", "nodular", "smooth", "asymmetric", "symmetric", "thickened",
    "dilated", "narrowed", "displaced", "compressed", "hemorrhagic", "fatty", "fluid-filled", "echogenic",
    "anechoic", "shadowing", "hypervascular", "avascular", "irregular borders", "color variegation",
    "blue-white veil", "atypical network", "dots and globules", "streaks", "restricted diffusion",
    "mass effect", "surrounding edema", "central necrosis", "faint", "dense", "granular", "speckled",
)  # fmt: skip

VIEWS = (
    "T1-weighted", "T2-weighted", "FLAIR", "diffusion-weighted", "contrast-enhanced", "non-contrast", "axial",
    "coronal", "sagittal", "posteroanterior", "anteroposterior", "lateral view", "B-scan", "color Doppler",
    "H&E stained", "low magnification", "high magnification", "cross-sectional", "en face", "wide-field",
)  # fmt: skip
"""Sequences, planes, views and stains, as reports name them."""

IMPRESSIONS = (
    "Findings are consistent with {f}.", "The appearance is compatible with {f}.",
    "These features are suggestive of {f}.", "A {f} is likely; the differential diagnosis includes {g}.",
    "A {g} is unlikely given these features.", "A {f} cannot be excluded; recommend follow-up imaging.",
    "Compared with the surrounding tissue, the region is clearly different.",
    "The remaining structures are unremarkable and within normal limits.",
    "Image quality is adequate for interpretation.",
)  # fmt: skip
"""Report phrasing for the conclusion step; ``{f}`` is the finding, ``{g}`` a differential."""

SIZES = ("small", "medium", "large", "tiny", "subtle")

_QUESTIONS = {
    "anatomy_identification": (
        "Which anatomical region is shown in this image?",
        "What organ does this image show?",
    ),
    "modality_classification": ("What is the imaging modality of this image?", "Which modality was used?"),
    "anomaly_detection": ("Is there any abnormality in this image?", "Does this image show a lesion?"),
    "pathology_characterization": ("What is the most likely finding?", "Which abnormality is present?"),
    "lesion_localization": ("Where is the lesion located?", "In which region is the abnormality?"),
}

# Qwen2's pre-tokenisation regex (a published fact of its tokenizer): words, single digits, punctuation runs.
QWEN_SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)


def _options(rng: random.Random, answer: str, pool: tuple[str, ...]) -> tuple[list[str], str]:
    """Four options holding ``answer`` at a random letter; returns (options, letter)."""
    options = rng.sample([p for p in pool if p != answer], 3) + [answer]
    rng.shuffle(options)
    return options, LETTERS[options.index(answer)]


def _record(rng: random.Random, i: int) -> MedADRecord:
    """One synthetic MCQ item with a gold reasoning that cites a box in original pixels."""
    task = rng.choice(tuple(_QUESTIONS))
    modality, anatomy = rng.choice(MODALITIES), rng.choice(ANATOMIES)
    finding, location = rng.choice(FINDINGS), rng.choice(LOCATIONS)
    appearance = rng.sample(APPEARANCES, 2)
    abnormal = task != "anomaly_detection" or rng.random() < 0.5
    size = rng.randint(32, 1024)
    x1, y1 = rng.randint(0, size // 2), rng.randint(0, size // 2)
    box = [x1, y1, x1 + rng.randint(4, size // 2), y1 + rng.randint(4, size // 2)]
    answer, pool = {
        "anatomy_identification": (anatomy, ANATOMIES),
        "modality_classification": (modality, MODALITIES),
        "anomaly_detection": ("Yes" if abnormal else "No", ("Yes", "No", "Uncertain", "Not assessable")),
        "pathology_characterization": (finding, FINDINGS),
        "lesion_localization": (location, LOCATIONS),
    }[task]
    options, letter = _options(rng, answer, pool)
    steps = [f"This is a {rng.choice(VIEWS)} {modality} image of the {anatomy}."]
    if abnormal:
        steps.append(
            f"There is a {rng.choice(SIZES)} {', '.join(appearance)} {finding} in the {location} region, "
            f"{rng.choice(LATERALITIES)} side, at <box>[{', '.join(map(str, box))}]</box>, about "
            f"{rng.randint(2, 80)} mm across."
        )
        steps.append(rng.choice(IMPRESSIONS).format(f=finding, g=rng.choice(FINDINGS)))
        steps.append("The finding is abnormal.")
    else:
        steps.append(f"The {anatomy} looks normal, with no focal lesion, mass or {finding}.")
    steps.append(f"Therefore the answer is {letter}: {answer}.")
    return MedADRecord(
        id=str(i), images=["image.png"], question=rng.choice(_QUESTIONS[task]), options=options,
        answer=letter, task=task, modality=modality, anatomy=anatomy, cot=" ".join(steps),
    )  # fmt: skip


def corpus_texts(n_items: int = 1500, seed: int = 0) -> list[str]:
    """The training corpus: for ``n_items`` generated items, the system prompt, the user instruction in both box
    conventions, and the gold completion, grammar tags included as text (real Qwen vocabularies hold no
    grammar token but Qwen3's ``<think>``/``</think>``, whose neighbours the pre-tokenizer splits anyway).

    Deterministic in ``seed``.
    """
    rng = random.Random(seed)
    texts = [SYSTEM_PROMPT]
    for i in range(n_items):
        record = _record(rng, i)
        texts.append(instruction(record, rng.choice(("abs", "rel1000"))))
        texts.append(build_target(record))
    return texts


@functools.cache
def train_bpe(vocab_size: int, n_items: int = 1500, seed: int = 0) -> str:
    """Train a byte-level BPE with Qwen2's normaliser and pre-tokeniser on :func:`corpus_texts`.

    Returns the tokenizer as JSON (cached: every tiny model of a process shares one training run). Special and
    grammar tokens are not part of it; :mod:`medgrpo.models.tiny` appends them after the learned vocabulary, where
    Qwen keeps them too.
    """
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])  # fmt: skip
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus_texts(n_items, seed), trainer=trainer)
    return tok.to_str()
