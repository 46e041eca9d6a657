"""Audit: leakage — forbidden actions, or the answer arriving from a non-policy source.

Two checks over training rollouts and validation responses:

1. *Signatures*: regexes (RE2 syntax) over `tools`, `transcript` and
   `completion`. Built-in per domain (DOMAIN_SIGNATURES: swe reads of git
   history — `git log/show/diff/blame/reflog/rev-list/cat-file`, reading `.git/`), plus every
   regex in settings `audits.leakage_signatures`. Column chunks whose text
   holds none of the literals every match needs (e.g. `git`) skip the regex
   (kit.regex_mask_prefiltered): on a clean run the check costs one buffer scan.
2. *Answer from the environment*: in a correct multi-turn trajectory, the
   final answer (at least MIN_ANSWER_CHARS long) already appears in an
   observation (a non-assistant turn after the prompt) before the policy first
   states it. An observation answering the policy's own computation (a turn
   matching COMPUTE_CALLS: a ```python block run by the math code interpreter,
   in every domain; `calc EXPR` in the calc domain, whose calculator is the
   tool the task is about) is the policy's work, not the environment's, and is
   skipped.
   Transcripts are JSON, so this check parses them one by one; it looks at up
   to MAX_ANSWER_CHECKS correct trajectories per table (spread evenly) and says
   how many it checked.

Any hit (at least VETO_MIN_HITS rows) vetoes the version, citing the rows:
a leaked score is not evidence about the policy (paper D.2: a 48.80 BC% Git-leak
result was 31.04 BC% once git history was removed).
"""

import json
import re

import numpy as np

from evo.harness import kit

LAYER = "behavior"
AUDIT = True
NAME = "leakage"
DOMAIN_SIGNATURES = {
    "swe": [
        r"\bgit\s+(log|show|diff|blame|reflog|rev-list|cat-file)\b",
        r"(^|[\s/'\"=:])\.git/",
    ],
}
TEXT_COLUMNS = ("tools", "transcript", "completion")
POLICY_ROLES = ("assistant",)
# Policy-authored computations whose result the next observation carries: "*" in every domain, plus the domain's own.
COMPUTE_CALLS = {"*": r"```python\b", "calc": r"^calc "}
MIN_ANSWER_CHARS = 4
MAX_ANSWER_CHECKS = 5000
VETO_MIN_HITS = 1


def _signatures(ctx):
    patterns = list(DOMAIN_SIGNATURES.get(ctx.domain, []))
    patterns += [str(p) for p in ctx.setting("audits.leakage_signatures", []) or []]
    return patterns


def _signature_hits(table, patterns):
    """(rows,) hit mask and hits per pattern; one RE2 pass per column over all patterns at once."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for pattern in patterns:
        try:
            pc.match_substring_regex(pa.array([""]), pattern)
        except pa.ArrowInvalid as exc:
            raise ValueError(f"leakage signature {pattern!r} is not a valid RE2 regex ({str(exc).splitlines()[0]}); fix audits.leakage_signatures") from None
    combined = "|".join(f"(?:{p})" for p in patterns)
    hits = kit.regex_mask_prefiltered(table, TEXT_COLUMNS, combined)  # chunks without e.g. "git" skip the regex
    per_pattern = {}
    if hits.any():
        hit_rows = table.filter(pa.array(hits))  # attribute hits to patterns on the (few) matching rows only
        for pattern in patterns:
            count = int(kit.regex_mask(hit_rows, TEXT_COLUMNS, pattern).sum())
            if count:
                per_pattern[pattern] = count
    return hits, per_pattern


def _compute_call(domain):
    return re.compile("|".join(f"(?:{COMPUTE_CALLS[d]})" for d in ("*", domain) if d in COMPUTE_CALLS), re.MULTILINE)


def _answer_from_environment(transcript, answer, compute_call):
    try:
        turns = json.loads(transcript)
    except (json.JSONDecodeError, TypeError):
        return False
    if not isinstance(turns, list):
        return False
    computed = False  # the previous policy turn ran its own code
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict):
            continue
        content = str(turn.get("content", ""))
        if turn.get("role") in POLICY_ROLES:
            if answer in content:
                return False  # the policy said it first
            computed = bool(compute_call.search(content))
        elif i > 0 and answer in content and not computed:
            return True
    return False


def _answer_leaks(table, correct, compute_call):
    if not (kit.has(table, "transcript") and kit.has(table, "answer")):
        return np.zeros(table.num_rows, dtype=bool), 0
    import pyarrow.compute as pc

    answer_len = pc.utf8_length(pc.fill_null(table.column("answer"), "")).to_numpy(zero_copy_only=False)
    candidates = np.flatnonzero(correct & kit.nonempty(table, "transcript") & (answer_len >= MIN_ANSWER_CHARS))
    if len(candidates) > MAX_ANSWER_CHECKS:
        candidates = candidates[np.linspace(0, len(candidates) - 1, MAX_ANSWER_CHECKS).astype(np.int64)]
    leaks = np.zeros(table.num_rows, dtype=bool)
    if len(candidates) == 0:
        return leaks, 0
    transcripts = table.column("transcript").take(candidates).to_pylist()
    answers = table.column("answer").take(candidates).to_pylist()
    for row, transcript, answer in zip(candidates, transcripts, answers):  # bounded by MAX_ANSWER_CHECKS
        leaks[row] = _answer_from_environment(transcript, answer, compute_call)
    return leaks, len(candidates)


def analyze(ctx):
    patterns = _signatures(ctx)
    metrics, findings, vetoes = {}, [], []
    sources = (
        (ctx.rollouts, "behavior/", "traj_id", "training", "reward/correctness", "reward"),
        (ctx.eval, "behavior/eval_", "task_id", "validation", "score", "score"),
    )
    for table, prefix, ids_col, where, correct_col, fallback_col in sources:
        if table is None or table.num_rows == 0:
            continue
        hits, per_pattern = _signature_hits(table, patterns) if patterns else (np.zeros(table.num_rows, bool), {})
        if kit.has(table, correct_col):
            correct = kit.col(table, correct_col, np.float64) >= 1.0 - 1e-9
        else:
            correct = kit.col(table, fallback_col, np.float64) > 0 if kit.has(table, fallback_col) else np.zeros(table.num_rows, bool)
        leaks, checked = _answer_leaks(table, correct, _compute_call(ctx.domain))
        metrics[f"{prefix}leak_signature_hits"] = int(hits.sum())
        metrics[f"{prefix}answer_leak_count"] = int(leaks.sum())
        bad = hits | leaks
        if int(bad.sum()) < VETO_MIN_HITS:
            continue
        ids = table.column(ids_col)
        rows = kit.rows_where(ids, bad)
        parts = []
        if hits.any():
            parts.append(f"{int(hits.sum())} match forbidden-action signatures ({', '.join(sorted(per_pattern))})")
        if leaks.any():
            parts.append(f"{int(leaks.sum())} of {checked} checked correct trajectories got the answer from the environment")
        message = f"{int(bad.sum())} {where} trajectories leak: " + "; ".join(parts)
        evidence = {"rows": rows, "signatures": per_pattern, "answer_leaks": int(leaks.sum()), "source": where}
        findings.append(kit.finding("behavior.leakage", "critical", message, rows=rows, values=evidence))
        vetoes.append({"audit": NAME, "message": message, "evidence": evidence})
    return {"metrics": metrics, "findings": findings, "vetoes": vetoes}
