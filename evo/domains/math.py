"""Math with verified final answers, optionally with a Python code interpreter.

Tasks are JSONL rows ``{"problem", "answer", "subset"?, "id"?}`` (``subset`` is
the stratum, e.g. aime24 / aime25 / cnmo24 for a stratified bootstrap). The
prompt asks for the final answer in ``\\boxed{}``.

Reward components (see `score_response`):

- ``correctness`` 1 iff the extracted answer verifies against the reference
  (`evo.domains.answers`: math-verify, sympy fallback);
- ``partial_credit`` 1 when correct, else the share of matching tuple elements,
  or for numbers 1 - |p - r| / max(|r|, 1) floored at 0 (0 for no answer);
- ``format`` the gate: 1 iff an answer was extracted under the ``extract`` mode
  and nothing is left open (``<think>``, ``\\boxed{``, a code fence);
- ``length`` 1 up to half the ``length_budget`` (characters of policy text),
  falling linearly to 0 at the budget;
- ``judge_if`` a deterministic instruction-following judge: the mean of four
  checks (a boxed answer as asked, one distinct boxed answer, reasoning
  closed, little text after the answer).

With ``code_interpreter: true`` the episode is multi-turn: an action holding a
```` ```python ```` block (or ``<tool>python ...</tool>``) and no boxed answer
runs the code in the sandbox and returns its output as the observation
(```` ```output ... ``` ````); an action with a boxed answer ends the episode.
Each run is reported as ``info["tool"] = "python"`` (the driver collects it into
the trajectory's ``tools``), so the harness can log the tool-use rate. The last allowed turn never runs code: it is scored as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from evo.domains.answers import (
    all_boxed,
    answers_match,
    extract_answer,
    extract_boxed,
    has_unclosed_box,
    open_think,
    partial_credit,
)
from evo.domains.base import StepResult, Task, check_positive_ints
from evo.domains.codeblocks import fenced_blocks, last_python_block, tool_call
from evo.domains.sandbox import Sandbox, SandboxLimits
from evo.domains.taskfiles import TaskFiles
from evo.errors import ConfigError

TOOL_TURNS = 4  # the turn limit with the interpreter when the recipe names none
COMPONENTS = ("correctness", "partial_credit", "format", "length", "judge_if")
DEFAULT_TEMPLATE = "{problem}\n\nPlease reason step by step, and put your final answer within \\boxed{{}}."
TOOL_HINT = ("\n\nYou may run Python: write a ```python code block and stop; its printed output comes "
             "back in an ```output block. Give the final answer in \\boxed{{}}.")
_EXTRACT_MODES = ("auto", "boxed", "last_number")
_VERIFIERS = ("auto", "math_verify", "sympy")


def score_response(text: str, reference: str, *, extract: str = "auto", verifier: str = "auto",
                   length_budget: int = 4000, policy_chars: int | None = None) -> tuple[dict[str, float], str]:
    """Reward components for a final response `text`, and the extracted answer."""
    answer = extract_answer(text, extract)
    correct = bool(answer) and answers_match(answer, reference, verifier)
    _, fence_open = fenced_blocks(text)
    left_open = open_think(text) or has_unclosed_box(text) or fence_open
    chars = len(text) if policy_chars is None else policy_chars
    half = length_budget / 2
    length = 1.0 if chars <= half else max(0.0, 1.0 - (chars - half) / half)
    boxed = extract_boxed(text)
    after_box = text[text.rfind("\\boxed"):] if boxed is not None else ""
    distinct = {b.replace(" ", "") for b in all_boxed(text)}
    checks = (
        boxed is not None,
        len(distinct) == 1,
        not open_think(text) and not fence_open,
        boxed is not None and len(after_box) - len(boxed) <= 200,
    )
    components = {
        "correctness": float(correct),
        "partial_credit": float(partial_credit(answer, reference, correct, verifier)),
        "format": float(bool(answer) and not left_open),
        "length": float(length),
        "judge_if": sum(checks) / len(checks),
    }
    return components, answer


def _task_fields(row: dict, where: str) -> dict:
    return {"prompt": str(row["problem"]), "answer": str(row["answer"]),
            "meta": {k: v for k, v in row.items() if k not in ("problem", "answer", "id", "subset")}}


def strip_code(text: str) -> str:
    """`text` without its ```python blocks and <tool> calls (numbers in code are not answers)."""
    text = re.sub(r"<tool>\s*python\b.*?(?:</tool>|\Z)", "", text, flags=re.S)
    return re.sub(r"(?ms)^[ \t]*```[ \t]*(?:python3?|py)[^\n]*\n.*?^[ \t]*```[ \t]*$", "", text)


@dataclass
class MathEpisode:
    task: Task
    env: "MathEnv"
    turns: int = 0
    policy_chars: int = 0
    tools: list = field(default_factory=list)
    errors: list = field(default_factory=list)

    def step(self, action: str) -> StepResult:
        env = self.env
        self.turns += 1
        self.policy_chars += len(action)
        code = self._code_to_run(action) if env.code_interpreter else None
        if code is not None and self.turns < env.max_turns:
            output = env.run_code(code, self.errors)
            opener = "\n" if action.rstrip().endswith("```output") else "\n```output\n"
            observation = f"{opener}{output}\n```\n"
            zeros = {name: 0.0 for name in COMPONENTS}
            return StepResult(observation, zeros, False,
                              {"tool": "python", "turns": self.turns, "errors": list(self.errors)})
        scored = strip_code(action) if env.code_interpreter else action  # a tool call is not an answer
        components, answer = score_response(scored, str(self.task.answer), extract=env.extract,
                                            verifier=env.verifier, length_budget=env.length_budget,
                                            policy_chars=self.policy_chars)
        info = {"answer": answer, "turns": self.turns, "errors": list(self.errors)}
        if not answer:
            info["error"] = "no_answer"
        if code is not None:  # code on the last allowed turn: the driver ends it as max_turns
            info["ended_by"] = "max_turns"
            return StepResult(None, components, False, info)
        return StepResult(None, components, True, info)

    def _code_to_run(self, action: str) -> str | None:
        if extract_boxed(action) is not None:
            return None  # an answer ends the episode even if code came first
        call = tool_call(action)
        if call is not None:
            return call
        code, _status = last_python_block(action, ("python", "py", "python3"))
        return code

    def close(self) -> None:
        pass


class MathEnv:
    """Options: `train_file`, `validation_file`, `files` ({split: path}), `extract`
    (auto | boxed | last_number), `verifier` (auto | math_verify | sympy),
    `code_interpreter`, `max_turns`, `max_tool_output_chars`, `sandbox` (limits),
    `tool_site_packages` (the tool may import installed packages such as sympy),
    `prompt_template` (with ``{problem}``), `length_budget` (characters)."""

    name = "math"
    reward_components = COMPONENTS

    @staticmethod
    def computed_defaults(options: dict) -> dict:
        """The turn limit a recipe with the interpreter and no `max_turns` runs under (`evo.domains.with_option_defaults`)."""
        return {"max_turns": TOOL_TURNS} if options.get("code_interpreter") else {}

    def __init__(self, train_file: str | None = None, validation_file: str | None = None,
                 files: dict | None = None, extract: str = "auto", verifier: str = "auto",
                 code_interpreter: bool = False, max_turns: int | None = None,
                 max_tool_output_chars: int = 1000, sandbox: dict | None = None,
                 prompt_template: str | None = None, length_budget: int = 4000,
                 tool_site_packages: bool = True):
        if extract not in _EXTRACT_MODES:
            raise ConfigError(f"recipe.yaml: domain.options.extract: {extract!r} is not one of {', '.join(_EXTRACT_MODES)}")
        if verifier not in _VERIFIERS:
            raise ConfigError(f"recipe.yaml: domain.options.verifier: {verifier!r} is not one of {', '.join(_VERIFIERS)}")
        check_positive_ints(max_turns=max_turns)
        if not isinstance(length_budget, int) or length_budget < 2:
            raise ConfigError(f"recipe.yaml: domain.options.length_budget: {length_budget!r} must be an integer >= 2")
        template = prompt_template or DEFAULT_TEMPLATE + (TOOL_HINT if code_interpreter else "")
        if "{problem}" not in template:
            raise ConfigError("recipe.yaml: domain.options.prompt_template: must contain {problem}")
        self.extract, self.verifier = extract, verifier
        self.code_interpreter = bool(code_interpreter)
        self.max_turns = max_turns or (TOOL_TURNS if self.code_interpreter else 1)
        self.stop = ("```output", "</tool>") if self.code_interpreter else ()
        self.max_tool_output_chars = int(max_tool_output_chars)
        self.length_budget = length_budget
        self.template = template
        self._files = TaskFiles("math", train_file, validation_file, files, ("problem", "answer"), _task_fields)
        self._sandbox = Sandbox(SandboxLimits.from_options({"cpu_seconds": 5.0, "wall_seconds": 10.0, **(sandbox or {})}),
                                deny_read=self._files.deny_read(),
                                site_packages=tool_site_packages) if self.code_interpreter else None

    def tasks(self, split: str) -> list[Task]:
        return self._files.tasks(split)

    def render_prompt(self, task: Task) -> str:
        return self.template.replace("{problem}", task.prompt).replace("{{}}", "{}")

    def reset(self, task: Task) -> MathEpisode:
        return MathEpisode(task, self)

    def run_code(self, code: str, errors: list) -> str:
        """Run one tool call; the output (stdout, then the error tail) capped for the context."""
        result = self._sandbox.run_script(code)
        text = result.stdout
        if result.returncode != 0 or result.errors:
            tail = result.stderr.strip().splitlines()[-1:] or result.errors
            text += ("\n" if text else "") + (tail[0] if tail else "error")
            errors.extend(e for e in result.errors if e not in errors)
        if len(text) > self.max_tool_output_chars:
            text = text[: self.max_tool_output_chars] + "\n[output truncated]"
        return text.rstrip("\n")
