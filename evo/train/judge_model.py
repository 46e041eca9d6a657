"""The `model_judge` reward component: a judge model scores each trajectory against a rubric.

`reward.model_judge` in a recipe turns it on (schema: `evo/schemas/recipe.schema.json`):

- **rubric**: a prompt file in the workspace (so an agent can evolve it), with
  `{prompt}` and `{response}` replaced by the task prompt and the trajectory's
  response; the judge answers `SCORE: <number>` between 0 and `max_score`. The
  component is score / max_score, in [0, 1].
- **judge**: an OpenAI-compatible `chat/completions` endpoint (`backend: openai`,
  what vLLM, SGLang and most servers speak: `batch_size` requests in flight at
  once, each with `timeout_s`) or a local Hugging Face model (`backend: hf`,
  `batch_size` prompts per greedy generate call).
- **cache**: an SQLite file keyed by sha256 of (judge, rubric sha256, prompt,
  response), so a trajectory judged once is never sent again (a resumed step,
  a repeated response); only answers with a score are cached.
- **on_error** (`zero | skip_group | fail`): what a timeout, an HTTP error or an
  answer without a score in range does: score 0, drop the trajectory's group
  from training (the trainer records the reason as its filter decision), or
  stop the run with one line naming the trajectory. Every trajectory carries its
  `judge_status` (`ok`, `cached`, or `error: <why>; on_error <policy>`).

The trainer stores the component per trajectory (`reward/model_judge`) whether
or not `reward.terms` weights it, so the harness sees its spread inside dead
groups and a backtest can re-weight it without calling the judge again.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import sqlite3
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from evo.errors import ConfigError, TrainError

COMPONENT = "model_judge"
ON_ERROR = ("zero", "skip_group", "fail")
CACHE_FILE = "judge_cache.sqlite"
_SCORE = re.compile(r"score\s*[:=]\s*(-?\d+(?:\.\d+)?)", re.I)
_BARE = re.compile(r"\s*(-?\d+(?:\.\d+)?)\s*")


@dataclass
class Verdict:
    """One trajectory's judgement: the component value, and how it was reached."""

    value: float
    status: str  # "ok" | "cached" | "error: <why>; on_error <policy>"

    @property
    def failed(self) -> bool:
        return self.status.startswith("error")


class JudgeFailure(Exception):
    """A request that produced no usable score (timeout, HTTP error, garbage); the message says why."""


def parse_score(reply: str, max_score: float) -> float:
    """The score in a judge's reply (the last `SCORE: x`, or a reply that is only a number), divided by max_score."""
    found = _SCORE.findall(reply or "")
    if found:
        raw = found[-1]
    else:
        bare = _BARE.fullmatch(reply or "")
        if not bare:
            snippet = (reply or "").strip().replace("\n", " ")[:60]
            raise JudgeFailure(f"no score in the reply {snippet!r}")
        raw = bare.group(1)
    score = float(raw)
    if not (0.0 <= score <= max_score) or math.isnan(score):
        raise JudgeFailure(f"score {raw} is outside 0..{max_score:g}")
    return score / max_score


def render(rubric: str, prompt: str, response: str) -> str:
    """The judge's prompt: the rubric with {prompt} and {response} filled in (no other braces are touched)."""
    return rubric.replace("{prompt}", prompt).replace("{response}", response)


class OpenAIBackend:
    """POST {endpoint}/chat/completions, one request per trajectory, `batch_size` in flight."""

    def __init__(self, cfg: dict):
        endpoint = cfg.get("endpoint")
        if not endpoint:
            raise ConfigError("recipe.yaml: reward.model_judge.endpoint: missing; give the server's base URL "
                              "(e.g. http://127.0.0.1:8000/v1) or set backend: hf with a model")
        self.url = endpoint.rstrip("/") + "/chat/completions"
        self.model = cfg.get("model") or "default"
        self.timeout = float(cfg["timeout_s"])
        self.max_tokens = int(cfg["max_tokens"])
        self.workers = int(cfg["batch_size"])
        key_env = cfg.get("api_key_env")
        self.api_key = os.environ.get(key_env) if key_env else None
        if key_env and not self.api_key:
            raise ConfigError(f"recipe.yaml: reward.model_judge.api_key_env: {key_env!r} is not set in the "
                              "environment; export it or drop api_key_env for a server without a key")
        self.identity = f"openai {self.url} {self.model}"
        host = urllib.parse.urlsplit(self.url).hostname or ""
        # A judge on this machine is reached directly, never through an HTTP(S)_PROXY of the environment.
        handlers = [urllib.request.ProxyHandler({})] if host in ("127.0.0.1", "localhost", "::1") else []
        self.opener = urllib.request.build_opener(*handlers)

    def _one(self, text: str) -> str:
        body = json.dumps({"model": self.model, "messages": [{"role": "user", "content": text}],
                           "max_tokens": self.max_tokens, "temperature": 0}).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with self.opener.open(request, timeout=self.timeout) as reply:
                data = json.loads(reply.read().decode("utf-8"))
        except TimeoutError:
            raise JudgeFailure(f"timeout after {self.timeout:g}s") from None
        except urllib.error.HTTPError as exc:
            raise JudgeFailure(f"HTTP {exc.code} from {self.url}") from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError) or "timed out" in str(exc.reason):
                raise JudgeFailure(f"timeout after {self.timeout:g}s") from None
            raise JudgeFailure(f"cannot reach {self.url}: {exc.reason}") from None
        except (ValueError, UnicodeDecodeError):
            raise JudgeFailure("the reply is not JSON") from None
        try:
            return str(data["choices"][0]["message"]["content"])
        except (KeyError, IndexError, TypeError):
            raise JudgeFailure("the reply has no choices[0].message.content") from None

    def complete(self, texts: Sequence[str]) -> list[str | JudgeFailure]:
        def attempt(text):
            try:
                return self._one(text)
            except JudgeFailure as exc:
                return exc

        with ThreadPoolExecutor(max_workers=max(1, min(self.workers, len(texts)))) as pool:
            return list(pool.map(attempt, texts))


class HFBackend:
    """A local Hugging Face causal LM, greedy, `batch_size` prompts per generate call."""

    def __init__(self, cfg: dict):
        from evo.train.policy import load_policy

        name = cfg.get("model")
        if not name:
            raise ConfigError("recipe.yaml: reward.model_judge.model: missing; name the judge's Hugging Face "
                              "id or local folder for backend: hf")
        self.policy = load_policy(name)
        self.max_tokens = int(cfg["max_tokens"])
        self.batch = int(cfg["batch_size"])
        self.identity = f"hf {name}"

    def complete(self, texts: Sequence[str]) -> list[str | JudgeFailure]:
        out: list[str | JudgeFailure] = []
        for start in range(0, len(texts), self.batch):
            chunk = list(texts[start: start + self.batch])
            gens = self.policy.generate(chunk, max_new_tokens=self.max_tokens, temperature=0.0, seed=0)
            out += [g.text for g in gens]
        return out


BACKENDS = {"openai": OpenAIBackend, "hf": HFBackend}


class JudgeCache:
    """(judge, rubric sha256, prompt, response) -> score, in one SQLite file (safe for several ranks)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.execute("CREATE TABLE IF NOT EXISTS judged (key TEXT PRIMARY KEY, score REAL NOT NULL)")

    def _connect(self):
        return sqlite3.connect(str(self.path), timeout=60)

    @staticmethod
    def key(identity: str, rubric_sha: str, prompt: str, response: str) -> str:
        return hashlib.sha256(json.dumps([identity, rubric_sha, prompt, response]).encode()).hexdigest()

    def get_many(self, keys: Sequence[str]) -> dict[str, float]:
        found: dict[str, float] = {}
        with self._connect() as db:
            for start in range(0, len(keys), 500):
                part = list(keys[start: start + 500])
                marks = ",".join("?" * len(part))
                found.update(db.execute(f"SELECT key, score FROM judged WHERE key IN ({marks})", part).fetchall())
        return found

    def put_many(self, items: dict[str, float]) -> None:
        if items:
            with self._connect() as db:
                db.executemany("INSERT OR REPLACE INTO judged (key, score) VALUES (?, ?)", list(items.items()))


class ModelJudge:
    """Scores (prompt, response) pairs against the rubric, through the cache, under the failure policy."""

    def __init__(self, cfg: dict, run_dir: Path, *, backend=None):
        self.cfg = cfg
        self.on_error = cfg["on_error"]
        if self.on_error not in ON_ERROR:
            raise ConfigError(f"recipe.yaml: reward.model_judge.on_error: {self.on_error!r} is not one of "
                              f"{', '.join(ON_ERROR)}")
        rubric = Path(cfg["rubric"]).expanduser()
        try:
            self.rubric = rubric.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"recipe.yaml: reward.model_judge.rubric: cannot read {str(rubric)!r} "
                              f"({type(exc).__name__}); give a UTF-8 text file relative to the workspace or absolute") from None
        if "{response}" not in self.rubric:
            raise ConfigError(f"recipe.yaml: reward.model_judge.rubric: {str(rubric)!r} has no {{response}} "
                              "placeholder; the judge would never see the response")
        self.rubric_sha256 = hashlib.sha256(self.rubric.encode()).hexdigest()
        self.max_score = float(cfg["max_score"])
        self.backend = backend or BACKENDS[cfg["backend"]](cfg)
        self.cache = JudgeCache(Path(cfg.get("cache") or Path(run_dir) / CACHE_FILE))
        self.counts = {"calls": 0, "cache_hits": 0, "errors": 0}

    def score(self, pairs: Sequence[tuple[str, str]], labels: Sequence[str] | None = None) -> list[Verdict]:
        """One Verdict per (prompt, response); raises TrainError on a failure under on_error: fail.

        `labels` name the pairs in that error (e.g. trajectory ids).
        """
        keys = [JudgeCache.key(self.backend.identity, self.rubric_sha256, p, r) for p, r in pairs]
        cached = self.cache.get_many(keys)
        verdicts: list[Verdict | None] = [Verdict(cached[k], "cached") if k in cached else None for k in keys]
        todo: dict[str, int] = {}  # one request per distinct key (identical responses are judged once)
        for i, (k, v) in enumerate(zip(keys, verdicts)):
            if v is None:
                todo.setdefault(k, i)
        self.counts["cache_hits"] += len(pairs) - sum(1 for v in verdicts if v is None)
        replies = self.backend.complete([render(self.rubric, *pairs[i]) for i in todo.values()]) if todo else []
        self.counts["calls"] += len(todo)
        fresh: dict[str, float] = {}
        outcome: dict[str, Verdict] = {}
        for k, reply in zip(todo, replies):
            try:
                if isinstance(reply, JudgeFailure):
                    raise reply
                fresh[k] = parse_score(reply, self.max_score)
                outcome[k] = Verdict(fresh[k], "ok")
            except JudgeFailure as exc:
                outcome[k] = Verdict(0.0, f"error: {exc}; on_error {self.on_error}")
        self.cache.put_many(fresh)
        out = [v if v is not None else outcome[k] for k, v in zip(keys, verdicts)]
        failed = [i for i, v in enumerate(out) if v.failed]
        self.counts["errors"] += len(failed)
        if failed and self.on_error == "fail":
            i = failed[0]
            name = labels[i] if labels else f"{i} of the batch"
            raise TrainError(f"reward.model_judge: trajectory {name}: {out[i].status.split(';')[0]} "
                             "(on_error: fail); fix the judge, or set on_error: zero or skip_group")
        return out

    def summary(self) -> dict:
        return {"judge": self.backend.identity, "rubric": str(self.cfg["rubric"]),
                "rubric_sha256": self.rubric_sha256, "on_error": self.on_error, **self.counts}


def make_judge(recipe: dict, run_dir: Path) -> ModelJudge | None:
    """The recipe's judge, or None when `reward.model_judge` is not set."""
    cfg = (recipe.get("reward") or {}).get("model_judge")
    return ModelJudge(cfg, run_dir) if cfg else None
