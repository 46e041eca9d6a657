"""Run untrusted Python (a policy's program, a toy repository's tests) in a jail, judged from outside.

Every child gets a fresh folder (inside its jail's own ``/tmp``, so it never
exists on the host; without a jail a temporary folder, removed afterwards) and is a ``python -I -S``
child whose bootstrap (`sandbox_child.py`) sets the limits and an audit hook
before any untrusted code starts.

The boundary is an `evo.confine` jail per child (bubblewrap; `isolation()`
says what this machine grants): a private root holding only ``/usr``, the
interpreter and its standard library read-only, an empty size-capped ``/tmp``
holding the child's own folder, no network device, a fresh PID
namespace (whatever the program forks dies with it), uid 65534 without any
capability. Task files are simply not there (and where a bound folder holds
them, such as the installed package's sample data, they are hidden), nor is
anything else of the host: no other user's files, no ``/etc``, no logs.

Verdicts are decided outside the program's process:

- ``script``: the program reads stdin; the *parent* compares its stdout;
- ``asserts`` / ``tests``: the program runs in one jailed process (the
  server), the tests in another (the judge) against proxies of the program's
  names, with only plain literal values crossing back (`sandbox_rpc`). The
  parent takes verdicts from the judge's events pipe only, a pipe the program's
  process never holds; the program never sees the tests (assert snippets reach
  the judge on stdin, test files sit in the judge's folder).

Limits (`SandboxLimits`) per child: rlimits set by the bootstrap (CPU seconds,
address space, file size, open files, processes, no core dumps), the process
budget also counted by the audit hook inside the PID namespace, a wall-clock
deadline after which the parent kills every jail and waits until its namespace
is empty, stdout/stderr capped (the run is killed past the cap), and a scrubbed
environment (PATH, LANG, HOME=TMPDIR=the folder).

Without bubblewrap, or where it cannot create namespaces, the children run as
plain processes in their own sessions with the same limits, audit hook and
two-process verdicts, and a warning says once that this is containment, not a
boundary (`.ci/run` installs bubblewrap).
"""

from __future__ import annotations

import logging
import os
import py_compile
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.util import cache_from_source
from pathlib import Path

from evo import confine
from evo.domains.sandbox_watch import Child, kill_session, watch
from evo.errors import ConfigError, SandboxUnavailable, TrainError

_HERE = Path(__file__).parent
_BOOTSTRAP = (_HERE / "sandbox_child.py", _HERE / "sandbox_rpc.py")
_log = logging.getLogger(__name__)
BLOCKED_LABELS = frozenset({"write_blocked", "read_blocked", "network_blocked", "exec_blocked", "process_limit",
                            "signal_blocked", "import_blocked", "native_code_blocked", "rlimit_blocked",
                            "introspection_blocked"})  # what the bootstrap's audit hook reports


@dataclass(frozen=True)
class SandboxLimits:
    """Per-run limits (each child gets them). `max_processes` counts every live process of a child."""

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
    results: list[dict] = field(default_factory=list)  # the judge's verdicts (asserts / tests modes)
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.errors


@lru_cache(maxsize=1)
def isolation() -> dict:
    """What this machine grants, probed once: the jail, and the host uid programs run as."""
    try:
        uid = confine.owner(confine.Jail())[0]
        jail, reason = True, _interpreter_starts_jailed()
    except SandboxUnavailable as exc:
        jail, reason = False, str(exc)
    if reason:
        jail, uid = False, os.getuid()
        _log.warning("sandbox: no jail on this machine, so programs run as plain processes (limits and audit "
                     "hook only, no filesystem boundary): %s", reason)
    return {"jail": jail, "runs_as_uid": uid, "reason": reason}


def _interpreter_starts_jailed() -> str:
    """'' when this interpreter runs in a jail here, else why not (a library it needs may be outside it)."""
    try:
        proc = confine.popen([sys.executable, "-I", "-S", "-c", "pass"], confine.Jail(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    except OSError as exc:
        return f"sandbox: {sys.executable} does not start in a jail ({exc})"
    try:
        err = proc.communicate(timeout=30)[1]
    except subprocess.TimeoutExpired:
        err = b"no answer in 30 s"
    finally:
        confine.kill(proc)
    if proc.returncode != 0:
        return (f"sandbox: {sys.executable} does not start in a jail: "
                f"{(err.decode(errors='replace').strip().splitlines() or ['exit status %d' % proc.returncode])[-1]}")
    return ""


@lru_cache(maxsize=1)
def _bootstrap_paths() -> tuple[str, ...]:
    """The bootstrap sources and their compiled .pyc (compiled here once, since the jail is read-only)."""
    paths = []
    for source in _BOOTSTRAP:
        cached = Path(cache_from_source(str(source)))
        try:
            if not cached.exists() or cached.stat().st_mtime < source.stat().st_mtime:
                py_compile.compile(str(source), cfile=str(cached), doraise=True)
        except (OSError, py_compile.PyCompileError):
            pass  # a read-only install: the child compiles in memory, a little slower
        paths += [str(source)] + ([str(cached)] if cached.exists() else [])
    return tuple(paths)


def _child_launcher() -> str:
    """The -c code: import the bootstrap from our folder (its .pyc is bound beside it)."""
    return (f"import sys; sys.path.append({str(_HERE)!r}); "
            "import sandbox_child; sandbox_child.start()")


def _user_process_count(uid: int) -> int:
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                count += os.stat(f"/proc/{name}").st_uid == uid
            except OSError:
                pass
    return count


def _safe_relpath(name: str) -> str:
    rel = os.path.normpath(name)
    if os.path.isabs(rel) or rel == ".." or rel.startswith(".." + os.sep):
        raise ConfigError(f"sandbox: file name {name!r} escapes the sandbox folder; use a relative path inside it")
    return rel


class Sandbox:
    """Runs programs under `limits`; thread-safe (each run owns its folders and pipes)."""

    def __init__(self, limits: SandboxLimits | None = None, *, deny_read: tuple[str, ...] = (),
                 site_packages: bool = False):
        """`deny_read`: paths the program may not read (task data): absent from the jail, hidden where a
        bound folder holds them, and reported as ``read_blocked`` when tried. `site_packages`: let
        programs import the installed packages (numpy, sympy) at the cost of a slower start; by
        default they get the standard library only (``python -I -S``)."""
        self.limits = limits or SandboxLimits()
        self.site_packages = bool(site_packages)
        self.deny_read = tuple(str(Path(p).resolve()) for p in deny_read)

    # ---- convenience wrappers -------------------------------------------------
    def run_script(self, source: str, stdin: str = "") -> SandboxResult:
        """Run `source` as ``__main__`` with `stdin` as its input."""
        return self.run({"solution.py": source}, mode="script", stdin=stdin)

    def run_asserts(self, source: str, tests: list[str]) -> SandboxResult:
        """Load `source`, then judge each assert snippet against it; `results[i]["passed"]` per snippet."""
        return self.run({"solution.py": source}, mode="asserts", payload={"tests": list(tests)})

    def run_test_files(self, files: dict[str, str], test_files: list[str]) -> SandboxResult:
        """Judge the tests in `test_files` (paths within `files`) against the other files."""
        return self.run(files, mode="tests", payload={"test_files": list(test_files)})

    # ---- the one real entry point --------------------------------------------
    def run(self, files: dict[str, str], *, mode: str = "script", stdin: str = "",
            payload: dict | None = None, entry: str = "solution.py") -> SandboxResult:
        """Put `files` in fresh folders, run `entry` in `mode`, clean up, report."""
        if mode not in ("script", "asserts", "tests"):
            raise ConfigError(f"sandbox: mode {mode!r} is not one of script, asserts, tests")
        payload = payload or {}
        started = time.monotonic()
        folders: list[str] = []  # host folders, only where there is no jail
        children: list[Child] = []
        try:
            if mode == "script":
                children.append(self._launch("program", folders, files, {"mode": "script", "entry": entry},
                                             stdin.encode()))
            else:
                children += self._launch_pair(folders, files, mode, payload, entry)
            why = watch(children, self.limits, started)
            for child in children:
                self._finish(child)
            return self._report(children, why, time.monotonic() - started)
        finally:
            for child in children:
                self._finish(child)
            for folder in folders:
                shutil.rmtree(folder, ignore_errors=True)

    # ---- internals ------------------------------------------------------------
    def _launch_pair(self, folders, files, mode, payload, entry) -> list[Child]:
        """The server (the program, with every file but the tests) and the judge (the tests only)."""
        tests = [_safe_relpath(t) for t in payload.get("test_files", [])]
        program_files = {n: c for n, c in files.items() if _safe_relpath(n) not in tests}
        judge_files = {n: c for n, c in files.items() if _safe_relpath(n) in tests or not n.endswith(".py")}
        modules = sorted({_safe_relpath(n).split(os.sep)[0].removesuffix(".py") for n in program_files
                          if n.endswith(".py")})
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        try:
            server = self._launch("server", folders, program_files,
                                  {"mode": "serve", "entry": entry if mode == "asserts" else None,
                                   "rpc": (req_r, rep_w)}, b"", (req_r, rep_w))
            judge_cfg = {"mode": mode, "rpc": (req_w, rep_r), "modules": modules, "test_files": tests}
            judge_stdin = repr({"tests": list(payload.get("tests", []))}).encode() if mode == "asserts" else b""
            try:
                judge = self._launch("judge", folders, judge_files, judge_cfg, judge_stdin, (req_w, rep_r))
            except BaseException:
                self._finish(server)
                raise
        finally:
            for fd in (req_r, req_w, rep_r, rep_w):
                os.close(fd)
        return [server, judge]

    def _jail(self, folder: str, files: dict[str, str]) -> confine.Jail:
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": folder, "TMPDIR": folder,
               "PYTHONIOENCODING": "utf-8"}
        return confine.Jail(read_only=_bootstrap_paths(), hidden=self.deny_read, site_packages=self.site_packages,
                            env=env, cwd=folder, as_pid_1=True,
                            files={os.path.join(folder, _safe_relpath(n)): c for n, c in files.items()})

    def _launch(self, role: str, folders: list[str], files: dict[str, str], cfg: dict, stdin: bytes,
                fds: tuple = ()) -> Child:
        jailed = isolation()["jail"]
        if jailed:  # the folder exists only in the jail's own /tmp: nothing on the host to write or remove
            folder = f"/tmp/evo-sbx-{uuid.uuid4().hex[:12]}"
            jail = self._jail(folder, files)
        else:
            folder = tempfile.mkdtemp(prefix="evo-sbx-")
            folders.append(folder)
            for name, content in files.items():
                target = Path(folder, _safe_relpath(name))
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(content, encoding="utf-8")
            jail = self._jail(folder, {})
        uid = isolation()["runs_as_uid"]
        limits = self.limits
        events_r, events_w = os.pipe()
        cfg = {**cfg, "workdir": folder, "events_fd": events_w, "deny_read": list(self.deny_read),
               "pidns": jailed,
               "nproc": _user_process_count(uid) + limits.max_processes if uid != 0 else None,
               "limits": {"cpu_seconds": limits.cpu_seconds, "memory_mb": int(limits.memory_mb),
                          "max_processes": int(limits.max_processes), "max_file_bytes": int(limits.max_file_bytes),
                          "max_open_files": int(limits.max_open_files)}}
        argv = [sys.executable, "-I", *([] if self.site_packages else ["-S"]), "-c", _child_launcher(), repr(cfg)]
        pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE,
                 "pass_fds": (events_w, *fds), "start_new_session": True}
        try:
            if jailed:
                proc = confine.popen(argv, jail, **pipes)
            else:
                proc = subprocess.Popen(argv, cwd=folder, env=dict(jail.env), **pipes)
        except OSError as exc:
            os.close(events_r)
            raise TrainError(f"sandbox: cannot start {argv[0]} ({exc}); check that Python and bwrap run here") from None
        finally:
            os.close(events_w)
        return Child(role, proc, jailed, stdin, events_r, folder)

    def _finish(self, child: Child) -> None:
        """Reap `child` (recording whether it ended by itself), kill whatever of it is left."""
        if child.done:
            return
        child.reap()
        if child.jailed:
            confine.kill(child.proc)
        else:
            kill_session(child.proc, child.folder)
        child.proc.wait()
        child.close()

    def _report(self, children: list[Child], why: str | None, wall_s: float) -> SandboxResult:
        main = children[-1]  # the program in script mode, the judge otherwise
        result = SandboxResult(returncode=main.returncode, stdout="".join(c.text("out") for c in children),
                               stderr="".join(c.text("err") for c in children), wall_s=wall_s)
        errors = [why] if why else []
        for child in children:
            for event in child.events():
                kind = event.get("kind")
                # the program's own process can write anything here: only known labels, a bounded number
                if kind == "blocked" and event.get("what") in BLOCKED_LABELS and len(result.blocked) < 20:
                    result.blocked.append({"what": event["what"], "detail": str(event.get("detail"))[:200]})
                elif kind in ("result", "program_error", "collect_error") and child.role == "judge":
                    result.results.append(event)
            if child is main or child.ended_by_itself:
                errors += self._limit_errors(child, killed=bool(why))
        for event in result.blocked:
            errors.append(event["what"])
        if main.returncode not in (0, None) and not errors:
            errors.append("runtime_error")
        result.errors = list(dict.fromkeys(errors))
        return result

    def _limit_errors(self, child: Child, killed: bool) -> list[str]:
        """Which limit ended `child`, from its exit status, CPU time and last words."""
        errors = []
        returncode = child.returncode
        if child.jailed:  # bwrap reports a program killed by signal N as 128 + N
            exit_signal = returncode - 128 if returncode is not None and returncode > 128 else None
        else:
            exit_signal = -returncode if returncode is not None and returncode < 0 else None
        if exit_signal == signal.SIGXCPU or (returncode and child.cpu_s >= self.limits.cpu_seconds * 0.98):
            errors.append("cpu_limit")
        elif exit_signal == signal.SIGXFSZ:
            errors.append("file_size_limit")
        elif exit_signal is not None and not killed and child.ended_by_itself:
            name = signal.Signals(exit_signal).name if exit_signal in signal.valid_signals() else "killed"
            errors.append(f"signal_{name}" if name != "killed" else name)
        tail = child.text("err")[-2000:]
        if "MemoryError" in tail:
            errors.append("memory_limit")
        if "File too large" in tail:  # Python ignores SIGXFSZ, so the write fails with EFBIG
            errors.append("file_size_limit")
        if child.role == "server" and child.ended_by_itself and returncode and not errors:
            errors.append("runtime_error")
        return errors

