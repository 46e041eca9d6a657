"""The pretraining corpus of `builtin:tiny-char-mix`: demonstrations on the embedded domains' train splits.

Each example is a list of (text, trained) segments: the prompt and the
environment's observations are context (no loss), the policy's actions are
trained on. Multi-turn demonstrations are played through the real environment,
so every observation is exactly what a rollout would show.

The demonstrators are deliberately imperfect, the way an SFT model's data is:
the base policy should imitate a mixture of good and bad habits that RL can
sort out, not an expert it only has to copy.

- arithmetic: the answer and its newline (noise comes from label smoothing).
- calc: with the tool on, a demonstration calls the calculator with
  probability `CALC_TOOL_RATE` and otherwise answers in its head (the right
  answer, which a model this size cannot compute for the hard stratum); with
  the tool off (`CALC_TOOL_OFF_SHARE` of calc examples) it always answers.
  After a call it copies the result. Copying a five-digit number is what this
  model learns slowest: with the tool called in 3 of 10 demonstrations and 64
  calc examples a step, a 1,500-step build wrote the right call but copied
  0 of 34 hard results (it answered from its head instead), so the tool could
  not pay and RL trained it away. Half of the demonstrations call the tool
  and calc has 128 examples a step (they are a few tokens each): about three
  times the copying practice.
- patch: a noisy expert (read, edit each typo's line, test, submit) that at
  every decision slips with probability `PATCH_SLIP` to an action drawn
  uniformly from read / test / submit / an edit of a random line with a word
  from the issue, then carries on from wherever that left it: repeated reads,
  premature submissions and wrong-line edits all occur.

These numbers were set before any RL run, to give a weak start (the calc
ones once more, after the build above could not copy); they are not tuned to
make any intervention look good.
"""

from __future__ import annotations

import random

from evo.domains.calc import CalcEnv
from evo.domains.patch import PatchEnv

CALC_TOOL_RATE = 0.5
CALC_TOOL_OFF_SHARE = 0.25
PATCH_SLIP = 0.3

Segments = list[tuple[str, bool]]


def arithmetic_example(task, rng: random.Random) -> Segments:
    return [(task.prompt, False), (f"{task.answer}\n", True)]


def _play(env, task, choose) -> Segments:
    """Run `choose(episode, history)` -> action text through a real episode; the segments it produced."""
    episode = env.reset(task)
    segments: Segments = [(env.render_prompt(task), False)]
    history: list[str] = []
    for _ in range(env.max_turns):
        action = choose(episode, history)
        history.append(action)
        segments.append((action, True))
        result = episode.step(action)
        if result.done or result.observation is None:
            break
        segments.append((result.observation, False))
    episode.close()
    return segments


def calc_example(envs: dict[bool, CalcEnv], task, rng: random.Random) -> Segments:
    env = envs[rng.random() >= CALC_TOOL_OFF_SHARE]
    use_tool = env.tool and rng.random() < CALC_TOOL_RATE

    def choose(episode, history):
        if use_tool and not history:
            return f"calc {task.prompt}\n"
        return f"answer {task.answer}\n"

    return _play(env, task, choose)


def _patch_expert(episode, history: list[str]) -> str:
    """What a careful agent does next, knowing the file from its read (the task holds the truth)."""
    fixed, lines = episode.task.answer, episode.lines
    if "read\n" not in history:
        return "read\n"
    wrong = [k for k, (a, b) in enumerate(zip(lines, fixed)) if a != b]
    if wrong:
        k = wrong[0]
        return f"edit {k + 1} {fixed[k]}\n"
    if not history[-1].startswith("test"):
        return "test\n"
    return "submit\n"


def patch_example(env: PatchEnv, task, rng: random.Random) -> Segments:
    words = [pair.split("->")[1] for pair in task.prompt.split()]

    def choose(episode, history):
        if rng.random() < PATCH_SLIP:
            kind = rng.choice(("read", "test", "submit", "edit"))
            if kind != "edit":
                return f"{kind}\n"
            return f"edit {rng.randrange(1, len(episode.lines) + 1)} {rng.choice(words)}\n"
        return _patch_expert(episode, history)

    return _play(env, task, choose)


class Corpus:
    """Examples from the three train splits; each step draws `BATCH` examples of each domain.

    Per domain, not per step share: the arithmetic and calc examples are a few
    tokens long and cost little, the patch episodes are long and cost most.
    """

    BATCH = {"arithmetic": 128, "calc": 128, "patch": 32}
    ARITHMETIC_STRATUM_WEIGHTS = {"easy": 0.3, "medium": 0.4, "hard": 0.3}  # easy has only a few hundred problems

    def __init__(self):
        from evo.domains.arithmetic import ArithmeticEnv

        self.calc_envs = {True: CalcEnv(tool=True), False: CalcEnv(tool=False)}
        self.patch_env = PatchEnv()
        self.tasks = {
            "arithmetic": ArithmeticEnv().tasks("train"),
            "calc": self.calc_envs[True].tasks("train"),
            "patch": self.patch_env.tasks("train"),
        }
        self.arithmetic: dict[str, list] = {}
        for task in self.tasks["arithmetic"]:
            self.arithmetic.setdefault(task.stratum, []).append(task)

    def sizes(self) -> dict[str, int]:
        return {name: len(tasks) for name, tasks in self.tasks.items()}

    def draw(self, domain: str, rng: random.Random) -> Segments:
        if domain == "arithmetic":
            strata = sorted(self.arithmetic)
            stratum = rng.choices(strata, [self.ARITHMETIC_STRATUM_WEIGHTS.get(s, 1.0) for s in strata])[0]
            return arithmetic_example(rng.choice(self.arithmetic[stratum]), rng)
        task = rng.choice(self.tasks[domain])
        if domain == "calc":
            return calc_example(self.calc_envs, task, rng)
        return patch_example(self.patch_env, task, rng)
