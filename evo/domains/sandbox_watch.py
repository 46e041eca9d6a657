"""The parent's side of a sandbox run: feed, drain and stop its children under the caps and the deadline.

Split from `evo.domains.sandbox` (what a run is and what it reports) along the
seam of "moving bytes and ending processes". Each `Child` is one jailed (or,
without a jail, plain) process with stdin, stdout, stderr and an events pipe.
"""

from __future__ import annotations

import ast
import os
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass, field

_EVENTS_CAP = 4 * 1024 * 1024


@dataclass
class Child:
    role: str  # "program" (script mode), "server" (the program under test), "judge" (the tests)
    proc: subprocess.Popen
    jailed: bool
    stdin: bytes
    events_fd: int
    folder: str  # unique to the run, and in the child's command line
    bufs: dict = field(default_factory=lambda: {"out": bytearray(), "err": bytearray(), "events": bytearray()})
    returncode: int | None = None
    cpu_s: float = 0.0
    ended_by_itself: bool = False
    done: bool = False
    pending: memoryview = memoryview(b"")  # stdin not yet written

    def reap(self) -> None:
        """If the process has exited, record its status and CPU seconds (of the whole reaped tree)."""
        if self.proc.returncode is not None:
            self.returncode = self.proc.returncode
            return
        try:
            pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        self.proc.returncode = self.returncode = os.waitstatus_to_exitcode(status)
        self.cpu_s = usage.ru_utime + usage.ru_stime
        self.ended_by_itself = True

    def text(self, name: str) -> str:
        return bytes(self.bufs[name]).decode("utf-8", "replace")

    def events(self) -> list[dict]:
        out = []
        for line in bytes(self.bufs["events"]).splitlines():
            try:
                event = ast.literal_eval(line.decode("utf-8", "replace"))
            except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
                continue
            if isinstance(event, dict):
                out.append(event)
        return out

    def close(self) -> None:
        if self.returncode is None:
            self.returncode = self.proc.returncode
        self.done = True
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None and not stream.closed:
                stream.close()
        if self.events_fd >= 0:
            os.close(self.events_fd)
            self.events_fd = -1


def watch(children: list[Child], limits, started: float) -> str | None:
    """Feed stdin, drain every pipe under the caps and the wall deadline; why the run was cut short.

    Stops once the last child (the program, or the judge) has exited and its
    pipes are drained, at the deadline ("timeout"), or past an output cap
    ("output_limit"); what is left running is killed by the caller.
    """
    deadline = started + limits.wall_seconds
    caps = {"out": limits.max_output_bytes, "err": limits.max_output_bytes, "events": _EVENTS_CAP}
    sel = selectors.DefaultSelector()
    for child in children:
        streams = {child.proc.stdout: "out", child.proc.stderr: "err"}
        streams[os.fdopen(child.events_fd, "rb", buffering=0, closefd=False)] = "events"
        for stream, name in streams.items():
            os.set_blocking(stream.fileno(), False)
            sel.register(stream, selectors.EVENT_READ, (child, name))
        if child.stdin:
            os.set_blocking(child.proc.stdin.fileno(), False)
            sel.register(child.proc.stdin, selectors.EVENT_WRITE, (child, "in"))
            child.pending = memoryview(child.stdin)
        else:
            child.proc.stdin.close()
    main = children[-1]
    why = None

    def read_from(stream, child, name) -> str:
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
        buf = child.bufs[name]
        buf += chunk
        if len(buf) > caps[name]:
            del buf[caps[name]:]
            why = why or ("output_limit" if name != "events" else "event_flood")
        return "data"

    try:
        while not why and any(key.data[1] != "in" for key in sel.get_map().values()):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                why = "timeout"
                break
            for key, _ in sel.select(timeout=min(remaining, 0.05)):
                child, name = key.data
                if name == "in":
                    try:
                        child.pending = child.pending[os.write(key.fileobj.fileno(), child.pending[:65536]):]
                    except OSError:  # the child closed its stdin early; fine
                        child.pending = memoryview(b"")
                    if not child.pending:
                        sel.unregister(key.fileobj)
                        key.fileobj.close()
                elif read_from(key.fileobj, child, name) == "eof":
                    sel.unregister(key.fileobj)
            main.reap()
            if main.returncode is not None:  # drain what the children wrote, then stop
                for key in list(sel.get_map().values()):
                    child, name = key.data
                    while name != "in" and not why and read_from(key.fileobj, child, name) == "data":
                        pass
                break
        while not why and main.returncode is None:  # every pipe closed, the process not yet gone
            if time.monotonic() >= deadline:
                why = "timeout"
                break
            time.sleep(0.001)
            main.reap()
    finally:
        for key in list(sel.get_map().values()):
            if key.data[1] == "events":
                key.fileobj.close()  # the wrapper only (closefd=False); Child.close closes the fd
        sel.close()
    return why


def kill_session(proc: subprocess.Popen, token: str) -> None:
    """Without a jail: SIGKILL the child's session and its forks, and wait (up to 2 s) until none is left.

    The child was started with `start_new_session`, so its session id is its
    pid. A fork that called setsid() has left that session, but not the child's
    command line (exec is blocked, so every fork keeps it): `token`, a string
    unique to this run in that command line, finds those.
    """
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        members = _members(proc.pid, token.encode())
        if not members:
            return
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.005)


def _members(sid: int, token: bytes) -> list[int]:
    """Live (non-zombie) processes of session `sid`, or whose command line holds `token`."""
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            if fields[0] == b"Z":  # fields: state, ppid, pgrp, session, ...
                continue
            if int(fields[3]) != sid:
                with open(f"/proc/{name}/cmdline", "rb") as fh:
                    if token not in fh.read():
                        continue
        except OSError:
            continue
        members.append(int(name))
    return members
