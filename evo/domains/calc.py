"""Tool use on a CPU: integer arithmetic that a calculator solves far more reliably than the policy's head.

The embedded stand-in for the paper's Math regime (a model that gains from
computation). A prompt is the problem and the tools on offer::

    Q: 347*28
    Tools: calc

One action per turn, one line closed by the newline (the generation stop, so an
action cut off by the token limit is visibly incomplete):

- ``calc EXPR`` — the environment evaluates EXPR (integers, ``+ - *`` and
  parentheses, at most `max_expr_chars` characters; nothing is executed, a
  small parser computes it) and answers ``|= 9716``. With ``tool: false`` the
  prompt says ``Tools: none`` and a call is answered ``|calc is not available``.
- ``answer N`` — ends the episode; only an integer N counts as an answer.

Anything else is an idle turn (observation ``|? calc EXPR or answer N``).
Observations start with ``|``, the policy's own lines never do. An episode
still open after `max_turns` turns is left to the driver (finish reason
``max_turns``).

Strata (fixed, seeded splits in `evo/data/domains/calc/`, written by
`write_splits`; validation expressions never occur in train):

- ``easy``:   a + b, two-digit operands
- ``medium``: a × b, a two-digit and a one-digit operand
- ``hard``:   a × b, a three-digit and a two-digit operand

Reward components (the paper's signal families), all in [0, 1]:
``correctness`` 1 iff the answer equals the reference; ``partial_credit`` the
share of the reference's digits the answer matches, left-aligned (0 without an
answer); ``format`` 1 iff the episode ended with an answer and every turn held
one well-formed action; ``tool_success`` 1 iff at least one calculator call
returned a value and none failed (a malformed expression, or a call when the
tool is off); ``efficiency`` 1 − (turns − 1) / max_turns (a behaviour term that
pays for answering at once, i.e. for *not* using the tool); ``tool_grounding``
1 iff the answer is the value the last successful calculator call returned (an
execution-aligned term: it pays for carrying the tool's result into the answer,
whether or not that result is the reference).

Info (the driver keeps the last): ``tool`` (``calc`` on every call, failed ones
included, so attempts show in the trajectory's ``tools``), ``answer``,
``ended_by`` (answer / max_turns), ``idle_turns``, ``repeats`` (actions
identical to an earlier one), ``errors`` (``tool_error``, ``tool_unavailable``),
``tool_result`` (the value the last successful call returned, once there is one:
what the harness compares the answer with).
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

COMPONENTS = ("correctness", "partial_credit", "format", "tool_success", "efficiency", "tool_grounding")
STRATA = ("easy", "medium", "hard")
TERMINATOR = "\n"
PROMPT = "Q: {expr}\nTools: {tools}\n"
IDLE_HINT = "? calc EXPR or answer N"
_ACTION = re.compile(r"(calc|answer)(?: (.*))?")
_INTEGER = re.compile(r"-?\d+")
_TOKEN = re.compile(r"\s*(\d+|[-+*()])")
MAX_OPERAND_DIGITS = 9  # the calculator refuses larger numbers: its answers stay short and cheap


class ExpressionError(ValueError):
    """The calculator could not evaluate an expression (the policy's mistake, not a crash)."""


def evaluate_expression(text: str) -> int:
    """The value of an integer expression over ``+ - *`` and parentheses (unary minus allowed)."""
    tokens, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            if text[pos:].strip() == "":
                break
            raise ExpressionError(f"unexpected {text[pos:].strip()[:1]!r}")
        tokens.append(m.group(1))
        pos = m.end()
    if not tokens:
        raise ExpressionError("empty expression")
    value, rest = _sum(tokens, 0)
    if rest != len(tokens):
        raise ExpressionError(f"unexpected {tokens[rest]!r}")
    return value


def _sum(tokens: list[str], i: int) -> tuple[int, int]:
    value, i = _product(tokens, i)
    while i < len(tokens) and tokens[i] in "+-":
        op = tokens[i]
        right, i = _product(tokens, i + 1)
        value = value + right if op == "+" else value - right
    return value, i


def _product(tokens: list[str], i: int) -> tuple[int, int]:
    value, i = _atom(tokens, i)
    while i < len(tokens) and tokens[i] == "*":
        right, i = _atom(tokens, i + 1)
        value *= right
        if abs(value) >= 10 ** (2 * MAX_OPERAND_DIGITS):
            raise ExpressionError("result too large")
    return value, i


def _atom(tokens: list[str], i: int) -> tuple[int, int]:
    if i >= len(tokens):
        raise ExpressionError("expression ends too early")
    tok = tokens[i]
    if tok == "-":
        value, i = _atom(tokens, i + 1)
        return -value, i
    if tok == "(":
        value, i = _sum(tokens, i + 1)
        if i >= len(tokens) or tokens[i] != ")":
            raise ExpressionError("unclosed parenthesis")
        return value, i + 1
    if tok.isdigit():
        if len(tok) > MAX_OPERAND_DIGITS:
            raise ExpressionError("number too large")
        return int(tok), i + 1
    raise ExpressionError(f"unexpected {tok!r}")


def digit_credit(answer: str, reference: int) -> float:
    """Share of the reference's digits matched left-aligned by `answer`'s digits (longer answers dilute it)."""
    digits = "".join(ch for ch in answer if ch.isdigit())
    ref = str(abs(reference))
    span = max(len(digits), len(ref))
    return sum(p == r for p, r in zip(digits, ref)) / span if span and digits else 0.0


# -- splits ----------------------------------------------------------------------------------

def _sample(rng: random.Random, stratum: str) -> str:
    if stratum == "easy":
        return f"{rng.randrange(10, 100)}+{rng.randrange(10, 100)}"
    if stratum == "medium":
        return f"{rng.randrange(10, 100)}*{rng.randrange(2, 10)}"
    return f"{rng.randrange(100, 1000)}*{rng.randrange(10, 100)}"


def make_splits(seed: int = 0, n_train: int = 3000, n_validation: int = 90) -> dict[str, list[dict]]:
    """Task rows per split, balanced across strata; validation expressions are unique and never in train."""
    rng = random.Random(f"calc-{seed}")
    held_out: set[str] = set()
    out: dict[str, list[dict]] = {}
    for split, count in (("validation", n_validation), ("train", n_train)):
        rows = []
        for i in range(count):
            stratum = STRATA[i % len(STRATA)]
            expr = _sample(rng, stratum)
            while expr in held_out:
                expr = _sample(rng, stratum)
            if split == "validation":
                held_out.add(expr)
            rows.append({"id": f"{split[:3]}-{stratum}-{i // len(STRATA):04d}", "expr": expr,
                         "answer": evaluate_expression(expr), "subset": stratum})
        out[split] = rows
    return out


def write_splits(folder: Path | None = None, seed: int = 0) -> dict[str, Path]:
    """Write the shipped train / validation JSONL files (what `evo/data/domains/calc/` holds)."""
    return taskfiles.write_splits("calc", make_splits(seed), folder)


def _task_fields(row: dict, where: str) -> dict:
    expr = row["expr"]
    if not isinstance(expr, str) or not expr:
        raise ConfigError(f"{where}: 'expr' must be a non-empty expression string")
    try:
        answer = evaluate_expression(expr)
    except ExpressionError as exc:
        raise ConfigError(f"{where}: 'expr' {expr!r} is not an integer expression ({exc})") from None
    if not isinstance(row["answer"], int) or isinstance(row["answer"], bool) or row["answer"] != answer:
        raise ConfigError(f"{where}: 'answer' {row['answer']!r} is not the value of {expr!r} ({answer})")
    return {"prompt": expr, "answer": answer, "meta": {}}


# -- episodes --------------------------------------------------------------------------------

@dataclass
class CalcEpisode:
    task: Task
    env: "CalcEnv"
    turns: int = 0
    idle_turns: int = 0
    calls: int = 0
    failed_calls: int = 0
    tool_result: str | None = None  # the value the last successful calculator call returned
    answer: str | None = None  # the text after `answer`, once given
    actions: list = field(default_factory=list)
    repeats: int = 0
    errors: list = field(default_factory=list)

    def step(self, action: str) -> StepResult:
        self.turns += 1
        verb, arg = self._parse(action)
        info: dict = {}
        if verb is None:
            self.idle_turns += 1
            observation = IDLE_HINT
        else:
            line = f"{verb} {arg}"
            self.repeats += line in self.actions
            self.actions.append(line)
            if verb == "answer":
                self.answer = arg
            else:
                info["tool"] = "calc"
                observation = self._calc(arg)
        info.update(self._info())
        done = self.answer is not None
        if done:
            info["ended_by"] = "answer"
        elif self.turns >= self.env.max_turns:
            info["ended_by"] = "max_turns"  # left open: the driver records finish reason max_turns
        return StepResult(None if done else f"|{observation}{TERMINATOR}", self._components(), done, info)

    def close(self) -> None:
        pass

    def _parse(self, action: str) -> tuple[str | None, str]:
        """(verb, argument) of a well-formed action: exactly one line closed by the newline."""
        if not action.endswith(TERMINATOR) or action.count(TERMINATOR) != 1:
            return None, ""
        m = _ACTION.fullmatch(action[:-1].strip())
        if not m:
            return None, ""
        return m.group(1), (m.group(2) or "").strip()

    def _calc(self, expr: str) -> str:
        self.calls += 1
        if not self.env.tool:
            self._fail("tool_unavailable")
            return "calc is not available"
        if len(expr) > self.env.max_expr_chars:
            self._fail("tool_error")
            return f"error: longer than {self.env.max_expr_chars} characters"
        try:
            self.tool_result = str(evaluate_expression(expr))
        except ExpressionError as exc:
            self._fail("tool_error")
            return f"error: {exc}"
        return f"= {self.tool_result}"

    def _fail(self, kind: str) -> None:
        self.failed_calls += 1
        if kind not in self.errors:
            self.errors.append(kind)

    def _answered_integer(self) -> bool:
        return self.answer is not None and _INTEGER.fullmatch(self.answer) is not None

    def _components(self) -> dict[str, float]:
        reference = int(self.task.answer)
        correct = self._answered_integer() and int(self.answer) == reference
        return {
            "correctness": float(correct),
            "partial_credit": digit_credit(self.answer, reference) if self._answered_integer() else 0.0,
            "format": float(self._answered_integer() and self.idle_turns == 0),
            "tool_success": float(self.calls > self.failed_calls and self.failed_calls == 0),
            "efficiency": max(0.0, 1.0 - (self.turns - 1) / self.env.max_turns),
            "tool_grounding": float(self._answered_integer() and self.tool_result is not None
                                    and int(self.answer) == int(self.tool_result)),
        }

    def _info(self) -> dict:
        info = {"idle_turns": self.idle_turns, "repeats": self.repeats, "errors": list(self.errors)}
        if self.answer is not None:
            info["answer"] = self.answer if self._answered_integer() else ""
        if self.tool_result is not None:
            info["tool_result"] = self.tool_result
        return info


class CalcEnv:
    """Options: `train_file`, `validation_file`, `files` ({split: path}), `tool` (the calculator is
    offered), `max_turns`, `max_expr_chars`."""

    name = "calc"
    reward_components = COMPONENTS
    stop = (TERMINATOR,)

    def __init__(self, train_file: str | None = None, validation_file: str | None = None, files: dict | None = None,
                 tool: bool = True, max_turns: int = 3, max_expr_chars: int = 40):
        if not isinstance(tool, bool):
            raise ConfigError(f"recipe.yaml: domain.options.tool: {tool!r} must be true or false")
        check_positive_ints(max_turns=max_turns, max_expr_chars=max_expr_chars)
        self.tool, self.max_turns, self.max_expr_chars = tool, max_turns, max_expr_chars
        self._files = TaskFiles("calc", train_file, validation_file, files, ("expr", "answer"), _task_fields)

    def tasks(self, split: str) -> list[Task]:
        return self._files.tasks(split)

    def render_prompt(self, task: Task) -> str:
        return PROMPT.format(expr=task.prompt, tools="calc" if self.tool else "none")

    def reset(self, task: Task) -> CalcEpisode:
        return CalcEpisode(task, self)
