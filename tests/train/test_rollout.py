"""The rollout driver over single- and multi-turn environments."""

import json

from evo.domains.arithmetic import ArithmeticEnv
from evo.domains.base import StepResult, Task
from evo.train.policy import load_policy
from evo.train.rollout import RolloutLimits, rollout, transcript_json
from evo.train.types import Generation


class CharPolicy:
    """Scripted policy: each call answers every context with the next queued action."""

    def __init__(self, actions):
        self.actions = list(actions)
        self.calls = []
        self.tokenizer = None

    def encode_prompt(self, text):
        return [ord(c) for c in text]

    encode_observation = encode_prompt

    def decode(self, ids):
        return "".join(chr(i) for i in ids)

    def generate_ids(self, prompt_ids, *, max_new_tokens, temperature=1.0, top_p=1.0, stop=(), seed=None):
        self.calls.append((len(prompt_ids), max_new_tokens, seed))
        action = self.actions.pop(0)
        out = []
        for _ in prompt_ids:
            ids = [ord(c) for c in action][:max_new_tokens]
            reason = "length" if len(action) > max_new_tokens else "eos"
            out.append(Generation(self.decode(ids), ids, reason))
        return out


class ToolEnv:
    """Multi-turn: every action is a tool call answered with 'ok'; 'submit' ends the episode."""

    name = "tools"
    reward_components = ("correctness",)
    max_turns = 3
    stop = ()

    def tasks(self, split):
        return [Task("t0", "fix it:", 1), Task("t1", "and this:", 1)]

    def render_prompt(self, task):
        return task.prompt

    def reset(self, task):
        env = self

        class Ep:
            def __init__(self):
                self.task = task
                self.closed = False
                env.episodes.append(self)

            def step(self, action):
                if action == "submit":
                    return StepResult(None, {"correctness": 1.0}, True, {"answer": "42"})
                return StepResult("ok", {"correctness": 0.0}, False, {"tool": action})

            def close(self):
                self.closed = True

        return Ep()

    def __init__(self):
        self.episodes = []


def test_multi_turn_episodes_interleave_actions_and_masked_observations():
    env = ToolEnv()
    policy = CharPolicy(["run", "submit"])
    trajs = rollout(env, env.tasks("train"), policy, 2, RolloutLimits(max_new_tokens=8), seed=7)
    assert len(trajs) == 4 and [t.group for t in trajs] == [0, 0, 1, 1]
    assert [c[2] for c in policy.calls] == [7, 8]  # one batched call per turn, seeds offset per call
    assert policy.calls[0][0] == 4  # all live episodes in one generate call
    t = trajs[0]
    assert t.text == "runoksubmit"
    assert t.response_mask == [1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1]
    assert (t.turns, t.tool_calls, t.info["tools"], t.finish_reason) == (2, 1, ["run"], "eos")
    assert t.components == {"correctness": 1.0} and t.info["answer"] == "42" and not t.truncated
    assert [m["role"] for m in json.loads(transcript_json(t))] == ["user", "assistant", "user", "assistant"]
    assert all(ep.closed for ep in env.episodes)


def test_episode_limits_max_turns_and_max_total_tokens():
    env = ToolEnv()
    trajs = rollout(env, env.tasks("train")[:1], CharPolicy(["run", "run", "run"]), 2,
                    RolloutLimits(max_new_tokens=8))
    assert {t.finish_reason for t in trajs} == {"max_turns"} and trajs[0].turns == 3
    trajs = rollout(env, env.tasks("train")[:1], CharPolicy(["run", "submitting"]), 2,
                    RolloutLimits(max_new_tokens=8, max_total_tokens=7))
    t = trajs[0]
    assert t.truncated and t.finish_reason == "max_total_tokens"  # the episode's budget, not the turn's limit
    # "run" (3) + "ok" (2) leaves 2 tokens: "su" is cut, and no observation follows it.
    assert t.text == "runoksu" and t.response_mask == [1, 1, 1, 0, 0, 1, 1]
    trajs = rollout(env, env.tasks("train")[:1], CharPolicy(["run", "submitting"]), 2,
                    RolloutLimits(max_new_tokens=6, max_total_tokens=40))
    t = trajs[0]  # "submitting" cut to "submit" by the turn's own limit, which the episode had room for
    assert t.truncated and t.finish_reason == "length" and t.text == "runoksubmit" and t.turns_cut == 1
    trajs = rollout(env, env.tasks("train")[:1], CharPolicy(["running", "run", "submitting"]), 2,
                    RolloutLimits(max_new_tokens=6, max_total_tokens=14))
    t = trajs[0]  # cut by the turn's limit first, then by the episode's budget: it ends on the budget
    assert t.text == "runninokrunoks" and t.finish_reason == "max_total_tokens" and t.turns_cut == 1
    assert [t.turns_cut for t in rollout(env, env.tasks("train")[:1], CharPolicy(["run", "submit"]), 1,
                                         RolloutLimits(max_new_tokens=8))] == [0]


def test_single_turn_arithmetic_with_the_builtin_policy_is_batched_and_seeded():
    env = ArithmeticEnv(n_validation=6, n_train=6)
    policy = load_policy("builtin:tiny-char")
    from evo.recipe_spec import Rollout, section

    limits = RolloutLimits.of(section(Rollout, {"rollout": {"max_new_tokens": 4, "temperature": 1.0}}, "rollout"), env)
    assert limits.stop == ("\n",)
    tasks = env.tasks("validation")
    a = rollout(env, tasks, policy, 3, limits, seed=1)
    b = rollout(env, tasks, policy, 3, limits, seed=1)
    assert [t.response_ids for t in a] == [t.response_ids for t in b]
    for t in a:
        assert t.turns == 1 and transcript_json(t) == ""
        assert set(t.components) == set(env.reward_components)
        assert t.truncated == (t.finish_reason == "length")
    hard = [t for t in a if t.stratum == "hard"]
    # A 4-token limit cannot hold a 4+ digit answer and its newline.
    assert hard and all(t.components["correctness"] == 0.0 for t in hard)
