"""The medical synonym lexicon the rule-based verifiers read text through.

Every surface phrase maps to one *concept* (``"hyperintense"``, ``"hyperdense"`` and ``"bright"`` are all
``bright``; ``"mass"``, ``"nodule"``, ``"tumour"`` are all ``mass``), and every concept belongs to one
*category* (modality, anatomy, finding, ...). Two concepts of one category either agree (same concept, or a
declared compatible pair such as MRI / contrast-enhanced MRI) or conflict (``left`` vs ``right``, ``CT`` vs
``MRI``). The verifiers compare concepts, never raw words, so a reasoning that says "hyperdense nodule" agrees
with a record whose evidence says ``finding: "mass", appearance: ["bright"]``.

Before any text is read, capitalised abbreviations are spelled out (:data:`ABBREVIATIONS`: "PTX", "LLL"), British
spellings become American and clinical synonyms become the name an option usually has (:data:`SYNONYMS`:
"optic nerve head" -> "optic disc"), so one phrase per concept suffices (:func:`normalize_text`).

The lexicon is data: extend the tables below, nothing else has to change.
"""

from __future__ import annotations

import re
from pathlib import Path


def trie_pattern(phrases: list[str]) -> str:
    """A regex matching any of ``phrases`` (longest first), factored as a prefix trie so that a scan rejects
    most positions after one character instead of trying every phrase in turn."""
    root: dict[str, dict] = {}
    for phrase in phrases:
        node = root
        for ch in phrase:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict[str, dict]) -> str:
        alts = [re.escape(ch) + emit(sub) for ch, sub in sorted(node.items()) if ch]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        if "" in node:
            return f"(?:{body})?"
        return body

    return emit(root)


# category -> concept -> surface phrases (lower case; matched on word boundaries, hyphens and spaces alike).
_TABLE: dict[str, dict[str, tuple[str, ...]]] = {
    "modality": {
        "ce_mri": (
            "ce-mri",
            "ce mri",
            "contrast-enhanced mri",
            "contrast enhanced mri",
            "post-contrast mri",
            "contrast-enhanced magnetic resonance",
        ),
        "mri": (
            "mri",
            "mr",
            "magnetic resonance",
            "magnetic resonance imaging",
            "t1-weighted",
            "t2-weighted",
            "flair",
            "mr image",
            "mr scan",
        ),
        "ct": ("ct", "computed tomography", "ct scan", "cat scan"),
        "xray": ("x-ray", "xray", "x ray", "radiograph", "radiography", "radiographic", "plain film", "cxr"),
        "ultrasound": (
            "ultrasound",
            "ultrasonography",
            "sonography",
            "sonographic",
            "sonogram",
            "echography",
        ),
        "dermoscopy": ("dermoscopy", "dermoscopic", "dermatoscopy", "dermatoscopic", "dermoscope"),
        "fundus": (
            "fundus",
            "fundus photograph",
            "fundus photography",
            "fundoscopy",
            "funduscopic",
            "retinal photograph",
            "colour fundus",
            "color fundus",
        ),
        "oct": ("oct", "optical coherence tomography"),
        "endoscopy": ("endoscopy", "endoscopic", "colonoscopy", "colonoscopic", "gastroscopy"),
        "microscopy": (
            "microscopy",
            "microscopic",
            "histology",
            "histopathology",
            "histological",
            "histopathological",
            "micrograph",
            "pathology slide",
            "whole slide",
        ),
        "pet": ("pet", "positron emission tomography"),
        "mammography": ("mammography", "mammogram", "mammographic"),
    },
    "anatomy": {
        "brain": (
            "brain",
            "cerebral",
            "cerebrum",
            "intracranial",
            "cranial",
            "head",
            "cerebellum",
            "hemisphere",
            "hemispheres",
            "parenchyma of the brain",
        ),
        "chest": ("chest", "thorax", "thoracic", "lung", "lungs", "pulmonary", "lung field", "lung fields"),
        "heart": ("heart", "cardiac", "myocardium"),
        "breast": ("breast", "breasts", "mammary"),
        "abdomen": ("abdomen", "abdominal"),
        "liver": ("liver", "hepatic"),
        "kidney": ("kidney", "kidneys", "renal"),
        "spleen": ("spleen", "splenic"),
        "pancreas": ("pancreas", "pancreatic"),
        "gallbladder": ("gallbladder", "gall bladder", "biliary"),
        "bladder": ("urinary bladder", "bladder", "vesical"),
        "thyroid": ("thyroid", "thyroid gland"),
        "esophagus": ("esophagus", "esophageal"),
        "colon": ("colon", "colonic", "bowel", "colorectal", "rectum", "intestine", "intestinal"),
        "stomach": ("stomach", "gastric"),
        "pelvis": ("pelvis", "pelvic"),
        "skin": ("skin", "cutaneous", "dermal", "epidermis"),
        "eye": ("eye", "retina", "retinal", "ocular", "optic disc", "macula", "macular"),
        "knee": ("knee", "knees"),
        "spine": ("spine", "spinal", "vertebra", "vertebrae", "vertebral", "lumbar", "cervical spine"),
        "hand": ("hand", "hands", "wrist", "finger", "fingers"),
    },
    "finding": {
        "mass": (
            "mass",
            "masses",
            "nodule",
            "nodules",
            "nodular",
            "tumor",
            "tumour",
            "tumors",
            "tumours",
            "neoplasm",
            "neoplastic",
            "growth",
            "glioma",
            "carcinoma",
            "cancer",
            "malignancy",
            "metastasis",
            "metastases",
            "adenoma",
        ),
        "cyst": ("cyst", "cysts", "cystic"),
        "abscess": ("abscess", "abscesses", "empyema"),
        "hemorrhage": (
            "hemorrhage",
            "haemorrhage",
            "hemorrhagic",
            "haemorrhagic",
            "bleed",
            "bleeding",
            "hematoma",
            "haematoma",
        ),
        "infarct": (
            "infarct",
            "infarction",
            "infarcts",
            "stroke",
            "ischemia",
            "ischaemia",
            "ischemic",
            "ischaemic",
        ),
        "fracture": ("fracture", "fractures", "fractured", "cortical break", "cortical disruption"),
        "effusion": ("effusion", "effusions", "fluid collection"),
        "consolidation": (
            "consolidation", "pneumonia", "infiltrate", "infiltrates", "infiltration", "airspace opacity",
        ),
        # NIH ChestX-ray14 findings
        "atelectasis": ("atelectasis", "atelectatic"),
        "cardiomegaly": (
            "cardiomegaly", "enlarged heart", "enlarged cardiac silhouette", "cardiac silhouette is enlarged",
            "heart is enlarged", "enlarged cardiac shadow",
        ),
        "pneumothorax": ("pneumothorax", "pneumothoraces"),
        "emphysema": ("emphysema", "emphysematous"),
        "fibrosis": ("fibrosis", "fibrotic"),
        "pleural_thickening": ("pleural thickening",),
        "hernia": ("hernia", "hernias", "herniation"),
        # ISIC 2018 diagnoses
        "actinic_keratosis": ("actinic keratosis", "actinic keratoses", "solar keratosis"),
        "benign_keratosis": ("benign keratosis", "benign keratoses", "seborrheic keratosis", "seborrhoeic keratosis"),
        "dermatofibroma": ("dermatofibroma", "dermatofibromas"),
        "vascular_lesion": (
            "vascular lesion", "vascular lesions", "vascular proliferation", "angioma", "hemangioma", "haemangioma",
        ),
        "calcification": ("calcification", "calcifications", "calcified"),
        "edema": ("edema", "oedema"),
        "melanoma": ("melanoma", "melanocytic lesion"),
        "nevus": ("nevus", "naevus", "nevi", "mole"),
        "exudate": ("exudate", "exudates"),
        "drusen": ("drusen", "druse"),
        "polyp": ("polyp", "polyps"),
        "ulcer": ("ulcer", "ulcers", "ulceration"),
        "atrophy": ("atrophy", "atrophic"),
        "inflammation": ("inflammation", "inflammatory"),
        "embolism": ("embolism", "emboli", "embolus", "pulmonary embolism", "thromboembolism"),
        "thrombosis": ("thrombosis", "thrombus", "thrombi", "thrombosed"),
        "pneumoperitoneum": (
            "pneumoperitoneum", "free air", "free intraperitoneal air", "free gas", "free intraperitoneal gas",
            "extraluminal gas", "extraluminal air",
        ),
        "aneurysm": ("aneurysm", "aneurysms", "aneurysmal"),
        "dissection": ("dissection", "intimal flap"),
        "obstruction": ("obstruction", "obstructed", "obstructive"),
        "stenosis": ("stenosis", "stenoses", "stenotic", "narrowing"),
        "hydronephrosis": ("hydronephrosis", "hydroureteronephrosis", "pelvicalyceal dilatation"),
        "ascites": ("ascites", "ascitic"),
        "lymphadenopathy": ("lymphadenopathy", "adenopathy", "enlarged lymph node", "enlarged lymph nodes"),
        "cirrhosis": ("cirrhosis", "cirrhotic"),
        "detachment": ("detachment", "retinal detachment"),
    },
    # A finding named only generically ("a lesion", "an abnormality"): agrees with every specific finding.
    "generic": {
        "abnormal": (
            "abnormal",
            "abnormality",
            "abnormalities",
            "anomaly",
            "anomalies",
            "anomalous",
            "lesion",
            "lesions",
            "pathology",
            "pathological",
            "focal finding",
            "focal findings",
        ),
    },
    "normal": {
        "normal": ("normal", "unremarkable", "healthy", "within normal limits", "no acute findings"),
    },
    "laterality": {
        "left": ("left", "left-sided", "left sided", "sinistral"),
        "right": ("right", "right-sided", "right sided", "dextral"),
        "bilateral": ("bilateral", "bilaterally", "both sides"),
    },
    "location": {
        "upper": ("upper", "superior", "superiorly", "top", "apical", "apex"),
        "lower": ("lower", "inferior", "inferiorly", "bottom", "basal"),
        "central": ("central", "centre", "center", "centrally", "middle", "midline"),
        "peripheral": ("peripheral", "periphery", "peripherally"),
        "anterior": ("anterior", "anteriorly", "ventral"),
        "posterior": ("posterior", "posteriorly", "dorsal"),
        # breast quadrants and limbs are named inner/outer as much as medial/lateral
        "medial": ("medial", "medially", "inner"),
        "lateral": ("lateral", "laterally", "outer"),
    },
    "appearance": {
        "bright": (
            "bright",
            "brighter",
            "hyperintense",
            "hyperintensity",
            "hyperdense",
            "hyperdensity",
            "hyperechoic",
            "hyperreflective",
            "radiopaque",
            "high signal",
            "high intensity",
            "high density",
            "enhancing",
        ),
        "dark": (
            "dark",
            "darker",
            "hypointense",
            "hypointensity",
            "hypodense",
            "hypodensity",
            "hypoechoic",
            "anechoic",
            "hyporeflective",
            "radiolucent",
            "lucent",
            "low signal",
            "low intensity",
            "low density",
        ),
        "round": ("round", "rounded", "circular", "oval", "ovoid", "spherical", "elliptical"),
        "irregular": (
            "irregular",
            "irregularly",
            "lobulated",
            "spiculated",
            "ill-defined",
            "ill defined",
            "poorly defined",
            "infiltrative",
            "jagged",
        ),
        "well_defined": (
            "well-defined",
            "well defined",
            "circumscribed",
            "well-circumscribed",
            "sharply defined",
            "sharp margins",
            "smooth margins",
            "smooth",
        ),
        "heterogeneous": ("heterogeneous", "heterogeneously", "mixed", "mottled"),
        "homogeneous": ("homogeneous", "homogeneously", "uniform"),
        "pigmented": ("pigmented", "brown", "pigmentation"),
    },
    "size": {
        "large": ("large", "big", "sizeable", "extensive", "huge"),
        "small": ("small", "tiny", "subtle", "minute", "punctate"),
        "medium": ("medium", "moderate", "moderate-sized", "medium-sized", "intermediate"),
    },
}

CATEGORY: dict[str, str] = {c: cat for cat, concepts in _TABLE.items() for c in concepts}
"""concept -> its category."""

CONCEPTS: dict[str, frozenset[str]] = {cat: frozenset(concepts) for cat, concepts in _TABLE.items()}
"""category -> its concepts (so that "the claims of one category" is a set intersection)."""

PHRASES: dict[str, str] = {}
"""normalised surface phrase -> concept."""


# British spellings of medical words, read as the American ones the tables list: one pattern of the stems that
# differ ("haem", "oedema", "tumour", "centre"), so a phrase needs one spelling and an option written one way
# matches reasoning written the other.
_AMERICAN = {
    "aem": "em", "paed": "ped", "caec": "cec", "faec": "fec", "gynaec": "gynec", "anaesth": "anesth",
    "aetiol": "etiol", "naev": "nev", "oedem": "edem", "oesophag": "esophag", "oestr": "estr", "foet": "fet",
    "coel": "cel", "rrhoea": "rrhea", "pnoea": "pnea", "tumour": "tumor", "colour": "color", "favour": "favor",
    "behaviour": "behavior", "odour": "odor", "centred": "centered", "centre": "center", "fibre": "fiber",
    "calibre": "caliber", "grey": "gray",
}
_BRITISH = re.compile(trie_pattern(sorted(_AMERICAN)), re.IGNORECASE)



def _table(name: str) -> list[tuple[str, str]]:
    """The rows of a two-column, tab-separated table shipped beside this module (its header line skipped)."""
    lines = (Path(__file__).parent / name).read_text(encoding="utf-8").splitlines()[1:]
    return [(a, b) for a, b in (line.split("\t") for line in lines if line.strip())]


ABBREVIATIONS: dict[str, str] = dict(_table("abbreviations.tsv"))
"""Abbreviations radiology, pathology, ophthalmology, dermatology and endoscopy write in capitals, read as what they
stand for ("PTX" is a pneumothorax, "LLL" the left lower lobe): ``abbreviations.tsv`` beside this module, one per
line. Only the capitalised form is read so ("US" is ultrasound, "us" is not). Left out on purpose: abbreviations
with two common meanings in imaging text (ICH, PA, CC, LAD, PDA, ...) and those that are English words in capitals
(FISH, TIPS, FAST, ...); an abbreviation the tables above already read as it is (CT, MRI) is not spelled out."""
_ABBREVIATION = re.compile(r"(?<![\w&])(" + trie_pattern(sorted(ABBREVIATIONS)) + r")(?=s?(?![\w&]))")


def expand_abbreviations(text: str) -> str:
    """``text`` with the capitalised abbreviations of :data:`ABBREVIATIONS` spelled out."""
    if text[1:].islower() or text.islower():  # no capitals past the first letter: no abbreviation
        return text
    return _ABBREVIATION.sub(_spelled_out, text)


def _spelled_out(m: re.Match) -> str:
    return ABBREVIATIONS[m.group(1)]


SYNONYMS: dict[str, tuple[str, ...]] = {}
for _name, _variant in _table("synonyms.tsv"):
    SYNONYMS[_name] = (*SYNONYMS.get(_name, ()), _variant)
"""Clinical synonyms read as the name an option usually has ("optic nerve head" names "Optic disc",
"cholelithiasis" names "Gallstones", "pulmonary trunk" the main pulmonary artery): ``synonyms.tsv`` beside this
module, a name and one variant per line. A variant means exactly its name (never a broader or narrower entity), is
listed under one name only, and is not a phrase the tables above read as a concept of their own."""
_SYNONYM_OF = {variant: name for name, variants in SYNONYMS.items() for variant in variants}


def _names_holding_variants(synonym_of: dict[str, str]) -> dict[str, str]:
    """The names that hold a variant, each as the other rows read it ("anteroposterior view" -> "ap view", since
    "anteroposterior" is read as "ap"), keeping a variant of its own inside it ("perthes disease" in
    "legg-calve-perthes disease")."""
    within = re.compile(r"(?<![\w])(" + trie_pattern(sorted(synonym_of)) + r")(?![\w])", re.IGNORECASE)

    def form(m: re.Match, name: str) -> str:
        found = synonym_of[m.group(1).lower()]
        return m.group(1) if found == name else found

    return {name: within.sub(lambda m, n=name: form(m, n), name) for name in SYNONYMS if within.search(name)}


_HOLDING = _names_holding_variants(_SYNONYM_OF)
# Every variant reads as its name's form, and a name that holds a variant reads as its form too (matched whole,
# the longest match, so the variant inside it is not rewritten): one pass leaves text as a second pass would.
_SYNONYM_OF = {**_HOLDING, **{variant: _HOLDING.get(name, name) for variant, name in _SYNONYM_OF.items()}}
_SYNONYM = re.compile(r"(?<![\w])(" + trie_pattern(sorted(_SYNONYM_OF)) + r")(?![\w])", re.IGNORECASE)
# the same on lower-cased text with a leading non-word character: the regex engine then jumps between candidate
# positions (half the cost of the case-blind pattern), so most text, which holds no synonym, is passed cheaply
_SYNONYM_SCAN = re.compile(r"\W(" + trie_pattern(sorted(_SYNONYM_OF)) + r")\b")



def _synonym(m: re.Match) -> str:
    return _SYNONYM_OF[m.group(1).lower()]


# American compounds whose combining vowel runs into the next word's "e" ("gastr-o-esophageal"): not British
_COMBINING_O = ("gastr", "trache", "pharyng", "laryng", "cardi", "bronch", "duoden")


def _american(m: re.Match) -> str:
    word = m.group(0)
    if word[:2].lower() == "oe" and m.string[max(0, m.start() - 7) : m.start()].lower().endswith(_COMBINING_O):
        return word
    out = _AMERICAN[word.lower()]
    return out.capitalize() if word[0].isupper() else out


def _in_american(text: str) -> str:
    """``text`` with British spellings of medical words in American spelling ("Haemorrhage" -> "Hemorrhage")."""
    return _BRITISH.sub(_american, text) if _british_hint(text.lower()) else text


def _british_hint(low: str) -> bool:
    """A look for the letters every stem holds before the regex: most text has none, and these five substring
    tests cost a tenth of a regex search."""
    return "ae" in low or "oe" in low or "our" in low or "tre" in low or "grey" in low


def normalize_text(text: str) -> str:
    """How the verifiers read any text: abbreviations spelled out (:func:`expand_abbreviations`), American
    spelling (British stems of medical words, "haemorrhage" -> "hemorrhage", "oedema" -> "edema", "tumour" -> "tumor"),
    clinical synonyms as the usual name (:data:`SYNONYMS`)."""
    text = expand_abbreviations(text)
    low = text.lower()
    if _british_hint(low):
        text = _BRITISH.sub(_american, text)
        low = text.lower()
    return _SYNONYM.sub(_synonym, text) if _SYNONYM_SCAN.search(" " + low) else text


def norm_phrase(text: str) -> str:
    """American spelling, lower case, hyphens/underscores/slashes as spaces, single spaces: how phrases are
    compared."""
    return " ".join(re.sub(r"[-_/]", " ", _in_american(text).lower()).split())


for _cat, _concepts in _TABLE.items():
    for _concept, _phrases in _concepts.items():
        for _p in (_concept.replace("_", " "), *_phrases):
            PHRASES.setdefault(norm_phrase(_p), _concept)

# Concepts that agree although they differ (symmetric); every other pair in a category conflicts. Anatomy
# concepts are body regions: structures seen in many regions (bone, vessels, tissue) are deliberately absent,
# a reasoning naming them claims nothing about which region is shown.
_COMPATIBLE = {
    frozenset(p)
    for p in (
        ("mri", "ce_mri"),
        ("chest", "heart"),
        ("chest", "breast"),
        ("abdomen", "liver"),
        ("abdomen", "kidney"),
        ("abdomen", "colon"),
        ("abdomen", "stomach"),
        ("abdomen", "spleen"),
        ("abdomen", "pancreas"),
        ("abdomen", "gallbladder"),
        ("liver", "gallbladder"),
        ("abdomen", "bladder"),
        ("pelvis", "bladder"),
        ("chest", "esophagus"),
        ("embolism", "thrombosis"),
        ("infarct", "embolism"),
        ("obstruction", "stenosis"),
        ("hydronephrosis", "obstruction"),
        ("ascites", "effusion"),
        ("cirrhosis", "ascites"),
        ("aneurysm", "dissection"),
        ("mass", "lymphadenopathy"),
        ("mass", "obstruction"),
        ("abdomen", "pelvis"),
        ("pelvis", "colon"),
        ("spine", "chest"),
        ("spine", "abdomen"),
        ("skin", "breast"),
        ("skin", "abdomen"),
        ("fundus", "eye"),
        ("abscess", "cyst"),
        ("mass", "cyst"),
        ("mass", "calcification"),
        ("mass", "melanoma"),
        ("nevus", "melanoma"),
        ("hemorrhage", "infarct"),
        ("hemorrhage", "exudate"),
        ("exudate", "edema"),
        ("edema", "mass"),
        ("consolidation", "effusion"),
    )
}

OPPOSITES: dict[str, frozenset[str]] = {
    "left": frozenset({"right"}),
    "right": frozenset({"left"}),
    "upper": frozenset({"lower"}),
    "lower": frozenset({"upper"}),
    "central": frozenset({"peripheral"}),
    "peripheral": frozenset({"central"}),
    "anterior": frozenset({"posterior"}),
    "posterior": frozenset({"anterior"}),
    "medial": frozenset({"lateral"}),
    "lateral": frozenset({"medial"}),
    "bright": frozenset({"dark"}),
    "dark": frozenset({"bright"}),
    "irregular": frozenset({"well_defined"}),
    "well_defined": frozenset({"irregular"}),
    "heterogeneous": frozenset({"homogeneous"}),
    "homogeneous": frozenset({"heterogeneous"}),
    "large": frozenset({"small"}),
    "small": frozenset({"large"}),
}
"""Descriptor concepts that cannot both describe one finding (for laterality, location, appearance, size)."""

IMPLIED: dict[str, frozenset[str]] = {"bilateral": frozenset({"left", "right"})}
"""A concept a sentence asserts when it asserts all of its parts ("one on the left, one on the right")."""

EXCLUSIVE_CATEGORIES = ("modality", "anatomy", "finding")
"""Categories where an image has one value: any two incompatible concepts conflict."""


def agree(a: str, b: str) -> bool:
    """True when concept ``a`` (claimed) is compatible with concept ``b`` (the record's)."""
    return a == b or frozenset((a, b)) in _COMPATIBLE


def conflict(a: str, b: str) -> bool:
    """True when two concepts claimed of the same image (or the same finding) cannot both hold."""
    if a == b or frozenset((a, b)) in _COMPATIBLE:
        return False
    if b in OPPOSITES.get(a, ()):
        return True
    cat = CATEGORY.get(a)
    return cat in EXCLUSIVE_CATEGORIES and cat == CATEGORY.get(b)
