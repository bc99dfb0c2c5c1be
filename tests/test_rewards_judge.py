"""The judge evidence backend: lenient parsing, the HTTP transport against a loopback server started here
(retries, timeout, concurrency limit, cache, no redirects, no proxies, text only), the labelled dev set of
reasoning end to end through that server, and a local tiny model."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import medgrpo.rewards.judge as judge_module
from medgrpo.data.record import TASKS, MedADRecord
from medgrpo.rewards import JudgeSettings, RewardSettings, build_reward_funcs, verify, verify_batch
from medgrpo.rewards.evidence import combine
from medgrpo.rewards.judge import RUBRIC, JudgeClient, judge_for, parse_judgement, rubric_messages
from medgrpo.rewards.parsing import parse_completion
from medgrpo.rewards.settings import CRITERIA, RewardSettingsError

DEV_SET = Path(__file__).resolve().parents[1] / "eval" / "reasoning_set" / "dev.jsonl"

RECORD = MedADRecord(
    "r1",
    ["images/secret_patient_scan.png"],
    "Where is the lesion?",
    ["left upper quadrant", "right upper quadrant"],
    "A",
    "lesion_localization",
    "MRI",
    "brain",
    {"abnormal": True, "laterality": "left", "finding": "mass"},
    [[10.0, 10.0, 20.0, 20.0]],
)
GOOD = (
    '{"visual_grounding": 0.5, "question_relevance": 1, "answer_support": 0.25, "no_hallucination": 1, '
    '"no_contradiction": 0}'
)
COMPLETION = (
    "<think>A mass in the left upper quadrant <box>[10, 10, 20, 20]</box>.</think>\n<answer>A</answer>"
)


@pytest.mark.parametrize(
    "reply, expected",
    [
        (GOOD, (0.5, 1.0, 0.25, 1.0, 0.0)),
        ("Sure! ```json\n" + GOOD + "\n``` hope this helps", (0.5, 1.0, 0.25, 1.0, 0.0)),
        (
            '{"Visual Grounding": "0.5", "question-relevance": true, "answer_support": "high", '
            '"no_hallucination": 7}',
            (0.5, 1.0, None, None, None),
        ),
        (
            "visual_grounding: 0.9\nquestion_relevance = 1\nno_contradiction: false",
            (0.9, 1.0, None, None, 0.0),
        ),
        ('{"visual_grounding": NaN, "question_relevance": -1}', (None,) * 5),
        ("{{{{", (None,) * 5),
        ("", (None,) * 5),
        (None, (None,) * 5),
        ('[1, 2]{"answer_support": 1}', (None, None, 1.0, None, None)),
    ],
)
def test_parse_judgement_is_lenient_and_never_raises(reply, expected):
    assert tuple(parse_judgement(reply)[c] for c in CRITERIA) == expected


def test_rubric_is_text_only():
    messages = rubric_messages(COMPLETION, RECORD)
    assert all(isinstance(m["content"], str) for m in messages)
    text = json.dumps(messages)
    assert "secret_patient_scan" not in text and "image_url" not in text
    assert "left upper quadrant" in text and "Chosen answer: A" in text


class Judge(BaseHTTPRequestHandler):
    """A fake OpenAI-compatible server: replays scripted replies (else asks ``respond(body)``, else answers
    GOOD) and records what it received."""

    script: list = []
    respond = None
    bodies: list = []
    in_flight = 0
    max_in_flight = 0
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    def do_POST(self):
        cls = type(self)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with cls.lock:
            cls.bodies.append((self.path, dict(self.headers), body))
            cls.in_flight += 1
            cls.max_in_flight = max(cls.max_in_flight, cls.in_flight)
            if cls.script:
                step = cls.script.pop(0)
            elif cls.respond is not None:
                step = cls.respond(body)
            else:
                step = ("ok", GOOD)
        kind, value = step
        if kind == "sleep":
            time.sleep(value)
            kind, value = "ok", GOOD
        with cls.lock:  # the request is answered: the client may send its next one as soon as it reads this
            cls.in_flight -= 1
        if kind == "status":
            self.send_response(value)
            if value == 302:
                self.send_header("Location", "http://example.invalid/v1/chat/completions")
            self.end_headers()
            return
        payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": value}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Judge)
    Judge.script, Judge.bodies, Judge.in_flight, Judge.max_in_flight, Judge.respond = [], [], 0, 0, None
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()  # serve_forever polls every 0.5 s: the teardown cost of each test
    httpd.server_close()


def settings_for(url, **kw):
    return JudgeSettings(
        **{"transport": "http", "base_url": url, "model": "judge", "backoff_s": 0.01, "timeout_s": 2.0, **kw}
    )


def test_http_judge_scores_caches_and_sends_only_text(server, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # a proxy from the environment must be ignored
    monkeypatch.setenv("JUDGE_TOKEN", "t0k")
    client = JudgeClient(settings_for(server, api_key_env="JUDGE_TOKEN"))
    items = [(COMPLETION, RECORD), (COMPLETION + " ", RECORD), (COMPLETION, RECORD)]
    first = client.score(items)
    assert first[0] == first[1] == first[2] == dict(zip(CRITERIA, (0.5, 1.0, 0.25, 1.0, 0.0), strict=True))
    assert len(Judge.bodies) == 2  # the duplicate pair is judged once
    client.score(items)
    assert len(Judge.bodies) == 2 and client.stats["cache_hits"] == 3
    path, headers, body = Judge.bodies[0]
    assert path == "/v1/chat/completions" and headers["Authorization"] == "Bearer t0k"
    assert set(body) == {"model", "messages", "temperature", "max_tokens"}
    assert all(isinstance(m["content"], str) for m in body["messages"])
    assert "secret_patient_scan" not in json.dumps(body)


def test_http_judge_retries_then_gives_up_and_counts(server):
    Judge.script = [("status", 503), ("status", 429), ("ok", GOOD)]
    client = JudgeClient(settings_for(server, max_retries=2))
    assert client.score([(COMPLETION, RECORD)])[0]["visual_grounding"] == 0.5
    assert len(Judge.bodies) == 3
    Judge.script = [("status", 500)] * 3
    failed = client.score([("other completion", RECORD)])[0]
    assert failed == dict.fromkeys(CRITERIA) and client.stats["failures"] == 1
    Judge.script = [("status", 400)]
    client.score([("third", RECORD)])
    assert len(Judge.bodies) == 3 + 3 + 1  # a 4xx is not retried
    Judge.script = [("ok", "no idea")]
    client.score([("fourth", RECORD)])
    assert client.stats["unparsed"] == 5


def test_http_judge_does_not_follow_redirects(server):
    Judge.script = [("status", 302)]
    client = JudgeClient(settings_for(server, max_retries=0))
    assert client.score([(COMPLETION, RECORD)])[0] == dict.fromkeys(CRITERIA)
    assert len(Judge.bodies) == 1


def test_http_judge_times_out(server):
    Judge.script = [("sleep", 1.0)]
    client = JudgeClient(settings_for(server, max_retries=0, timeout_s=0.2))
    start = time.perf_counter()
    assert client.score([(COMPLETION, RECORD)])[0] == dict.fromkeys(CRITERIA)
    assert time.perf_counter() - start < 0.9 and client.stats["failures"] == 1


def test_http_judge_limits_concurrency(server):
    Judge.script = [("sleep", 0.05)] * 8
    client = JudgeClient(settings_for(server, max_concurrency=2))
    client.score([(f"completion {i}", RECORD) for i in range(8)])
    assert 1 <= Judge.max_in_flight <= 2


def test_evidence_reward_with_judge_backend_logs_criteria(server):
    # unshaped, so that the junk completion is still scored by the judge (the reward's default pays it 0)
    settings = RewardSettings(evidence_backend="judge", judge=settings_for(server), gate_on_correct=False,
                              zero_on_format_failure=False)
    logged = {}
    (evidence,) = build_reward_funcs(["evidence"], settings)
    out = evidence(
        prompts=None,
        completions=[COMPLETION, "junk"],
        id=["r1", "r1"],
        question=[RECORD.question] * 2,
        options=[RECORD.options] * 2,
        answer=["A", "A"],
        task=[RECORD.task] * 2,
        log_metric=lambda k, v: logged.__setitem__(k, v),
    )
    weighted = (0.5 + 1.0 + 0.25 + 1.0 + 0.0) / 5
    assert out == pytest.approx([weighted, weighted])
    assert logged["evidence/answer_support"] == 0.25 and logged["evidence/judge_unscored"] == 0.0
    assert verify(COMPLETION, RECORD, settings=settings)["evidence/visual_grounding"] == 0.5
    assert [s["evidence"] for s in verify_batch([COMPLETION], [RECORD], settings=settings)] == pytest.approx(
        [weighted]
    )


# How the fake judge answers the i-th distinct dev request (i modulo 6): a first-try HTTP error or None, the reply
# (a = 1 when the line is labelled consistent, else 0; v = a grounding score that differs between neighbours, so
# a reply routed to the wrong completion shows), and the criteria the parser must read from it.
DEV_REPLIES = (
    (None, '{{"visual_grounding": {v}, "question_relevance": 1, "answer_support": {a}, "no_hallucination": 1, '
     '"no_contradiction": {a}}}', lambda v, a: (v, 1.0, a, 1.0, a)),
    (None, "Grading.\nanswer_support: {a}\nno_contradiction = {a}\nThe rest I cannot tell.",
     lambda v, a: (None, None, a, None, a)),
    (500, '```json\n{{"visual_grounding": {v}, "question_relevance": 0.5, "answer_support": {a}, '
     '"no_hallucination": 0, "no_contradiction": 1}}\n```', lambda v, a: (v, 0.5, a, 0.0, 1.0)),
    (429, '{{"Visual Grounding": "{v}", "question-relevance": true, "answer_support": "{a}", '
     '"no_hallucination": 3, "no_contradiction": false}}', lambda v, a: (v, 1.0, a, None, 0.0)),
    (None, '{{"visual_grounding": {v}, "answer_support": ', lambda v, a: (v, None, None, None, None)),
    (None, "I am unable to grade this reasoning.", lambda v, a: (None,) * 5),
)


def test_dev_set_end_to_end_through_a_fake_openai_server(server, monkeypatch):
    rows = [json.loads(line) for line in DEV_SET.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(rows) >= 100
    records = [
        MedADRecord(
            id=str(r["id"]), images=[f"images/secret_{r['id']}.png"], question=r["question"],
            options=list(r["options"]), answer=r["answer"], task=r["task"], modality=r.get("modality"),
        )
        for r in rows
    ]
    assert all(r.task in TASKS for r in records)
    completions = [r["completion"] for r in rows]
    # One request per distinct (completion, record id), identified on the server by its user message.
    plan: dict[str, tuple] = {}
    keys: dict[tuple[str, str], str] = {}
    for row, record, text in zip(rows, records, completions, strict=True):
        content = rubric_messages(text, record)[1]["content"]
        keys.setdefault((text, record.id), content)
        if content not in plan:
            i = len(plan)
            status, reply, expected = DEV_REPLIES[i % len(DEV_REPLIES)]
            v, a = (i % 9 + 1) / 10, float(row["consistent"] is True)
            plan[content] = (status, reply.format(v=v, a=a), expected(v, a))
    assert len(plan) >= len(DEV_REPLIES)  # every kind of reply (and of first-try failure) is exercised
    tries: dict[str, int] = {}

    def respond(body):  # called under the server's lock
        content = body["messages"][1]["content"]
        if content not in plan:
            return ("status", 400)  # not a dev request: the client does not retry, the test sees a failure
        tries[content] = tries.get(content, 0) + 1
        status, reply, _ = plan[content]
        return ("status", status) if status and tries[content] == 1 else ("ok", reply)

    Judge.respond = respond
    monkeypatch.setattr(judge_module, "_CLIENTS", {})  # a fresh client (and cache) for this test
    settings = RewardSettings(
        evidence_backend="judge",
        judge=settings_for(server, model="dev-judge", max_retries=2, backoff_s=0.001, max_concurrency=4),
        gate_on_correct=False, zero_on_format_failure=False,  # read as a metric: the judge's scores unshaped
    )
    results = verify_batch(completions, records, settings=settings)

    # Requests: the rubric, the question and that completion's reasoning, text only, each distinct pair once
    # (plus one retry after each first-try 429/500).
    failing, n_sent = sum(status is not None for status, _, _ in plan.values()), len(Judge.bodies)
    assert n_sent == len(keys) + failing
    for path, _, body in Judge.bodies:
        assert path == "/v1/chat/completions" and body["model"] == "dev-judge"
        assert [m["role"] for m in body["messages"]] == ["system", "user"]
        assert body["messages"][0]["content"] == RUBRIC
        assert "secret_" not in json.dumps(body) and "image_url" not in json.dumps(body)
    sent = [body["messages"][1]["content"] for _, _, body in Judge.bodies]
    for record, text in zip(records, completions, strict=True):
        content = keys[(text, record.id)]
        assert content in sent and record.question in content
        think = parse_completion(text).think
        assert (think if think is not None else text)[:8000] in content
    per_content = list(keys.values())  # a dev line may repeat another's question and completion
    assert all(tries[c] == per_content.count(c) + (plan[c][0] is not None) for c in plan)  # failures retried

    # Replies: every criterion as the parser must read it, routed back to its own completion (the retried ones
    # included), and the evidence reward their weighted mean over the criteria that could be read.
    for record, text, scores in zip(records, completions, results, strict=True):
        expected = plan[keys[(text, record.id)]][2]
        assert tuple(scores[f"evidence/{c}"] for c in CRITERIA) == pytest.approx(expected)
        assert scores["evidence"] == pytest.approx(combine(expected, settings.evidence_weights))
    stats = dict(judge_for(settings.judge).stats)
    assert stats == {
        "requests": len(keys),
        "cache_hits": 0,  # a pair repeated within one batch is judged once, not counted as a hit
        "failures": 0,
        "unparsed": sum(expected.count(None) for _, _, expected in (plan[c] for c in keys.values())),
    }

    # Cache: the same set again sends nothing and scores the same.
    assert verify_batch(completions, records, settings=settings) == results
    assert len(Judge.bodies) == n_sent
    assert judge_for(settings.judge).stats == {**stats, "cache_hits": stats["cache_hits"] + len(rows)}


def test_judge_settings_are_validated():
    with pytest.raises(RewardSettingsError, match="transport"):
        JudgeSettings(transport="grpc")
    with pytest.raises(RewardSettingsError, match="base_url"):
        JudgeClient(JudgeSettings(base_url="file:///etc/passwd"))
    with pytest.raises(RewardSettingsError, match="model"):
        JudgeClient(JudgeSettings(transport="local"))


def test_local_judge_runs_a_tiny_model_in_batches(tiny_model_dirs):
    client = JudgeClient(
        JudgeSettings(
            transport="local", model=str(tiny_model_dirs["qwen2_5_vl"]), max_new_tokens=8, batch_size=2
        )
    )
    items = [(f"<think>reasoning {i}</think><answer>A</answer>", RECORD) for i in range(3)]
    results = client.score(items)
    assert len(results) == 3 and all(set(r) == set(CRITERIA) for r in results)
    assert all(v is None or 0.0 <= v <= 1.0 for r in results for v in r.values())
    assert client.stats["requests"] == 3 and client.stats["failures"] == 0
    assert client.stats["unparsed"] == sum(v is None for r in results for v in r.values())
