"""Reading free text into claims: per sentence, which lexicon concepts it asserts or denies, which option
letters it commits to, whether it draws a conclusion, and which polarity (normal / abnormal) it states.

The text is split into sentences (at ``. ! ?`` before whitespace, and at line breaks); each sentence is read
once and cached, since the completions of one prompt repeat many sentences. Markdown emphasis and headings are
dropped, capitalised abbreviations spelled out ("PTX", "LLL") and British spellings read as American ones
(:func:`~medgrpo.rewards.lexicon.normalize_text`). Two regular-expression scans of
the lower-cased sentence find the clause breaks and cited boxes, and the words of interest (lexicon phrases,
negation and conclusion cues, compiled as one prefix trie so the scan is cheap); a linear walk over the
matches, in order, decides whether each mention is denied:

* a *pre* cue (``no``, ``not``, ``without``, ``rather than``, ``don't``...) denies every mention after it up to the
  end of its clause (clauses end at ``, ; :``, at ``but``/``whereas``, at "and" before a new subject ("no
  cardiomegaly and the heart size is normal"), at a concession and at a revision);
* a *post* cue (``absent``, ``not seen``, ``ruled out``, ``incorrect``, ...) denies every mention before it in its
  clause;
* a *post* cue also rejects: ``less likely``, ``not favored``, ``spared`` ("with the macula spared");
* a *relational* cue (``unlikely``, ``not consistent with``, ``does not fit``, ``argues against``, ``sparing``...)
  denies the mentions after it in its clause, or, when none follows, those before it ("CT is unlikely",
  "unlikely to be CT");
* a *concession* (``although``, ``though``, ``while``, ``despite``) opens a clause whose mentions are weighed,
  not claimed ("although a glioma could be considered, ..."); an *uncertainty* (``cannot be excluded``,
  ``differential``) or a statement of what an entity would or typically does show (``would show``,
  ``typically``, ``should be seen``) weighs every mention of its clause;
* a *revision* (``however``, ``actually``, ``on reflection``, ``wait``...) closes the clause before it and
  makes its sentence a conclusion, so that after a change of mind the last committed conclusion wins;
  ``can't decide``, ``cannot distinguish``... mark reasoning that concludes nothing;
* a pre cue's denial runs on over a comma into a list of the same kind of concept ("no effusion, pneumothorax or
  consolidation"), but not into another kind ("no mass, left side"); a clause of nothing but mentions before a
  comma waits for the next: when that one opens with a denied mention of the same kind, the list is denied with
  it ("CT, X-ray and ultrasound are excluded");
* a pre cue that ends its clause (nothing but punctuation after it) rejects what came before: the mentions
  before it in its clause ("CT - no"), or, when it stands alone after a colon, those of the labelled clause
  before the colon ("CT: no", "Option A: no"; a post cue alone after a colon too: "Chest: incorrect"), so that
  an option-by-option elimination reads as one;
* a *hypothetical* cue (``whether``, ``if``, ``look for``, ``to rule out``...) makes the mentions and option
  letters after it, to the end of its sentence, neither asserted nor denied (and a question, a sentence ending
  in ``?``, claims nothing at all): "to determine whether there is a lesion, ..." and "I look for a mass, a
  nodule or an effusion" claim nothing (a whole sentence, because lists run across commas);
* a *neutral* cue (``otherwise``, ``surrounding``, ``remaining``...) makes "normal" in its clause say nothing
  about the whole image ("the surrounding parenchyma is otherwise normal").

Option letters count as committed only in explicit forms: "answer is C", "option C", "choice: C", "(C)", "I
choose C", "C is the correct answer"; and as denied in "not C", "rules out C". A sentence that answers a yes/no
question in those words ("Yes, ...", "No.", "the answer is no") records it (``says``). Each sentence keeps where
its cues and clause breaks stand (``scopes``), so that :func:`mention` can read the negation scope of words the
lexicon does not know, such as an option's own text.
Polarity: a sentence states *abnormal* when it asserts a finding or a generic abnormality, or denies "normal";
it states *normal* when it asserts "normal"/"unremarkable" or denies a generic abnormality ("no lesion", "no
abnormality"). Denying one specific finding ("no haemorrhage") says nothing about the whole, nor does a clause
about one place ("the right side shows no abnormality", "the left side is normal"), whose places are then
denied: they are where the lesion is not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from operator import attrgetter, methodcaller

from medgrpo.rewards.lexicon import CATEGORY, IMPLIED, PHRASES, normalize_text, trie_pattern

_FINDING_CATS = ("finding", "generic")
DESCRIPTOR_CATEGORIES = ("laterality", "location", "appearance", "size")
"""Categories whose concepts describe a finding rather than the whole image."""
VISUAL_CATEGORIES = ("modality", "anatomy", "finding", "generic", "normal", *DESCRIPTOR_CATEGORIES)
"""Categories whose concepts describe what the image shows."""

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
            "incorrect",
            "wrong",
            "not correct",
            "not the answer",
            "not supported",
            "less likely",
            "less favored",
            "not favored",
            "disfavored",
            "spared",
        ),
        "post",
    ),
    **dict.fromkeys(
        (
            "unlikely",
            "not likely",
            "not consistent with",
            "inconsistent with",
            "not compatible with",
            "incompatible with",
            "does not fit",
            "do not fit",
            "doesn't fit",
            "does not match",
            "do not match",
            "doesn't match",
            "argues against",
            "argue against",
            "arguing against",
            "speaks against",
            "speak against",
            "evidence against",
            "not suggestive of",
            "not typical of",
            "not characteristic of",
            "not in keeping with",
            "atypical for",
            "does not support",
            "do not support",
            "doesn't support",
            "not supportive of",
            "would not explain",
            "does not explain",
            "sparing",
            "sparing of",
        ),
        "rel",
    ),
    # uncertainty that commits to nothing: the mentions of its clause are neither asserted nor denied
    **dict.fromkeys(
        (
            "cannot exclude",
            "cannot be excluded",
            "cannot be entirely excluded",
            "cannot be completely excluded",
            "cannot be definitely excluded",
            "not entirely excluded",
            "can't exclude",
            "can't be excluded",
            "cannot rule out",
            "cannot be ruled out",
            "can't rule out",
            "not excluded",
            "not ruled out",
            "differential",
            "differentials",
            "ddx",
            # what an entity would or typically does show is a statement about it, not a claim about the image
            "would show",
            "would have",
            "would appear",
            "would look",
            "would typically",
            "would usually",
            "would demonstrate",
            "would be expected",
            "would be seen",
            "would contain",
            "would produce",
            "would not",
            "would require",
            # what another entity would do to the image is hypothetical: "a lower lobe process would obscure the
            # hemidiaphragm instead"
            "would obscure",
            "would efface",
            "would obliterate",
            "would cause",
            "would displace",
            "would give",
            "would create",
            "would result",
            "would lie",
            "would sit",
            "would involve",
            "would affect",
            "would enhance",
            "would extend",
            "would spare",
            "would be located",
            "would be",
            "should be seen",
            "should show",
            "should have",
            "typically",
            "usually",
            "classically",
            "normally",
            "tends to",
            "tend to",
        ),
        "unc",
    ),
    # a concession opens a clause whose mentions are weighed, not claimed ("although X could be considered, ...")
    **dict.fromkeys(("although", "though", "even though", "while", "whilst", "despite", "albeit"), "conc"),
    # negations that deny nothing: "whether there is a lesion or not", "no doubt that", "not only"
    **dict.fromkeys(("or not", "no doubt", "not only", "not just"), "inert"),
    **dict.fromkeys(
        (
            "whether",
            "if",
            "were there",
            "had there been",
            "look for",
            "looking for",
            "check for",
            "checking for",
            "search for",
            "screen for",
            "evaluate for",
            "evaluated for",
            "assess for",
            "assessed for",
            "reviewed for",
            "examined for",
            "checked for",
            "inspected for",
            "screened for",
            "for any",
            "for signs of",
            "for evidence of",
            "to rule out",
            "to exclude",
        ),
        "hyp",
    ),
    # "and" before a new subject ends a negation's list: "no cardiomegaly and the heart size is normal"
    **dict.fromkeys(("but", "whereas", "yet", "and the", "and there", "and its", "and this"), "clause"),
    # a revision closes the clause before it and concludes: the last committed conclusion wins
    **dict.fromkeys(
        (
            "however",
            "on reflection",
            "on closer",
            "closer inspection",
            "second thought",
            "on review",
            "actually",
            "wait",
            "reconsider",
            "reconsidering",
            "re evaluate",
            "re evaluating",
            "revise",
            "revised",
            "correction",
            "in fact",
            "instead",
            "namely",
            "and favor",
            "and favors",
            "in favor of",
            "and suggest",
            "and suggests",
        ),
        "rev",
    ),
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
            "neither",
            "nor",
            "lack of",
            "lacks",
            "never",
            "cannot be",
            "none",
            "absence of",
            "don't",
            "doesn't",
            "isn't",
            "aren't",
            "wasn't",
            "weren't",
            "didn't",
            "can't see",
            "cannot see",
            "nothing",
            # what a finding tells the image apart from is rejected: "distinguishes it from a T2-weighted image"
            "distinguishes it from",
            "distinguish it from",
            "distinguishing it from",
            "differentiates it from",
            "differentiating it from",
            "as opposed to",
            "unlike",
        ),
        "neg",
    ),
    # after a negation in its sentence, what is "suggested" is denied too ("no serrated architecture to suggest
    # a hyperplastic polyp", "nothing to suggest X"); without one it concludes ("findings to suggest X")
    **dict.fromkeys(("to suggest", "to indicate", "to support", "to favor", "to raise concern for"), "tosug"),
    **dict.fromkeys(
        ("would be consistent with", "would be in keeping with", "would fit with", "would favor"), "cue"
    ),
    **dict.fromkeys(("non",), "non"),  # "non-contrast CT": the prefix denies its own word only
    # a pronoun's rejection closes a sentence about one option: "the trapezium is distal, so not that either"
    **dict.fromkeys(
        ("not that either", "not that one", "not this one", "so not that", "that's out", "that is out",
         "so that's out", "not this either", "neither of those", "neither of these", "neither of them",
         "none of those", "none of these", "none of them"),
        "rejall",
    ),
    # the reasoning says it cannot choose: a conclusion before it does not stand
    **dict.fromkeys(
        (
            "can't decide",
            "cannot decide",
            "can't determine",
            "cannot determine",
            "unable to determine",
            "cannot be determined",
            "can't tell",
            "cannot tell",
            "impossible to tell",
            "impossible to determine",
            "can't distinguish",
            "cannot distinguish",
            "unable to distinguish",
            "can't differentiate",
            "cannot differentiate",
            "unable to differentiate",
            "undecided",
            "hard to tell",
            "difficult to tell",
            "hard to say",
            "can't separate",
            "cannot separate",
            "unable to separate",
            "can't be separated",
            "cannot be separated",
            "impossible to separate",
            "impossible to distinguish",
            "not possible to distinguish",
            "not possible to tell",
            "cannot reliably distinguish",
            "can't reliably distinguish",
            "cannot reliably differentiate",
            "cannot reliably separate",
            "can't pin it down",
            "cannot pin it down",
            "can't pin down",
            "cannot pin down",
            "can't choose",
            "cannot choose",
            "unable to choose",
            "can't say which",
            "cannot say which",
            "can't tell which",
            "needed to decide",
            "needed to distinguish",
            "needed to separate",
            "indeterminate between",
        ),
        "und",
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
            "impression",
            "favor",
            "favors",
            "favoring",
            "favored",
            "in keeping with",
            "c/w",
            "characteristic of",
            "typical of",
            "diagnostic of",
            "correct",
            "confirms",
            "best",
        ),
        "cue",
    ),
    **dict.fromkeys(("answer", "option", "choice", "choose", "select", "pick", "go with", "opt for"), "intro"),
}
_KIND: dict[str, str] = {**dict.fromkeys(PHRASES, "c"), **_CUES}

# Sentences end at whitespace after ". ! ?" and at line breaks. The stop is matched (and captured, to be put
# back) rather than looked behind for, so the regex engine can jump between the few candidate characters; a
# text without "!", "?" or line breaks (most reasonings) takes the narrower, faster pattern.
_SENTENCE_END = re.compile(r"([.!?\n])(?:(?<=[.!?])\s+|(?<=\n))")
_PERIOD_END = re.compile(r"\.\s+")
# Two scans of a lower-cased sentence, merged by position: the marks (a cited box, whose commas are no clause
# breaks; a clause break; "(C)") and the words of interest (lexicon phrases and cues, as one prefix trie).
# Each starts with a character class, which lets the regex engine jump between candidate positions: the marks
# with one of five characters, a word with the non-word character before it (the sentence gets a leading
# space).
_MARKS = re.compile(r"<box>.*?</box>|,|;|:|\([a-j]\)", re.DOTALL)
_WORDS = re.compile(rf"\W({trie_pattern(sorted(_KIND))})(?:s|es)?\b")  # plurals of every phrase too
_WORDS_ASCII = re.compile(_WORDS.pattern, re.ASCII)  # the same on ASCII text, with a cheaper test for \W
_LETTER_AFTER = re.compile(
    r"\s*(?:(?:is|would be|will be|should be|must be|here is|therefore|then|thus)\s*)?(?:[:=\-\u2013\u2014>]\s*)?"
    r"(?:option\s+|letter\s+)?\(?([A-J])\)?(?![\w'\u2019])"
)
_MARKUP = str.maketrans({"*": None, "`": None, "#": None, "\u2019": "'"})  # markdown is layout, not words
# option letters written bare, in forms no article takes: "so not A", "rules out B"; "C is correct"
_LETTER_DENIED = re.compile(
    r"\b(?i:not|excludes?|excluding|eliminates?|rules?\s+out|ruling\s+out|rather\s+than|except)\s+"
    r"(?:option\s+)?\(?([A-J])\)?(?![\w'\u2019])"
)
_LETTER_FIRST = re.compile(
    r"\A\W*\(?([A-J])\)?\s+(?:is|seems|appears|would\s+be|must\s+be)\s+(?:the\s+)?(?:most\s+)?"
    r"(?:correct|right|best|answer|likely)"
)


@dataclass(eq=False, slots=True)
class Sentence:
    """The claims of one sentence; ``low`` is its lower-cased text (hyphens as spaces) up to its hypothetical
    part, where it has one (empty for a question): the text the verifiers match option words in.

    Compared and hashed by identity: :func:`read_sentence` returns one shared object per distinct sentence, so
    the per-(sentence, record) cache of the verifiers costs a pointer hash. Never mutated (not frozen only
    because a frozen dataclass is slow to build, and every new sentence builds one).
    """

    low: str
    asserted: frozenset[str]
    denied: frozenset[str]
    letters: frozenset[str]  # option letters it commits to
    denied_letters: frozenset[str]  # "not option C", "rather than (C)"
    cue: bool  # it draws a conclusion ("therefore", "consistent with", "the answer is")
    boxes: int
    polarity: frozenset[str]  # subset of {"normal", "abnormal"}
    descriptors: frozenset[str]  # when it asserts a finding or cites a box: the descriptors of that finding
    observed: bool  # it cites a box or asserts something visual (a concept of VISUAL_CATEGORIES)
    scopes: tuple[tuple[int, str], ...]  # (position in ``low``, kind) of its cues and clause breaks, for
                                         # :func:`mention` (empty when it has none)
    says: str  # "yes" or "no" when it answers a yes/no question in those words ("Yes, ...", "the answer is
               # no"), else ""
    heads: bool  # it opens with a conclusion's label ("Impression:", "Conclusion -", "Final answer:")
    undecided: bool  # it says it cannot choose ("I can't decide between them")


@dataclass(eq=False, slots=True)
class Reading:
    """The claims of a whole text, sentence by sentence (in order); ``low`` is the lower-cased text (hyphens
    as spaces). Never mutated (not frozen for the same reason as :class:`Sentence`)."""

    low: str
    sentences: tuple[Sentence, ...]
    asserted: frozenset[str]
    denied: frozenset[str]
    polarity: frozenset[str]
    descriptors: frozenset[str]  # the finding descriptors of every sentence that describes a finding


_NO_SET: frozenset[str] = frozenset()
_CLAIMS = attrgetter("asserted", "denied", "polarity", "descriptors")  # one C call per sentence
_start = methodcaller("start")
_IS_FINDING = {c: CATEGORY[c] in _FINDING_CATS for c in CATEGORY}
_IS_DESCRIPTOR = {c: CATEGORY[c] in DESCRIPTOR_CATEGORIES for c in CATEGORY}
_IS_PLACE = {c: CATEGORY[c] in ("laterality", "location") for c in CATEGORY}
# a concept's kind for negated lists ("no mass, cyst or calcification"): findings and generic abnormalities alike
_LIST_KIND = {c: "finding" if _IS_FINDING[c] else "place" if _IS_PLACE[c] else CATEGORY[c] for c in CATEGORY}
_LIST_FILLERS = frozenset(("and", "or", "a", "an", "any", "the"))
_VISUAL = frozenset(c for c in CATEGORY if CATEGORY[c] in VISUAL_CATEGORIES)


# Equal claim sets are one object: the sentence cache holds up to 65,536 sentences, and most of their sets
# repeat ({"ct"}, {"abnormal"}). Shared, they leave the cache about 40% fewer GC-tracked objects, so the
# collector's full passes over a long-running trainer come less often and take less time.
_SETS: dict[frozenset[str], frozenset[str]] = {}
_SETS_MAX = 1 << 16
"""Distinct sets held; past that the table starts over (sets already shared stay valid)."""


def _shared(items: set[str]) -> frozenset[str]:
    """``items`` as the one shared frozenset equal to it (the empty set as ``_NO_SET``)."""
    if not items:
        return _NO_SET
    new = frozenset(items)
    known = _SETS.get(new)
    if known is None:
        if len(_SETS) >= _SETS_MAX:
            _SETS.clear()
        known = _SETS[new] = new
    return known


def _flush(
    clause: list[list],
    neut: bool,
    asserted: set[str],
    denied: set[str],
    letters: set[str],
    denied_letters: set[str],
    polarity: set[str],
) -> None:
    """Move one finished clause's mentions into its sentence's sets (post cues may have denied them late).

    A clause about a place ("the right side shows no abnormality", "the left side is normal") says nothing about
    the whole image; when it denies a finding or calls the place normal, and asserts no finding, its places are
    where the lesion is not, and are denied (so "left ...; the right side shows no abnormality" does not read as
    both sides, nor "the other quadrants appear unremarkable" as naming them).
    """
    local = found = missing = False
    if len(clause) > 1:  # a place and something to say about it
        for item, is_denied in clause:
            if _IS_PLACE.get(item, False):  # option letters ("#C") are neither places nor findings
                local = True
            elif _IS_FINDING.get(item, False):
                missing = missing or is_denied
                found = found or not is_denied
            elif item == "normal" and not is_denied:
                missing = True
    if local and missing and not found:
        for item in clause:
            item[1] = item[1] or _IS_PLACE.get(item[0], False)
    for item, is_denied in clause:
        if item[0] == "#":
            (denied_letters if is_denied else letters).add(item[1:])
        elif is_denied:
            denied.add(item)
            if item == "abnormal" and not local:
                polarity.add("normal")
            elif item == "normal" and not neut and not local:
                polarity.add("abnormal")
        else:
            asserted.add(item)
            if _IS_FINDING[item]:
                polarity.add("abnormal")
            elif item == "normal" and not neut and not local:
                polarity.add("normal")


def _only_mentions(text: str, said: list[str]) -> bool:
    """``text`` holds nothing but the mentions ``said`` and list fillers ("the chest", "x ray and")."""
    words = text.split()
    if len(words) > 3 * len(said):  # most clauses say more than their mentions: no need to look closer
        return False
    return _LIST_FILLERS.union(*(phrase.split() for phrase in said)).issuperset(words)


def _release(held: list[list[list]], clause: list[list], sets: tuple[set[str], ...]) -> None:
    """Flush the bare list items held at their commas before ``clause`` ("CT, X-ray and ultrasound are
    excluded" holds "CT"): when ``clause`` opens with a denied mention of their kind, they are denied with it."""
    kind = _LIST_KIND[clause[0][0]] if clause and clause[0][1] and clause[0][0][0] != "#" else ""
    for items in held:
        if kind and all(_LIST_KIND.get(item, "") == kind for item, _ in items):
            for item in items:
                item[1] = True
        _flush(items, False, *sets)


def _reject_back(low: str, clause: list[list], labelled: list[list], neg_end: int, end: int) -> None:
    """At the end (``end`` in ``low``) of a clause whose last pre or relational cue has no mention after it:
    unless a pre cue has words after it, deny the mentions before the cue, or those of the labelled clause
    before a colon when there are none ("CT is unlikely", "CT - no", "CT: no")."""
    if neg_end >= 0 and low[neg_end:end].strip(" .!?"):  # "no fan shape": the "no" is about what follows
        return
    for item in clause or labelled:
        item[1] = True


@lru_cache(maxsize=1 << 16)
def read_sentence(text: str) -> Sentence | None:
    """The claims of one sentence (None when it is blank). Cached: completions of one prompt, and the gold
    reasoning they imitate, repeat many sentences word for word."""
    if "*" in text or "#" in text or "`" in text or "\u2019" in text:
        text = text.translate(_MARKUP)
    text = normalize_text(text)
    low = text.lower()
    if len(low) != len(text):  # a few Unicode letters change length when lowered: keep indices aligned
        text = text.encode("ascii", "replace").decode("ascii")
        low = text.lower()
    low = low.replace("-", " ")
    if not low.strip():
        return None
    words = list((_WORDS_ASCII if low.isascii() else _WORDS).finditer(" " + low))
    marks = list(_MARKS.finditer(low))
    hyp = text.rstrip().endswith("?")  # "Is there a mass?" asks; it does not claim
    if not words and not marks:  # nothing of interest (common): no clause bookkeeping
        return Sentence(
            "" if hyp else low, _NO_SET, _NO_SET, _NO_SET, _NO_SET, False, 0, _NO_SET, _NO_SET, False, (),
            _says(low) if "yes" in low and not hyp else "",  # a bare "Yes." holds no word of interest
            _HEAD.match(low) is not None,
            False,
        )
    hyp_at = 0  # where the hypothetical part starts in ``low``: the sentence keeps only the text before it
    boxes = 0
    cue = neg = neut = conc = False
    clause: list[list] = []  # [concept or "#<letter>", denied] of the current clause
    labelled: list[list] = []  # the clause before a colon, held back until the next one ends ("CT: no")
    labelled_neut = False
    negated_at = -1  # len(clause) at its last pre or relational cue
    neg_end = -1  # where that cue ends in ``low`` when it is a pre cue (-1 for a relational one)
    listed, listed_from = "", 0  # after a comma that ends a denied mention: its kind, and where the comma ends
    held: list[list[list]] = []  # clauses of bare mentions before a comma ("CT,"): a later cue may deny them too
    clause_from = 0  # where the current clause starts in ``low``
    said: list[str] = []  # the current clause's mentions, as written
    asserted: set[str] = set()
    denied: set[str] = set()
    letters: set[str] = set()
    denied_letters: set[str] = set()
    polarity: set[str] = set()
    sets = (asserted, denied, letters, denied_letters, polarity)
    covered = 0  # the end of the last box or "(C)": nothing inside them is a claim
    scopes: list[tuple[int, str]] = []
    non_end = -1  # where a "non" prefix ends: the word right after it is denied
    negated_before = False  # the sentence has negated something before this point
    for m in sorted(marks + words, key=_start) if marks and words else marks or words:
        if m.re is not _MARKS:  # a word; positions in " " + low: m.start() is the word's, m.end() one past it
            if m.start() < covered:
                continue
            word = m.group(1)
            kind = _KIND[word]
            if kind != "c" and kind != "intro":
                scopes.append((m.start(), kind))
            if kind == "c":
                concept = PHRASES[word]
                if m.start() == non_end:  # "non-small cell": this word only
                    if not (hyp or conc):
                        clause.append([concept, True])
                        said.append(word)
                    continue
                if listed and not clause:  # the first mention after "no mass,": does the list go on?
                    if _LIST_KIND[concept] == listed and _LIST_FILLERS.issuperset(low[listed_from : m.start()].split()):
                        neg = True
                    listed = ""
                if not (hyp or conc):
                    clause.append([concept, neg])
                    said.append(word)
            elif kind == "neg" or kind == "rel":
                neg, negated_at, negated_before = True, len(clause), True
                neg_end = m.end() - 1 if kind == "neg" else -1
            elif kind == "cue":
                cue = True
            elif kind == "intro":
                cue = cue or word == "answer"
                after = _LETTER_AFTER.match(text, m.end() - 1)
                if after:
                    cue = True
                    if not (hyp or conc):
                        clause.append(["#" + after.group(1), neg])
            elif kind == "post":
                for item in clause or labelled:  # "Chest: incorrect" rejects the labelled clause
                    item[1] = True
            elif kind == "non":
                non_end = m.end()
            elif kind == "rejall":  # everything the sentence named so far is what "that" rejects
                for item in clause + labelled + [it for items in held for it in items]:
                    item[1] = True
                denied.update(asserted)
                asserted.clear()
                polarity.discard("abnormal")
            elif kind == "neut":
                neut = True
            elif kind == "hyp" and not hyp:
                hyp, hyp_at = True, m.start()
            elif kind == "unc":  # "X cannot be excluded", "cannot rule out X": the clause claims nothing
                clause[:] = [item for item in clause if item[0][0] == "#"]  # "the answer would be C" stays
                said.clear()
                conc = True
            elif kind == "tosug":
                if negated_before:
                    neg, negated_at, neg_end = True, len(clause), m.end() - 1
                else:
                    cue = True
            elif kind == "clause" or kind == "conc" or kind == "rev":
                cue = cue or kind == "rev"
                if negated_at == len(clause):  # its negation closes it (-1 when it has none)
                    _reject_back(low, clause, labelled, neg_end, m.start())
                if labelled:
                    _flush(labelled, labelled_neut, *sets)
                    labelled = []
                _flush(clause, neut, *sets)
                if held:
                    _release(held, clause, sets)
                    held = []
                clause, neg, neut, negated_at, listed = [], False, False, -1, ""
                clause_from, said = m.end() - 1, []
                conc = kind == "conc"
        elif m.start() < covered:
            continue
        elif low[m.start()] == "<":
            boxes += 1
            covered = m.end()
        elif low[m.start()] == "(":  # "(c)": a letter only when written in upper case
            covered = m.end()
            letter = text[m.start() + 1]
            if letter.isupper() and not (hyp or conc):
                clause.append(["#" + letter, neg])
        else:  # a clause break: ", ; :"
            scopes.append((m.start(), low[m.start()]))
            if negated_at == len(clause):
                _reject_back(low, clause, labelled, neg_end, m.start())
            if labelled:
                _flush(labelled, labelled_neut, *sets)
                labelled = []
            listed = ""  # "no mass," may open a list the denial runs on into
            if low[m.start()] == "," and clause and clause[-1][1] and clause[-1][0][0] != "#":
                listed, listed_from = _LIST_KIND[clause[-1][0]], m.end()
            if low[m.start()] == ":":
                if held:
                    _release(held, [], sets)
                    held = []
                labelled, labelled_neut = clause, neut
            elif low[m.start()] == "," and clause and _only_mentions(low[clause_from : m.start()], said):
                held.append(clause)  # perhaps a list that a cue after it denies
            else:
                _flush(clause, neut, *sets)
                if held:
                    _release(held, clause, sets)
                    held = []
            clause, neg, neut, negated_at, conc = [], False, False, -1, False
            clause_from, said = m.end(), []
    if negated_at == len(clause):
        _reject_back(low, clause, labelled, neg_end, len(low))
    if labelled:
        _flush(labelled, labelled_neut, *sets)
    _flush(clause, neut, *sets)
    if held:
        _release(held, clause, sets)
    if not hyp:
        if "not " in low or "exclud" in low or "elimin" in low or "rul" in low or "rather" in low or "except" in low:
            denied_letters.update(m.group(1) for m in _LETTER_DENIED.finditer(text))
        first = _LETTER_FIRST.match(text)
        if first:
            letters.add(first.group(1))
            cue = True
    says = _says(low)
    cue = cue or says == "yes"  # "Yes, that's the posterior cruciate ligament."
    for whole, parts in IMPLIED.items():
        if parts <= asserted:
            asserted.add(whole)
    is_finding = boxes > 0 or any(_IS_FINDING[c] for c in asserted)
    return Sentence(
        low[:hyp_at] if hyp else low,
        _shared(asserted),
        _shared(denied),
        _shared(letters),
        _shared(denied_letters),
        cue,
        boxes,
        _shared(polarity),
        _shared({c for c in asserted if _IS_DESCRIPTOR[c]}) if is_finding else _NO_SET,
        boxes > 0 or not _VISUAL.isdisjoint(asserted),
        tuple(scopes),
        says,
        _HEAD.match(low) is not None,
        any(kind == "und" for _, kind in scopes),
    )


_HEAD = re.compile(
    r"\A\W*(?:final\s+|overall\s+)?(?:conclusion|impression|diagnosis|answer|verdict|in conclusion|in summary|"
    r"to summarize)\s*(?::|-|\u2014|,)"
)


_SAYS = re.compile(r"\A\W*(yes|no)\b(?!\s+\w)|\banswer\W+(?:(?:is|would be|will be)\W+)?(yes|no)\b")


def _says(low: str) -> str:
    """"yes" or "no" when the sentence answers in those words: "Yes, a mass ...", "No.", "the answer is no";
    not "No mass is seen", whose "no" denies what follows."""
    if "answer" not in low and not low.lstrip(" -*>\u2022").startswith(("yes", "no")):
        return ""
    m = _SAYS.search(low)
    return (m.group(1) or m.group(2)) if m else ""


_DENY_BEFORE = frozenset(("neg", "rel"))  # a cue of these kinds before a mention in its clause denies it
_DENY_AFTER = frozenset(("post", "rel", "rejall"))  # ... and of these after it
_BREAKS = frozenset((",", ";", ":", "clause", "conc", "rev"))


def mention(sentence: Sentence, pattern: re.Pattern[str], after: int = 0) -> int:
    """How ``sentence`` mentions the words ``pattern`` matches (in its ``low`` text): 1 asserted, -1 denied
    (every mention denied), 0 not at all or only weighed. The scope rules of the lexicon's concepts, for words
    the lexicon does not know (an option's own text): a negation before it in its clause or a rejection after
    it denies it ("no villous pattern", "the macula is spared"); a concession, an uncertainty or a
    hypothetical weighs it without a claim ("although X could be considered", "X cannot be excluded"); a bare
    negation after a colon rejects the label before it ("X: no"). The last mention decides; ``after``: only
    mentions from that position on count."""
    found = 0
    for m in pattern.finditer(sentence.low, after):
        at = m.start()
        start, end, kinds_before, kinds_after, after_colon = 0, len(sentence.low), [], [], None
        listed = False  # the clause before a comma denied something: a list may run on ("no X, Y or Z")
        for pos, kind in sentence.scopes:
            if kind in _BREAKS:
                if pos < at:
                    listed = kind == "," and (listed or "neg" in kinds_before)
                    start, kinds_before = pos, [] if kind != "conc" else ["conc"]
                    continue
                if kind == ":":
                    after_colon = pos
                end = pos
                break
            (kinds_before if pos < at else kinds_after).append(kind)
        if "conc" in kinds_before or "unc" in kinds_before or "unc" in kinds_after or "hyp" in kinds_before:
            continue
        denied = not _DENY_BEFORE.isdisjoint(kinds_before) or not _DENY_AFTER.isdisjoint(kinds_after)
        denied = denied or any(
            (kind == "non" and 0 < at - pos <= 4) or (kind == "rejall" and pos > at) for pos, kind in sentence.scopes
        )
        if listed and not denied:  # "no lesion in the right upper, left lower or right lower quadrants"
            gap = sentence.low[start + 1 : at].split()
            denied = all(w in _LIST_WORDS for w in gap)
        if not denied and "neg" in kinds_after:  # "X - no.": a negation that ends the clause rejects it
            after = next(pos for pos, kind in sentence.scopes if pos >= at and kind == "neg")
            denied = not _FIRST_WORD.sub("", sentence.low[after:end], count=1).strip(" .!?")
        if not denied and after_colon is not None:  # "X: no", "X: incorrect", "X: no dome-shaped elevation"
            rest = sentence.low[after_colon + 1 :].split(",")[0].split(";")[0].strip(" .!?")
            label = sentence.low[start:after_colon].replace(m.group(0), " ")
            denied = rest in _BARE_NEGATIONS or (
                rest.split(" ", 1)[0] in _BARE_NEGATIONS and not _LABEL_WORDS.search(label)
            )
        found = -1 if denied else 1  # the last mention decides: "X is the concern ..., so not X"
    return found


_LIST_WORDS = _LIST_FILLERS.union(*(phrase.split() for phrase in PHRASES))  # what a list holds
_FIRST_WORD = re.compile(r"\A\W*\w+")
_BARE_NEGATIONS = frozenset(("no", "not", "incorrect", "wrong", "unlikely", "excluded", "ruled out", "absent"))
_LABEL_WORDS = re.compile(r"[a-z]{2,}(?<!option)(?<!choice)\b")  # a label that says more than the mention


# Latin and clinical short forms whose period ends no sentence; "i.e." restates what precedes it more exactly
# ("T2-weighted with fluid attenuation, i.e. FLAIR"), so it reads as a revision: the clause after it decides.
_SHORT_FORMS = re.compile(r"\b(?:(i\.\s?e)|(e\.\s?g)|(vs)|(approx)|(cf))\.(?=\s)", re.IGNORECASE)
_SPELLED = ("namely", "for example", "versus", "approximately", "compare")
_SHORT_HINTS = ("i.e", "e.g", "vs.", "approx.", "cf.", "I.e", "E.g", "Vs.", "Approx.", "Cf.", "i. e", "e. g")


def _spelled(m: re.Match) -> str:
    return _SPELLED[m.lastindex - 1]


def _sentences(text: str) -> list[str]:
    """The sentences of a text, each with its stop; line breaks are dropped."""
    if any(form in text for form in _SHORT_HINTS):  # substring tests cost far less than the regex on every text
        text = _SHORT_FORMS.sub(_spelled, text)
    if "\n" not in text and "!" not in text and "?" not in text:
        parts = _PERIOD_END.split(text)
        sentences = [piece + "." for piece in parts[:-1]]
    else:
        parts = _SENTENCE_END.split(text)  # sentence, its stop, sentence, its stop, ..., the last sentence
        stops = zip(parts[::2], parts[1::2], strict=False)  # the last sentence has no stop
        sentences = [piece if stop == "\n" else piece + stop for piece, stop in stops]
    sentences.append(parts[-1])
    return sentences


def reading_of(text: str) -> Reading:
    """Read a text into its claims, sentence by sentence (each sentence read once and cached)."""
    sentences = tuple(filter(None, map(read_sentence, _sentences(text))))  # blank ones are None
    low = text.lower().replace("-", " ")
    if not sentences:
        return Reading(low, (), _NO_SET, _NO_SET, _NO_SET, _NO_SET)
    asserted, denied, polarity, descriptors = zip(*map(_CLAIMS, sentences), strict=True)
    return Reading(
        low,
        sentences,
        _NO_SET.union(*asserted),
        _NO_SET.union(*denied),
        _NO_SET.union(*polarity),
        _NO_SET.union(*descriptors),
    )


@lru_cache(maxsize=1 << 15)
def read(text: str) -> Reading:
    """:func:`reading_of`, cached: for the short texts read again and again (options, questions, answers).
    A completion's reasoning, read once, goes to :func:`reading_of` directly."""
    return reading_of(text)
