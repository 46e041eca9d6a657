"""Run untrusted Python (a policy's program, a toy repository's tests) contained.

Every run gets a fresh temporary folder (removed afterwards) and a child
``python -I -S`` whose bootstrap (`sandbox_child.py`) sets the limits and an
audit hook before the program starts. Layers, each used where the machine
allows it (`isolation()` says which):

- kernel: ``unshare`` network + PID + mount namespaces (no network device; the
  program is reaped with its namespace; /proc shows only the sandbox), or where
  those are missing and we are root, a pids cgroup (caps live processes, lists
  them for the kill); rlimits: CPU seconds, address space, file size, open
  files, processes (RLIMIT_NPROC binds non-root users only), no core dumps.
  The cgroup is not combined with the namespaces by default because creating
  namespaces from inside a v1 cgroup costs ~20 ms a run (measured), which would
  halve throughput; `Sandbox(use_cgroup=True)` asks for both;
- interpreter: the audit hook (writes outside the folder, reads of the task
  data, sockets, exec, fork budget, foreign signals, ctypes, rlimit changes);
- parent: a wall-clock deadline after which the whole process group (and
  cgroup) is SIGKILLed, stdout/stderr capped (the child is killed past the cap),
  a scrubbed environment (PATH, LANG, HOME=TMPDIR=the folder), stdin-only
  delivery of tests so no test file ever exists on disk.

This is containment for RL rollouts on a trusted machine, not a security
boundary against kernel exploits; run untrusted production code in a VM.
"""

from __future__ import annotations

import ast
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from evo.errors import ConfigError, TrainError

_CHILD_SOURCE_PATH = Path(__file__).with_name("sandbox_child.py")
_CGROUP_PIDS_ROOT = Path("/sys/fs/cgroup/pids")


@dataclass(frozen=True)
class SandboxLimits:
    """Per-run limits. `max_processes` counts every live process of the run."""

    cpu_seconds: float = 2.0
    wall_seconds: float = 5.0
    memory_mb: int = 512
    max_processes: int = 16
    max_output_bytes: int = 64 * 1024  # stdout and stderr each
    max_file_bytes: int = 4 * 1024 * 1024
    max_open_files: int = 64

    @classmethod
    def from_options(cls, options: dict | None) -> "SandboxLimits":
        """Build from a recipe mapping, naming the bad key in the error."""
        options = dict(options or {})
        known = set(cls.__dataclass_fields__)
        for key, value in options.items():
            if key not in known:
                raise ConfigError(f"recipe.yaml: domain.options.sandbox.{key}: unknown sandbox limit; "
                                  f"use one of {', '.join(sorted(known))}")
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"recipe.yaml: domain.options.sandbox.{key}: {value!r} must be a positive number")
        return cls(**options)


@dataclass
class SandboxResult:
    returncode: int | None
    stdout: str
    stderr: str
    errors: list[str] = field(default_factory=list)  # why it failed: timeout, cpu_limit, write_blocked, ...
    blocked: list[dict] = field(default_factory=list)  # audit-hook events: {"what", "detail"}
    results: list[dict] = field(default_factory=list)  # test verdicts (asserts / tests modes)
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.errors


@lru_cache(maxsize=1)
def isolation() -> dict:
    """Which kernel layers this machine grants; probed once per process."""
    unshare = shutil.which("unshare")
    prefix: list[str] = []
    if unshare:
        base = [unshare, "--net", "--pid", "--fork", "--kill-child", "--mount-proc"]
        for candidate in (base, [unshare, "--map-root-user"] + base[1:]):
            try:
                probe = subprocess.run(candidate + ["true"], capture_output=True, timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                continue
            if probe.returncode == 0:
                prefix = candidate
                break
    cgroup = os.geteuid() == 0 and _CGROUP_PIDS_ROOT.is_dir() and os.access(_CGROUP_PIDS_ROOT, os.W_OK)
    # the pids cgroup is joined by a /bin/sh wrapper before unshare, so nothing escapes it
    return {"namespaces": bool(prefix), "unshare_prefix": prefix, "pids_cgroup": cgroup,
            "rlimit_nproc": os.geteuid() != 0}


def _child_launcher() -> str:
    """The -c code: import the bootstrap from our folder (its .pyc is cached there)."""
    return (f"import sys; sys.path.append({str(_CHILD_SOURCE_PATH.parent)!r}); "
            "import sandbox_child; sandbox_child.start()")


def _user_process_count() -> int:
    uid = os.getuid()
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    count += 1
            except OSError:
                pass
    return count


def _make_cgroup(max_processes: int) -> Path | None:
    path = _CGROUP_PIDS_ROOT / f"evo-sandbox-{uuid.uuid4().hex[:12]}"
    try:
        path.mkdir()
        (path / "pids.max").write_text(str(max_processes + 1))  # +1: the namespace's init
    except OSError:
        shutil.rmtree(path, ignore_errors=True)
        return None
    return path


def _cgroup_pids(path: Path) -> list[int]:
    try:
        return [int(x) for x in (path / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def _remove_cgroup(path: Path) -> None:
    for _ in range(200):  # killed processes leave the cgroup a moment after SIGKILL
        for pid in _cgroup_pids(path):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            path.rmdir()
            return
        except OSError:
            time.sleep(0.005)


def _reap(proc, block: bool = False) -> tuple[int | None, float]:
    """(exit code or None, CPU seconds of the reaped process tree), via wait4 for its rusage."""
    if proc.returncode is not None:
        return proc.returncode, getattr(proc, "evo_cpu_s", 0.0)
    try:
        pid, status, usage = os.wait4(proc.pid, 0 if block else os.WNOHANG)
    except ChildProcessError:
        return proc.wait(), 0.0
    if pid == 0:
        return None, 0.0
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.evo_cpu_s = usage.ru_utime + usage.ru_stime
    return proc.returncode, proc.evo_cpu_s


def _session_members(sid: int) -> list[int]:
    """Live (non-zombie) processes of session `sid`."""
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != b"Z":  # fields: state, ppid, pgrp, session, ...
            members.append(int(name))
    return members


def _safe_relpath(name: str) -> str:
    rel = os.path.normpath(name)
    if os.path.isabs(rel) or rel == ".." or rel.startswith(".." + os.sep):
        raise ConfigError(f"sandbox: file name {name!r} escapes the sandbox folder; use a relative path inside it")
    return rel


class Sandbox:
    """Runs programs under `limits`; thread-safe (each run owns its folder and pipes)."""

    def __init__(self, limits: SandboxLimits | None = None, *, deny_read: tuple[str, ...] = (),
                 use_cgroup: bool | None = None, site_packages: bool = False):
        """`deny_read`: paths the program may not read (task data). `use_cgroup`:
        None = a pids cgroup only where namespaces are missing; True = always
        when available; False = never. `site_packages`: let programs import the
        installed packages (numpy, sympy) at the cost of a slower start; by
        default they get the standard library only (``python -I -S``)."""
        self.limits = limits or SandboxLimits()
        self.site_packages = bool(site_packages)
        self.deny_read = tuple(str(Path(p).resolve()) for p in deny_read)
        iso = isolation()
        self.use_cgroup = iso["pids_cgroup"] and (not iso["namespaces"] if use_cgroup is None else use_cgroup)

    # ---- convenience wrappers -------------------------------------------------
    def run_script(self, source: str, stdin: str = "") -> SandboxResult:
        """Run `source` as ``__main__`` with `stdin` as its input."""
        return self.run({"solution.py": source}, mode="script", stdin=stdin)

    def run_asserts(self, source: str, tests: list[str]) -> SandboxResult:
        """Exec `source`, then each assert snippet; `results[i]["passed"]` per snippet."""
        return self.run({"solution.py": source}, mode="asserts", payload={"tests": list(tests)})

    def run_test_files(self, files: dict[str, str], test_files: list[str]) -> SandboxResult:
        """Import each of `test_files` (paths within `files`) and call its tests."""
        return self.run(files, mode="tests", payload={"test_files": list(test_files)})

    # ---- the one real entry point --------------------------------------------
    def run(self, files: dict[str, str], *, mode: str = "script", stdin: str = "",
            payload: dict | None = None, entry: str = "solution.py") -> SandboxResult:
        """Write `files` into a fresh folder, run `entry` in `mode`, clean up, report."""
        if mode not in ("script", "asserts", "tests"):
            raise ConfigError(f"sandbox: mode {mode!r} is not one of script, asserts, tests")
        iso = isolation()
        limits = self.limits
        workdir = tempfile.mkdtemp(prefix="evo-sbx-")
        cgroup = _make_cgroup(limits.max_processes) if self.use_cgroup else None
        nonce = uuid.uuid4().hex
        started = time.monotonic()
        try:
            for name, content in files.items():
                target = Path(workdir, _safe_relpath(name))
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(content, encoding="utf-8")
            if mode == "script":
                stdin_bytes = stdin.encode()
            else:
                stdin_bytes = repr({**(payload or {}), "nonce": nonce}).encode()
            events_r, events_w = os.pipe()
            cfg = {
                "workdir": workdir, "mode": mode, "entry": entry, "events_fd": events_w,
                "cgroup": str(cgroup) if cgroup else None, "deny_read": list(self.deny_read),
                "pidns_proc": iso["namespaces"],
                "nproc": _user_process_count() + limits.max_processes if iso["rlimit_nproc"] else None,
                "limits": {"cpu_seconds": limits.cpu_seconds, "memory_mb": int(limits.memory_mb),
                           "max_processes": int(limits.max_processes),
                           "max_file_bytes": int(limits.max_file_bytes),
                           "max_open_files": int(limits.max_open_files)},
            }
            flags = ["-I"] if self.site_packages else ["-I", "-S"]
            argv = iso["unshare_prefix"] + [sys.executable, *flags, "-c", _child_launcher(), repr(cfg)]
            if cgroup:  # join before anything forks; the child only reads pids.current
                argv = ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(cgroup)] + argv
            env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir, "TMPDIR": workdir,
                   "PYTHONIOENCODING": "utf-8"}
            try:
                proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, cwd=workdir, env=env,
                                        pass_fds=(events_w,), start_new_session=True)
            except OSError as exc:
                os.close(events_r)
                raise TrainError(f"sandbox: cannot start {argv[0]} ({exc}); check that Python and unshare run here") from None
            finally:
                os.close(events_w)
            out, err, events, why = self._communicate(proc, stdin_bytes, events_r, started)
            self._kill_all(proc, cgroup)
            returncode, cpu_s = _reap(proc, block=True)
            return self._report(returncode, out, err, events, why, nonce, time.monotonic() - started, cpu_s)
        finally:
            if cgroup:
                _remove_cgroup(cgroup)
            shutil.rmtree(workdir, ignore_errors=True)

    # ---- internals ------------------------------------------------------------
    def _communicate(self, proc, stdin_bytes: bytes, events_r: int, started: float):
        """Feed stdin, drain stdout/stderr/events under caps and the wall deadline.

        Stops at EOF on every reader, at the deadline ("timeout"), past the output
        cap ("output_limit"), or once the main process has exited (children it
        left behind may hold the pipes open; they are killed next).
        """
        cap = self.limits.max_output_bytes
        deadline = started + self.limits.wall_seconds
        bufs = {"out": bytearray(), "err": bytearray(), "events": bytearray()}
        caps = {"out": cap, "err": cap, "events": 4 * 1024 * 1024}
        events_file = os.fdopen(events_r, "rb", buffering=0)
        readers = {proc.stdout: "out", proc.stderr: "err", events_file: "events"}
        for stream in (proc.stdin, *readers):
            os.set_blocking(stream.fileno(), False)
        sel = selectors.DefaultSelector()
        for stream, name in readers.items():
            sel.register(stream, selectors.EVENT_READ, name)
        pending = memoryview(stdin_bytes)
        if pending:
            sel.register(proc.stdin, selectors.EVENT_WRITE, "in")
        else:
            proc.stdin.close()
        why = None

        def read_from(stream, name) -> str:
            """Read what is there: "data", "empty" (would block) or "eof". Sets `why` past the cap."""
            nonlocal why
            try:
                chunk = stream.read(65536)
            except BlockingIOError:
                return "empty"
            if chunk is None:
                return "empty"
            if not chunk:
                return "eof"
            bufs[name] += chunk
            if len(bufs[name]) > caps[name]:
                del bufs[name][caps[name]:]
                why = why or ("output_limit" if name != "events" else "event_flood")
            return "data"

        try:
            while any(key.data != "in" for key in sel.get_map().values()) and not why:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    why = "timeout"
                    break
                for key, _ in sel.select(timeout=min(remaining, 0.05)):
                    if key.data == "in":
                        try:
                            pending = pending[os.write(key.fileobj.fileno(), pending[:65536]):]
                        except OSError:  # the program closed its stdin early; fine
                            pending = memoryview(b"")
                        if not pending:
                            sel.unregister(key.fileobj)
                            key.fileobj.close()
                    elif read_from(key.fileobj, key.data) == "eof":
                        sel.unregister(key.fileobj)
                if _reap(proc)[0] is not None:  # drain what the exited program wrote, then stop
                    for key in list(sel.get_map().values()):
                        while key.data != "in" and not why and read_from(key.fileobj, key.data) == "data":
                            pass
                    break
        finally:
            sel.close()
            events_file.close()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if not stream.closed:
                    stream.close()
        return bytes(bufs["out"]), bytes(bufs["err"]), bytes(bufs["events"]), why

    def _kill_all(self, proc, cgroup: Path | None) -> None:
        """SIGKILL the session's processes and every cgroup member, and wait until they are gone.

        A run that exits by itself needs none of this (the namespace's init
        leaves only after the kernel killed the rest). A killed run does: the
        namespace dies a moment after its init, so we wait for the session
        (started with `start_new_session`, id = the leader's pid) to empty.
        """
        exited = _reap(proc)[0] is not None
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        deadline = time.monotonic() + 2.0
        while True:
            members = _cgroup_pids(cgroup) if cgroup else []
            if not exited or members:
                members += _session_members(proc.pid)
            for pid in members:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            if not members or time.monotonic() > deadline:
                return
            time.sleep(0.005)

    def _report(self, returncode, out: bytes, err: bytes, events: bytes, why, nonce, wall_s,
                cpu_s: float) -> SandboxResult:
        result = SandboxResult(returncode=returncode, stdout=out.decode("utf-8", "replace"),
                               stderr=err.decode("utf-8", "replace"), wall_s=wall_s)
        exit_signal = -returncode if returncode is not None and returncode < 0 else None
        for line in events.splitlines():
            try:
                event = ast.literal_eval(line.decode("utf-8", "replace"))
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                continue
            if not isinstance(event, dict):
                continue
            kind = event.get("kind")
            if kind == "blocked":
                result.blocked.append({"what": event.get("what"), "detail": event.get("detail")})
            elif kind in ("result", "program_error", "collect_error") and event.get("nonce") == nonce:
                result.results.append(event)
            elif kind == "exit":
                exit_signal = event.get("signal")
        errors: list[str] = []
        if why:
            errors.append(why)
        # unshare reports a killed child as exit status 1, so the CPU time of the
        # reaped tree also tells: a program that ignored SIGXCPU met the hard limit
        if exit_signal == signal.SIGXCPU or (returncode != 0 and cpu_s >= self.limits.cpu_seconds * 0.98):
            errors.append("cpu_limit")
        elif exit_signal == signal.SIGXFSZ:
            errors.append("file_size_limit")
        elif exit_signal is not None and not why:
            errors.append(f"signal_{signal.Signals(exit_signal).name}" if exit_signal in signal.valid_signals() else "killed")
        if "MemoryError" in result.stderr[-2000:]:
            errors.append("memory_limit")
        if "File too large" in result.stderr[-2000:]:  # Python ignores SIGXFSZ, so the write fails with EFBIG
            errors.append("file_size_limit")
        for event in result.blocked:
            if event["what"] not in errors:
                errors.append(event["what"])
        if not errors and returncode not in (0, None):
            errors.append("runtime_error")
        result.errors = errors
        return result
