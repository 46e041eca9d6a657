"""The code that runs INSIDE a sandboxed child process (never imported by evo).

`evo.domains.sandbox` starts ``python -I -S -c "...; import sandbox_child; sandbox_child.start()"``
with this folder appended to ``sys.path`` (so the compiled .pyc is reused; the
folder is taken off the path again before the program runs). It needs nothing
but the standard library and no file of ours sits in the program's folder.
``sys.argv[1]`` is the config as a Python literal (the parent writes it with
`repr`; `json` and `runpy` are avoided because importing them costs more than
the rest of the start-up). In order, the child:

1. sets its resource limits (CPU, address space, processes, file size, fds, no core);
2. when it is PID 1 of a fresh PID namespace (the program runs as that PID 1,
   so when it exits the kernel kills every process it left behind), installs
   the SIGXCPU handler PID 1 needs for the CPU limit to stop it;
3. reads the payload (tests, nonce) from stdin where the mode has one, then
   points stdin at /dev/null so the program cannot read what follows;
4. installs an audit hook (it cannot be removed) that blocks, and reports on the
   events pipe: writes outside the working folder, reads of denied paths
   (the task data), sockets and name lookups, exec / spawn / system, forks past
   the process budget, signals to processes outside the sandbox, native code
   (ctypes imports, but loading libraries, calling foreign functions and
   reading raw memory are blocked; _posixsubprocess.fork_exec, which raises no
   audit event, is replaced and the module cannot be imported afresh; the test
   C-API modules do not import), rlimit changes, gc and tracing introspection
   (the nonce lives in this process's memory);
5. runs the program in one of three modes:
   ``script`` (``solution.py`` as ``__main__``; stdin is the program's input),
   ``asserts`` (exec the program, then each assert snippet; one result event per
   snippet), ``tests`` (import ``test_*.py`` files and call their ``test_*``
   functions and ``Test*`` class methods; one result event per test).

Events are lines of Python literals on the inherited events fd: ``{"kind": "blocked", "what":
reason, "detail": ...}``, ``{"kind": "result", "nonce": n, "test": id, "passed":
bool, "error": str}``, ``{"kind": "exit", "signal": n}``. Result events carry the
nonce the parent sent on stdin, so a program cannot forge a pass by printing one
unless it first digs the nonce out of this process's memory (the hook blocks
the gc walkers; walking frames stays possible). That is containment, not a
proof of honesty: where a program may be adversarial, prefer stdin/stdout tests,
which the parent judges and the program never sees.
"""

import os
import sys

if __name__ == "sandbox_child":  # started by the sandbox, not imported as evo.domains.sandbox_child
    CFG = eval(sys.argv[1], {"__builtins__": {}})  # a dict literal written by the parent
    EVENTS_FD = CFG["events_fd"]
    WORKDIR = os.path.realpath(CFG["workdir"])


def emit(obj):
    try:
        os.write(EVENTS_FD, (repr(obj) + "\n").encode())
    except OSError:
        pass


def set_limits():
    import resource

    lim = CFG["limits"]
    cpu = max(1, int(lim["cpu_seconds"] + 0.999))
    pairs = [
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_AS, lim["memory_mb"] * 1024 * 1024),
        (resource.RLIMIT_FSIZE, lim["max_file_bytes"]),
        (resource.RLIMIT_NOFILE, lim["max_open_files"]),
        (resource.RLIMIT_CORE, 0),
    ]
    if CFG.get("nproc"):
        pairs.append((resource.RLIMIT_NPROC, CFG["nproc"]))
    for which, value in pairs:
        hard = value + 1 if which == resource.RLIMIT_CPU else value  # SIGXCPU at soft, SIGKILL at hard
        resource.setrlimit(which, (value, hard))
    del sys.modules["resource"]  # a fresh `import resource` then goes through the hook


def handle_cpu_limit_as_pid1():
    """As PID 1 of a fresh namespace the program ignores default-action signals,
    SIGXCPU included, so the CPU soft limit needs a handler (the hard limit's
    SIGKILL is forced by the kernel and needs none). Running the program itself
    as PID 1, rather than under a tiny init, saves a fork per run (measured ~15%
    of a run); its exit still makes the kernel kill everything it left behind."""
    if os.getpid() != 1:
        return
    import _signal  # not `signal`: that imports enum, which costs more than the rest of start-up

    def on_cpu_limit(signum, frame):
        emit({"kind": "exit", "signal": signum})
        os._exit(128 + signum)

    _signal.signal(_signal.SIGXCPU, on_cpu_limit)


def read_payload():
    if CFG["mode"] == "script":
        return {}
    chunks = []
    while True:
        data = os.read(0, 1 << 16)
        if not data:
            break
        chunks.append(data)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    return eval(b"".join(chunks).decode() or "{}", {"__builtins__": {}})  # a literal from the parent


def install_guard():
    import _thread

    deny = [os.path.realpath(p) for p in CFG.get("deny_read", [])]
    max_procs = CFG["limits"]["max_processes"]
    cgroup = CFG.get("cgroup")
    pidns = CFG.get("pidns_proc", False)
    my_sid = os.getsid(0)
    state = _thread._local()
    blocked_imports = {"_posixsubprocess", "_testcapi", "_testinternalcapi",
                       "_xxsubinterpreters", "_xxinterpchannels", "resource"}
    # ctypes may be imported (sympy needs its types) but not used to reach native code or memory
    ctypes_events = {"ctypes.call_function", "ctypes.cdata", "ctypes.cdata/buffer", "ctypes.dlsym",
                     "ctypes.dlsym/handle", "ctypes.string_at", "ctypes.wstring_at"}
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    path_events = {"os.remove", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.truncate", "os.utime",
                   "os.setxattr", "os.removexattr", "os.chflags", "os.lchflags", "shutil.rmtree"}
    pair_events = {"os.rename", "os.symlink", "os.link", "shutil.copyfile", "shutil.copymode",
                   "shutil.copystat", "shutil.copytree", "shutil.move"}
    exec_events = {"os.exec", "os.posix_spawn", "os.spawn", "os.system", "subprocess.Popen",
                   "os.startfile", "pty.spawn", "os.forkpty"}
    net_events = {"socket.__new__", "socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr",
                  "socket.gethostbyname_ex", "socket.getnameinfo", "socket.sethostname"}
    # sys._getframe stays allowed: namedtuple, typing and logging call it
    introspection = {"gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames",
                     "sys.setprofile", "sys.settrace"}

    def fspath(p):
        if isinstance(p, int) or p is None:
            return None
        try:
            p = os.fsdecode(os.fspath(p))
        except TypeError:
            return None
        return os.path.realpath(p)

    def inside(p):
        rp = fspath(p)
        return rp is None or rp == os.devnull or rp == WORKDIR or rp.startswith(WORKDIR + os.sep)

    def denied(p):
        if not deny:
            return False
        rp = fspath(p)
        return rp is not None and any(rp == d or rp.startswith(d + os.sep) for d in deny)

    def live_processes():
        if cgroup:
            fd = os.open(os.path.join(cgroup, "pids.current"), os.O_RDONLY)
            try:
                return int(os.read(fd, 64))
            finally:
                os.close(fd)
        if pidns:
            return sum(1 for name in os.listdir("/proc") if name.isdigit())  # /proc shows only the namespace
        return 0  # RLIMIT_NPROC is the limit here

    def same_session(pid):
        try:
            return os.getsid(pid) == my_sid
        except OSError:
            return False

    reported = [0]

    def block(what, detail, error=PermissionError):
        reported[0] += 1
        if reported[0] <= 20:  # a retry loop must not flood the events pipe
            emit({"kind": "blocked", "what": what, "detail": str(detail)[:200]})
        raise error(f"sandbox: {what}: {str(detail)[:200]}")

    def hook(event, args):
        if getattr(state, "busy", False):
            return
        state.busy = True
        try:
            if event == "open":
                path, _mode, flags = args
                if isinstance(flags, int) and flags & write_flags and not inside(path):
                    block("write_blocked", path)
                if denied(path):
                    block("read_blocked", path)
            elif event in path_events:
                if not inside(args[0]):
                    block("write_blocked", args[0])
            elif event in pair_events:
                if not (inside(args[0]) and inside(args[1])) or denied(args[0]):
                    block("write_blocked", f"{args[0]} -> {args[1]}")
            elif event in ("os.listdir", "os.scandir") and args and denied(args[0]):
                block("read_blocked", args[0])
            elif event in exec_events:
                block("exec_blocked", args[0] if args else event)
            elif event == "os.fork":
                if live_processes() >= max_procs:
                    block("process_limit", f"{max_procs} processes")
            elif event in net_events:
                block("network_blocked", event)
            elif event in ("os.kill", "os.killpg", "signal.pthread_kill"):
                target = args[0]
                if event == "os.kill" and target in (0, os.getpid()):
                    return
                if event == "os.killpg" and target == os.getpgid(0):
                    return
                if event == "os.kill" and target > 1 and (pidns or same_session(target)):  # 1 = us or init
                    return
                if event == "signal.pthread_kill":
                    return
                block("signal_blocked", f"{event}({target})")
            elif event == "import":
                if args[0].split(".")[0] in blocked_imports:
                    # ImportError, so libraries that treat ctypes as optional (numpy) still import
                    block("import_blocked", args[0], ImportError)
            elif event in ctypes_events or (event == "ctypes.dlopen" and args[0] is not None):
                block("native_code_blocked", event)
            elif event in ("resource.setrlimit", "resource.prlimit"):
                block("rlimit_blocked", args)
            elif event in introspection:
                block("introspection_blocked", event)
        finally:
            state.busy = False

    # `import subprocess` must work (sympy imports it), but _posixsubprocess.fork_exec
    # raises no audit event: load it now and replace the function; a re-import is blocked.
    import _posixsubprocess

    def fork_exec(*args, **kwargs):
        block("exec_blocked", "_posixsubprocess.fork_exec")

    _posixsubprocess.fork_exec = fork_exec
    sys.addaudithook(hook)


def run_script(payload):
    path = os.path.join(WORKDIR, CFG.get("entry", "solution.py"))
    main = type(sys)("__main__")  # a real module, so pickling classes defined in the program works
    main.__file__ = path
    sys.modules["__main__"] = main
    sys.argv = [CFG.get("entry", "solution.py")]
    with open(path, "rb") as fh:
        code = compile(fh.read(), path, "exec")
    exec(code, main.__dict__)


def run_asserts(payload):
    import traceback

    nonce = payload.get("nonce")
    tests = payload.get("tests", [])
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    source_path = os.path.join(WORKDIR, CFG.get("entry", "solution.py"))
    with open(source_path, encoding="utf-8") as fh:
        source = fh.read()
    try:
        exec(compile(source, source_path, "exec"), namespace)
    except BaseException as exc:  # the program itself failed: every test fails
        emit({"kind": "program_error", "nonce": nonce, "error": f"{type(exc).__name__}: {exc}"[:300]})
        traceback.print_exc()
        raise SystemExit(1)
    for i, snippet in enumerate(tests):
        try:
            exec(compile(snippet, f"<test {i}>", "exec"), namespace)
            emit({"kind": "result", "nonce": nonce, "test": i, "passed": True, "error": ""})
        except BaseException as exc:
            emit({"kind": "result", "nonce": nonce, "test": i, "passed": False,
                  "error": f"{type(exc).__name__}: {exc}"[:300]})


def run_tests(payload):
    """A pytest-shaped runner for the toy SWE repositories (module-level and class tests)."""
    import importlib
    import traceback

    nonce = payload.get("nonce")
    sys.path.insert(0, WORKDIR)
    sys.argv = ["tests"]
    for rel in payload.get("test_files", []):
        module_name = rel[:-3].replace("/", ".")
        try:
            module = importlib.import_module(module_name)
        except BaseException as exc:
            emit({"kind": "collect_error", "nonce": nonce, "file": rel, "error": f"{type(exc).__name__}: {exc}"[:300]})
            continue
        cases = []
        for name, obj in sorted(vars(module).items()):
            if name.startswith("test") and callable(obj) and not isinstance(obj, type):
                cases.append((f"{rel}::{name}", obj))
            elif name.startswith("Test") and isinstance(obj, type):
                for meth in sorted(m for m in vars(obj) if m.startswith("test")):
                    cases.append((f"{rel}::{name}::{meth}", (obj, meth)))
        for test_id, case in cases:
            try:
                if isinstance(case, tuple):
                    getattr(case[0](), case[1])()
                else:
                    case()
                emit({"kind": "result", "nonce": nonce, "test": test_id, "passed": True, "error": ""})
            except BaseException as exc:
                tb = traceback.extract_tb(exc.__traceback__)
                where = f" ({tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno})" if tb else ""
                emit({"kind": "result", "nonce": nonce, "test": test_id, "passed": False,
                      "error": f"{type(exc).__name__}: {exc}{where}"[:300]})


def main():
    set_limits()
    handle_cpu_limit_as_pid1()
    payload = read_payload()
    os.chdir(WORKDIR)
    install_guard()
    {"script": run_script, "asserts": run_asserts, "tests": run_tests}[CFG["mode"]](payload)


def start():
    """Entry point for the launcher: forget this module's import, then run."""
    sys.path.remove(os.path.dirname(os.path.abspath(__file__)))
    del sys.modules[__name__]  # the program must not find this module's state
    main()
