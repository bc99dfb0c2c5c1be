"""The ``consistency`` verifier: does the reasoning reach the conclusion the answer states?

MedAD-R1 reports reasoning-answer consistency next to accuracy; CAPO/MCR find that rewarding this internal
consistency works better than judging whether the reasoning is correct. The conclusion is read from the
reasoning itself, never from the answer block, the way a careful reader reads real models' text:

1. Commitments per sentence (:func:`by_content`, :func:`by_letter`): option letters in explicit forms ("the
   answer is C", "option C", "(C)", "**Answer: C**"); an option's own words as written, with their negation
   scope ("no villous pattern", "X: no", "argues against X", "although X could be considered": not the
   conclusion), or its initials ("SBO"); its lexicon concepts when they say all the option says (so
   "hyperdense nodule" names "Bright mass"; "PTX" and "haemorrhage" are read through the lexicon); failing
   those, a word of its own that no other option or the question holds ("optic nerve head" for "Optic disc").
   Yes/No questions: the polarity the sentence asserts for the question's own subject (:func:`stance`), so
   pertinent negatives about other things do not answer "No".
2. The conclusion is the last sentence with a conclusion cue ("therefore", "consistent with", "impression",
   "however", "the answer") that commits to something; failing that, the last sentence that commits to
   something; failing that, the one option an option-by-option elimination leaves standing. An "Impression:"
   line that commits stays the conclusion over the discussion after it, unless a revision follows. A conclusion
   by letter alone ("Answer: B") stands beside the last conclusion argued by content: a letter of another option
   contradicts it. Reasoning that says it cannot decide concludes nothing. A conclusion that names its options
   only by a word or concept of their own can confirm an answer but not contradict it (0.5: it may be a
   description).

Scores: the conclusion commits to the answer alone: 1.0; to the answer and k-1 other options (hedging): 1/k;
not to the answer, or by letter to one option and by content to another option or to a class the options do not
offer ("therefore CT, so the answer is B (CT)" when B reads dermoscopy): 0.0 (contradiction); the reasoning
denies the answer's content and never asserts it ("not an MRI ... so the answer is B (MRI)"), states both
polarities, or only the polarity opposite to the answer's: 0.0; no conclusion the reader can find:
:data:`NO_CONCLUSION` (the midpoint, never below a hedge); no reasoning, or no valid answer: 0.0. Open-ended
records: the free-text answer (its lexicon concepts when they say it whole, else its words, in order or not, read
as the reasoning is read; for a yes/no question its stance) must be asserted by the reasoning, and not only before
a later concluding sentence or a "cannot decide"; denied: 0.0.

:func:`reasoning_accuracy` asks instead whether the reasoning's conclusion is the gold answer. Consistency can
rise by bending the reasoning to a wrong answer as well as by fixing the answer; the two side by side tell which.
How well these rules agree with careful readers on text in real models' styles: ``eval/reasoning_agreement.py``.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

from medgrpo.rewards.accuracy import normalize_answer
from medgrpo.rewards.claims import Reading, Sentence, mention, read, read_sentence
from medgrpo.rewards.facts import RecordFacts, YesNo, said_by_concepts, word_pattern
from medgrpo.rewards.lexicon import CATEGORY, IMPLIED, agree, conflict, normalize_text

NO_CONCLUSION = 0.5
"""Score of a reasoning that reaches no conclusion the reader can find: the midpoint, neither paid nor punished.
A conclusion in words the reader does not know reads the same as none, so it must not score below a hedge
(1/k for k options): then writing clinically never pays less than hedging, and an outright contradiction (0.0)
still scores lowest."""

_OPPOSITE = {"normal": "abnormal", "abnormal": "normal"}
_POLAR = frozenset(_OPPOSITE)
_NONE: frozenset[str] = frozenset()


class Verdict(NamedTuple):
    """The consistency score and why: ``agree``, ``hedge``, ``contradict``, ``none`` (no conclusion) or
    ``empty`` (no reasoning or no valid answer)."""

    score: float
    kind: str


# every verdict but a hedge's, built once
_AGREE = Verdict(1.0, "agree")
_CONTRADICT = Verdict(0.0, "contradict")
_NO_CONCLUSION = Verdict(NO_CONCLUSION, "none")
_EMPTY = Verdict(0.0, "empty")


def denies_option(reading: Reading, facts: RecordFacts, i: int) -> bool:
    """The reasoning denies option ``i``'s concepts and never asserts them ("not an MRI", "MRI: no"). Options
    that stand for a polarity ("No lesion") are read through the polarity the reasoning states instead."""
    concepts = facts.option_concepts[i]
    return (
        facts.option_polarity[i] is None
        and bool(concepts)
        and concepts <= reading.denied
        and not concepts <= reading.asserted
    )


def by_letter(sentence: Sentence, facts: RecordFacts) -> frozenset[str]:
    """The record's option letters a sentence commits to explicitly ("the answer is C", "option C", "(C)"),
    not counting denied ones ("not C", "rather than (C)")."""
    return sentence.letters.intersection(facts.letters) - sentence.denied_letters


def stance(sentence: Sentence, yes_no: YesNo) -> str:
    """What one sentence answers to a yes/no question: "yes", "no" or "" (nothing). Its own "Yes," / "No." /
    "the answer is no" first; else the polarity it asserts for the question's own subject, so that pertinent
    negatives about other things ("no effusion" beside a pneumothorax) answer nothing:

    * "is it normal?" / "are the lungs clear?": the whole image's polarity (or "clear" itself);
    * a finding ("is there a pneumothorax?"): asserting it (or a compatible one) says yes; denying it, or
      calling the whole image normal, says no; a qualifier the question adds ("on the left") asserted
      opposite ("on the right") says no;
    * a generic abnormality ("is there a lesion?"): the whole image's polarity;
    * a side or place ("is the lesion on the left?"), a modality ("is this a CT?"), an anatomy ("does it show
      the liver?"): asserting it says yes; asserting another of its kind, or denying it, says no;
    * words the lexicon does not know ("is there mediastinal shift?"): asserted or denied (:func:`mention`);
    * a predicate of :data:`~medgrpo.rewards.facts.PREDICATES` ("is the lesion benign?"): its words say yes,
      its opposite's say no ("... melanoma").
    """
    if sentence.says:
        return sentence.says
    head, polarity = yes_no.head, sentence.polarity
    said = ""
    if head:
        if head == _NORMAL_SET or head == _ABNORMAL_SET:
            if len(polarity) == 1:
                said = "yes" if head == polarity else "no"
        elif any(agree(a, h) for a in sentence.asserted for h in head):
            said = "yes"
        elif head <= sentence.denied or polarity == _NORMAL_SET and CATEGORY[next(iter(head))] == "finding":
            said = "no"
        elif any(conflict(a, h) for a in sentence.asserted for h in head):
            said = "no"
        if said == "yes" and yes_no.where:
            if any(conflict(a, w) for a in sentence.asserted for w in yes_no.where) or (
                yes_no.where <= sentence.denied
            ):
                said = "no"
    if not said and yes_no.words is not None:
        said = _SAID[mention(sentence, yes_no.words)]
    if not said and yes_no.opposite is not None:  # "is it benign?" ... "melanoma": no; "no malignancy": yes
        said = _SAID[-mention(sentence, yes_no.opposite)]
    if yes_no.inverted and said and not sentence.says:
        said = "no" if said == "yes" else "yes"
    return said


_NORMAL_SET, _ABNORMAL_SET = frozenset(("normal",)), frozenset(("abnormal",))
_SAID = {1: "yes", -1: "no", 0: ""}


def by_content(sentence: Sentence, facts: RecordFacts) -> frozenset[str]:
    """The option letters one sentence commits to by content, not counting denied mentions:

    * a yes/no question: the answer its :func:`stance` gives;
    * an option that stands for a polarity ("no abnormality", "abnormality on the left side"): the sentence
      states that polarity alone, and asserts the option's other concepts ("left");
    * any other option: its words as written (plurals allowed; negated, weighed and rejected mentions read
      by :func:`mention`); or its lexicon concepts, when they say all the option says ("Left upper
      quadrant", not "Left ventricle") and no other option has the same concepts (the lexicon reads "nodule"
      and "mass" alike, so those two need their own words); failing every option, its own words, found in no
      other option ("aortic arch" for "Aortic knob", "optic nerve head" for "Optic disc").

    When one matched option's concepts are a strict subset of another's, the more specific option wins; an
    option naming a part ("left side") loses to one naming the whole ("both sides", see ``IMPLIED``).
    Not cached itself: :func:`contents` caches it per record, as sentences recur across a prompt's completions.
    """
    yes_no = facts.yes_no
    if yes_no is not None:
        said = stance(sentence, yes_no)
        return frozenset((yes_no.yes if said == "yes" else yes_no.no,)) if said else _NONE
    worded_sentence = facts.option_any is not None and facts.option_any.search(sentence.low) is not None
    if not (worded_sentence or sentence.asserted or sentence.denied or sentence.polarity):
        return _NONE  # no claim, and no option's words: nothing below can match (most new sentences end here)
    worded: list[int] = []  # named by its own words
    named: list[int] = []  # by its concepts
    loose: list[int] = []  # by a word of its own: only when no option is named otherwise
    for i, concepts in enumerate(facts.option_concepts):
        polarity = facts.option_polarity[i]
        if polarity is not None:
            if (
                polarity in sentence.polarity
                and _OPPOSITE[polarity] not in sentence.polarity
                and concepts - _POLAR <= sentence.asserted
            ):
                named.append(i)
            continue
        words = mention(sentence, facts.option_words[i]) if worded_sentence and facts.option_words[i] else 0
        if words < 0 or (words == 0 and concepts and concepts <= sentence.denied and not concepts <= sentence.asserted):
            continue
        if words > 0:
            worded.append(i)
        elif (
            facts.option_covered[i]
            and facts.option_marks[i]
            and facts.option_marks[i] <= sentence.asserted
            and facts.option_marks.count(facts.option_marks[i]) == 1
            and not any(conflict(a, c) for a in sentence.asserted for c in concepts - facts.option_marks[i])
        ):
            named.append(i)
        elif sentence.cue and (  # a word or concept of its own is weak evidence: only where a sentence concludes
            (worded_sentence and facts.option_keys[i] is not None and mention(sentence, facts.option_keys[i]) > 0)
            or (facts.option_own[i] and facts.option_own[i] <= sentence.asserted)
        ):
            loose.append(i)
    hits: set[str] = set()
    by_text = (worded + named) or loose
    weak = not (worded or named)
    for i in by_text:
        concepts = facts.option_concepts[i]
        if not any(
            j != i
            and concepts
            and (concepts < facts.option_concepts[j] or _part_of(concepts, facts.option_concepts[j]))
            for j in by_text
        ):
            hits.add(facts.letters[i])
    if len(hits) > 1:
        # "the middle lobe is anterior, so the mass is in the lower lobe", "initially suggests X; however, on
        # reflection, Y": the clause from the sentence's last conclusion cue or revision on decides
        cue = max((pos for pos, kind in sentence.scopes if kind == "cue" or kind == "rev"), default=0)
        tail = read_sentence(sentence.low[cue:]) if cue else None
        concluded = by_content(tail, facts) & hits if tail is not None else _NONE
        if concluded:
            return _Loose(concluded) if weak else concluded
    if not hits:
        return _NONE
    return _Loose(hits) if weak else frozenset(hits)


class _Loose(frozenset):
    """Options a sentence names only by a word or concept of their own: enough for a conclusion, too weak to
    contradict a letter the reasoning writes."""


# record facts -> {sentence: its by_content}: one dict per record, so that looking a completion's sentences up
# is one C-level map over a dict keyed by identity, without building a key per sentence (as lru_cache would).
_CONTENT: dict[RecordFacts, dict[Sentence, frozenset[str]]] = {}
_CONTENT_MAX = 1 << 16
"""Entries held over all records; past that the cache starts over (a bound, rarely reached in one run)."""
_content_size = [0]


def contents(sentences: tuple[Sentence, ...] | list[Sentence], facts: RecordFacts) -> list[frozenset[str]]:
    """:func:`by_content` of each sentence, cached per (sentence, record)."""
    known = _CONTENT.get(facts)
    if known is None:
        known = _CONTENT[facts] = {}
    content = list(map(known.get, sentences))
    if None in content:
        if _content_size[0] >= _CONTENT_MAX:
            clear_contents()
            known = _CONTENT[facts] = {}
        for i, value in enumerate(content):
            if value is None:
                content[i] = known[sentences[i]] = by_content(sentences[i], facts)
                _content_size[0] += 1
    return content


def clear_contents() -> None:
    """Empty the :func:`contents` cache."""
    _CONTENT.clear()
    _content_size[0] = 0


def _part_of(concepts: frozenset[str], other: frozenset[str]) -> bool:
    """``concepts`` names a part ("left") of what ``other`` names whole ("bilateral"): the whole wins."""
    return any(
        whole in other and whole not in concepts and concepts & parts for whole, parts in IMPLIED.items()
    )


def _names_against(sentence: Sentence, facts: RecordFacts, letter: str) -> bool:
    """The sentence asserts something incompatible with option ``letter``'s content and not that content: a
    class the options do not offer ("therefore CT, so the answer is B (CT)" when B is dermoscopy)."""
    concepts = facts.option_concepts[facts.letters.index(letter)]
    return bool(concepts) and not concepts <= sentence.asserted and any(
        conflict(a, c) for a in sentence.asserted for c in concepts)


class Commitments(NamedTuple):
    """What a reasoning commits to, for one multiple-choice record (all empty for an open-ended one)."""

    hits: frozenset[str]  # the options its concluding sentence commits to, by letter or content
    index: int  # the concluding sentence's index; the number of sentences when nothing concludes
    body: frozenset[str]  # the options the sentences before the conclusion commit to by content
    content: frozenset[str]  # the options any sentence commits to by content
    mixed: bool  # the concluding sentence names one option by letter and another, or a class not offered,
                 # by content
    said: frozenset[str]  # the options the concluding sentence commits to by content
    loose: bool = False  # the conclusion names its options only by words or concepts of their own


def _conclusion(
    sentences: tuple[Sentence, ...], committed: list[frozenset[str]], cue_only: bool = False
) -> tuple[frozenset[str], int]:
    """Rule 2: the last sentence with a conclusion cue that commits to something; failing that (unless
    ``cue_only``), the last that commits to something (``committed``: each sentence's commitments).
    ``(hits, index)``; ``(nothing, len(sentences))`` when none."""
    hits, index = _NONE, len(sentences)
    for i in range(len(sentences) - 1, -1, -1):
        if committed[i]:
            if sentences[i].cue:
                return committed[i], i
            if not hits and not cue_only:
                hits, index = committed[i], i
    return hits, index


def _rejected(reading: Reading, facts: RecordFacts, i: int) -> bool:
    """The reasoning rejects option ``i`` (by letter, words or concepts) and never asserts its words."""
    if any(facts.letters[i] in s.denied_letters for s in reading.sentences) or denies_option(reading, facts, i):
        return True
    words = facts.option_words[i]
    if words is None:
        return False
    said = [mention(s, words) for s in reading.sentences]
    return -1 in said and 1 not in said


def _left_standing(reading: Reading, facts: RecordFacts) -> frozenset[str]:
    """An option-by-option elimination's conclusion: the one option the reasoning does not reject when it
    rejects every other one (by letter, words or concepts), else nothing."""
    standing = []
    for i, letter in enumerate(facts.letters):
        if not _rejected(reading, facts, i):
            standing.append(letter)
            if len(standing) > 1:
                return _NONE
    return frozenset(standing)


def commitments(reading: Reading, facts: RecordFacts) -> Commitments:
    """The conclusion (rule 2 above, or what an elimination leaves standing) and the content commitments
    before and around it, in one pass over the sentences: consistency and three evidence criteria need them."""
    sentences = reading.sentences
    if not facts.is_mcq:
        return Commitments(_NONE, len(sentences), _NONE, _NONE, False, _NONE)
    content = contents(sentences, facts)
    committed = [
        ((content[i] | by_letter(s, facts) if s.letters else content[i]) - s.denied_letters)  # "..., so not E"
        if s.letters or s.denied_letters
        else content[i]
        for i, s in enumerate(sentences)
    ]
    hits, index = _conclusion(sentences, committed)
    # A conclusion's label ("Impression: X") is the conclusion: the discussion after it ("the lunate lies ulnar
    # ..., so it is not the indicated bone") is not, unless it revises ("however, on reflection, Y").
    labelled = next((i for i in range(index - 1, -1, -1) if sentences[i].heads and committed[i]), -1)
    if labelled >= 0 and not sentences[index].heads and not any(
        kind == "rev" for s in sentences[labelled + 1 : index + 1] for _, kind in s.scopes
    ):
        hits, index = committed[labelled], labelled
    # A conclusion's label the reader cannot read leaves the reasoning's conclusion unknown: an earlier mention,
    # or a later aside, is not it.
    head = next((i for i in range(len(sentences) - 1, -1, -1) if sentences[i].heads), -1)
    if hits and head >= 0 and not committed[head] and (index < head or not sentences[index].cue):
        hits, index = _NONE, len(sentences)
    if hits and not content[index]:
        # A conclusion by letter alone ("**Answer: B**") restates the answer; the reasoning concluded where it
        # last committed by content, and that conclusion stands beside the letter: a letter of another option
        # contradicts it, one of a hedge's options stays a hedge.
        argued, at = _conclusion(
            sentences[:index], [_NONE if isinstance(c, _Loose) else c for c in content[:index]], cue_only=True
        )
        argued = frozenset(a for a in argued if not _rejected(reading, facts, facts.letters.index(a)))
        if any(sentences[i].heads and not committed[i] for i in range(at + 1, index)):
            argued = _NONE  # an unread conclusion stands between: the letter stands alone
        if argued and not argued <= hits:
            return Commitments(
                argued | hits, at, _NONE.union(*content[:at]), _NONE.union(*content), not argued & hits, argued
            )
    if not hits and len(facts.letters) > 2 and sentences:
        hits = _left_standing(reading, facts)
        if hits:
            return Commitments(hits, len(sentences) - 1, _NONE.union(*content), _NONE.union(*content), False, hits)
    if len(hits) > 1:  # a hedge between options one of which the reasoning rejects is about the others
        kept = frozenset(h for h in hits if not _rejected(reading, facts, facts.letters.index(h)))
        hits = kept or hits
    if hits and any(s.undecided for s in sentences[index:]):
        hits, index = _NONE, len(sentences)  # "... or an artifact; I can't decide": nothing is concluded
    mixed = False
    if hits and sentences[index].letters:
        letters, said = by_letter(sentences[index], facts), content[index]
        mixed = bool(letters and said and not letters & said) or (
            len(letters) == 1 and not said and _names_against(sentences[index], facts, next(iter(letters))))
    body = _NONE.union(*content[:index])
    said = content[index] if hits else _NONE
    return Commitments(hits, index, body, body.union(*content[index:]), mixed, said, isinstance(hits, _Loose))


def _open_verdict(reading: Reading, facts: RecordFacts, answer: str) -> Verdict:
    words = normalize_answer(answer)
    if not words:
        return _EMPTY
    if len(words) == 1 and words[0] in ("yes", "no") and facts.yes_no is not None:
        said = [stance(s, facts.yes_no) for s in reading.sentences]
        concluded, _ = _conclusion(reading.sentences, [frozenset((a,)) if a else _NONE for a in said])
        if not concluded:
            return _NO_CONCLUSION
        return _AGREE if concluded == {words[0]} else _CONTRADICT
    concepts = read(answer).asserted
    if concepts and concepts <= reading.denied and not concepts <= reading.asserted:
        return _CONTRADICT
    if said_by_concepts(answer, concepts):  # its concepts say all it says: read through the lexicon
        said = [1 if concepts <= s.asserted else 0 for s in reading.sentences]
    else:  # "left pulmonary artery" is more than {left, chest}: its words must be written
        pattern, singles = _answer_words(answer)
        said = [mention(s, pattern) or _all_words(s, singles) for s in reading.sentences]
    if 1 in said:
        # the answer named only before a concluding sentence that names it not ("... just above the pulmonary
        # artery. Therefore, the aortic knuckle."), or before the reasoning says it cannot decide: not its
        # conclusion
        last = len(said) - 1 - said[::-1].index(1)
        if any(s.undecided or (s.cue and (s.asserted or s.letters)) for s in reading.sentences[last + 1 :]):
            return _NO_CONCLUSION
        return _AGREE
    return _CONTRADICT if -1 in said else _NO_CONCLUSION


@lru_cache(maxsize=1 << 12)
def _answer_words(answer: str) -> tuple[re.Pattern[str], tuple[re.Pattern[str], ...]]:
    """A free-text answer read as the reasoning is ("AP" and "anteroposterior" alike, British as American): its
    words in order as one pattern, and, for two content words or more, each as its own pattern."""
    words = normalize_answer(normalize_text(answer)) or normalize_answer(answer)
    content = [w for w in words if len(w) > 2 and w not in ("and", "the", "with")]
    singles = tuple(p for p in (word_pattern([w]) for w in content) if p is not None) if len(content) > 1 else ()
    return word_pattern(words), singles


def _all_words(sentence: Sentence, words: tuple[re.Pattern[str], ...]) -> int:
    """1 when the sentence asserts every word of ``words`` in any order ("a fracture of the distal radius" for
    "distal radius fracture"), -1 when it denies one of them and asserts the rest, else 0."""
    if not words:
        return 0
    said = [mention(sentence, w) for w in words]
    return 0 if 0 in said else (-1 if -1 in said else 1)


def consistency_verdict(
    reading: Reading | None,
    facts: RecordFacts,
    answer: str | None,
    choice: str | None,
    argument: Commitments,
) -> Verdict:
    """Score reasoning-answer consistency (see the module docstring for the exact rules).

    Args:
        reading: the claims of the think block (None when there is none).
        facts: the record's facts.
        answer: the ``<answer>`` content (None unless exactly one answer block).
        choice: the option letter the answer commits to (None when it is not a valid single option).
        argument: :func:`commitments` of the reading (of an empty one when there is none).
    """
    if reading is None or not reading.sentences:
        return _EMPTY
    if not facts.is_mcq:
        return _open_verdict(reading, facts, answer or "")
    if choice is None:
        return _EMPTY
    index = facts.letters.index(choice)
    polarity = facts.option_polarity[index]
    if polarity is not None and reading.polarity and polarity not in reading.polarity:
        return _CONTRADICT
    if denies_option(reading, facts, index):
        return _CONTRADICT
    if polarity is not None and len(reading.polarity) == 2:
        return _CONTRADICT
    hits = argument.hits
    if argument.mixed:  # "both sides, so the answer is B"
        return _CONTRADICT
    if not hits:
        if polarity is not None and reading.polarity == {polarity}:
            return _AGREE
        return _NO_CONCLUSION
    if choice not in hits:  # weak evidence does not punish: a word of another option's own may be a description
        return _NO_CONCLUSION if argument.loose else _CONTRADICT
    if len(hits) == 1:
        return _AGREE
    return Verdict(1.0 / len(hits), "hedge")


def reasoning_accuracy(reading: Reading | None, facts: RecordFacts, argument: Commitments) -> float | None:
    """Whether the reasoning's own conclusion is the gold answer, read apart from the ``<answer>`` block (1.0 or
    0.0; None when the record's own answer is not one of its options).

    Multiple choice: the options its concluding sentence commits to by content (or, when it names none by
    content, by letter) are the gold one alone, and it never denies the gold option's content
    (:func:`denies_option`). Open-ended: it asserts the gold answer (:func:`consistency_verdict` against the gold
    answer agrees). So a right rationale with a wrong letter scores 1, and a rationale bent to agree with a wrong
    answer 0: beside consistency, it tells which way consistency was reached. An evaluation metric, never shaped.
    """
    if not facts.is_mcq:
        return float(consistency_verdict(reading, facts, facts.open_answer, None, argument).kind == "agree")
    if len(facts.answer) != 1 or facts.answer not in facts.letters:
        return None
    if reading is None or denies_option(reading, facts, facts.letters.index(facts.answer)):
        return 0.0
    return float((argument.said or argument.hits) == {facts.answer})
