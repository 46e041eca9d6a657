"""The model_judge reward term against a judge server this test starts on 127.0.0.1 (no other network)."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pyarrow.parquet as pq
import pytest

from evo.errors import ConfigError, TrainError
from evo.train.judge_model import ModelJudge, parse_score
from evo.train.run import train_recipe

from .conftest import small_recipe

RUBRIC = "Rate the answer.\nPrompt: {prompt}\nResponse: {response}\nEND\nReply with SCORE: <0-10>.\n"


def _response_of(content: str) -> str:
    return content.split("Response: ", 1)[1].split("\nEND\n", 1)[0]


class JudgeServer:
    """An OpenAI-compatible chat/completions endpoint; `rule(response)` says how to answer each request."""

    def __init__(self):
        self.calls: list[str] = []
        self.rule = lambda response: f"SCORE: {len(response.strip()) % 11}"
        judge = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                assert self.path == "/v1/chat/completions" and body["temperature"] == 0
                response = _response_of(body["messages"][0]["content"])
                judge.calls.append(response)
                answer = judge.rule(response)
                if isinstance(answer, float):  # a slow judge
                    time.sleep(answer)
                    answer = "SCORE: 5"
                if isinstance(answer, int):  # an HTTP error
                    self.send_response(answer)
                    self.end_headers()
                    return
                data = json.dumps({"choices": [{"message": {"role": "assistant", "content": answer}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = JudgeServer()
    yield s
    s.close()


def _cfg(tmp_path, server, **kw):
    rubric = tmp_path / "rubric.md"
    rubric.write_text(RUBRIC)
    return {"rubric": str(rubric), "backend": "openai", "endpoint": server.url, "model": "judge",
            "batch_size": 4, "timeout_s": 10, "max_tokens": 16, "max_score": 10, "on_error": "zero",
            "cache": str(tmp_path / "cache.sqlite"), **kw}


PAIRS = [("1+1=", "2\n"), ("1+1=", "22\n"), ("2+3=", "5\n"), ("1+1=", "2\n")]


def test_scores_come_from_the_judge_and_the_cache_prevents_a_second_call(tmp_path, server, monkeypatch):
    # A proxy in the environment is not used for a judge on this machine (it would refuse the connection).
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    judge = ModelJudge(_cfg(tmp_path, server), tmp_path)
    first = judge.score(PAIRS)
    assert [v.value for v in first] == [0.1, 0.2, 0.1, 0.1]  # len("2") % 11 / 10, ...
    assert [v.status for v in first] == ["ok"] * 4
    assert sorted(server.calls) == ["2\n", "22\n", "5\n"]  # the repeated pair was sent once
    again = ModelJudge(_cfg(tmp_path, server), tmp_path).score(PAIRS)  # a new process reading the same cache
    assert [v.status for v in again] == ["cached"] * 4 and [v.value for v in again] == [v.value for v in first]
    assert len(server.calls) == 3
    # The key holds the rubric's hash: an evolved rubric is judged anew.
    (tmp_path / "strict.md").write_text(RUBRIC.replace("Rate the answer.", "Rate the answer strictly."))
    ModelJudge(_cfg(tmp_path, server) | {"rubric": str(tmp_path / "strict.md")}, tmp_path).score(PAIRS[:1])
    assert len(server.calls) == 4


@pytest.mark.parametrize("rule, why", [
    (lambda r: 1.5, "error: timeout after 0.3s; on_error zero"),
    (lambda r: "I like it a lot", "error: no score in the reply 'I like it a lot'; on_error zero"),
    (lambda r: "SCORE: 14", "error: score 14 is outside 0..10; on_error zero"),
    (lambda r: 500, "error: HTTP 500 from "),
])
def test_a_judge_that_fails_follows_on_error_zero_with_the_reason(tmp_path, server, rule, why):
    server.rule = rule
    verdicts = ModelJudge(_cfg(tmp_path, server, timeout_s=0.3), tmp_path).score(PAIRS[:2])
    assert all(v.value == 0.0 and v.status.startswith(why) for v in verdicts), verdicts
    server.rule = lambda r: "SCORE: 3"  # failures are not cached: a judge that recovers is asked again
    assert [v.status for v in ModelJudge(_cfg(tmp_path, server), tmp_path).score(PAIRS[:2])] == ["ok", "ok"]


def test_on_error_fail_stops_with_one_line_naming_the_trajectory(tmp_path, server):
    server.rule = lambda r: "no idea"
    with pytest.raises(TrainError) as err:
        ModelJudge(_cfg(tmp_path, server, on_error="fail"), tmp_path).score(PAIRS[:1], labels=["t-7 (group 0, sample 0)"])
    assert str(err.value) == ("reward.model_judge: trajectory t-7 (group 0, sample 0): error: no score in the reply "
                              "'no idea' (on_error: fail); fix the judge, or set on_error: zero or skip_group")


def test_bad_judge_settings_are_one_line_errors(tmp_path, server):
    with pytest.raises(ConfigError, match="reward.model_judge.rubric: cannot read"):
        ModelJudge(_cfg(tmp_path, server) | {"rubric": str(tmp_path / "missing.md")}, tmp_path)
    (tmp_path / "blind.md").write_text("Score {prompt}")
    with pytest.raises(ConfigError, match=r"has no \{response\} placeholder"):
        ModelJudge(_cfg(tmp_path, server) | {"rubric": str(tmp_path / "blind.md")}, tmp_path)
    cfg = _cfg(tmp_path, server)
    del cfg["endpoint"]
    with pytest.raises(ConfigError, match="reward.model_judge.endpoint: missing"):
        ModelJudge(cfg, tmp_path)
    assert parse_score("Because... SCORE: 2\nwait, SCORE: 7", 10) == 0.7 and parse_score(" 4 ", 8) == 0.5


def test_a_local_hugging_face_judge_scores_in_batches(tmp_path, tiny_model_dir):
    cfg = {"rubric": str(tmp_path / "r.md"), "backend": "hf", "model": str(tiny_model_dir), "batch_size": 2,
           "timeout_s": 10, "max_tokens": 3, "max_score": 10, "on_error": "zero"}
    (tmp_path / "r.md").write_text("{prompt}{response}")
    judge = ModelJudge(cfg, tmp_path)
    verdicts = judge.score(PAIRS)
    # A random-weight judge answers noise: each answer is a score in range or a recorded failure, never a crash.
    assert all((v.status == "ok" and 0 <= v.value <= 1) or (v.failed and v.value == 0.0) for v in verdicts)
    assert judge.counts["calls"] == 3 and (tmp_path / "judge_cache.sqlite").exists()


def test_training_stores_the_judge_component_and_skips_groups_it_could_not_judge(tmp_path, server):
    from evo.harness.backtest import backtest

    server.rule = lambda r: "hmm" if "1" in r else f"SCORE: {len(r.strip()) % 11}"
    cfg = _cfg(tmp_path, server, on_error="skip_group")
    terms = [{"name": "correctness"}, {"name": "partial_credit", "weight": 0.5}, {"name": "model_judge", "weight": 0.1}]
    recipe = small_recipe(**{"seed": 0, "grpo.steps": 1, "reward.model_judge": cfg, "reward.terms": terms})
    out = tmp_path / "run"
    summary = train_recipe(recipe, out, progress=False).summary
    rows = pq.read_table(out / "rollouts.parquet").to_pylist()
    assert len(rows) == 16
    for r in rows:
        failed = "1" in r["completion"]
        assert r["judge_status"] == ("error: no score in the reply 'hmm'; on_error skip_group" if failed else "ok")
        assert r["reward/model_judge"] == (0.0 if failed else pytest.approx(len(r["completion"].strip()) % 11 / 10))
        assert r["reward"] == pytest.approx(r["reward/correctness"] + 0.5 * r["reward/partial_credit"]
                                            + 0.1 * r["reward/model_judge"])
    groups = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(r)
    skipped = [g for g, rs in groups.items() if any("1" in r["completion"] for r in rs)]
    assert skipped, "the planted failure must hit at least one group"
    for g in skipped:
        assert all(not r["kept"] and r["filter_reason"] == "model_judge: no score in the reply 'hmm' (on_error skip_group)"
                   for r in groups[g])
    distinct = {(r["prompt"], r["completion"]) for r in rows}
    assert summary["model_judge"]["calls"] == len(distinct) == len(server.calls)
    assert summary["model_judge"]["errors"] == sum(1 for r in rows if "1" in r["completion"])

    # A backtest re-weights the stored judge scores without asking the judge again.
    calls = len(server.calls)
    change = {"reward": {"terms": [{"name": "correctness"}, {"name": "partial_credit", "weight": 0.5},
                                   {"name": "model_judge", "weight": 0.5}]}}
    result = backtest(out, change, recipe)
    assert len(server.calls) == calls
    judge = np.array([r["reward/model_judge"] for r in rows])
    base = np.array([r["reward/correctness"] + 0.5 * r["reward/partial_credit"] for r in rows])
    assert result["after"]["reward_mean"] == pytest.approx(float((base + 0.5 * judge).mean()))


def test_a_model_judge_term_without_a_judge_is_a_one_line_error(tmp_path):
    recipe = small_recipe(**{"reward.terms": [{"name": "correctness"}, {"name": "model_judge", "weight": 0.1}]})
    with pytest.raises(ConfigError, match=r"reward.terms\[1\].name: 'model_judge' is scored by a judge model; set reward.model_judge"):
        train_recipe(recipe, tmp_path / "run", progress=False)
    assert not (tmp_path / "run" / "checkpoint").exists()
