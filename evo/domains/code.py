"""Code generation scored by running the policy's program against tests, sandboxed.

Tasks are JSONL rows ``{"prompt", "tests", "subset"?, "id"?, "reference"?}``.
Each test is either ``{"input": str, "output": str}`` (the program reads stdin
and must print the output; the parent compares, so the program never sees an
expected output) or a string of assert statements run after the program's
definitions (``"assert add(1, 2) == 3"``). ``reference`` is an optional correct
program (kept as the task's answer, never shown).

The program is the last closed ```` ```python ```` block of the response. Every
test runs in `evo.domains.sandbox` (a bubblewrap jail: no host files, the task
files nowhere in sight, no network, limits). Stdin tests are compared here;
assert tests are judged in a second jailed process that sees the program only
through proxies and reports verdicts on a pipe the program does not hold.

Reward components:

- ``correctness`` 1 iff every test passes (binary all-pass);
- ``tests_passed_frac`` the fraction of tests passed; ``partial_credit`` is the
  same number under the name shared across domains (continuous credit);
- ``format`` the gate: 1 iff a closed Python block was found and no fence is
  left open (a response cut off mid-program scores 0 everywhere and is not run).

``info["errors"]`` says why tests failed (``wrong_answer``, ``assert_failed``,
``runtime_error``, ``timeout``, ``cpu_limit``, ``memory_limit``, ``output_limit``,
``write_blocked``, ``read_blocked``, ``network_blocked``, ``process_limit``,
``exec_blocked``, ``no_code_block``, ``unclosed_code_block``, ``skipped``).
With ``stop_on_timeout`` (default) the tests after the first one that runs out
of time are not run and count as failed (``skipped``): a looping program would
otherwise cost its full time limit per test.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from evo.domains.base import StepResult, Task, check_positive_ints
from evo.domains.codeblocks import fenced_blocks, last_python_block
from evo.domains.sandbox import Sandbox, SandboxLimits, SandboxResult
from evo.domains.taskfiles import TaskFiles
from evo.errors import ConfigError

COMPONENTS = ("correctness", "partial_credit", "tests_passed_frac", "format")
STDIO_INSTRUCTIONS = ("Write a complete Python 3 program in one ```python code block. "
                      "It reads standard input and prints the answer to standard output.")
FUNCTION_INSTRUCTIONS = "Write the Python 3 code in one ```python code block."
DEFAULT_TEMPLATE = "{prompt}\n\n{instructions}"
_COMPARE = ("lines", "tokens", "exact")
_TIME_ERRORS = ("timeout", "cpu_limit")


def outputs_match(got: str, expected: str, mode: str = "lines") -> bool:
    """``lines``: equal after trimming trailing spaces per line and trailing blank lines."""
    if mode == "exact":
        return got == expected
    if mode == "tokens":
        return got.split() == expected.split()
    def norm(s: str) -> list[str]:
        lines = [ln.rstrip() for ln in s.replace("\r\n", "\n").split("\n")]
        while lines and not lines[-1]:
            lines.pop()
        return lines
    return norm(got) == norm(expected)


def _task_fields(row: dict, where: str) -> dict:
    return {"prompt": str(row["prompt"]), "answer": row.get("reference"),
            "meta": {"tests": _validate_tests(row["tests"], where)}}


def _validate_tests(tests, where: str) -> list:
    if not isinstance(tests, list) or not tests:
        raise ConfigError(f"{where}: 'tests' must be a non-empty list of {{input, output}} objects or assert strings")
    for t in tests:
        ok = isinstance(t, str) or (isinstance(t, dict) and isinstance(t.get("input", ""), str)
                                    and isinstance(t.get("output"), str))
        if not ok:
            raise ConfigError(f"{where}: test {t!r} must be {{\"input\": str, \"output\": str}} or an assert string")
    return tests


@dataclass
class CodeEpisode:
    task: Task
    env: "CodeEnv"

    def step(self, action: str) -> StepResult:
        components, info = self.env.score(action, self.task.meta["tests"])
        return StepResult(None, components, True, info)

    def close(self) -> None:
        pass


class CodeEnv:
    """Options: `train_file`, `validation_file`, `files`, `sandbox` (limits),
    `compare` (lines | tokens | exact), `stop_on_timeout`, `workers` (tests run
    in parallel), `prompt_template` (``{prompt}``, ``{instructions}``)."""

    name = "code"
    reward_components = COMPONENTS
    max_turns = 1
    stop = ()

    def __init__(self, train_file: str | None = None, validation_file: str | None = None,
                 files: dict | None = None, sandbox: dict | None = None, compare: str = "lines",
                 stop_on_timeout: bool = True, workers: int = 2, prompt_template: str | None = None):
        if compare not in _COMPARE:
            raise ConfigError(f"recipe.yaml: domain.options.compare: {compare!r} is not one of {', '.join(_COMPARE)}")
        check_positive_ints(workers=workers)
        self.template = prompt_template or DEFAULT_TEMPLATE
        if "{prompt}" not in self.template:
            raise ConfigError("recipe.yaml: domain.options.prompt_template: must contain {prompt}")
        self.compare, self.stop_on_timeout, self.workers = compare, bool(stop_on_timeout), workers
        limits = {"cpu_seconds": 2.0, "wall_seconds": 4.0, **(sandbox or {})}
        self._files = TaskFiles("code", train_file, validation_file, files, ("prompt", "tests"), _task_fields)
        self.sandbox = Sandbox(SandboxLimits.from_options(limits), deny_read=self._files.deny_read())

    def tasks(self, split: str) -> list[Task]:
        return self._files.tasks(split)

    def render_prompt(self, task: Task) -> str:
        stdio = all(isinstance(t, dict) for t in task.meta["tests"])
        return self.template.replace("{prompt}", task.prompt).replace(
            "{instructions}", STDIO_INSTRUCTIONS if stdio else FUNCTION_INSTRUCTIONS)

    def reset(self, task: Task) -> CodeEpisode:
        return CodeEpisode(task, self)

    # -- scoring -------------------------------------------------------------------------
    def score(self, response: str, tests: list) -> tuple[dict[str, float], dict]:
        """Components and info for one response against `tests`."""
        code, status = last_python_block(response)
        if code is None:
            reason = "unclosed_code_block" if status == "unclosed" else "no_code_block"
            zeros = {name: 0.0 for name in COMPONENTS}
            return zeros, {"answer": "", "error": reason, "errors": [reason], "test_results": []}
        passed, errors = self._run_tests(code, tests)
        frac = sum(passed) / len(tests)
        components = {
            "correctness": float(all(passed)),
            "partial_credit": frac,
            "tests_passed_frac": frac,
            "format": 0.0 if fenced_blocks(response)[1] else 1.0,  # a later fence left open: cut off
        }
        info = {"answer": code.strip()[:2000], "errors": errors, "test_results": passed}
        if errors:
            info["error"] = errors[0]
        return components, info

    def _run_tests(self, code: str, tests: list) -> tuple[list[bool], list[str]]:
        stdio = [(i, t) for i, t in enumerate(tests) if isinstance(t, dict)]
        asserts = [(i, t) for i, t in enumerate(tests) if isinstance(t, str)]
        passed = [False] * len(tests)
        errors: list[str] = []

        def note(reasons):
            errors.extend(r for r in reasons if r not in errors)

        if asserts:
            result = self.sandbox.run_asserts(code, [t for _, t in asserts])
            verdicts = {r["test"]: r for r in result.results if r.get("kind") == "result"}
            for k, (i, _t) in enumerate(asserts):
                passed[i] = bool(verdicts.get(k, {}).get("passed"))
            if not all(passed[i] for i, _ in asserts):
                note(result.errors or (["assert_failed"] if verdicts else ["runtime_error"]))
        if stdio:
            note(self._run_stdio(code, stdio, passed))
        return passed, errors

    def _run_stdio(self, code: str, stdio: list, passed: list[bool]) -> list[str]:
        reasons: list[str] = []
        out_of_time = threading.Event()  # set by the worker that sees it, so queued tests skip at once

        def run_one(item) -> tuple[int, SandboxResult | None]:
            i, test = item
            if out_of_time.is_set() and self.stop_on_timeout:
                return i, None
            result = self.sandbox.run_script(code, stdin=test.get("input", ""))
            if any(e in _TIME_ERRORS for e in result.errors):
                out_of_time.set()
            return i, result

        expected = {i: t["output"] for i, t in stdio}
        with ThreadPoolExecutor(max_workers=min(self.workers, len(stdio))) as pool:
            for i, result in pool.map(run_one, stdio):
                if result is None:
                    reasons.append("skipped")
                    continue
                passed[i] = result.ok and outputs_match(result.stdout, expected[i], self.compare)
                if not passed[i]:
                    reasons.extend(result.errors or ["wrong_answer"])
        return list(dict.fromkeys(reasons))
