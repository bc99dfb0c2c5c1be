"""What a record lets the verifiers check, read once per record and cached: its options as claims (lexicon
concepts, their own words as patterns, their initials, the words only they hold), the polarity each option
stands for, the subject of a yes/no question (:class:`YesNo`), and its structured evidence as lexicon concepts.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from medgrpo.data.record import LETTERS, MedADRecord
from medgrpo.rewards.claims import read
from medgrpo.rewards.lexicon import CATEGORY, PHRASES, normalize_text

Box = tuple[float, float, float, float]

_YES = {"yes", "present", "true", "positive"}
_NO = {"no", "absent", "false", "negative"}
_WORD_RE = re.compile(r"[a-z0-9]+")


_PLAIN = frozenset((
    "a", "an", "the", "of", "in", "on", "at", "to", "with", "and", "or", "by", "for", "from", "is", "are", "this",
    "that", "side", "sided", "lobe", "region", "area", "quadrant", "zone", "part", "portion", "view", "image",
    "imaging", "scan", "study", "sequence", "type", "only", "both", "seen", "present", "finding", "findings",
    "appearance", "pattern", "changes", "disease", "structure", "tissue", "cell", "cells", "normal", "territory",
    "distribution",
))
"""Words an option can hold without saying more than its lexicon concepts ("Left upper *quadrant*"); they
never tell one option from another on their own either."""


def _option_phrases(option: str) -> list[list[str]]:
    """The word lists an option is written as: its whole text, and with a parenthesis its text outside and
    inside it ("Histopathology (H&E)": also "histopathology" and "hematoxylin and eosin")."""
    whole = _option_words(option)
    core = whole[:]  # without plain words at either end: "Left MCA territory" is also "left MCA"
    while core and core[-1] in _PLAIN:
        core.pop()
    while core and core[0] in _PLAIN:
        core.pop(0)
    if "(" not in option:
        return [whole, core] if core and core != whole else [whole]
    outside = _option_words(re.sub(r"\([^)]*\)", " ", option))
    inside = [w for part in re.findall(r"\(([^)]*)\)", option) for w in _option_words(part)]
    return [whole, *(p for p in (outside, inside) if p and p != whole)]


def _phrase(words: list[str]) -> str:
    return r"\W+".join(re.escape(w[:-1] if w.endswith("s") and len(w) > 3 else w) + r"(?:s|es)?" for w in words)


@lru_cache(maxsize=1 << 12)
def option_pattern(option: str) -> re.Pattern[str] | None:
    """:func:`word_pattern` of each way an option is written, as one pattern."""
    patterns = [word_pattern(words) for words in _option_phrases(option)]
    patterns = [p for p in patterns if p is not None]
    if len(patterns) < 2:
        return patterns[0] if patterns else None
    return re.compile("|".join(p.pattern for p in patterns))


def word_pattern(words: list[str]) -> re.Pattern[str] | None:
    """The words in order, as whole words, with any separator between them and plurals allowed; words joined
    by "or" also one by one with the last word ("intraretinal or subretinal fluid": "subretinal fluid"); three
    words or more also as their initials ("Small bowel obstruction": "SBO", "Diabetic macular edema": "DME")."""
    if not words:
        return None
    alternatives = [_phrase(words)]
    if "or" in words[1:-1]:
        cut = words.index("or")
        alternatives += [_phrase(words[cut - 1 : cut] + words[-1:]), _phrase(words[cut + 1 :])]
    content = [w for w in words if w not in _PLAIN and not w.isdigit()]
    if len(content) >= 3 and len(words) == len(content):  # two letters are too often a word ("is", "an")
        alternatives.append("".join(w[0] for w in content))
    return re.compile(r"(?<![\w])(?:" + "|".join(alternatives) + r")(?![\w])")


def _option_words(option: str) -> list[str]:
    return _WORD_RE.findall(normalize_text(option).lower())


_FINDINGS = ("finding", "generic")


def _marks(concepts: tuple[frozenset[str], ...], stated: frozenset[str]) -> tuple[frozenset[str], ...]:
    """Each option's concepts less the context: those the question names and those every option with concepts
    shares ("Both kidneys" of "which kidney?" is left with none: only its words name it)."""
    named = [c for c in concepts if c]
    context = stated | (
        frozenset.intersection(*named) if len(named) > 1 else frozenset()
    )
    marks = [c - context for c in concepts]
    # the anatomy an option names is where its finding is, not what tells it from the others: "Intracranial
    # hemorrhage" is named by "hemorrhage" (an anatomy asserted against it still stops it, see by_content)
    return tuple(
        frozenset(x for x in m if CATEGORY[x] != "anatomy") if any(CATEGORY[x] in _FINDINGS for x in m) else m
        for m in marks
    )


@lru_cache(maxsize=1 << 12)
def _any_word(words: tuple[tuple[str, ...], ...]) -> re.Pattern[str] | None:
    """A pattern of every word of four letters or more in any option (a quick test before the others)."""
    every = sorted({w for option in words for w in option if len(w) >= 4 and w not in _PLAIN})
    return re.compile("|".join(re.escape(w[:-1] if w.endswith("s") else w) for w in every)) if every else None


@lru_cache(maxsize=1 << 12)
def _keys(words: tuple[str, ...], others: tuple[tuple[str, ...], ...], asked: frozenset[str]) -> re.Pattern[str] | None:
    """A pattern of the option's own words: those no other option holds and the question does not use, of four
    letters or more, neither plain nor lexicon phrases (a concept is matched through the lexicon, where its
    negation is read)."""
    taken = asked.union(*others)
    own = sorted({w for w in words if len(w) >= 4 and w not in taken and w not in _PLAIN and w not in PHRASES})
    if not own:
        return None
    return re.compile(r"(?<![\w])(?:" + "|".join(re.escape(w) for w in own) + r")(?![\w])")


_BENIGN = ("benign", "non malignant", "nonmalignant")
_MALIGNANT = ("malignant", "malignancy", "cancer", "carcinoma", "adenocarcinoma", "sarcoma", "melanoma", "lymphoma",
              "leukemia", "metastasis", "metastases", "metastatic", "mesothelioma", "glioblastoma", "myeloma")
PREDICATES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "benign": (_BENIGN, _MALIGNANT),
    "malignant": (_MALIGNANT, _BENIGN),
    "preserved": (("preserved", "maintained", "intact"), ("lost", "loss of", "effaced", "effacement", "obliterated",
                  "blunted", "disrupted", "distorted")),
    "intact": (("intact", "continuous"), ("disrupted", "disruption", "torn", "tear", "ruptured", "rupture",
               "discontinuous", "discontinuity")),
    "patent": (("patent", "patency"), ("occluded", "occlusion", "thrombosed", "blocked", "obstructed")),
    "reduced": (("reduced", "decreased", "impaired", "depressed"), ("preserved",)),
    "positioned": (("correctly positioned", "appropriately positioned", "well positioned", "satisfactory position",
                    "good position", "in position"), ("malpositioned", "malposition", "misplaced", "too low",
                   "too high", "too deep", "too far")),
    "symmetric": (("symmetric", "symmetrical"), ("asymmetric", "asymmetrical", "asymmetry")),
}
"""Predicates a yes/no question asks of its subject, each with its words and its opposite's: "is the lesion
benign?" is answered "No" by "... melanoma", "is the foveal contour preserved?" by "foveal depression lost",
"is the tube correctly positioned?" by "malpositioned ETT"."""


def word_pattern_any(phrases: tuple[str, ...]) -> re.Pattern[str]:
    """Any of ``phrases``, each as :func:`word_pattern` reads it."""
    return re.compile("|".join(p.pattern for p in (word_pattern(ph.split()) for ph in phrases) if p is not None))


@dataclass(frozen=True)
class YesNo:
    """What "Yes" claims for a yes/no question: the concepts the question asks about (``head``: "is there a
    pneumothorax?" asks about {pneumothorax}, "is this a CT?" about {ct}, "is it normal?" about {normal}) and
    the ones that qualify it (``where``: "on the left?"); or, for a subject the lexicon does not know
    ("is there mediastinal shift?"), its words (``words``)."""

    yes: str  # the letter of "Yes"
    no: str  # the letter of "No"
    head: frozenset[str]
    where: frozenset[str]
    words: re.Pattern[str] | None
    inverted: bool = False  # the question asks for an absence ("is the liver free of lesions?"): a finding is "No"
    opposite: re.Pattern[str] | None = None  # words that answer "No" when asserted ("melanoma" to "is it benign?")


_ASKS = re.compile(
    r"^(?:is|are|was|were|does|do|did|can|could|has|have)\s+(?:there\s+|this\s+|these\s+|it\s+|the\s+|an?\s+|"
    r"you\s+)*(?:(?:image|picture|scan|study|film|photo|photograph|slide)s?\s+)?"
    r"(?:(?:show|shows|showing|demonstrate|depict|reveal|contain|see|have|has|evidence of|any|signs? of|"
    r"obtained with|taken with|acquired with|acquired by|an?|the)\s+)*"
)
_ASKED_AFTER = re.compile(r"\s(?:used|given|administered|performed|obtained|noted|identified|depicted|shown)\b.*")


def _either(*patterns: re.Pattern[str] | None) -> re.Pattern[str] | None:
    """One pattern matching any of ``patterns``."""
    kept = [p for p in patterns if p is not None]
    return re.compile("|".join(p.pattern for p in kept)) if len(kept) > 1 else (kept[0] if kept else None)


_AUX = frozenset(("is", "are", "was", "were", "does", "do", "did", "can", "could", "has", "have"))


def _yes_no(question: str, options: tuple[str, ...]) -> YesNo | None:
    """The subject of a yes/no question: with options "Yes" and "No" (any order), or open-ended and opening
    with an auxiliary verb ("Is there ...", "Does this image show ..."; then "yes" and "no" stand for the
    letters)."""
    if options:
        words = [_WORD_RE.findall(o.lower()) for o in options]
        if len(options) != 2 or sorted(w[0] if len(w) == 1 else "" for w in words) != ["no", "yes"]:
            return None
        yes = LETTERS[0] if words[0] == ["yes"] else LETTERS[1]
        no = LETTERS[1] if yes == LETTERS[0] else LETTERS[0]
    elif question.split()[:1] and question.split()[0].lower() in _AUX:
        yes, no = "yes", "no"
    else:
        return None
    statement = read(question.rstrip().rstrip("?"))  # as a statement: a question claims nothing
    asked = statement.asserted
    absent = frozenset(c for c in statement.denied if CATEGORY[c] in ("finding", "generic"))
    if absent and not any(CATEGORY[c] in ("finding", "generic") for c in asked):
        # "is the liver free of focal lesions?", "is there no evidence of infarct?": Yes is the absence
        return YesNo(yes, no, absent, frozenset(), None, inverted=True)
    by_cat: dict[str, set[str]] = {}
    for c in asked:
        by_cat.setdefault(CATEGORY[c], set()).add(c)
    # what qualifies a finding: where it is, and how it looks ("is the lesion well circumscribed?")
    where = frozenset(c for cat in ("laterality", "location", "appearance", "size") for c in by_cat.get(cat, ()))
    subject = _ASKS.sub("", " ".join(_WORD_RE.findall(normalize_text(question).lower())))
    subject = re.split(r"\s(?:in|on|at|of|within|seen|visible|present|noted|identified)\s", f" {subject} ")[0]
    phrases = _phrases(frozenset(asked))
    # the subject's words the lexicon does not read: "is the heart *enlarged*?", "are the lungs *clear*?"
    subject_words = _ASKED_AFTER.sub("", subject).split()  # "is contrast used?": "contrast"
    unread = [i for i, w in enumerate(subject_words) if w not in _PLAIN and not any(w in p.split() for p in phrases)]
    # the run of the subject's words from its first word the lexicon does not read to its last ("are the lungs
    # clear?": "clear"; "intraretinal or subretinal fluid")
    run = subject_words[unread[0] : unread[-1] + 1][:6] if unread else []
    # the whole run, and its last two words: "is the tube correctly positioned?" is answered "... not correctly
    # positioned"
    words = _either(word_pattern(run), word_pattern(run[-2:]) if len(run) > 2 else None)
    unread = [subject_words[i] for i in unread]
    if "clear" in unread:  # "are the lungs clear?" asks whether they are normal
        by_cat.setdefault("normal", set()).add("normal")
    predicate = next((p for p in PREDICATES if p in unread), None)
    if predicate:  # "is the lesion benign?", "is the EF reduced?": what it is, not whether it is there
        said, opposite = PREDICATES[predicate]
        return YesNo(yes, no, frozenset(), frozenset(), word_pattern_any(said), opposite=word_pattern_any(opposite))
    for cats in (("normal",), ("finding",), ("generic",), ("laterality", "location"), ("modality",), ("anatomy",)):
        head = frozenset(c for cat in cats for c in by_cat.get(cat, ()))
        if not head:
            continue
        if cats == ("generic",) and where:  # "is the lesion on the left?": the side (or the look) is asked
            return YesNo(yes, no, where, frozenset(), words)
        if cats[0] in ("modality", "anatomy") and words is not None:  # "is the heart enlarged?"
            return YesNo(yes, no, frozenset(), frozenset(), words)
        return YesNo(yes, no, head, where - head, words)
    return YesNo(yes, no, frozenset(), frozenset(), words)


@dataclass(frozen=True, eq=False)
class RecordFacts:
    """The checkable content of one record (all concept sets are lexicon concepts).

    Compared and hashed by identity: :func:`facts_of` returns one shared object per distinct record content,
    so caches keyed on it cost a pointer hash instead of hashing every field.
    """

    id: str
    task: str
    answer: str
    options: tuple[str, ...]
    letters: str
    option_concepts: tuple[frozenset[str], ...]  # concepts each option text asserts
    option_polarity: tuple[str | None, ...]  # "normal" / "abnormal" / None
    option_words: tuple[re.Pattern[str] | None, ...]  # each option's text as written, plurals allowed
    option_keys: tuple[re.Pattern[str] | None, ...]  # its own words, found in no other option ("aortic")
    option_marks: tuple[frozenset[str], ...]  # its concepts less those the question and the other options
                                              # share ("Left lung" of "which side of the chest?": {left})
    option_own: tuple[frozenset[str], ...]  # concepts no other option and not the question holds
                                            # ("Peripheral retina" among disc, macula, arcade: {peripheral})
    option_covered: tuple[bool, ...]  # its concepts say all it says ("Left upper quadrant"; not "Left
                                      # ventricle"), so naming them names it
    option_any: re.Pattern[str] | None  # any of the options' words: a sentence without them names no option
                                        # by its words
    yes_no: YesNo | None  # the subject of a yes/no question ("Yes"/"No" options, or open-ended)
    question_low: str
    abnormal: bool | None
    modality: frozenset[str]
    anatomy: frozenset[str]
    finding: frozenset[str]  # finding + generic concepts of evidence["finding"]
    laterality: frozenset[str]
    location: frozenset[str]
    appearance: frozenset[str]  # appearance + size descriptors
    gold_boxes: tuple[Box, ...]
    open_answer: str  # lower-cased free-text answer ("" for MCQ)
    is_mcq: bool  # it has options (a field, not a property: the verifiers ask several times per completion)

    def descriptors(self) -> frozenset[str]:
        """Every finding descriptor the record knows (laterality, location, appearance, size)."""
        return self.laterality | self.location | self.appearance


def _concepts(value: Any, categories: tuple[str, ...]) -> frozenset[str]:
    if isinstance(value, list | tuple):
        value = " , ".join(v for v in value if isinstance(v, str))
    if not isinstance(value, str) or not value:
        return frozenset()
    return frozenset(c for c in read(value).asserted if CATEGORY[c] in categories)


def _question_yes_polarity(question: str) -> str | None:
    """What "yes" means for a yes/no question: "abnormal" for "is there a lesion?", "normal" for "is it
    normal?".
    """
    reading = read(question.rstrip().rstrip("?"))  # as a statement: a question claims nothing
    if reading.asserted & {"normal"} and not any(
        CATEGORY[c] in ("finding", "generic") for c in reading.asserted
    ):
        return "normal"
    if any(CATEGORY[c] in ("finding", "generic") for c in reading.asserted):
        return "abnormal"
    return None


def option_polarity(option: str, question: str) -> str | None:
    """The polarity an option text stands for ("Normal", "No lesion", "Tumour present", "Yes" to "is
    there..").
    """
    words = _WORD_RE.findall(option.lower())
    if len(words) == 1 and words[0] in _YES | _NO:
        yes = _question_yes_polarity(question)
        if yes is None:
            return None
        return yes if words[0] in _YES else ("normal" if yes == "abnormal" else "abnormal")
    polarity = read(option).polarity
    return next(iter(polarity)) if len(polarity) == 1 else None


def _polarities(options: tuple[str, ...], question: str) -> tuple[str | None, ...]:
    """Each option's polarity, kept only when the options disagree on it (four lesion types are all
    "abnormal": then polarity does not tell them apart and is dropped)."""
    # an option naming a specific finding ("Tubular adenoma") is told apart by its words, not by polarity
    polarities = tuple(
        None if any(CATEGORY[c] == "finding" for c in read(o).asserted) else option_polarity(o, question)
        for o in options
    )
    return polarities if len(set(polarities) - {None}) == 2 else (None,) * len(options)


def _boxes(bbox: Any) -> tuple[Box, ...]:
    out: list[Box] = []
    if not isinstance(bbox, list | tuple):
        return ()
    if len(bbox) == 4 and all(isinstance(v, int | float) for v in bbox):
        bbox = [bbox]
    for box in bbox:
        if isinstance(box, list | tuple) and len(box) == 4:
            try:
                b = tuple(float(v) for v in box)
            except (TypeError, ValueError):
                continue
            if all(math.isfinite(v) for v in b) and b[2] > b[0] and b[3] > b[1]:
                out.append(b)  # type: ignore[arg-type]
    return tuple(out)


_KEY_FIELDS = ("id", "question", "options", "answer", "task", "modality", "anatomy", "evidence", "bbox")


@lru_cache(maxsize=1 << 14)
def _facts(key: str) -> RecordFacts:
    row = json.loads(key)
    ev = row["evidence"] if isinstance(row["evidence"], dict) else {}
    options = (
        tuple(o for o in row["options"] if isinstance(o, str)) if isinstance(row["options"], list) else ()
    )
    question = row["question"] if isinstance(row["question"], str) else ""
    answer = row["answer"] if isinstance(row["answer"], str) else ""
    abnormal = ev.get("abnormal")
    appearance = ev.get("appearance") if isinstance(ev.get("appearance"), list) else []
    words = tuple(tuple(_option_words(o)) for o in options)
    asked = frozenset(_option_words(question))
    stated = read(question.rstrip().rstrip("?")).asserted  # the question as a statement: it claims nothing
    concepts = tuple(read(o).asserted for o in options)
    yes_no = _yes_no(question, options) if len(options) in (0, 2) else None
    return RecordFacts(
        id=str(row["id"]),
        task=str(row["task"]),
        answer=answer,
        options=options,
        letters=LETTERS[: len(options)],
        option_concepts=concepts,
        option_polarity=(None,) * len(options) if yes_no else _polarities(options, question),
        option_words=tuple(map(option_pattern, options)),
        option_keys=tuple(_keys(w, words[:i] + words[i + 1 :], asked) for i, w in enumerate(words)),
        option_marks=_marks(concepts, stated),
        option_own=tuple(
            c - stated - frozenset().union(*concepts[:i], *concepts[i + 1 :]) for i, c in enumerate(concepts)
        ),
        option_covered=tuple(said_by_concepts(o, c) for o, c in zip(options, concepts, strict=True)),
        option_any=_any_word(words),
        yes_no=yes_no,
        question_low=question.lower(),
        abnormal=abnormal if isinstance(abnormal, bool) else None,
        modality=_concepts(ev.get("modality") or row["modality"], ("modality",)),
        anatomy=_concepts(ev.get("anatomy") or row["anatomy"], ("anatomy",)),
        finding=_concepts(ev.get("finding"), ("finding", "generic")),
        laterality=_concepts(ev.get("laterality"), ("laterality",)),
        location=_concepts(ev.get("location"), ("location", "laterality")),
        appearance=_concepts([*appearance, ev.get("size")], ("appearance", "size")),
        gold_boxes=_boxes(row["bbox"]),
        open_answer="" if options else " ".join(_WORD_RE.findall(answer.lower())),
        is_mcq=bool(options),
    )


@lru_cache(maxsize=1 << 12)
def _phrases(concepts: frozenset[str]) -> tuple[str, ...]:
    """The lexicon's surface phrases of ``concepts``."""
    return tuple(p for p, c in PHRASES.items() if c in concepts)


@lru_cache(maxsize=1 << 12)
def said_by_concepts(text: str, concepts: frozenset[str]) -> bool:
    """``concepts`` (what the lexicon reads in ``text``) say all ``text`` says: each of its words is plain or part
    of one of their phrases ("Left upper quadrant"; not "Left pulmonary artery", read only as {left, chest})."""
    return bool(concepts) and all(
        w in _PLAIN or any(w in p.split() for p in _phrases(concepts)) for w in _option_words(text))


def facts_of(record: MedADRecord) -> RecordFacts:
    """The cached :class:`RecordFacts` of a record (keyed by content: equal records share one entry)."""
    return _facts(json.dumps({name: getattr(record, name, None) for name in _KEY_FIELDS}, default=str))
