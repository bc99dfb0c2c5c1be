"""The ``judge`` evidence backend: a model scores MedAD-R1's five criteria from a rubric, as JSON.

MedAD-R1 (arXiv 2602.01081) names the five criteria of its Evidence-Aware Consistency Reward but not how they
are scored; this backend asks a judge model, given the question, the options, the chosen answer, the record's
structured findings (text only) and the reasoning, for one number in [0, 1] per criterion.

Two transports (:class:`~medgrpo.rewards.settings.JudgeSettings`):

* ``http``: an OpenAI-compatible ``/chat/completions`` endpoint (e.g. ``vllm serve``), with a concurrency
  limit, a per-request timeout and retries with exponential backoff on timeouts, connection errors, 429 and
  5xx. Requests go to the host of ``base_url`` only: proxies from the environment are ignored and redirects
  are not followed. Only text is sent, never image bytes or paths. The standard library, not
  ``huggingface_hub.InferenceClient`` (which speaks the same protocol): its HTTP session follows redirects and
  honours proxies from the environment, and changing that is process-wide (``set_client_factory``), where a
  judge request carrying clinical text must reach the configured host and nothing else (tests assert both).
* ``local``: a transformers model loaded once in this process, generating greedily in batches.

Results are cached by (completion, record id, rubric version). Judge output is parsed leniently (the first
JSON object anywhere in the text, keys in any case or spelling with spaces, numbers as strings, booleans; else
``criterion: value`` pairs); a criterion that cannot be read scores None and is counted in
:attr:`JudgeClient.stats`, a failed request scores None for all five. Nothing here raises on bad judge output.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from medgrpo.data.record import LETTERS, MedADRecord
from medgrpo.rewards.parsing import parse_completion
from medgrpo.rewards.settings import CRITERIA, JudgeSettings, RewardSettingsError

logger = logging.getLogger(__name__)

RUBRIC_VERSION = "medad-r1-evidence-v3"
"""Part of every cache key: change it whenever the rubric text changes."""

RUBRIC = """You grade the diagnostic reasoning of a medical imaging assistant. Score each criterion from 0
to 1. Read the reasoning as a radiologist would, in every criterion:
- Markdown, headings, bullets and numbered steps are layout only: grade what is said, not how it is set out.
- Synonyms, abbreviations and British spellings name the same thing (adenocarcinoma = malignant glandular
  neoplasm, PE = pulmonary embolism, ICH = intracranial haemorrhage, CXR = chest radiograph, T2W/FLAIR = MRI
  sequences, haemorrhage = hemorrhage, optic nerve head = optic disc).
Criteria:
- visual_grounding: the reasoning describes what the image shows (modality, anatomy, the finding and where it
  is) in agreement with the reference findings, and any cited box lies on the finding.
- question_relevance: the reasoning addresses what the question asks, not something else.
- answer_support: the reasoning's final conclusion leads to the chosen answer. Find that conclusion like this:
  - Yes/No question: the polarity the reasoning asserts for the question's own subject decides, not any
    negation in the text; pertinent negatives about other things ("no effusion") do not deny the finding. A
    question asking a property is answered by its opposite too: "melanoma" answers "Is the lesion benign?"
    with No, "malpositioned ETT" answers "Is the tube correctly positioned?" with No.
  - An option mentioned only to be rejected ("argues against X", "although X could be considered") is not
    the conclusion.
  - After a change of mind ("initially X ... on reflection, Y"), the last committed conclusion wins.
  - Option-by-option elimination concludes the option left standing.
  - A hedge across options ("A or C") does not support one chosen answer fully: score it lower than a
    committed conclusion. Reasoning that says it cannot separate the options ("either A or C; I can't tell
    them apart") has concluded nothing.
- no_hallucination: 1 when the reasoning claims nothing the reference findings contradict or lack (a lesion
  on a normal image, the wrong side, another modality), lower for each such claim.
- no_contradiction: 1 when the reasoning never contradicts itself or the chosen answer. Not contradictions:
  pertinent negatives, rejected options, an earlier view the reasoning itself revised, one thing named by a
  synonym or abbreviation. A final conclusion that differs from the chosen answer is one.
Reply with one JSON object and nothing else, e.g. {"visual_grounding": 0.8, "question_relevance": 1,
"answer_support": 0.5, "no_hallucination": 1, "no_contradiction": 1}"""

Judgement = dict[str, float | None]


def rubric_messages(completion: str, record: MedADRecord) -> list[dict[str, str]]:
    """The chat messages asking the judge to score one completion (text only: no image, no image path)."""
    parsed = parse_completion(completion)
    reasoning = parsed.think if parsed.think is not None else completion
    options = "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(record.options)) or "(open-ended)"
    findings = {k: v for k, v in (record.evidence or {}).items() if v not in (None, "", [])}
    for name in ("modality", "anatomy"):
        if getattr(record, name) and name not in findings:
            findings[name] = getattr(record, name)
    if record.bbox:
        findings["lesion_boxes_original_pixels"] = record.bbox
    reference = json.dumps(findings, ensure_ascii=False, default=str) if findings else "(none)"
    user = (
        f"Question: {record.question}\nOptions:\n{options}\n"
        f"Reference findings: {reference}\n"
        f"Chosen answer: {parsed.answer if parsed.answer is not None else '(none)'}\n"
        f"Reasoning to grade:\n{reasoning[:8000]}"
    )
    return [{"role": "system", "content": RUBRIC}, {"role": "user", "content": user}]


_KEY_RE = re.compile(r"[^a-z]+")
_PAIR_RE = re.compile(
    r"([A-Za-z][A-Za-z _-]{2,40})[\"']?\s*[:=]\s*[\"']?(true|false|[-+]?\d*\.?\d+(?:[eE][-+]?\d+)?)",
    re.IGNORECASE,
)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        value = value.strip().lower()
        if value in ("true", "yes"):
            return 1.0
        if value in ("false", "no"):
            return 0.0
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, int | float) and math.isfinite(value) and 0.0 <= value <= 1.0:
        return float(value)
    return None


def _first_object(text: str) -> dict[str, Any] | None:
    """The first parseable JSON object in ``text`` (bounded: 32 openings, 4000 characters each)."""
    start = text.find("{")
    for _ in range(32):
        if start < 0:
            break
        depth = 0
        for end in range(start, min(len(text), start + 4000)):
            if text[end] == "{":
                depth += 1
            elif text[end] == "}":
                depth -= 1
                if depth == 0:
                    try:
                        obj = json.loads(text[start : end + 1])
                    except (ValueError, RecursionError):
                        break
                    return obj if isinstance(obj, dict) else None
        start = text.find("{", start + 1)
    return None


def parse_judgement(text: Any) -> Judgement:
    """Read the five criteria from a judge's reply, leniently; unreadable or out-of-range ones are None."""
    if not isinstance(text, str):
        return dict.fromkeys(CRITERIA)
    pairs: dict[str, Any] = {}
    obj = _first_object(text)
    if obj is not None:
        pairs = {_KEY_RE.sub("_", str(k).lower()).strip("_"): v for k, v in obj.items()}
    else:
        for key, value in _PAIR_RE.findall(text):
            pairs.setdefault(_KEY_RE.sub("_", key.lower()).strip("_"), value)
    return {c: _number(pairs.get(c)) for c in CRITERIA}


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects are errors: a judge request never goes anywhere but the configured host."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        raise urllib.error.HTTPError(req.full_url, code, f"redirect to {newurl} refused", headers, fp)


class HttpTransport:
    """POSTs rubric chats to an OpenAI-compatible ``/chat/completions`` endpoint (stdlib only: see the module
    docstring for why not huggingface_hub's client)."""

    def __init__(self, settings: JudgeSettings) -> None:
        url = urllib.parse.urlsplit(settings.base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise RewardSettingsError(
                f"judge.base_url must be an http(s) URL with a host, not {settings.base_url!r}"
            )
        self.settings = settings
        self.url = settings.base_url.rstrip("/") + "/chat/completions"
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())
        self._pool = ThreadPoolExecutor(
            max_workers=settings.max_concurrency, thread_name_prefix="medgrpo-judge"
        )

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        token = os.environ.get(self.settings.api_key_env, "") if self.settings.api_key_env else ""
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _one(self, messages: list[dict[str, str]]) -> str | None:
        s = self.settings
        body = json.dumps(
            {"model": s.model, "messages": messages, "temperature": 0.0, "max_tokens": s.max_new_tokens}
        ).encode("utf-8")
        for attempt in range(s.max_retries + 1):
            if attempt:
                time.sleep(s.backoff_s * 2 ** (attempt - 1))
            try:
                request = urllib.request.Request(self.url, data=body, headers=self._headers(), method="POST")
                with self._opener.open(request, timeout=s.timeout_s) as response:
                    reply = json.loads(response.read().decode("utf-8", "replace"))
                content = reply["choices"][0]["message"]["content"]
                return content if isinstance(content, str) else None
            except urllib.error.HTTPError as exc:
                if exc.code != 429 and exc.code < 500:
                    logger.warning("judge request refused: HTTP %s %s", exc.code, exc.reason)
                    return None
            except (urllib.error.URLError, TimeoutError, OSError):
                pass
            except (ValueError, KeyError, IndexError, TypeError):  # a 200 that is not a chat completion
                return None
        return None

    def __call__(self, batch: list[list[dict[str, str]]]) -> list[str | None]:
        return list(self._pool.map(self._one, batch))


class LocalTransport:
    """A transformers model in this process: chat template, left padding, greedy batched generation."""

    def __init__(self, settings: JudgeSettings) -> None:
        if not settings.model:
            raise RewardSettingsError("judge.model must name a local model folder for transport 'local'")
        self.settings = settings
        self._model: Any = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    def _load(self) -> None:
        import transformers

        path = self.settings.model
        try:
            processor = transformers.AutoProcessor.from_pretrained(path)
        except (OSError, ValueError):
            processor = transformers.AutoTokenizer.from_pretrained(path)
        tokenizer = getattr(processor, "tokenizer", processor)
        tokenizer.padding_side = "left"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        try:
            model = transformers.AutoModelForCausalLM.from_pretrained(path)
        except ValueError:  # a vision-language checkpoint: its text path judges text
            model = transformers.AutoModelForImageTextToText.from_pretrained(path)
        self._model, self._tokenizer = model.eval(), tokenizer

    def __call__(self, batch: list[list[dict[str, str]]]) -> list[str | None]:
        import torch

        with self._lock:
            if self._model is None:
                self._load()
            tok, out = self._tokenizer, []
            for i in range(0, len(batch), self.settings.batch_size):
                chunk = batch[i : i + self.settings.batch_size]
                texts = [
                    tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in chunk
                ]
                enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
                with torch.inference_mode():
                    ids = self._model.generate(
                        **enc,
                        max_new_tokens=self.settings.max_new_tokens,
                        do_sample=False,
                        pad_token_id=tok.pad_token_id,
                    )
                out += tok.batch_decode(ids[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
            return out


class JudgeClient:
    """Scores (completion, record) pairs through a transport, with a result cache and counters.

    ``stats``: ``requests`` (judged by the transport), ``cache_hits``, ``failures`` (no reply at all) and
    ``unparsed`` (criteria that could not be read from a reply).
    """

    def __init__(
        self,
        settings: JudgeSettings,
        transport: Callable[[list[list[dict[str, str]]]], list[str | None]] | None = None,
    ) -> None:
        self.settings = settings
        if transport is None:
            transport = HttpTransport(settings) if settings.transport == "http" else LocalTransport(settings)
        self.transport = transport
        self._cache: OrderedDict[tuple[str, str, str], Judgement] = OrderedDict()
        self._lock = threading.Lock()
        self.stats = {"requests": 0, "cache_hits": 0, "failures": 0, "unparsed": 0}

    def score(self, items: list[tuple[str, MedADRecord]]) -> list[Judgement]:
        """The five criteria per (completion text, record); judged pairs come from the cache."""
        keys = [(text, record.id, RUBRIC_VERSION) for text, record in items]
        with self._lock:
            results: list[Judgement | None] = [self._cache.get(k) for k in keys]
            self.stats["cache_hits"] += sum(r is not None for r in results)
        todo: dict[tuple[str, str, str], int] = {}
        for i, (key, result) in enumerate(zip(keys, results, strict=True)):
            if result is None and key not in todo:
                todo[key] = i
        if todo:
            try:
                replies = self.transport([rubric_messages(*items[i]) for i in todo.values()])
            except Exception:  # a broken transport must not stop training: the criteria go unscored
                logger.exception("judge transport failed")
                replies = [None] * len(todo)
            fresh = {key: parse_judgement(reply) for key, reply in zip(todo, replies, strict=True)}
            with self._lock:
                self.stats["requests"] += len(todo)
                for (key, judged), reply in zip(fresh.items(), replies, strict=True):
                    if reply is None:
                        self.stats["failures"] += 1
                    else:
                        self.stats["unparsed"] += sum(v is None for v in judged.values())
                    self._cache[key] = judged
                    while len(self._cache) > self.settings.cache_size:
                        self._cache.popitem(last=False)
            results = [r if r is not None else fresh[k] for r, k in zip(results, keys, strict=True)]
        return [dict(r) for r in results]  # type: ignore[arg-type]


_CLIENTS: dict[JudgeSettings, JudgeClient] = {}
_CLIENTS_LOCK = threading.Lock()


def judge_for(settings: JudgeSettings) -> JudgeClient:
    """The process-wide client for these settings (one cache and one model/connection pool per settings)."""
    with _CLIENTS_LOCK:
        if settings not in _CLIENTS:
            _CLIENTS[settings] = JudgeClient(settings)
        return _CLIENTS[settings]
