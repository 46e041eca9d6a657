"""Start a data-parallel training run and wait for it: `run_training`, and the rank entry point.

`run_training(recipe, out, nproc=N, launcher="torchrun")` starts N ranks with
`torchrun --standalone --nproc-per-node N -m evo.train.launch SPEC` (or
`deepspeed --num_gpus N --module evo.train.launch SPEC`), blocks until they
finish, and leaves the run folder exactly as a one-process run would (rank 0
writes it; `evo.train.run.train_recipe` on every rank). With N = 1 it trains in
this process; inside an outside launcher (`WORLD_SIZE > 1` already) this
process is one rank and trains as such.

Each rank writes its stderr (and, except rank 0 with a progress bar, its
stdout) to `rank<R>.log` in a temporary folder, ending with one marker line:
`evo-rank-done`, `evo-rank-stopped: ...` or `evo-rank-error ...: <message>`.
When a rank fails, `run_training` raises `TrainError` with one line naming the
rank that failed first and its last log line (a rank that only lost its peers
in a collective is not the cause), and keeps the folder for the full logs.
A rank that dies after its `evo-rank-done` fails nothing (ranks end without
teardown, `distributed.end_rank`, but a crash on the way out stays possible):
when every rank reported done and rank 0 wrote the summary, the run is
complete whatever the launcher's exit code.

Ctrl-C asks the ranks to stop after the current step (a stop file every rank
polls, so they stop together and checkpoint); a second Ctrl-C terminates them.
The launcher runs in its own session, so the terminal's Ctrl-C reaches only
this process, and it is started with a parent-death signal, so killing this
process (`kill -9` of `evo step`) takes the ranks down with it instead of
leaving them training into the run folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from evo.errors import EvoError, TrainError
from evo.recipe_spec import RecipeSpec
from evo.train.distributed import end_rank, launched_world
from evo.train.run import STOP_FILE_ENV, TrainResult, train_recipe

LAUNCHERS = ("torchrun", "deepspeed")
DONE, STOPPED, ERROR, LOST = "evo-rank-done", "evo-rank-stopped", "evo-rank-error", "evo-rank-lost-peer"


def run_training(recipe: dict, out_dir, *, init_checkpoint=None, version: str = "", progress: bool = True,
                 nproc: int = 1, launcher: str = "torchrun", step_offset: int = 0) -> TrainResult:
    """Train `recipe` into `out_dir` on `nproc` data-parallel ranks (1: in this process); resumable like train_recipe.

    Raises TrainError naming the failing rank and its last log line when a rank dies,
    KeyboardInterrupt when Ctrl-C stopped the ranks after a step (rerun to resume).
    """
    nproc = int(nproc)
    if launcher not in LAUNCHERS:
        raise TrainError(f"run.launcher: {launcher!r} is not a launcher; use one of {', '.join(LAUNCHERS)}")
    if nproc < 1:
        raise TrainError(f"run.nproc: {nproc} is invalid; use 1 or more processes")
    prompts = RecipeSpec.of(recipe).rollout.prompts_per_step
    if nproc > prompts:  # checked here too, so nothing is launched only to fail on every rank
        raise TrainError(f"recipe.yaml: rollout.prompts_per_step: {prompts} is below the {nproc} training ranks; "
                         f"each rank samples whole groups, so set it to at least {nproc} or train with fewer processes")
    world = launched_world()
    if world > 1:  # already one rank of an outside torchrun / deepspeed
        if nproc not in (1, world):
            raise TrainError(f"--nproc {nproc}: this process is already one of {world} launched ranks; "
                             "drop --nproc when running under torchrun or deepspeed")
        # The caller ends this process with `end_rank` once it has reported (the `evo` command does).
        return train_recipe(recipe, out_dir, init_checkpoint=init_checkpoint, version=version, progress=progress,
                            step_offset=step_offset)
    if nproc == 1:
        return train_recipe(recipe, out_dir, init_checkpoint=init_checkpoint, version=version, progress=progress,
                            step_offset=step_offset)
    return _launch(recipe, Path(out_dir), init_checkpoint, version, progress, nproc, launcher, step_offset)


def _command(launcher: str, nproc: int, spec: Path) -> list[str]:
    if launcher == "deepspeed":
        import importlib.util

        if importlib.util.find_spec("deepspeed") is None:
            from evo.errors import MissingDependencyError

            raise MissingDependencyError("deepspeed", "gpu", "run.launcher: deepspeed")
        return [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", str(nproc), "--master_port",
                str(free_port()), "--no_local_rank", "--module", "evo.train.launch", str(spec)]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
            "-m", "evo.train.launch", str(spec)]


def free_port() -> int:
    """A TCP port free on this machine now (for a rendezvous)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the launcher's child: receive SIGTERM when this process dies (Linux prctl PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the ranks then outlive a killed launcher
        pass


def _launch(recipe, out: Path, init_checkpoint, version, progress, nproc, launcher, step_offset: int = 0) -> TrainResult:
    logdir = Path(tempfile.mkdtemp(prefix="evo-train-ranks-"))
    spec = logdir / "spec.json"
    spec.write_text(json.dumps({"recipe": recipe, "out_dir": str(out), "init_checkpoint": init_checkpoint,
                                "version": version, "progress": bool(progress), "logdir": str(logdir),
                                "step_offset": int(step_offset)}),
                    encoding="utf-8")
    stop = logdir / "stop"
    env = {**os.environ, STOP_FILE_ENV: str(stop)}
    with open(logdir / "launcher.log", "w", encoding="utf-8") as err:
        # Rank 0 draws its progress bar on this terminal; otherwise everything goes to the log (e.g. --json).
        proc = subprocess.Popen(_command(launcher, nproc, spec), stdout=None if progress else err, stderr=err,
                                env=env, start_new_session=True, preexec_fn=_die_with_parent)
        rc = _wait(proc, stop)
    markers = {} if rc == 0 else _markers(logdir, nproc)
    if rc == 0 or _finished(markers, nproc, out):
        shutil.rmtree(logdir, ignore_errors=True)
        from evo.train.records import read_json_if

        return TrainResult(out, out / "checkpoint", read_json_if(out / "summary.json") or {})
    if stop.exists() and markers and all(kind == STOPPED for kind, _, _ in markers.values()):
        shutil.rmtree(logdir, ignore_errors=True)
        raise KeyboardInterrupt(markers[0][2] if 0 in markers else "stopped; rerun the same command to resume")
    raise TrainError(_failure(logdir, nproc, rc, markers))


def _finished(markers: dict, nproc: int, out: Path) -> bool:
    """Every rank reported its work done and rank 0 wrote the run's summary: the run is complete even when the
    launcher exits non-zero, because a rank crashed on its way out after its last collective (seen on CPU under
    gloo before `end_rank` skipped the teardown: "terminate called without an active exception", SIGABRT)."""
    return (len(markers) == nproc and all(kind == DONE for kind, _, _ in markers.values())
            and (out / "summary.json").exists())


def _wait(proc: subprocess.Popen, stop: Path) -> int:
    """Wait for the launcher; the first Ctrl-C asks the ranks to stop after their step, a second terminates them."""
    asked = False
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            if asked:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait()
                raise KeyboardInterrupt("stopped at once; rerun the same command to resume from the last checkpoint") from None
            stop.touch()
            asked = True


_MARKER = re.compile(r"^(evo-rank-[a-z-]+)(?: t=([0-9.]+))?:? ?(.*)$")


def _markers(logdir: Path, nproc: int) -> dict[int, tuple[str, float, str]]:
    """{rank: (marker kind, time, message)} of the ranks that wrote their last marker line."""
    found = {}
    for rank in range(nproc):
        for line in reversed(_lines(logdir / f"rank{rank}.log")):
            m = _MARKER.match(line)
            if m:
                found[rank] = (m.group(1), float(m.group(2) or 0.0), m.group(3))
                break
    return found


def _lines(path: Path) -> list[str]:
    try:
        return [line.strip() for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    except OSError:
        return []


def _failure(logdir: Path, nproc: int, rc: int, markers: dict) -> str:
    """One line: the rank that failed first and its last log line."""
    errors = sorted((t, r, msg) for r, (kind, t, msg) in markers.items() if kind == ERROR)
    if errors:
        _, rank, msg = errors[0]
        return f"training rank {rank} of {nproc} failed: {msg} (rank logs: {logdir})"
    silent = [r for r in range(nproc) if r not in markers]  # died without a word: killed, out of memory, ...
    if silent:
        rank, code = _root_cause(logdir, silent)
        how = f" (killed by signal {-code})" if code is not None and code < 0 else ""
        last = next((line for line in reversed(_lines(logdir / f"rank{rank}.log")) if not _MARKER.match(line)),
                    "(its log is empty)")
        return (f"training rank {rank} of {nproc} died without reporting an error{how}; last log line: {last} "
                f"(rank logs: {logdir})")
    lost = sorted((t, r, msg) for r, (kind, t, msg) in markers.items() if kind == LOST)
    if lost:
        _, rank, msg = lost[0]
        return f"training rank {rank} of {nproc} lost its peers: {msg} (rank logs: {logdir})"
    launch = _lines(logdir / "launcher.log")
    return f"training launcher exited with code {rc}: {launch[-1] if launch else 'no output'} (logs: {logdir})"


def _root_cause(logdir: Path, candidates: list[int]) -> tuple[int, int | None]:
    """torchrun's "Root Cause (first observed failure)" rank and exit code when it names one of `candidates`."""
    text = "\n".join(_lines(logdir / "launcher.log"))
    m = re.search(r"Root Cause.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", text, flags=re.S)
    if m and int(m.group(1)) in candidates:
        return int(m.group(1)), int(m.group(2))
    return candidates[0], None


# -- the rank entry point: python -m evo.train.launch SPEC ---------------------------------------------
_PEER_GONE = re.compile(r"Connection (reset|closed) by peer|Broken pipe|remote (worker|process)", re.I)


def _lost_peer(exc: BaseException, text: str) -> bool:
    """A collective that failed because another rank went away: a symptom, not the cause."""
    import torch.distributed as dist

    kinds = tuple(k for k in (getattr(dist, "DistBackendError", None), getattr(dist, "DistNetworkError", None)) if k)
    return isinstance(exc, kinds) or bool(_PEER_GONE.search(text))

def _mark(kind: str, message: str = "") -> None:
    print(f"{kind} t={time.time():.6f}: {message}".rstrip(), file=sys.stderr, flush=True)


def _rank_main(spec_path: str) -> int:
    import traceback

    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    rank = int(os.environ.get("RANK", "0"))
    log = open(Path(spec["logdir"]) / f"rank{rank}.log", "a", encoding="utf-8", buffering=1)
    os.dup2(log.fileno(), 2)
    if rank != 0 or not spec["progress"]:
        os.dup2(log.fileno(), 1)
    code = 0
    try:
        train_recipe(spec["recipe"], spec["out_dir"], init_checkpoint=spec["init_checkpoint"],
                     version=spec["version"], progress=spec["progress"], step_offset=spec.get("step_offset", 0))
        _mark(DONE)
    except KeyboardInterrupt as exc:
        _mark(STOPPED, str(exc))
        code = 130
    except EvoError as exc:
        _mark(ERROR, str(exc))
        code = 1
    except BaseException as exc:  # noqa: BLE001 (every failure must reach the launcher as one line)
        traceback.print_exc()
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        _mark(LOST if _lost_peer(exc, text) else ERROR, f"{type(exc).__name__}: {text}")
        code = 1
    return code


if __name__ == "__main__":
    end_rank(_rank_main(sys.argv[1]))
