"""`make demo`: evo init + three evo steps on the embedded default, then the lineage
and the promoted version's Avg@8 against v0 with its paired-bootstrap interval.

Runs the real `evo` command line, exactly as a user would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

EVO = str(Path(sys.executable).with_name("evo"))


def evo(*args: str, capture: bool = False) -> str:
    print(f"\n$ evo {' '.join(args)}", flush=True)
    proc = subprocess.run([EVO, *args], text=True, capture_output=capture)
    if proc.returncode != 0:
        if capture:
            sys.stderr.write(proc.stdout + proc.stderr)
        sys.exit(f"demo failed at: evo {' '.join(args)}")
    return proc.stdout if capture else ""


def main() -> None:
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "demo-workspace").resolve()
    steps = int(os.environ.get("EVO_DEMO_STEPS", "3"))
    evo("init", str(target), "--domain", "arithmetic")
    for _ in range(steps):
        evo("step", "-C", str(target))
    evo("log", "-C", str(target))
    status = json.loads(evo("status", "-C", str(target), "--json", capture=True))
    head = status["promoted"]["name"]
    print(f"\npromoted head: {head}")
    artifacts = target / ".evo" / "artifacts"
    scores = {name: json.loads((artifacts / name / "eval.json").read_text())["avg_at_k"]
              for name in ("base", "v0", head) if (artifacts / name / "eval.json").exists()}
    line = f"base model (untrained) Avg@8 {scores.get('base', float('nan')):.3f}"
    line += f" -> v0 (baseline recipe, trained) {scores.get('v0', float('nan')):.3f}"
    if head != "v0":
        line += f" -> {head} (promoted) {scores.get(head, float('nan')):.3f}"
    print(line)
    if head != "v0":
        evo("compare", "-C", str(target), "v0", head)
    else:
        print("no version beat v0 in these steps; `evo log` above shows each outcome and interval")
    print(f"\nworkspace: {target}  (try: evo log -C {target}; evo pr -C {target} v1)")


if __name__ == "__main__":
    main()
