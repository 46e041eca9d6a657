"""A long-horizon domain on a CPU: inspect, edit, test and submit a fix to a tiny "repository".

The embedded stand-in for the paper's SWE regime: several tool actions per
episode, the test result is the reward, and premature submission, idle turns
and repetitive loops are all open to the policy. A repository is one file of
short lines (words); the issue names each typo and its correction, but not the
line it sits on::

    Issue: dgo->dog

One action per turn, one line closed by the newline (the generation stop):

- ``read`` — the file with line numbers (``|1 cat``, ``|2 dgo``, ``|3 emu``);
- ``edit N WORD`` — line N becomes WORD (``|ok``; ``|no line N`` when there is none);
- ``test`` — the tests as the file is now: one per line, each checking the
  line's expected word (``|2/3 pass``: how many, not which);
- ``submit`` — the tests run once more and the episode ends.

Anything else is an idle turn (``|? read, edit N WORD, test or submit``);
`max_idle_turns` idle turns in a row end the episode (idle failure). An
episode still open after `max_turns` turns is left to the driver (finish
reason ``max_turns``, abandonment). Observations start with ``|``.

Strata (fixed, seeded splits in `evo/data/domains/patch/`, written by
`write_splits`; validation files never occur in train): ``easy`` three lines
and one typo, ``medium`` five lines and one typo, ``hard`` five lines and two
typos (two edits).

Reward components, all in [0, 1]: ``correctness`` 1 iff submitted and every
test passes; ``partial_credit`` the share of tests passing at submit (0
without submit); ``format`` 1 iff every turn held a well-formed action;
``efficiency`` 1 − (turns − 1) / max_turns; ``edit_verify`` the share of edits
followed by a test before the next edit or submit; ``exploration`` 1 iff the
policy read the file or ran the tests before its first edit (behaviour terms,
as in the swe domain).

Info (the driver keeps the last): ``tool`` (the action's name: read, edit,
test, submit), ``answer`` (``k/n`` tests passing, after submit), ``ended_by``
(submit / idle / max_turns), ``abandoned`` (ended without submit),
``submitted``, ``premature`` (submitted before any edit), ``idle_turns``,
``repeats`` (actions identical to the one before), ``errors`` (``no_such_line``).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from evo.domains import taskfiles
from evo.domains.base import StepResult, Task, check_positive_ints
from evo.domains.taskfiles import TaskFiles
from evo.errors import ConfigError

COMPONENTS = ("correctness", "partial_credit", "format", "efficiency", "edit_verify", "exploration")
STRATA = ("easy", "medium", "hard")
TERMINATOR = "\n"
IDLE_HINT = "? read, edit N WORD, test or submit"
_ACTION = re.compile(r"read|test|submit|edit ([1-9]\d?) ([a-z]{1,12})")
# Three-to-five letter words with no doubled neighbours, so swapping two adjacent letters always makes a typo.
WORDS = ("ant", "ape", "bat", "bee", "cat", "cow", "cod", "dog", "eel", "elk", "emu", "fox", "gnu", "hen",
         "owl", "pig", "rat", "yak", "bear", "crab", "crow", "deer", "dove", "duck", "frog", "goat", "hare",
         "hawk", "lamb", "lion", "lynx", "mole", "moth", "mule", "newt", "puma", "seal", "slug", "swan",
         "toad", "wolf", "worm", "wren", "bison", "camel", "crane", "eagle", "finch", "gecko", "heron",
         "horse", "hyena", "koala", "lemur", "llama", "moose", "mouse", "otter", "panda", "quail", "raven",
         "shark", "skunk", "sloth", "snake", "squid", "stork", "tiger", "trout", "whale", "zebra")
SHAPES = {"easy": (3, 1), "medium": (5, 1), "hard": (5, 2)}  # stratum -> (lines, typos)


def _typo(rng: random.Random, word: str) -> str:
    """`word` with two adjacent letters swapped, never another word of the vocabulary."""
    while True:
        i = rng.randrange(len(word) - 1)
        typo = word[:i] + word[i + 1] + word[i] + word[i + 2:]
        if typo != word and typo not in WORDS:
            return typo


def make_splits(seed: int = 0, n_train: int = 3000, n_validation: int = 90) -> dict[str, list[dict]]:
    """Task rows per split, balanced across strata; a validation file (its lines) never occurs in train."""
    rng = random.Random(f"patch-{seed}")
    held_out: set[tuple[str, ...]] = set()
    out: dict[str, list[dict]] = {}
    for split, count in (("validation", n_validation), ("train", n_train)):
        rows = []
        for i in range(count):
            stratum = STRATA[i % len(STRATA)]
            n_lines, n_typos = SHAPES[stratum]
            while True:
                fixed = rng.sample(WORDS, n_lines)
                where = sorted(rng.sample(range(n_lines), n_typos))
                lines = list(fixed)
                for k in where:
                    lines[k] = _typo(rng, fixed[k])
                if tuple(lines) not in held_out:
                    break
            if split == "validation":
                held_out.add(tuple(lines))
            issue = " ".join(f"{lines[k]}->{fixed[k]}" for k in where)
            rows.append({"id": f"{split[:3]}-{stratum}-{i // len(STRATA):04d}", "issue": issue, "lines": lines,
                         "fixed": fixed, "subset": stratum})
        out[split] = rows
    return out


def write_splits(folder: Path | None = None, seed: int = 0) -> dict[str, Path]:
    """Write the shipped train / validation JSONL files (what `evo/data/domains/patch/` holds)."""
    return taskfiles.write_splits("patch", make_splits(seed), folder)


def _task_fields(row: dict, where: str) -> dict:
    lines, fixed = row["lines"], row["fixed"]
    for key, value in (("lines", lines), ("fixed", fixed)):
        if not isinstance(value, list) or not value or not all(isinstance(w, str) and w for w in value):
            raise ConfigError(f"{where}: {key!r} must be a non-empty list of words")
    if len(lines) != len(fixed) or len(lines) > 99:
        raise ConfigError(f"{where}: 'lines' and 'fixed' must have the same length (at most 99 lines)")
    if lines == fixed:
        raise ConfigError(f"{where}: 'lines' equals 'fixed'; a task needs at least one line to fix")
    return {"prompt": str(row["issue"]), "answer": list(fixed), "meta": {"lines": list(lines)}}


@dataclass
class PatchEpisode:
    task: Task
    env: "PatchEnv"
    lines: list = field(default_factory=list)
    turns: int = 0
    idle_turns: int = 0
    idle_streak: int = 0
    actions: list = field(default_factory=list)  # the action name per well-formed turn
    last_line: str | None = None
    repeats: int = 0
    errors: list = field(default_factory=list)
    submitted: bool = False
    premature: bool = False
    passing: int = 0  # tests passing at submit

    def __post_init__(self):
        self.lines = list(self.task.meta["lines"])

    def step(self, action: str) -> StepResult:
        self.turns += 1
        parsed = self._parse(action)
        info: dict = {}
        if parsed is None:
            self.idle_turns += 1
            self.idle_streak += 1
            observation = IDLE_HINT
        else:
            line, m = parsed
            self.idle_streak = 0
            self.repeats += line == self.last_line
            self.last_line = line
            name = line.split(" ", 1)[0]
            self.actions.append(name)
            info["tool"] = name
            observation = self._dispatch(name, m)
        ended_by = ("submit" if self.submitted else "idle" if self.idle_streak >= self.env.max_idle_turns
                    else "max_turns" if self.turns >= self.env.max_turns else "")
        info.update(self._info(ended_by))
        done = ended_by in ("submit", "idle")  # at max_turns the episode is left open for the driver
        return StepResult(None if done else f"|{observation}{TERMINATOR}", self._components(), done, info)

    def close(self) -> None:
        pass

    def _parse(self, action: str):
        """(the action line, its match) for a well-formed action: one line closed by the newline."""
        if not action.endswith(TERMINATOR) or action.count(TERMINATOR) != 1:
            return None
        line = action[:-1].strip()
        m = _ACTION.fullmatch(line)
        return (line, m) if m else None

    def _dispatch(self, name: str, m: re.Match) -> str:
        if name == "read":
            return "\n|".join(f"{i} {w}" for i, w in enumerate(self.lines, 1))
        if name == "test":
            return f"{self._passing()}/{len(self.lines)} pass"
        if name == "edit":
            k = int(m.group(1))
            if k > len(self.lines):
                if "no_such_line" not in self.errors:
                    self.errors.append("no_such_line")
                return f"no line {k}"
            self.lines[k - 1] = m.group(2)
            return "ok"
        self.submitted = True
        self.premature = "edit" not in self.actions
        self.passing = self._passing()
        return ""

    def _passing(self) -> int:
        return sum(a == b for a, b in zip(self.lines, self.task.answer))

    def _components(self) -> dict[str, float]:
        total = len(self.task.answer)
        edits = [i for i, a in enumerate(self.actions) if a == "edit"]
        verified = 0
        for j, i in enumerate(edits):
            stop = edits[j + 1] if j + 1 < len(edits) else len(self.actions)
            verified += "test" in self.actions[i + 1: stop]
        first_edit = edits[0] if edits else len(self.actions)
        return {
            "correctness": float(self.submitted and self.passing == total),
            "partial_credit": self.passing / total if self.submitted else 0.0,
            "format": float(self.idle_turns == 0),
            "efficiency": max(0.0, 1.0 - (self.turns - 1) / self.env.max_turns),
            "edit_verify": verified / len(edits) if edits else 0.0,
            "exploration": float(any(a in ("read", "test") for a in self.actions[:first_edit])),
        }

    def _info(self, ended_by: str) -> dict:
        info = {"idle_turns": self.idle_turns, "repeats": self.repeats, "errors": list(self.errors),
                "submitted": self.submitted}
        if ended_by:
            info["ended_by"] = ended_by
            info["abandoned"] = not self.submitted
        if self.submitted:
            info["answer"] = f"{self.passing}/{len(self.task.answer)}"
            info["premature"] = self.premature
        return info


class PatchEnv:
    """Options: `train_file`, `validation_file`, `files` ({split: path}), `max_turns`, `max_idle_turns`."""

    name = "patch"
    reward_components = COMPONENTS
    stop = (TERMINATOR,)

    def __init__(self, train_file: str | None = None, validation_file: str | None = None, files: dict | None = None,
                 max_turns: int = 8, max_idle_turns: int = 3):
        check_positive_ints(max_turns=max_turns, max_idle_turns=max_idle_turns)
        self.max_turns, self.max_idle_turns = max_turns, max_idle_turns
        self._files = TaskFiles("patch", train_file, validation_file, files, ("issue", "lines", "fixed"), _task_fields)

    def tasks(self, split: str) -> list[Task]:
        return self._files.tasks(split)

    def render_prompt(self, task: Task) -> str:
        return f"Issue: {task.prompt}\n"

    def reset(self, task: Task) -> PatchEpisode:
        return PatchEpisode(task, self)
