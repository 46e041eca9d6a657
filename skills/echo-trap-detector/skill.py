"""The Echo Trap: long, repetitive trajectories that still score (installed by echo-trap-detector).

RAGEN named it; the EvoTrainer SWE-4B trace shows it: the headline score rises
while turn counts double and trajectories loop. A trajectory counts when it is
long (>= the 90th percentile of tokens, or of turns when episodes are
multi-turn), repetitive (>= 30% of its token 4-grams repeat an earlier one) and
competitive (reward >= the median). Prefers the rollouts (training behavior);
falls back to the evaluation records.
"""

import numpy as np

LAYER = "behavior"
THRESHOLD = 0.05  # share of echo-trapped trajectories that makes a finding
NGRAM = 4
MIN_REPEAT_RATIO = 0.30


def _repeat_ratio(tokens):
    grams = [tuple(tokens[i:i + NGRAM]) for i in range(len(tokens) - NGRAM + 1)]
    if len(grams) < 2:
        return 0.0
    return 1.0 - len(set(grams)) / len(grams)


def _table(ctx):
    for name, score in (("rollouts", "reward"), ("eval", "score")):
        table = getattr(ctx, name, None)
        if table is not None and table.num_rows and {"num_tokens", score} <= set(table.column_names):
            return name, score, table
    return None, None, None


def analyze(ctx):
    source, score_col, table = _table(ctx)
    if table is None:
        return {"metrics": {}, "findings": []}
    n = table.num_rows
    num_tokens = np.asarray(table.column("num_tokens").to_pylist(), dtype=float)  # (N,)
    reward = np.asarray(table.column(score_col).to_pylist(), dtype=float)  # (N,)
    long = num_tokens >= np.percentile(num_tokens, 90)
    if "turns" in table.column_names:
        turns = np.asarray(table.column("turns").to_pylist(), dtype=float)
        if turns.max() > 1:
            long |= turns >= np.percentile(turns, 90)
    long &= num_tokens >= 2 * NGRAM  # too short to repeat a 4-gram twice
    candidates = np.flatnonzero(long)
    tokens_col = table.column("completion_tokens") if "completion_tokens" in table.column_names else None
    text_col = table.column("completion") if "completion" in table.column_names else None
    repetitive = np.zeros(n, dtype=bool)
    for i in candidates:  # only the long tenth is scanned
        seq = tokens_col[int(i)].as_py() if tokens_col is not None else list(text_col[int(i)].as_py() or "")
        repetitive[i] = _repeat_ratio(seq or []) >= MIN_REPEAT_RATIO
    competitive = reward >= np.median(reward)
    trapped = long & repetitive & competitive
    frac = float(trapped.mean())
    metrics = {"behavior/echo_trap_frac": frac, "behavior/long_repetitive_frac": float((long & repetitive).mean())}
    findings = []
    if frac > THRESHOLD:
        ids = table.column("traj_id").to_pylist() if "traj_id" in table.column_names else [str(i) for i in range(n)]
        rows = [ids[i] for i in np.flatnonzero(trapped)[:5]]
        findings.append({
            "id": "behavior.echo_trap",
            "layer": LAYER,
            "severity": "critical" if frac > 0.25 else "warning",
            "message": (f"{frac:.0%} of {source} trajectories are long, repetitive and score at or above the median "
                        f"(Echo Trap); mean length {num_tokens[trapped].mean():.0f} vs {num_tokens.mean():.0f} tokens"),
            "evidence": {"rows": rows, "values": {"echo_trap_frac": frac, "threshold": THRESHOLD}},
        })
    return {"metrics": metrics, "findings": findings}
