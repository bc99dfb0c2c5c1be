"""Template CoT against the project's own verifiers, and the teacher backend against a loopback server."""

from __future__ import annotations

import json
import random
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from medgrpo.data import load_records
from medgrpo.data.build import build_dataset, load_config
from medgrpo.data.build.cot import EndpointTeacher, missing_claims, qc, synthesize, template_cot
from medgrpo.data.build.readers import BuildError
from medgrpo.data.record import MedADRecord
from medgrpo.prompts import build_target
from medgrpo.rewards import verify
from medgrpo.rewards.verify import CRITERION_KEYS

ROOT = Path(__file__).parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "build"
SOURCES = ("br35h", "isic2018", "chestxray14", "image_folder", "csv_labels", "mask_pairs")
IN_LEXICON = ("br35h", "image_folder", "csv_labels", "mask_pairs")  # every finding name is a lexicon concept


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = {}
    for name in SOURCES:
        config = load_config(ROOT / "data" / "sources" / f"{name}.yaml")
        config.root = FIXTURES / name
        folder = tmp_path_factory.mktemp(name) / "out"
        out[name] = (build_dataset(config, folder, seed=0), load_records(folder))
    return out


def test_template_cot_passes_consistency_and_evidence_at_100_percent(built):
    total = 0
    for name, (summary, records) in built.items():
        assert records, name
        for record in records:
            scores = verify(build_target(record), record)
            assert scores["format"] == scores["consistency"] == scores["accuracy"] == 1.0, (name, record.cot)
            assert all(scores[k] == 1.0 for k in CRITERION_KEYS), (name, record.cot, scores)
            if record.bbox:
                assert scores["grounding"] == 1.0
            assert record.cot.rstrip(".").endswith(record.answer)  # ends by naming the option letter
            total += 1
        if name in IN_LEXICON:
            assert summary.qc["template_rejected"] == 0 and summary.qc["dropped"] == 0, (name, summary.qc)
    assert total > 100


def test_every_task_family_is_built(built):
    tasks = {r.task for _, records in built.values() for r in records}
    assert tasks == {"anomaly_detection", "pathology_characterization", "lesion_localization",
                     "modality_classification", "anatomy_identification"}


def test_template_is_deterministic_and_varied():
    record = _record()
    a = [template_cot(record, random.Random(f"s{i}")) for i in range(12)]
    assert a == [template_cot(record, random.Random(f"s{i}")) for i in range(12)]
    assert len(set(a)) >= 4


def _record() -> MedADRecord:
    return MedADRecord(
        id="r1", images=["images/a.png"], question="Where is the tumour located in this MRI image of the brain?",
        options=["Lower right", "Upper left", "Central", "Upper right"], answer="D", task="lesion_localization",
        modality="MRI", anatomy="brain", bbox=[[40.0, 10.0, 56.0, 20.0]],
        evidence={"abnormal": True, "finding": "tumour", "location": "upper right", "laterality": "right",
                  "size": "medium", "modality": "MRI", "anatomy": "brain"},
    )


class _Replies(BaseHTTPRequestHandler):
    replies: list[str] = []
    requests: list[dict] = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, **body})
        content = type(self).replies.pop(0)
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = HTTPServer(("127.0.0.1", 0), _Replies)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    _Replies.replies, _Replies.requests = [], []
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


DROPS_SIDE = ("On this brain MRI there is a medium-sized tumour in the upper part of the image "
              "<box>[40, 10, 56, 20]</box>. So the answer is D.")
KEEPS_ALL = ("Looking at this MRI of the brain, I notice a medium-sized tumour sitting in the image's upper right "
             "region <box>[40, 10, 56, 20]</box>. Because it lies in the upper right region, the answer is D.")


def test_teacher_rewrite_dropping_a_claim_is_rejected_then_one_keeping_all_accepted(server):
    assert missing_claims(DROPS_SIDE, _record()) == ["right"]
    assert missing_claims(KEEPS_ALL, _record()) == []
    _Replies.replies = [DROPS_SIDE, f"<think>{KEEPS_ALL}</think>"]
    record, counts = _record(), Counter()
    cot = synthesize(record, random.Random(0), counts, EndpointTeacher(server, "teacher-model"))
    assert cot == KEEPS_ALL and record.cot == KEEPS_ALL
    assert counts["teacher_rejected"] == 1 and counts["teacher_accepted"] == 1
    assert sum(n for k, n in counts.items() if k.startswith("qc:")) == 1  # the rejection's reason is counted
    request = _Replies.requests[0]
    assert request["path"] == "/v1/chat/completions" and request["model"] == "teacher-model"
    assert "<box>[40, 10, 56, 20]</box>" in request["messages"][1]["content"]  # the template draft was sent
    assert qc(record).ok


def test_teacher_always_dropping_claims_falls_back_to_the_template(server):
    _Replies.replies = [DROPS_SIDE] * 3
    record, counts = _record(), Counter()
    cot = synthesize(record, random.Random(0), counts, EndpointTeacher(server, "m"), attempts=3)
    assert counts["teacher_rejected"] == 3 and counts["teacher_fallback"] == 1
    assert cot == template_cot(_record(), random.Random(0)) and qc(record).ok


def test_unreachable_teacher_is_one_line():
    teacher = EndpointTeacher("http://127.0.0.1:9/v1", "m", timeout=2)
    with pytest.raises(BuildError, match=r"^teacher endpoint http://127.0.0.1:9/v1/chat/completions: "):
        teacher([{"role": "user", "content": "x"}])


def test_qc_names_the_missing_claim():
    record = _record()
    record.cot = KEEPS_ALL.replace(" <box>[40, 10, 56, 20]</box>", "")
    assert missing_claims(record.cot, record) == ["<box>[40, 10, 56, 20]</box>"]
    assert not qc(record).ok


def test_qc_rejects_contradicting_cot():
    record = _record()
    record.cot = ("This MRI shows the brain. A medium-sized tumour is seen in the image's upper right region "
                  "<box>[40, 10, 56, 20]</box>. The answer is B.")
    result = qc(record)
    assert not result.ok and result.reason.startswith("consistency")


@pytest.fixture(scope="module")
def local_lm(tmp_path_factory) -> Path:
    """A random-init Qwen2 causal LM over the tiny tokenizer, saved as a local folder (what ``{local: PATH}``
    names): the real LocalTeacher path (chat template, greedy generate, decode of the new tokens only)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from medgrpo.models.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=1024,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("teacher") / "lm"
    Qwen2ForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_local_teacher_generates_greedily_and_its_rejected_rewrites_fall_back(local_lm):
    from medgrpo.data.build.cot import LocalTeacher, make_teacher, teacher_messages

    teacher = make_teacher({"local": str(local_lm), "max_new_tokens": 8})
    assert isinstance(teacher, LocalTeacher)
    messages = teacher_messages(template_cot(_record(), random.Random(0)), _record())
    reply = teacher(messages)
    assert isinstance(reply, str) and reply == teacher(messages)  # greedy: the same reply twice
    longest = max(len(token) for token in teacher.tokenizer.get_vocab())
    assert 0 < len(reply) <= 8 * longest and "Draft reasoning" not in reply  # the 8 new tokens, not the prompt
    record, counts = _record(), Counter()
    cot = synthesize(record, random.Random(0), counts, teacher, attempts=2)
    # a random model keeps none of the draft's claims: both rewrites rejected, the template kept
    assert counts["teacher_rejected"] == 2 and counts["teacher_fallback"] == 1 and counts["teacher_accepted"] == 0
    assert cot == template_cot(_record(), random.Random(0)) and qc(record).ok
