"""The benchmarks run end to end (`make test-all`; `slow`: minutes each, excluded from `make test`).

Each bench measures against a named peer or limit and ends with one JSON line
with `met`. Speed goals are not asserted here (timings on shared machines are
noise, and `make bench` reports them); what is asserted is that each bench
runs, prints its line, and that the correctness checks some of them carry hold.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# bench script -> quick arguments (the same measurement at a smaller scale)
QUICK = {
    "lineage_scale.py": ["--versions", "100", "--repeats", "1"],
    "harness_scale.py": ["--rows", "50000"],
    "sandbox_throughput.py": ["--rounds", "1"],
    "report_scale.py": ["--versions", "100", "--repeats", "1"],
    "data_parallel.py": ["--rounds", "1", "--steps", "2"],
    "attribution.py": ["--pairs", "3", "--steps", "2"],
    "keeps_learning.py": ["--steps", "2"],
}


def _last_json(stdout: str) -> dict:
    line = next(ln for ln in reversed(stdout.strip().splitlines()) if ln.startswith("{"))
    return json.loads(line)


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(QUICK))
def test_bench_runs_and_reports(script, tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / script), *QUICK[script]], cwd=ROOT,
                          capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = _last_json(proc.stdout)
    assert isinstance(result.get("met"), bool), result
    if script == "attribution.py":
        assert result["aa_pairs"] == 3 and 0.0 <= result["aa_false_improvement_rate"] <= 1.0
        assert result["improvements"] == len(result["checks"])
    if script == "data_parallel.py":  # the two sides did the same work, and the machine's ceiling was measured
        assert result["same_rewards"] is True and result["ceiling_two_independent_runs"] > 0, result
        for run in result["seconds_per_step"].values():  # where each step's time went, summing to the step
            assert run["generate"] > 0 and run["train"] > 0, result
            assert run["generate"] + run["train"] + run["other"] == pytest.approx(run["step"], abs=1e-3), result
            assert 0 <= run["sync"] <= run["train"] and run["rank_wait"] >= 0, result  # parts of the update
        two, one = result["seconds_per_step"]["2_ranks"], result["seconds_per_step"]["1_rank"]
        assert two["sync"] > 0 and one["sync"] == one["rank_wait"] == 0, result  # only ranks reduce gradients
        assert result["seconds_per_step"]["2_ranks_balanced"]["sync"] > 0 and result["moved_groups_per_step"] >= 0


@pytest.mark.slow
def test_our_token_mean_loss_equals_trls_dapo_loss():
    """The correctness half of bench/grpo_vs_trl.py (needs its own .venv-bench with TRL; skipped without it)."""
    if not (ROOT / ".venv-bench" / "bin" / "python").exists():
        pytest.skip("bench/grpo_vs_trl.py has not created .venv-bench (TRL) here; run `make bench` once")
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "grpo_vs_trl.py"), "--steps", "1", "--warmup", "0",
                           "--no-create"], cwd=ROOT, capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = _last_json(proc.stdout)
    check = result["loss_check"]
    assert check["loss_abs_diff"] <= 1e-6, check


@pytest.mark.gpu
def test_gpu_smoke_script_passes():
    """scripts/gpu_smoke.sh on a CUDA machine: vLLM rollouts, DeepSpeed and FSDP2 steps, evo eval (no download)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here")
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_smoke.sh")], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = _last_json(proc.stdout)
    assert result["ok"], result["paths"]
