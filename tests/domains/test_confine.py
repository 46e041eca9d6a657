"""evo.confine: a jail shows what it binds and nothing else, and `kill` leaves no process behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest

from evo import confine
from evo.errors import SandboxUnavailable

needs_bwrap = pytest.mark.skipif(not confine.available(), reason="needs bubblewrap: apt-get install bubblewrap")


def run(jail: confine.Jail, code: str) -> str:
    proc = confine.popen([sys.executable, "-I", "-S", "-c", code], jail, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
    out, _ = proc.communicate(timeout=60)
    confine.release(proc)
    assert proc.returncode == 0, out.decode()
    return out.decode()


@needs_bwrap
def test_a_jail_sees_what_it_binds_and_nothing_else(tmp_path, monkeypatch):
    ro, rw, other = tmp_path / "ro", tmp_path / "rw", tmp_path / "other"
    for folder in (ro, rw, other, ro / "hidden"):
        folder.mkdir()
    (ro / "data.txt").write_text("visible")
    (ro / "hidden" / "answers.txt").write_text("42")
    (other / "private.txt").write_text("private")
    monkeypatch.setenv("EVO_TEST_API_KEY", "sk-not-for-the-jail")
    if os.geteuid() == 0:
        os.chown(rw, confine.NOBODY, confine.NOBODY)
    jail = confine.Jail(read_only=(ro,), writable=(rw,), hidden=(ro / "hidden",), env={"ONLY": "this"}, cwd=rw)
    code = f"""import os
def attempt(fn):
    try:
        return repr(fn())
    except OSError as exc:
        return type(exc).__name__
print(attempt(lambda: open({str(ro / 'data.txt')!r}).read()))
print(attempt(lambda: open({str(ro / 'new.txt')!r}, 'w')))
print(attempt(lambda: os.listdir({str(ro / 'hidden')!r})))
print(attempt(lambda: open({str(other / 'private.txt')!r}).read()))
print(attempt(lambda: open('made-inside.txt', 'w').write('ok')))
print(sorted(os.environ), os.getuid())
"""
    lines = run(jail, code).splitlines()
    assert lines[:5] == ["'visible'", "OSError", "[]", "FileNotFoundError", "2"]
    assert lines[5] == f"['LC_CTYPE', 'ONLY', 'PWD'] {confine.NOBODY}"  # LC_CTYPE: Python's own locale coercion
    assert os.stat(rw / "made-inside.txt").st_uid == confine.owner(jail)[0]
    assert sorted(p.name for p in ro.iterdir()) == ["data.txt", "hidden"]
    assert (ro / "hidden" / "answers.txt").read_text() == "42"


@needs_bwrap
def test_the_environment_and_mounts_stay_off_the_host_command_line():
    marker = f"evo-env-{uuid.uuid4().hex}"
    jail = confine.Jail(python=False, env={"TOKEN": marker, "PATH": "/usr/bin:/bin"})
    proc = confine.popen(["/bin/sh", "-c", "case $TOKEN in evo-env-*) sleep 30;; esac"], jail)
    try:
        time.sleep(0.3)
        cmdline = open(f"/proc/{proc.pid}/cmdline", "rb").read()
        assert marker.encode() not in cmdline and b"--ro-bind" not in cmdline
        assert proc.poll() is None  # the variable did arrive inside
    finally:
        confine.kill(proc)
    assert marker in " ".join(confine.wrap(["true"], jail))  # wrap() writes it out; popen() does not


@needs_bwrap
def test_no_network_unless_asked():
    devices = "print(sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]))"
    assert run(confine.Jail(), devices).strip() == "['lo']"
    host = sorted(line.split(":")[0].strip() for line in open("/proc/net/dev").readlines()[2:])
    assert run(confine.Jail(network=True), devices).strip() == repr(host)


@needs_bwrap
def test_kill_ends_every_process_of_the_jail_detached_ones_included():
    seconds = f"{300 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 1000}"
    jail = confine.Jail(python=False, env={"PATH": "/usr/bin:/bin"})
    proc = confine.popen(["/bin/sh", "-c", f"setsid sleep {seconds} & sleep {seconds} & wait"], jail)

    def sleepers():
        found = []
        for name in filter(str.isdigit, os.listdir("/proc")):
            try:
                if f"sleep\0{seconds}".encode() in open(f"/proc/{name}/cmdline", "rb").read():
                    found.append(name)
            except OSError:
                pass
        return found

    for _ in range(200):
        if len(sleepers()) == 2:
            break
        time.sleep(0.01)
    assert len(sleepers()) == 2
    confine.kill(proc)
    assert sleepers() == []


@needs_bwrap
def test_kill_after_the_program_ended_by_itself_is_no_error(monkeypatch):
    """The race CI met once: the jail's init exits between kill's poll and its signal (ESRCH on the pidfd)."""
    real = confine.signal.pidfd_send_signal

    def ended_first(fd, sig):
        real(fd, sig)  # the program ends (here: made to) just before the signal would reach it
        confine.select.select([fd], [], [], 5.0)
        raise ProcessLookupError(3, "No such process")

    monkeypatch.setattr(confine.signal, "pidfd_send_signal", ended_first)
    proc = confine.popen(["/bin/sh", "-c", "sleep 30"], confine.Jail(python=False, env={"PATH": "/usr/bin:/bin"}))
    time.sleep(0.2)
    confine.kill(proc)
    assert proc.poll() is not None


def test_a_missing_bwrap_is_a_one_line_error_naming_the_fix(monkeypatch):
    real_which = confine.shutil.which
    monkeypatch.setattr(confine.shutil, "which", lambda name: None if name == "bwrap" else real_which(name))
    confine._support.cache_clear()
    try:
        assert not confine.available()
        with pytest.raises(SandboxUnavailable, match=r"apt-get install bubblewrap") as err:
            confine.wrap(["true"], confine.Jail())
        assert "\n" not in str(err.value)
    finally:
        monkeypatch.undo()
        confine._support.cache_clear()
