"""`evo step` end to end with a trainer lever: the judge model's spread inside dead groups -> model-judge bonus.

A judge server this test starts on 127.0.0.1 (the standard library's
http.server; nothing beyond loopback) grades each arithmetic response by how
many of the true answer's leading digits it gets right. v0 records that score
for every trajectory without training on it (`reward.model_judge` is set, no
term weights it). v0's recipe has already pulled the other dead-group levers
(partial credit and the rule-based judge_if are listed at weight 0, the
StdGroupFilter refills), so the evidence decides whether the one left, the
model-judge bonus, applies: on the hard stratum with groups of two, half the
groups are dead and the judge still separates the trajectories of most of them.
The heuristic must choose that skill, the loop must backtest it on v0's stored
rollouts (re-weighting the stored judge scores) and print the prediction.

The step is kept short: one calibration run, no counterfactual control
(`search.control: none`, so the verdict is confounded and says so).
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pyarrow.parquet as pq
import pytest
from loop_support import evo, evo_json, init_workspace, patch_settings

RUBRIC = "Grade the answer.\nPrompt: {prompt}\nResponse: {response}\nEND\nReply SCORE: <0-10>.\n"


def grade(content: str) -> str:
    """SCORE = 10 x the share of the true answer's leading digits the response gets right."""
    prompt = content.split("Prompt: ", 1)[1].split("\n", 1)[0]
    response = content.split("Response: ", 1)[1].split("\nEND\n", 1)[0]
    a, op, b = re.fullmatch(r"(\d+)([-+*])(\d+)=", prompt).groups()
    truth = str({"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op])
    digits = re.match(r"-?\d*", response.strip()).group(0)
    same = 0
    for x, y in zip(truth, digits):
        if x != y:
            break
        same += 1
    return f"SCORE: {10 * same / len(truth):.2f}"


@pytest.fixture
def judge_server():
    calls = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            calls.append(body["messages"][0]["content"])
            data = json.dumps({"choices": [{"message": {"content": grade(body["messages"][0]["content"])}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", calls
    httpd.shutdown()
    httpd.server_close()


def test_judge_spread_in_dead_groups_chooses_the_backtested_model_judge_bonus(tmp_path, judge_server):
    url, calls = judge_server
    rubric = tmp_path / "rubric.md"
    rubric.write_text(RUBRIC)
    recipe = f"""\
name: arithmetic-hard-judged
seed: 0
domain: {{name: arithmetic, options: {{strata: [hard]}}}}
model: {{name: builtin:tiny-char}}
rollout: {{prompts_per_step: 16, num_generations: 2, max_new_tokens: 8}}
grpo: {{steps: 3, learning_rate: 0.002}}
reward:
  terms: [{{name: correctness, weight: 1.0}}, {{name: partial_credit, weight: 0.0}}, {{name: judge_if, weight: 0.0}}]
  model_judge: {{rubric: {rubric}, endpoint: "{url}", model: grader}}
filters:
  std_group: {{enabled: true, refill: true, max_generation_batches: 2}}
  anomaly: {{enabled: true, rules: [empty]}}
eval: {{k: 4, seed: 42, max_tasks: 48}}
"""
    root = init_workspace(tmp_path / "ws", recipe)
    patch_settings(root, {"search": {"calibration_seeds": 1, "control": "none", "frontier_size": 1}})
    out = evo("step", "-C", root).stdout

    # v0 recorded the judge's score for every trajectory without training on it.
    v0 = pq.read_table(root / ".evo/artifacts/v0/rollouts.parquet").to_pylist()
    assert calls and all(r["judge_status"] in ("ok", "cached") for r in v0)
    assert all(r["reward"] == r["reward/correctness"] for r in v0)
    diagnosis = json.loads((root / ".evo/artifacts/v0/diagnosis.json").read_text())["metrics"]
    assert diagnosis["signal/dead_group_ratio"] > 0.3 and diagnosis["signal/spread_in_dead_groups/model_judge"] > 0.2

    # The lever the evidence names is chosen, and its backtest prediction is printed before training.
    assert "(skill model-judge-bonus)" in out and "model_judge(add 0.1)" in out, out
    printed = re.search(r"^backtest: (\d+)% of dead groups regain non-zero spread \((\d+) of (\d+)\)", out, re.M)
    assert printed and int(printed.group(2)) > 0, out
    shown = evo_json("show", "-C", root, "v1")
    created = next(e for e in shown["events"] if e["event"] == "created")["intervention"]
    assert created["skill"] == "model-judge-bonus" and created["factor"] == "reward.terms"
    assert created["evidence"]["metrics"]["signal/spread_in_dead_groups/model_judge"] == \
        diagnosis["signal/spread_in_dead_groups/model_judge"]
    backtested = next(e for e in shown["events"] if e["event"] == "backtested")
    assert backtested["prediction"]["prediction"]["rescued_dead_groups"] == int(printed.group(2))
    assert out.count(backtested["message"]) == 1

    # v1 trains on the judge's score at weight 0.1.
    v1 = pq.read_table(root / ".evo/artifacts/v1/rollouts.parquet").to_pylist()
    assert all(r["reward"] == pytest.approx(r["reward/correctness"] + 0.1 * r["reward/model_judge"]) for r in v1)
    assert "--- evo step summary ---" in out and "version: v1" in out
