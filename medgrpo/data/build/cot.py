"""Chain-of-thought synthesis for built records, and the quality-control pass every CoT goes through.

* :func:`template_cot` writes a deterministic reasoning from the record's structured evidence only (modality,
  anatomy, finding, region, size, boxes), with phrasing drawn from a few variants per sentence, ending by
  naming the option letter.
* A teacher (:class:`EndpointTeacher`: any OpenAI-compatible ``/chat/completions`` server such as vLLM, via
  stdlib urllib; :class:`LocalTeacher`: a local transformers causal LM) rewrites that template into fluent
  reasoning and must keep every evidence claim.
* :func:`qc` scores ``build_target(record)`` with the project's own verifiers (format, consistency, the rule
  backend of the evidence reward) and checks that every evidence claim and box of the record is still stated
  (:func:`missing_claims`). :func:`synthesize` regenerates a failing template with other phrasings, falls back
  from a rejected teacher rewrite to the template, and drops what still fails; it counts every outcome.
"""

from __future__ import annotations

import json
import random
import re
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass
from typing import Any, Protocol

from medgrpo.data.build.questions import prose
from medgrpo.data.build.readers import BuildError
from medgrpo.data.record import MedADRecord
from medgrpo.prompts import BOX_RE, build_target, format_box
from medgrpo.rewards import verify
from medgrpo.rewards.claims import read
from medgrpo.rewards.facts import facts_of
from medgrpo.rewards.verify import CRITERION_KEYS

_SIZE_WORD = {"small": "small", "medium": "medium-sized", "large": "large"}

_OPENERS = (
    "This {modality} image shows the {anatomy}.",
    "The {anatomy} is imaged here with {modality}.",
    "The image was acquired with {modality} and shows the {anatomy}.",
)
_OPENERS_NO_ANATOMY = ("This is a {modality} image.", "The study was acquired with {modality}.")
_OPENERS_NO_MODALITY = ("The image shows the {anatomy}.", "The {anatomy} is imaged here.")
_FINDING_BOXED = (
    "A {size} abnormal area, {finding}, is seen {where} {boxes}.",
    "There is a {size} lesion {where}, consistent in appearance with {finding} {boxes}.",
    "The abnormality, {finding}, is {size} in extent and located {where} {boxes}.",
)
_FINDING_PLAIN = (
    "The image shows an abnormal finding: {finding}.",
    "An abnormality is present, namely {finding}.",
    "There is a lesion here, consistent with {finding}.",
)
_NORMAL = (
    "No lesion or other abnormality is seen. The {anatomy} appears normal.",
    "The {anatomy} looks unremarkable. There is no focal lesion.",
    "Everything visible is within normal limits; no abnormality is present.",
)
_CONCLUSIONS = {
    "anomaly_detection": ("Therefore the image is {text}, so the answer is {letter}.",
                          "The study is thus {text}: option {letter}."),
    "pathology_characterization": ("These features are most consistent with {text}, so the answer is {letter}.",
                                   "The finding is therefore best classified as {text}, option {letter}."),
    "lesion_localization": ("The lesion therefore lies in the {text} region, so the answer is {letter}.",
                            "Its position is thus the {text} region: option {letter}."),
    "modality_classification": ("Therefore the modality is {text}, so the answer is {letter}.",
                                "The imaging technique is thus {text}: option {letter}."),
    "anatomy_identification": ("Therefore the imaged region is the {text}, so the answer is {letter}.",
                               "The anatomy shown is thus the {text}: option {letter}."),
}


def _where(location: str | None, convention: str) -> str:
    if location == "bilateral":
        return "on both sides"
    if location == "central":
        return "in the central part of the image"
    if not location:
        return "in the image"
    owner = "the patient's" if convention == "patient" else "the image's"
    return f"in {owner} {location} region"


def template_cot(record: MedADRecord, rng: random.Random, convention: str = "image") -> str:
    """A reasoning built only from the record's structured evidence, ending with the option letter."""
    ev = record.evidence or {"abnormal": False}
    modality, anatomy = ev.get("modality") or record.modality, (ev.get("anatomy") or record.anatomy or "")
    anatomy = anatomy.lower()
    if modality and anatomy:
        opener = rng.choice(_OPENERS)
    elif modality:
        opener = rng.choice(_OPENERS_NO_ANATOMY)
    elif anatomy:
        opener = rng.choice(_OPENERS_NO_MODALITY)
    else:
        opener = ""
    parts = [opener.format(modality=prose(modality or ""), anatomy=anatomy)] if opener else []
    if ev.get("abnormal"):
        if record.bbox:
            parts.append(rng.choice(_FINDING_BOXED).format(
                size=_SIZE_WORD.get(ev.get("size", ""), "distinct"), finding=ev.get("finding", "an abnormality"),
                where=_where(ev.get("location"), convention), boxes=" ".join(format_box(b) for b in record.bbox),
            ))
        else:
            parts.append(rng.choice(_FINDING_PLAIN).format(finding=ev.get("finding", "an abnormality")))
    else:
        parts.append(rng.choice(_NORMAL).format(anatomy=anatomy or "image"))
    text = prose(record.answer_text())
    parts.append(rng.choice(_CONCLUSIONS[record.task]).format(text=text, letter=record.answer))
    return " ".join(parts)


def _words(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def missing_claims(cot: str, record: MedADRecord) -> list[str]:
    """The evidence claims of the record that ``cot`` no longer states: lexicon concepts of its modality,
    anatomy, finding, laterality, location and size; finding names the lexicon does not know (matched as
    words); every gold box (as written by :func:`medgrpo.prompts.format_box`)."""
    facts = facts_of(record)
    asserted = read(cot).asserted
    missing = sorted((facts.modality | facts.anatomy | facts.finding | facts.laterality | facts.location
                      | facts.appearance) - asserted)
    finding = (record.evidence or {}).get("finding") or ""
    text = f" {_words(cot)} "
    for name in finding.split(" and "):
        if name and not read(name).asserted and f" {_words(name)} " not in text:
            missing.append(name)
    cited = {tuple(round(float(v)) for v in m.groups()) for m in BOX_RE.finditer(cot)}
    missing += [format_box(b) for b in record.bbox or [] if tuple(round(v) for v in b) not in cited]
    return missing


@dataclass(frozen=True)
class QCResult:
    ok: bool
    reason: str = ""


def qc(record: MedADRecord, min_evidence: float = 1.0) -> QCResult:
    """Run the project's verifiers on ``build_target(record)`` (boxes in original pixels, no frame): format
    and consistency must be 1, each rule evidence criterion at least ``min_evidence``; and no evidence claim
    may be missing (:func:`missing_claims`)."""
    if not record.cot:
        return QCResult(False, "no cot")
    scores = verify(build_target(record), record)
    for key in ("format", "consistency"):
        if scores[key] != 1.0:
            return QCResult(False, f"{key} {scores[key]:.2f}")
    for key in CRITERION_KEYS:
        if scores[key] is not None and scores[key] < min_evidence:
            return QCResult(False, f"{key} {scores[key]:.2f}")
    missing = missing_claims(record.cot, record)
    if missing:
        return QCResult(False, f"missing claim '{missing[0]}'")
    return QCResult(True)


TEACHER_SYSTEM = (
    "You rewrite a draft of diagnostic reasoning about a medical image into fluent, natural reasoning. Keep "
    "every fact of the draft: the modality, the anatomy, the finding, its location, side and size, and every "
    "<box>[x1, y1, x2, y2]</box> tag exactly as written. Add no new findings, no other diagnoses, no new "
    "numbers. End with a sentence that names the same option letter as the draft. Reply with the reasoning only."
)


def teacher_messages(draft: str, record: MedADRecord) -> list[dict[str, str]]:
    options = "\n".join(f"{chr(65 + i)}. {o}" for i, o in enumerate(record.options))
    user = f"Question: {record.question}\nOptions:\n{options}\n\nDraft reasoning:\n{draft}"
    return [{"role": "system", "content": TEACHER_SYSTEM}, {"role": "user", "content": user}]


class Teacher(Protocol):
    def __call__(self, messages: list[dict[str, str]]) -> str: ...


class EndpointTeacher:
    """An OpenAI-compatible chat-completions endpoint (vLLM ``serve``, TGI, a hosted API), via stdlib urllib.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000/v1`` (``/chat/completions`` is appended).
        model: the served model name.
        api_key: sent as a bearer token when given.
    """

    def __init__(self, base_url: str, model: str, api_key: str | None = None, temperature: float = 0.7,
                 max_tokens: int = 512, timeout: float = 120.0) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.api_key = model, api_key
        self.temperature, self.max_tokens, self.timeout = temperature, max_tokens, timeout

    def __call__(self, messages: list[dict[str, str]]) -> str:
        body = json.dumps({"model": self.model, "messages": messages, "temperature": self.temperature,
                           "max_tokens": self.max_tokens}).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                reply = json.loads(response.read().decode("utf-8"))
            return str(reply["choices"][0]["message"]["content"])
        except (urllib.error.URLError, TimeoutError) as exc:
            raise BuildError(f"teacher endpoint {self.url}: {getattr(exc, 'reason', exc)}") from None
        except (ValueError, KeyError, IndexError, TypeError):
            raise BuildError(f"teacher endpoint {self.url}: reply is not a chat completion") from None


class LocalTeacher:
    """A local transformers causal LM (a folder or an already-downloaded hub id), greedy decoding."""

    def __init__(self, model: str, max_new_tokens: int = 512) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.model = AutoModelForCausalLM.from_pretrained(model)
        self.max_new_tokens = max_new_tokens

    def __call__(self, messages: list[dict[str, str]]) -> str:
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                                 return_dict=True)
        out = self.model.generate(**ids, max_new_tokens=self.max_new_tokens, do_sample=False)
        return self.tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)


def make_teacher(settings: dict[str, Any]) -> Teacher:
    """A teacher from the YAML ``teacher:`` block: ``{endpoint, model, api_key_env, ...}`` or ``{local: PATH}``."""
    import os

    settings = dict(settings)
    if "local" in settings:
        return LocalTeacher(settings.pop("local"), **settings)
    if "endpoint" not in settings or "model" not in settings:
        raise BuildError("config field 'teacher': needs 'endpoint' and 'model' (or 'local: PATH')")
    key_env = settings.pop("api_key_env", None)
    return EndpointTeacher(settings.pop("endpoint"), settings.pop("model"),
                           api_key=os.environ.get(key_env) if key_env else None, **settings)


def _clean(reply: str) -> str:
    """The teacher's reasoning without tags it may have added around it."""
    reply = re.sub(r"</?think>|<answer>.*?</answer>", " ", reply, flags=re.DOTALL)
    return " ".join(reply.split())


def synthesize(
    record: MedADRecord,
    rng: random.Random,
    counts: Counter,
    teacher: Teacher | None = None,
    convention: str = "image",
    attempts: int = 3,
    min_evidence: float = 1.0,
) -> str | None:
    """The record's CoT after QC, or None when every attempt failed (the record is then dropped).

    Template: up to ``attempts`` phrasings. Teacher: up to ``attempts`` rewrites of the accepted template; when
    all are rejected, the template is kept. ``counts`` gains ``template_accepted``, ``template_regenerated``,
    ``template_rejected``, ``dropped``, ``teacher_accepted``, ``teacher_rejected``, ``teacher_fallback`` and
    ``qc:<reason>`` per rejection reason.
    """
    draft = None
    for attempt in range(attempts):
        record.cot = template_cot(record, rng, convention)
        result = qc(record, min_evidence)
        if result.ok:
            draft = record.cot
            counts["template_accepted"] += 1
            counts["template_regenerated"] += attempt > 0
            break
        counts["template_rejected"] += 1
        counts[f"qc:{result.reason.split(' ')[0]}"] += 1
    if draft is None:
        counts["dropped"] += 1
        record.cot = None
        return None
    if teacher is None:
        return draft
    for _ in range(attempts):
        record.cot = _clean(teacher(teacher_messages(draft, record)))
        result = qc(record, min_evidence)
        if result.ok:
            counts["teacher_accepted"] += 1
            return record.cot
        counts["teacher_rejected"] += 1
        counts[f"qc:{result.reason.split(' ')[0]}"] += 1
    counts["teacher_fallback"] += 1
    record.cot = draft
    return draft
