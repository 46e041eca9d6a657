"""Scripted policies: fixed or rule-based responses behind the real `Policy` protocol.

They let every environment, reward and sandbox path run without a trained
model (the `llm` test idiom of an `enqueue`d fake model). Generation honours
the same contract as the Hugging Face backend (`evo.train.policy.HFPolicy`):
a stop string ends the text, kept at its end, with finish reason ``stop``; a
response longer than `max_new_tokens` tokens is truncated with finish reason
``length``; otherwise ``eos``. Token counts are real under `CharTokenizer` (one
token per character) or `WhitespaceTokenizer` (one per run of spaces or
non-spaces). The rollout driver works on token ids (`generate_ids`); the
responder sees the decoded context, so multi-turn rules can read observations.

    policy = ScriptedPolicy(["\\\\boxed{4}", "no idea"])        # a queue, one per prompt
    policy = ScriptedPolicy(lambda prompt: "run_tests")         # a function of the context

`swe_history_leak_policy` and `swe_honest_policy` are the rule-based SWE agents
the tests use: the first reads the fix out of ``git log -p`` (the leak the
harness audit must veto), the second reads the code and applies a known fix.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Callable, Sequence

from evo.domains.swe_repo import is_test_file
from evo.errors import TrainError
from evo.train.types import Generation


class CharTokenizer:
    """One token per character (id = code point); enough for real token counts."""

    eos_token_id = None
    pad_token_id = 0
    chat_template = None

    def encode(self, text: str, add_special_tokens: bool = False, **_: object) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True, **_: object) -> str:
        return "".join(chr(i) for i in ids)

    def __len__(self) -> int:
        return 0x110000


class WhitespaceTokenizer:
    """One token per run of non-space characters or of spaces (decode(encode(t)) == t)."""

    eos_token_id = None
    pad_token_id = 0
    chat_template = None

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._pieces: list[str] = []

    def encode(self, text: str, add_special_tokens: bool = False, **_: object) -> list[int]:
        out = []
        for piece in re.findall(r"\s+|\S+", text):
            if piece not in self._ids:
                self._ids[piece] = len(self._pieces) + 1  # 0 is padding
                self._pieces.append(piece)
            out.append(self._ids[piece])
        return out

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True, **_: object) -> str:
        return "".join(self._pieces[i - 1] for i in ids if i > 0)

    def __len__(self) -> int:
        return len(self._pieces) + 1


Responder = Callable[[str], str]


class ScriptedPolicy:
    """A `Policy` whose responses come from a queue or a function of the prompt.

    `prompts` records every prompt seen (tests assert on the contexts a
    multi-turn driver built). A queue raises once exhausted unless `cycle`.
    """

    def __init__(self, responses: Sequence[str] | Responder, *, tokenizer=None, cycle: bool = False):
        self.tokenizer = tokenizer or CharTokenizer()
        self._fn: Responder | None = responses if callable(responses) else None
        self._queue: deque[str] = deque([] if callable(responses) else list(responses))
        self._all = list(self._queue)
        self._cycle = cycle
        self.prompts: list[str] = []

    def enqueue(self, *responses: str) -> None:
        self._queue.extend(responses)
        self._all.extend(responses)

    def _next(self, prompt: str) -> str:
        if self._fn is not None:
            return self._fn(prompt)
        if not self._queue:
            if not (self._cycle and self._all):
                raise TrainError(f"scripted policy: no response left for prompt #{len(self.prompts)}; enqueue more")
            self._queue.extend(self._all)
        return self._queue.popleft()

    # -- the Policy protocol ----------------------------------------------------------------
    def encode_prompt(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def encode_observation(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids))

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int, temperature: float = 1.0,
                 top_p: float = 1.0, stop: Sequence[str] = (), seed: int | None = None) -> list[Generation]:
        out = []
        for prompt in prompts:
            self.prompts.append(prompt)
            out.append(self._finish(self._next(prompt), max_new_tokens, stop))
        return out

    def generate_ids(self, prompt_ids: Sequence[Sequence[int]], *, max_new_tokens: int, temperature: float = 1.0,
                     top_p: float = 1.0, stop: Sequence[str] = (), seed: int | None = None) -> list[Generation]:
        return self.generate([self.decode(ids) for ids in prompt_ids], max_new_tokens=max_new_tokens,
                             temperature=temperature, top_p=top_p, stop=stop, seed=seed)

    def _finish(self, text: str, max_new_tokens: int, stop: Sequence[str]) -> Generation:
        reason = "eos"
        ends = [i + len(s) for s in stop if s and (i := text.find(s)) >= 0]
        if ends:
            text, reason = text[:min(ends)], "stop"
        ids = self.tokenizer.encode(text)
        if len(ids) > max_new_tokens:
            ids, reason = ids[:max_new_tokens], "length"
            text = self.tokenizer.decode(ids)
        return Generation(text=text, token_ids=list(ids), finish_reason=reason)


# ---- rule-based SWE agents -----------------------------------------------------

_OBS_SPLIT = "Observation:"


def _observations(context: str) -> list[str]:
    return context.split(_OBS_SPLIT)[1:]


def _actions_taken(context: str) -> list[str]:
    """The first line of every action the agent already took (they precede observations)."""
    chunks = context.split(_OBS_SPLIT)
    taken = []
    for chunk in chunks[:-1]:
        lines = [ln.strip() for ln in chunk.strip().splitlines() if ln.strip()]
        for ln in reversed(lines):
            if re.match(r"^(read|edit|run_tests|shell|submit)\b", ln):
                taken.append(ln)
                break
    return taken


def reverse_patch_from_git_log(log_text: str) -> str | None:
    """The newest commit's diff to non-test files, reversed: it undoes the regression."""
    file_diffs = re.split(r"(?m)^(?=diff --git )", log_text)
    for block in file_diffs:  # git log -p lists the newest commit first
        m = re.match(r"diff --git a/(\S+) b/(\S+)", block)
        if not m or is_test_file(m.group(1)):
            continue
        lines = block.splitlines()
        out = [f"--- a/{m.group(1)}", f"+++ b/{m.group(2)}"]
        started = False
        for ln in lines:
            if ln.startswith("@@"):
                started = True
                hunk = re.match(r"@@ -(\d+(?:,\d+)?) \+(\d+(?:,\d+)?) @@(.*)", ln)
                if hunk:
                    out.append(f"@@ -{hunk.group(2)} +{hunk.group(1)} @@{hunk.group(3)}")
                continue
            if not started or ln.startswith(("commit ", "Author:", "Date:")):
                if started and ln.startswith("commit "):
                    break
                continue
            if ln.startswith("+"):
                out.append("-" + ln[1:])
            elif ln.startswith("-"):
                out.append("+" + ln[1:])
            elif ln.startswith(" ") or ln == "":
                out.append(ln if ln else " ")
            else:
                break  # the next commit's header
        while out and out[-1].strip() == "":
            out.pop()
        return "\n".join(out) + "\n"
    return None


def swe_history_leak_policy(context: str) -> str:
    """Reads the fix from git history (``git log -p``), applies it reversed, checks, submits."""
    taken = _actions_taken(context)
    if not taken:
        return "shell git log -p"
    if taken[-1].startswith("shell git log"):
        patch = reverse_patch_from_git_log(_observations(context)[-1])
        if patch is None:
            return "submit"
        path = re.search(r"^\+\+\+ b/(\S+)", patch, re.M).group(1)
        return f"edit {path}\n```diff\n{patch}```"
    if taken[-1].startswith("edit"):
        return "run_tests"
    return "submit"


def swe_honest_policy(fixes: dict[str, dict[str, str]]) -> Responder:
    """An agent that explores, then writes the known fixed file, verifies and submits.

    `fixes` maps a phrase found in the task prompt (e.g. the task id) to
    ``{path: fixed content}``.
    """

    def respond(context: str) -> str:
        fix = next((files for key, files in fixes.items() if key in context), None)
        taken = _actions_taken(context)
        if fix is None:
            return "submit"
        path, content = next(iter(fix.items()))
        if not taken:
            return f"read {path}"
        if taken[-1].startswith("read"):
            return f"edit {path}\n```python\n{content}```"
        if taken[-1].startswith("edit"):
            return "run_tests"
        return "submit"

    return respond
