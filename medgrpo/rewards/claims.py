"""Reading free text into claims: per sentence, which lexicon concepts it asserts or denies, which option
letters it commits to, whether it draws a conclusion, and which polarity (normal / abnormal) it states.

The text is split into sentences (at ``. ! ?`` before whitespace, and at line breaks); each sentence is read
once and cached, since the completions of one prompt repeat many sentences. One regular-expression pass over
the lower-cased sentence finds clause breaks, cited boxes and the words of interest (lexicon phrases,
negation and conclusion cues, compiled as one prefix trie so the scan is cheap); a linear walk over the
matches decides whether each mention is denied:

* a *pre* cue (``no``, ``not``, ``without``, ``rather than``, ``unlikely``, ...) denies every mention after it
  up to the end of its clause (clauses end at ``, ; :`` and at ``but``/``however``/``whereas``...);
* a *post* cue (``absent``, ``not seen``, ``ruled out``, ...) denies every mention before it in its clause;
* a *neutral* cue (``otherwise``, ``surrounding``, ``remaining``...) makes "normal" in its clause say nothing
  about the whole image ("the surrounding parenchyma is otherwise normal").

Option letters count as committed only in explicit forms: "answer is C", "option C", "choice: C", "(C)".
Polarity: a sentence states *abnormal* when it asserts a finding or a generic abnormality, or denies "normal";
it states *normal* when it asserts "normal"/"unremarkable" or denies a generic abnormality ("no lesion", "no
abnormality"). Denying one specific finding ("no haemorrhage") says nothing about the whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from medgrpo.rewards.lexicon import CATEGORY, IMPLIED, PHRASES, trie_pattern

_FINDING_CATS = ("finding", "generic")

# word or phrase -> its kind; lexicon phrases are kind "c" (concept).
_CUES: dict[str, str] = {
    **dict.fromkeys(
        (
            "absent",
            "not seen",
            "not present",
            "not identified",
            "not visible",
            "not evident",
            "not observed",
            "not shown",
            "not depicted",
            "ruled out",
            "excluded",
        ),
        "post",
    ),
    **dict.fromkeys(("but", "however", "whereas", "although", "though", "while", "yet"), "clause"),
    **dict.fromkeys(
        (
            "otherwise",
            "surrounding",
            "remaining",
            "rest of",
            "background",
            "adjacent",
            "contralateral",
            "elsewhere",
        ),
        "neut",
    ),
    **dict.fromkeys(
        (
            "no",
            "not",
            "without",
            "negative for",
            "free of",
            "rule out",
            "rules out",
            "excluding",
            "rather than",
            "instead of",
            "unlikely",
            "neither",
            "nor",
            "lack of",
            "lacks",
            "never",
            "cannot be",
        ),
        "neg",
    ),
    **dict.fromkeys(
        (
            "therefore",
            "thus",
            "hence",
            "so",
            "consequently",
            "conclude",
            "concluding",
            "conclusion",
            "consistent with",
            "compatible with",
            "indicate",
            "indicates",
            "indicating",
            "suggest",
            "suggests",
            "suggesting",
            "most likely",
            "likely",
            "represent",
            "represents",
            "diagnosis",
            "final",
            "overall",
        ),
        "cue",
    ),
    **dict.fromkeys(("answer", "option", "choice"), "intro"),
}
_KIND: dict[str, str] = {**dict.fromkeys(PHRASES, "c"), **_CUES}

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n")
_SCAN = re.compile(
    r"(<box>.*?</box>)"  # 1: a cited box (its commas are not clause breaks)
    r"|([.!?](?=\s|\Z))"  # 2: a sentence's final stop (nothing to do)
    r"|([,;:])"  # 3: clause break
    r"|\(([a-j])\)"  # 4: "(C)"
    rf"|(?=[a-z])\b({trie_pattern(sorted(_KIND))})\b",  # 5: a word of interest
    re.DOTALL,
)
_LETTER_AFTER = re.compile(r"\s*(?:is\s+|would\s+be\s+|:\s*)?\(?([A-J])\)?(?!\w)")


class Sentence(NamedTuple):
    """The claims of one sentence; ``low`` is its lower-cased text (hyphens as spaces)."""

    low: str
    asserted: frozenset[str]
    denied: frozenset[str]
    letters: frozenset[str]  # option letters it commits to
    denied_letters: frozenset[str]  # "not option C", "rather than (C)"
    cue: bool  # it draws a conclusion ("therefore", "consistent with", "the answer is")
    boxes: int
    polarity: frozenset[str]  # subset of {"normal", "abnormal"}
    is_finding: bool  # it asserts a finding or cites a box: its descriptors belong to that finding


@dataclass(frozen=True)
class Reading:
    """The claims of a whole text, sentence by sentence (in order); ``low`` is the lower-cased text (hyphens
    as spaces)."""

    low: str
    sentences: tuple[Sentence, ...]
    asserted: frozenset[str]
    denied: frozenset[str]
    polarity: frozenset[str]


_NO_SET: frozenset[str] = frozenset()
_IS_FINDING = {c: CATEGORY[c] in _FINDING_CATS for c in CATEGORY}


def _flush(
    clause: list[list],
    neut: bool,
    asserted: set[str],
    denied: set[str],
    letters: set[str],
    denied_letters: set[str],
    polarity: set[str],
) -> None:
    """Move one finished clause's mentions into its sentence's sets (post cues may have denied them late)."""
    for item, is_denied in clause:
        if item[0] == "#":
            (denied_letters if is_denied else letters).add(item[1:])
        elif is_denied:
            denied.add(item)
            if item == "abnormal":
                polarity.add("normal")
            elif item == "normal" and not neut:
                polarity.add("abnormal")
        else:
            asserted.add(item)
            if _IS_FINDING[item]:
                polarity.add("abnormal")
            elif item == "normal" and not neut:
                polarity.add("normal")


@lru_cache(maxsize=1 << 16)
def read_sentence(text: str) -> Sentence | None:
    """The claims of one sentence (None when it is blank). Cached: completions of one prompt, and the gold
    reasoning they imitate, repeat many sentences word for word."""
    low = text.lower()
    if len(low) != len(text):  # a few Unicode letters change length when lowered: keep indices aligned
        text = text.encode("ascii", "replace").decode("ascii")
        low = text.lower()
    low = low.replace("-", " ")
    boxes = 0
    cue = neg = neut = False
    clause: list[list] = []  # [concept or "#<letter>", denied] of the current clause
    asserted: set[str] = set()
    denied: set[str] = set()
    letters: set[str] = set()
    denied_letters: set[str] = set()
    polarity: set[str] = set()
    for m in _SCAN.finditer(low):
        group = m.lastindex
        if group == 5:
            word = m.group(5)
            kind = _KIND[word]
            if kind == "c":
                clause.append([PHRASES[word], neg])
            elif kind == "neg":
                neg = True
            elif kind == "cue":
                cue = True
            elif kind == "intro":
                cue = cue or word == "answer"
                after = _LETTER_AFTER.match(text, m.end())
                if after:
                    cue = True
                    clause.append(["#" + after.group(1), neg])
            elif kind == "post":
                for item in clause:
                    item[1] = True
            elif kind == "neut":
                neut = True
            else:  # "clause"
                _flush(clause, neut, asserted, denied, letters, denied_letters, polarity)
                clause, neg, neut = [], False, False
        elif group == 3:
            _flush(clause, neut, asserted, denied, letters, denied_letters, polarity)
            clause, neg, neut = [], False, False
        elif group == 1:
            boxes += 1
        elif group == 4:  # "(c)": a letter only when written in upper case
            letter = text[m.start(4)]
            if letter.isupper():
                clause.append(["#" + letter, neg])
    _flush(clause, neut, asserted, denied, letters, denied_letters, polarity)
    if not low.strip():
        return None
    for whole, parts in IMPLIED.items():
        if parts <= asserted:
            asserted.add(whole)
    return Sentence(
        low,
        frozenset(asserted) if asserted else _NO_SET,
        frozenset(denied) if denied else _NO_SET,
        frozenset(letters) if letters else _NO_SET,
        frozenset(denied_letters) if denied_letters else _NO_SET,
        cue,
        boxes,
        frozenset(polarity) if polarity else _NO_SET,
        boxes > 0 or any(_IS_FINDING[c] for c in asserted),
    )


@lru_cache(maxsize=1 << 15)
def read(text: str) -> Reading:
    """Read a text (a reasoning, an option, a question) into its claims, sentence by sentence; cached."""
    sentences = [s for s in map(read_sentence, _SENTENCE_END.split(text)) if s is not None]
    return Reading(
        text.lower().replace("-", " "),
        tuple(sentences),
        frozenset().union(*(x.asserted for x in sentences)),
        frozenset().union(*(x.denied for x in sentences)),
        frozenset().union(*(x.polarity for x in sentences)),
    )
