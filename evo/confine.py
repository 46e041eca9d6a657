"""Confinement for every untrusted program evo runs: one small wrapper over bubblewrap.

A `Jail` says what a program may see; `popen` starts it inside one; `kill`
ends it with every process it started. The jail is a fresh private root built
by ``bwrap`` (https://github.com/containers/bubblewrap, the tool Flatpak and
Claude Code use on Linux):

- ``/usr`` and the ``/bin``, ``/sbin``, ``/lib*`` links or folders read-only;
  of ``/etc`` only the loader's ``ld.so.cache`` (no ``/etc/shadow``, no
  ``/etc/passwd``), and the resolver and CA files when `network` is on; no ``/home``, ``/root``,
  ``/srv``, ``/var`` or ``/work`` unless a path under them is bound;
- a minimal ``/dev`` (null, zero, random, urandom, tty, pts), a private
  ``/proc`` of a fresh PID namespace (the program sees only its own
  processes), empty size-capped tmpfs ``/tmp`` and ``/dev/shm``; the root
  itself and ``/dev`` are remounted read-only so nothing else is writable;
- `files` (path under ``/tmp`` -> content) created inside the jail's own
  ``/tmp``, their folders (and `cwd`, when under ``/tmp``) writable by the
  program: a working folder that never exists on the host, so there is
  nothing to clean up and what the program writes counts against `tmp_mb`;
- the paths in `read_only` / `writable` at the same path as on the host,
  `hidden` paths under them replaced by an empty read-only folder (or a file
  that cannot be opened); with `python`, the interpreter and its standard
  library (``sys.base_prefix``, plus the venv's ``bin`` and ``pyvenv.cfg``);
  with `site_packages`, the venv's site-packages and the installed ``evo``;
- new IPC, UTS, cgroup and PID namespaces, a new network namespace with only
  a down loopback unless `network`, ``--new-session`` (no terminal to inject
  into) and ``--die-with-parent``;
- an unprivileged identity: every capability dropped and no nested user
  namespaces. With `unprivileged` the program is uid/gid 65534 ("nobody"):
  when evo runs as root that is its uid on the host too (bubblewrap builds the
  jail with root's mount rights, then ``setpriv`` drops to 65534 before the
  program starts), so the kernel's own permission checks and RLIMIT_NPROC
  treat it as nobody; otherwise it is 65534 inside a user namespace that maps
  to the caller's uid. Files it writes belong to `owner(jail)` on the host;
  a `writable` folder must be writable by that uid (``os.chown`` it).

The environment is exactly `Jail.env` (nothing is inherited). `popen` passes
the bwrap options through a pipe (``--args``), so neither the environment nor
the mounts show on the host's process list; `wrap` returns the same thing as
one command line for callers that need one (its ``--setenv`` values are then
visible to the host's ``ps``).

Resource limits stay with the caller. A Python program can set its own
rlimits before it runs untrusted code (``evo.domains.sandbox_child`` does);
anything else can be prefixed with ``prlimit``, which runs inside the jail::

    popen(["/usr/bin/prlimit", "--cpu=10", "--as=1073741824", "--nproc=64",
           "--fsize=16777216", "--", *argv], jail)

By default bwrap puts a small reaper at PID 1 of the namespace. With
`as_pid_1` the program is PID 1 itself: one fork fewer, and the caller's
``wait4`` on bwrap then reports the program's CPU time (the reaper does not
pass it on), but as PID 1 it ignores every signal it has no handler for,
SIGXCPU and SIGTERM included, and nothing reaps its orphans until it exits.

RLIMIT_NPROC counts every process of the program's host uid (65534 for
everything jailed as nobody; a host root is exempt), so inside the PID
namespace a caller that needs an exact cap counts ``/proc`` itself. The wall
clock is the caller's too: `kill(proc)` at its deadline.

When ``bwrap`` is missing or cannot create the namespaces, `popen`/`wrap`
raise `SandboxUnavailable` saying how to fix it; `available()` lets callers
decide beforehand whether to fall back to something weaker.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import site
import subprocess
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Mapping

from evo.errors import SandboxUnavailable

NOBODY = 65534
_SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_NETWORK_FILES = ("/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/ssl", "/etc/ca-certificates",
                  "/etc/pki")
_INSTALL = ("install it with `apt-get install bubblewrap` (Debian/Ubuntu) or `dnf install bubblewrap`")


@dataclass(frozen=True)
class Jail:
    """What a confined program sees. Paths are host paths, visible at the same path."""

    read_only: tuple[str | Path, ...] = ()
    writable: tuple[str | Path, ...] = ()
    hidden: tuple[str | Path, ...] = ()  # under a bound path: an empty read-only folder / an unopenable file
    python: bool = True  # the interpreter and its standard library, read-only
    site_packages: bool = False  # also the venv's site-packages and the installed evo package
    network: bool = False  # False: a fresh network namespace without any device up
    unprivileged: bool = True  # uid/gid 65534 (on the host too when we are root); never any capability
    env: Mapping[str, str] = field(default_factory=dict)  # the whole environment
    cwd: str | Path | None = None  # None: /
    tmp_mb: int = 64  # size of the private /tmp and /dev/shm (bubblewrap >= 0.8; unbounded before)
    files: Mapping[str, str | bytes] = field(default_factory=dict)  # created in the private /tmp (popen only)
    as_pid_1: bool = False  # the program itself is PID 1 (no reaper; see below)


@dataclass(frozen=True)
class _Support:
    """What the machine allows, probed once: the bwrap path, its feature level, the modes that work."""

    bwrap: str | None
    modern: bool  # --size / --perms on tmpfs and --disable-userns (bubblewrap >= 0.8)
    userns: bool  # jails inside a user namespace (any user)
    privileged: bool  # as root: namespaces without a user namespace, then setpriv to 65534
    setpriv: str | None
    why: str  # bwrap's complaint when no mode works


def available() -> bool:
    """True when bwrap is installed and can build a jail on this machine (probed once)."""
    return _support().userns or _support().privileged


def owner(jail: Jail) -> tuple[int, int]:
    """The host (uid, gid) a program in `jail` runs as, and so owns the files it writes."""
    if _mode(jail, _support()) == "privileged" and jail.unprivileged:
        return NOBODY, NOBODY
    return os.getuid(), os.getgid()


def wrap(argv: list[str], jail: Jail) -> list[str]:
    """The bwrap command line that runs `argv` in `jail` (raises `SandboxUnavailable`)."""
    if jail.files:
        raise ValueError("confine.wrap: Jail.files travel as descriptors; start the jail with confine.popen")
    support = _support()
    return [support.bwrap, *_options(jail, support), "--", *_prefix(jail, support), *argv]


def popen(argv: list[str], jail: Jail, **popen_kwargs) -> subprocess.Popen:
    """Start `argv` in `jail`; `popen_kwargs` go to `subprocess.Popen` (not `env`, `cwd`: the jail's).

    The options travel through a pipe, so the command line on the host is only
    ``bwrap --args N --info-fd M -- argv``. Pair it with `kill`.
    """
    if "env" in popen_kwargs or "cwd" in popen_kwargs:
        raise TypeError("confine.popen: set env and cwd on the Jail, not as Popen arguments")
    support = _support()
    file_fds, fds = {}, []
    try:
        for path, content in jail.files.items():  # contents go in as memfds, copied by bwrap into its tmpfs
            fd = os.memfd_create("evo-jail-file")
            file_fds[path] = fd
            fds.append(fd)
            data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
            while data:
                data = data[os.write(fd, data):]
            os.lseek(fd, 0, os.SEEK_SET)
        options = _options(jail, support, file_fds=file_fds)
        data = b"".join(os.fsencode(a) + b"\0" for a in options)
        if len(data) > 60000:  # a pipe holds 64 KiB; writing more here would block before bwrap reads
            raise SandboxUnavailable(f"confine: {len(options)} bwrap options are too many for one jail; bind fewer paths")
        args_r, args_w = os.pipe()
        fds += [args_r]
        os.write(args_w, data)
        os.close(args_w)
        info_r, info_w = os.pipe()
        fds += [info_w]
        pass_fds = tuple(popen_kwargs.pop("pass_fds", ())) + tuple(fds)
        cmd = [support.bwrap, "--args", str(args_r), "--info-fd", str(info_w), "--", *_prefix(jail, support), *argv]
        try:
            proc = subprocess.Popen(cmd, env={}, pass_fds=pass_fds, **popen_kwargs)
        except BaseException:
            os.close(info_r)
            raise
    finally:
        for fd in fds:
            os.close(fd)
    proc.evo_info_fd = info_r
    return proc


def kill(proc: subprocess.Popen) -> int:
    """SIGKILL a `popen` jail and wait until none of its processes is left; its exit status.

    The jail's first process is PID 1 of its namespace: once it is gone the
    kernel has killed and reaped everything else the program started (detached
    or not). We signal it through a pidfd verified to be bwrap's own child, so
    a recycled pid can never be hit.
    """
    info_fd = getattr(proc, "evo_info_fd", None)
    init = _jail_init(proc, info_fd) if proc.poll() is None and info_fd is not None else None
    try:
        if init is not None:
            try:
                signal.pidfd_send_signal(init, signal.SIGKILL)
            except ProcessLookupError:  # the program ended between the poll and the signal: nothing left to kill
                pass
        proc.kill()
        returncode = proc.wait()
        if init is not None:
            select.select([init], [], [], 5.0)  # readable once the namespace's init has exited
        return returncode
    finally:
        if init is not None:
            os.close(init)
        if info_fd is not None:
            os.close(info_fd)
            proc.evo_info_fd = None


def release(proc: subprocess.Popen) -> None:
    """Close what `popen` kept for `kill`, once the jail has ended by itself."""
    if getattr(proc, "evo_info_fd", None) is not None:
        os.close(proc.evo_info_fd)
        proc.evo_info_fd = None


def _jail_init(proc: subprocess.Popen, info_fd: int) -> int | None:
    """A pidfd for the jail's PID 1 (from bwrap's --info-fd), or None once it is gone."""
    data = b""
    while b"}" not in data and select.select([info_fd], [], [], 1.0)[0]:
        chunk = os.read(info_fd, 4096)
        if not chunk:
            break
        data += chunk
    try:
        pid = int(json.loads(data)["child-pid"])
        pidfd = os.pidfd_open(pid)
    except (ValueError, KeyError, OSError):
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        ppid = -1
    if ppid != proc.pid:  # not (or no longer) bwrap's child: leave it alone
        os.close(pidfd)
        return None
    return pidfd


# ---- the command line ---------------------------------------------------------------------------

def _mode(jail: Jail, support: _Support) -> str:
    root = os.geteuid() == 0
    if root and jail.unprivileged and support.privileged and support.setpriv:
        return "privileged"
    if support.userns:
        return "userns"
    if root and support.privileged and (support.setpriv or not jail.unprivileged):
        return "privileged"
    if support.bwrap is None:
        raise SandboxUnavailable(f"confine: bubblewrap (bwrap) is not installed; {_INSTALL}")
    raise SandboxUnavailable(f"confine: bwrap cannot create namespaces here ({support.why}); allow unprivileged "
                             "user namespaces (sysctl kernel.unprivileged_userns_clone=1 and user.max_user_namespaces > 0, "
                             "or a container started with --security-opt seccomp=unconfined) or run evo as root")


def _prefix(jail: Jail, support: _Support) -> list[str]:
    """What runs between bwrap and the program: setpriv, where root drops to nobody."""
    if _mode(jail, support) == "privileged" and jail.unprivileged:
        return [support.setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all",
                "--bounding-set=-all", "--no-new-privs"]
    return []


def _options(jail: Jail, support: _Support, mode: str | None = None, file_fds: dict | None = None) -> list[str]:
    mode = mode or _mode(jail, support)
    opts = ["--die-with-parent", "--new-session", "--unshare-ipc", "--unshare-pid", "--unshare-uts",
            "--unshare-cgroup-try"]
    if not jail.network:
        opts.append("--unshare-net")
    if jail.as_pid_1:
        opts.append("--as-pid-1")
    if mode == "userns":
        opts += ["--unshare-user", "--cap-drop", "ALL"] + (["--disable-userns"] if support.modern else [])
        if jail.unprivileged:
            opts += ["--uid", str(NOBODY), "--gid", str(NOBODY)]
    elif not jail.unprivileged:
        opts += ["--cap-drop", "ALL"]  # privileged mode keeping root's uid: at least no capability
    opts.append("--clearenv")
    for key, value in jail.env.items():
        opts += ["--setenv", str(key), str(value)]
    opts += ["--ro-bind", "/usr", "/usr"]
    for path in _SYSTEM_LINKS:
        if os.path.islink(path):
            opts += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            opts += ["--ro-bind", path, path]
    opts += ["--proc", "/proc", "--dev", "/dev"]
    for tmp in ("/tmp", "/dev/shm"):
        if support.modern:
            opts += ["--perms", "1777", "--size", str(int(jail.tmp_mb) * 1024 * 1024), "--tmpfs", tmp]
        else:
            opts += ["--tmpfs", tmp, "--chmod", "1777", tmp]
    opts += _file_options(jail, support, file_fds or {})
    system = ["/etc/ld.so.cache"] + (list(_NETWORK_FILES) if jail.network else [])  # the loader's library cache
    binds = [(p, "--ro-bind") for p in system if os.path.exists(p)]
    binds += [(p, "--ro-bind") for p in _python_paths(jail)] + [(p, "--ro-bind") for p in jail.read_only]
    binds += [(p, "--bind") for p in jail.writable]
    bound, made = ["/usr"], set()  # host trees in the jail (the tmpfs /tmp starts empty)
    for path, flag in sorted(((os.path.abspath(p), f) for p, f in binds), key=lambda b: b[0].count("/")):
        for parent in map(str, list(reversed(Path(path).parents))[1:]):  # bwrap would make them 0700
            if parent not in made and not _under(parent, bound):
                opts += ["--perms", "0755", "--dir", parent] if support.modern else \
                        ["--dir", parent, "--chmod", "0755", parent]
                made.add(parent)
        opts += [flag, path, path]  # shallow first, so a deeper bind (a writable folder in a read-only one) wins
        bound.append(path)
    hidden_dirs = [p for p in map(os.path.abspath, jail.hidden) if os.path.isdir(p)]
    for path in map(os.path.abspath, jail.hidden):
        if not _under(path, bound) or _under(path, [d for d in hidden_dirs if d != path]):
            continue  # not visible anyway
        if os.path.isdir(path):
            opts += ["--tmpfs", path, "--remount-ro", path]
        elif os.path.lexists(path):
            opts += ["--ro-bind", "/dev/null", path]  # a device node on a nodev mount: opening it fails
    opts += ["--remount-ro", "/dev", "--remount-ro", "/"]
    opts += ["--chdir", os.path.abspath(jail.cwd) if jail.cwd is not None else "/"]  # not the host's cwd
    return opts


def _file_options(jail: Jail, support: _Support, file_fds: dict) -> list[str]:
    """`Jail.files` (and a `cwd` under /tmp): folders writable by the program, files from their memfds."""
    def perms(mode: str, op: list[str]) -> list[str]:
        return ["--perms", mode, *op] if support.modern else [*op, "--chmod", mode, op[-1]]

    opts, made = [], {"/tmp"}
    folders = [os.path.dirname(os.path.abspath(p)) for p in file_fds]
    if jail.cwd is not None and _under(os.path.abspath(jail.cwd), ["/tmp"]):
        folders.append(os.path.abspath(jail.cwd))
    for folder in sorted(folders):
        if not _under(folder, ["/tmp"]):
            raise ValueError(f"confine: Jail.files: {folder!r} is not under /tmp; files live in the jail's own /tmp")
        for parent in map(str, [*reversed(Path(folder).parents), Path(folder)]):
            if _under(parent, ["/tmp"]) and parent not in made:
                opts += perms("0777", ["--dir", parent])
                made.add(parent)
    for path, fd in sorted(file_fds.items()):
        opts += perms("0666", ["--file", str(fd), os.path.abspath(path)])
    return opts


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def evo_package_dir() -> str:
    """The folder of the evo package this process runs (the one a `site_packages` jail binds), whichever copy."""
    import evo

    return os.path.dirname(os.path.abspath(evo.__file__))


def _python_paths(jail: Jail) -> list[str]:
    """Host paths the interpreter needs (and with `site_packages`, its installed packages)."""
    if not jail.python:
        return []
    paths = {sys.base_prefix, sys.base_exec_prefix}
    if sys.prefix != sys.base_prefix:  # a venv: its bin/python and the pyvenv.cfg that points home
        paths |= {os.path.join(sys.prefix, "bin"), os.path.join(sys.prefix, "pyvenv.cfg")}
        if jail.site_packages:
            paths.add(sys.prefix)
    if jail.site_packages:
        paths |= {p for p in site.getsitepackages() if os.path.isdir(p)}
        paths.add(evo_package_dir())
    paths = sorted(p for p in paths if os.path.exists(p))
    # keep only the outermost of nested paths (a bind of /usr would hide nothing, but saves a mount)
    return [p for p in paths if not _under(p, [q for q in paths + ["/usr"] if q != p])]


# ---- what the machine allows ---------------------------------------------------------------------

@lru_cache(maxsize=1)
def _support() -> _Support:
    bwrap = shutil.which("bwrap")
    setpriv = shutil.which("setpriv")
    if bwrap is None:
        return _Support(None, False, False, False, setpriv, "bwrap not found")
    modern = _version(bwrap) >= (0, 8)
    true = shutil.which("true") or "/bin/true"
    probe = Jail(python=False)
    works, why = {}, ""
    for mode in ("userns", "privileged") if os.geteuid() == 0 else ("userns",):
        base = _Support(bwrap, modern, mode == "userns", mode == "privileged", setpriv, "")
        cmd = [bwrap, *_options(probe, base, mode), "--", *_prefix(probe, base), true]
        try:
            result = subprocess.run(cmd, capture_output=True, timeout=20, env={})
        except (OSError, subprocess.TimeoutExpired) as exc:
            works[mode], why = False, why or str(exc)
            continue
        works[mode] = result.returncode == 0
        if not works[mode]:
            why = why or (result.stderr.decode(errors="replace").strip().splitlines() or ["exit status %d" % result.returncode])[0]
    return _Support(bwrap, modern, works.get("userns", False), works.get("privileged", False), setpriv, why)


def _version(bwrap: str) -> tuple[int, ...]:
    try:
        out = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10).stdout
        return tuple(int(x) for x in out.split()[-1].split(".")[:2])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return (0,)
