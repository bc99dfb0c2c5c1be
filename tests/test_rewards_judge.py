"""The judge evidence backend: lenient parsing, the HTTP transport against a loopback server started here
(retries, timeout, concurrency limit, cache, no redirects, no proxies, text only), and a local tiny model."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from medgrpo.data.record import MedADRecord
from medgrpo.rewards import JudgeSettings, RewardSettings, build_reward_funcs, verify, verify_batch
from medgrpo.rewards.judge import JudgeClient, parse_judgement, rubric_messages
from medgrpo.rewards.settings import CRITERIA, RewardSettingsError

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
    """A fake OpenAI-compatible server: replays scripted replies and records what it received."""

    script: list = []
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
            step = cls.script.pop(0) if cls.script else ("ok", GOOD)
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
    Judge.script, Judge.bodies, Judge.in_flight, Judge.max_in_flight = [], [], 0, 0
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
    settings = RewardSettings(evidence_backend="judge", judge=settings_for(server))
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
