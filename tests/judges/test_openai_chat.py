"""The OpenAI-compatible LLM judge against a real chat-completions server on 127.0.0.1: each documented outcome."""

import logging
import sqlite3

import pytest

from lightning_edit.judges import JudgeInput, OpenAIChatJudge

KEY = "sk-test-4f1c9e7b2d"
ITEM = JudgeInput.of("A rectangle's area is", "A = xy", "A = x*y")


def make_judge(server, tmp_path, **options) -> OpenAIChatJudge:
    options = {"timeout": 5.0, "max_retries": 2, "cache_dir": str(tmp_path / "cache")} | options
    return OpenAIChatJudge("judge-model", base_url=server.url, api_key_env="JUDGE_TEST_KEY", **options)


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("JUDGE_TEST_KEY", KEY)


def test_a_normal_answer_is_parsed_and_sent_with_the_key(chat_server, tmp_path):
    chat_server.respond = lambda text, n: ("reply", '{"verdict": "yes", "reason": "same formula"}')
    verdict = make_judge(chat_server, tmp_path).judge([ITEM])[0]
    assert (verdict.score, verdict.reason, verdict.failed) == (1.0, "same formula", False)
    assert chat_server.calls == 1 and chat_server.headers[0]["authorization"] == f"Bearer {KEY}"


def test_429_then_200_is_retried(chat_server, tmp_path):
    chat_server.respond = lambda text, n: ("status", 429) if n == 0 else ("reply", '{"verdict": "no"}')
    judge = make_judge(chat_server, tmp_path)
    assert judge.judge([ITEM])[0].score == 0.0
    assert chat_server.calls == 2 and judge.stats.failed == 0


def test_500_three_times_is_missing_and_counted_as_failed(chat_server, tmp_path):
    chat_server.respond = lambda text, n: ("status", 500)
    judge = make_judge(chat_server, tmp_path, max_retries=2)
    verdict = judge.judge([ITEM])[0]
    assert verdict.score is None and verdict.failed and "500" in verdict.reason
    assert chat_server.calls == 3 and (judge.stats.failed, judge.stats.missing) == (1, 1)
    judge.judge([ITEM])  # a failed request is not cached: asked again
    assert chat_server.calls == 6


def test_a_timeout_is_missing(chat_server, tmp_path):
    chat_server.respond = lambda text, n: ("sleep", 1.5)
    verdict = make_judge(chat_server, tmp_path, timeout=0.3, max_retries=0).judge([ITEM])[0]
    assert verdict.score is None and verdict.failed and "Timeout" in verdict.reason


def test_malformed_json_is_missing(chat_server, tmp_path):
    chat_server.respond = lambda text, n: ("raw", b'{"choices": [{"message": ')
    verdict = make_judge(chat_server, tmp_path, max_retries=0).judge([ITEM])[0]
    assert verdict.score is None and verdict.failed


def test_a_verdict_outside_the_scale_is_missing_but_cached(chat_server, tmp_path):
    chat_server.respond = lambda text, n: ("reply", '{"executability": 9, "reason": "great"}')
    judge = make_judge(chat_server, tmp_path, template="scedit_executability")
    verdict = judge.judge([ITEM])[0]
    assert verdict.score is None and not verdict.failed and "1 to 7" in verdict.reason
    assert verdict.raw == '{"executability": 9, "reason": "great"}'
    again = make_judge(chat_server, tmp_path, template="scedit_executability").judge([ITEM])[0]
    assert chat_server.calls == 1 and again.cached and again.score is None  # the judge answered: not asked again


@pytest.mark.parametrize(
    "template, reply, score, tampered",
    [("scedit_executability", '{"executability": 5}', 5.0, 99), ("rule_edit", '{"verdict": "yes"}', 1.0, 0.5)],
    ids=["likert7", "binary"],
)
def test_a_cached_score_off_the_scale_is_asked_again(chat_server, tmp_path, caplog, template, reply, score, tampered):
    chat_server.respond = lambda text, n: ("reply", reply)
    assert make_judge(chat_server, tmp_path, template=template).judge([ITEM])[0].score == score
    connection = sqlite3.connect(tmp_path / "cache" / "verdicts.sqlite")
    with connection:
        connection.execute("UPDATE verdicts SET score = ?", (tampered,))
    connection.close()
    with caplog.at_level(logging.WARNING, logger="lightning_edit.judges.cache"):
        again = make_judge(chat_server, tmp_path, template=template).judge([ITEM])[0]
    assert (again.score, again.cached, chat_server.calls) == (score, False, 2)
    assert f"cached scores {float(tampered)!r} are off the judge's scale" in caplog.text
    assert make_judge(chat_server, tmp_path, template=template).judge([ITEM])[0].cached  # the new verdict replaced it


def test_concurrent_requests_and_the_cache(chat_server, tmp_path):
    chat_server.respond = lambda text, n: ("reply", '{"verdict": "yes"}' if "x*y" in text else '{"verdict": "no"}')
    items = [JudgeInput.of("q", "A = xy", p) for p in ["A = x*y", "A = x+y", "A = 2x", "A = y*x*1", "A = x*y"]]
    judge = make_judge(chat_server, tmp_path, concurrency=3)
    assert [v.score for v in judge.judge(items)] == [1.0, 0.0, 0.0, 0.0, 1.0]
    assert chat_server.calls == 4  # the repeated item is asked once
    rerun = make_judge(chat_server, tmp_path, concurrency=3)
    assert [v.score for v in rerun.judge(items)] == [1.0, 0.0, 0.0, 0.0, 1.0] and chat_server.calls == 4
    assert rerun.stats.cached == 4
    other = make_judge(chat_server, tmp_path, temperature=0.5)  # another identity: the cache is not reused
    other.judge(items[:1])
    assert chat_server.calls == 5


def test_no_key_in_files_or_logs(chat_server, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    chat_server.respond = lambda text, n: [("status", 500), ("raw", b"not json"), ("reply", "yes")][n % 3]
    judge = make_judge(chat_server, tmp_path, max_retries=0)
    judge.judge([JudgeInput.of("q", "A = xy", f"A = {k}xy") for k in range(6)])
    assert judge.stats.failed > 0 and caplog.text
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files and not any(KEY.encode() in p.read_bytes() for p in files)
    assert KEY not in caplog.text and KEY not in str(judge.describe()) and KEY not in judge.identity()


def test_a_missing_key_is_an_error_before_any_request(chat_server, tmp_path, monkeypatch):
    monkeypatch.delenv("JUDGE_TEST_KEY")
    with pytest.raises(ValueError, match="JUDGE_TEST_KEY"):
        make_judge(chat_server, tmp_path).judge([ITEM])
    assert chat_server.calls == 0


def test_an_unexpected_error_in_a_request_thread_is_raised_not_lost(chat_server, tmp_path, monkeypatch):
    """Only the client's documented failures are missing verdicts; anything else is a bug, raised in the caller."""
    judge = make_judge(chat_server, tmp_path)

    def broken(messages):
        raise RuntimeError("a bug in the request code")

    monkeypatch.setattr(judge, "_ask", broken)
    with pytest.raises(RuntimeError, match="a bug in the request code"):
        judge.judge([ITEM])
