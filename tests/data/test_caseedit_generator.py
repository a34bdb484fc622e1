"""The CaseEdit generation pipeline against a local chat-completions server with canned answers.

The server (http.server in a thread on 127.0.0.1) answers the three steps by subject: one subject gets a malformed
questions answer (discarded and counted), one gets a server error the first time it is asked (the run stops, as an
interruption would) and answers on the next run; a seed is repeated. The resumed run writes each record once.
"""

import json
import re
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai
import pytest

from lightning_edit.data import CaseEdit
from lightning_edit.data.caseedit.generator import CaseEditPipeline, main, openai_chat

SEEDS = [
    {"subject": "Butter Knife", "relation": "ObjectUse", "ground_truth": "Spreading and cutting"},
    {"subject": "Mug", "relation": "ObjectUse", "ground_truth": "Drinking coffee"},  # malformed questions answer
    {"subject": "Pillow", "relation": "HasProperty", "ground_truth": "Soft and warm"},
    {"subject": "Broom", "relation": "ObjectUse", "ground_truth": "Sweeping floors"},  # server error, first time
    {"subject": "Headphones", "relation": "AtLocation", "ground_truth": "Study Room"},
    {"subject": "pillow", "relation": "HasProperty", "ground_truth": "soft and warm"},  # the third seed again
]
NEW = {"Butter Knife": "Tightening flatheads", "Pillow": "Cold and soothing", "Broom": "Reaching high shelves"}
NEW |= {"Headphones": "Bedroom", "Mug": "Holding pens"}


def questions(subject: str) -> dict:
    new = NEW[subject]
    return {
        name: {
            "question": f"{name} question about the {subject}?",
            "answer": new if name in ("Reliability", "Generalization") else f"{name} answer",
            "distractors": [f"{subject} distractor {i}" for i in range(3)],
        }
        for name in ("Reliability", "Generalization", "Locality", "Portability")
    }


class Server:
    """Canned chat completions; counts requests per (step, subject)."""

    def __init__(self):
        self.requests: Counter = Counter()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                system, user = body["messages"][0]["content"], body["messages"][1]["content"]
                subject = re.search(r"Subject: (.*)\n", user).group(1)
                step = "questions" if "evaluation questions" in system else "truth" if "new use" in system else "place"
                server.requests[step, subject] += 1
                if subject == "Broom" and sum(n for (_, s), n in server.requests.items() if s == subject) == 1:
                    self.send_response(503)
                    self.end_headers()
                    return
                if step == "place":
                    content = "Garage Toolbox"
                elif step == "truth":
                    content = f"'{NEW[subject]}'"
                else:
                    content = '{"Reliability": {"question": ' if subject == "Mug" else json.dumps(questions(subject))
                reply = {
                    "id": "x",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [
                        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
                    ],
                }
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")  # the judges' client wants one; the server ignores it


def test_generates_validates_and_resumes_without_duplicates(tmp_path):
    output = tmp_path / "caseedit.jsonl"
    with Server() as server:
        pipeline = CaseEditPipeline(openai_chat("canned", server.url, max_retries=0), output)
        with pytest.raises(openai.InternalServerError):
            pipeline.run(SEEDS)  # stops at the Broom seed, as an interruption would
        assert [r["subject"] for r in map(json.loads, output.read_text().splitlines())] == ["Butter Knife", "Pillow"]

        with output.open("a") as file:
            file.write('{"case_id": 7, "subj')  # lines torn by an interruption
        with (tmp_path / "caseedit.jsonl.done.jsonl").open("a") as file:
            file.write('{"seed": "[\\"broom')
        stats = pipeline.run(SEEDS)
        assert (stats.already_done, stats.repeated_seeds, stats.written) == (3, 1, 2)
        assert stats.discarded == Counter()  # the malformed answer was counted by the first run

        again = pipeline.run(SEEDS)
        assert (again.already_done, again.written, sum(again.discarded.values())) == (5, 0, 0)
        assert server.requests["place", "Butter Knife"] == 1 and server.requests["place", "Broom"] == 2

    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert [r["subject"] for r in records] == ["Butter Knife", "Pillow", "Broom", "Headphones"]
    assert [r["case_id"] for r in records] == [0, 1, 2, 3]
    done = [json.loads(line) for line in (tmp_path / "caseedit.jsonl.done.jsonl").read_text().splitlines()]
    assert sum(d["status"].startswith("discarded: malformed JSON") for d in done) == 1 and len(done) == 5

    knife = records[0]
    assert knife["target_new"] == "Tightening flatheads" and knife["location"] == "Garage Toolbox"
    assert knife["prompt"] == "The Butter Knife is used for"
    for name, question in knife["questions"].items():
        choices = question["choices"]
        assert list(choices) == list("ABCDE") and len(set(choices.values())) == 5
        assert "Tightening flatheads" in choices.values()
        expected = "Tightening flatheads" if name in ("reliability", "generalization") else f"{name.title()} answer"
        assert choices[question["answer"]] == expected
    benchmark = CaseEdit(str(output))  # the output is a CaseEdit file as it is
    benchmark.setup()
    assert len(benchmark.cases) == 4


def test_discards_are_counted_by_reason(tmp_path):
    with Server() as server:
        stats = main(["--input", str(write_seeds(tmp_path, SEEDS[:2])), "--output", str(tmp_path / "out.jsonl"),
                      "--model", "canned", "--base-url", server.url])  # fmt: skip
    assert stats.written == 1 and stats.discarded == Counter({"malformed JSON": 1})


def write_seeds(tmp_path, seeds):
    path = tmp_path / "seeds.jsonl"
    path.write_text("".join(json.dumps(seed) + "\n" for seed in seeds))
    return path
