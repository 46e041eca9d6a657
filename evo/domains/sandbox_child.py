"""The code that runs INSIDE a sandboxed child process (never imported by evo).

`evo.domains.sandbox` starts ``python -I -S -c "...; import sandbox_child; sandbox_child.start()"``
in a jail (`evo.confine`) where this file, `sandbox_rpc.py` and their compiled
.pyc are bound read-only at their own paths; this folder is appended to
``sys.path`` and taken off it again before the program runs. It needs nothing but the standard
library. ``sys.argv[1]`` is the config as a Python literal (the parent writes it
with `repr`; `json` and `runpy` are avoided because importing them costs more
than the rest of the start-up). In order, the child:

1. sets its resource limits (CPU, address space, processes, file size, fds, no core),
   and as PID 1 of its namespace a SIGXCPU handler (PID 1 ignores it otherwise);
2. reads the payload (assert snippets) from stdin where the mode has one, then
   points stdin at /dev/null so the program cannot read what follows;
3. installs an audit hook (it cannot be removed) that blocks, and reports on the
   events pipe: writes outside the working folder, reads of denied paths
   (the task data), sockets and name lookups, exec / spawn / system, forks past
   the process budget, signals to processes outside the sandbox, native code
   (ctypes imports, but loading libraries, calling foreign functions and
   reading raw memory are blocked; _posixsubprocess.fork_exec, which raises no
   audit event, is replaced and the module cannot be imported afresh; the test
   C-API modules do not import), rlimit changes, gc and tracing introspection.
   Inside the jail this is not the boundary (the jail is); it names what a
   program tried, so a failed test says ``write_blocked`` rather than
   ``runtime_error``, and it is the only layer where no jail can be built;
4. runs in one of four modes:
   ``script`` (``solution.py`` as ``__main__``; stdin is the program's input);
   ``serve`` (the program under test: exec ``solution.py``, or make the
   folder's modules importable, then answer the judge, `sandbox_rpc.serve`);
   ``asserts`` and ``tests`` (the judge, a separate process that never runs the
   program's code: each assert snippet, or each ``test_*`` function and
   ``Test*`` class method of the test files, runs against proxies of the
   program's names; one result event per test).

Events are lines of Python literals on the inherited events fd: ``{"kind": "blocked", "what":
reason, "detail": ...}``, ``{"kind": "result", "test": id, "passed": bool, "error": str}``,
``{"kind": "program_error", ...}``, ``{"kind": "collect_error", ...}``. The parent
takes verdicts from the judge's events pipe only, which the program's process
never holds.
"""

import os
import sys

if __name__ == "sandbox_child":  # started by the sandbox, not imported as evo.domains.sandbox_child
    CFG = eval(sys.argv[1], {"__builtins__": {}})  # a dict literal written by the parent
    EVENTS_FD = CFG["events_fd"]
    WORKDIR = os.path.realpath(CFG["workdir"])
    sandbox_rpc = None  # imported by start() in the two-process modes


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
    """The program runs as PID 1 of its namespace (bwrap --as-pid-1: one fork fewer per run,
    and the parent's wait4 then sees its CPU time), and PID 1 ignores default-action
    signals, SIGXCPU included, so the CPU soft limit needs a handler (the hard limit's
    SIGKILL is forced by the kernel and needs none). Its exit still makes the kernel
    kill everything it left behind."""
    if os.getpid() != 1:
        return
    import _signal  # not `signal`: that imports enum, which costs more than the rest of start-up

    def on_cpu_limit(signum, frame):
        os._exit(128 + signum)

    _signal.signal(_signal.SIGXCPU, on_cpu_limit)


def read_payload():
    if CFG["mode"] != "asserts":
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
    pidns = CFG.get("pidns", False)
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
        if pidns:  # /proc shows only the namespace
            return sum(1 for name in os.listdir("/proc") if name.isdigit())
        count = 0  # no jail: the members of our session (RLIMIT_NPROC also binds a non-root user)
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat", "rb") as fh:
                        count += int(fh.read().rsplit(b")", 1)[1].split()[3]) == my_sid
                except (OSError, ValueError, IndexError):
                    pass
        return count

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
    # RLIMIT_NPROC may refuse a fork before our own count does: name it the same way
    real_fork = os.fork

    def fork():
        try:
            return real_fork()
        except BlockingIOError as exc:
            block("process_limit", f"{max_procs} processes ({exc.strerror})", BlockingIOError)

    os.fork = fork
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


def run_server(payload):
    """The program under test: load it, then answer the judge until it hangs up."""
    import traceback

    names = None
    if CFG.get("entry"):  # asserts: one file whose globals the tests see
        path = os.path.join(WORKDIR, CFG["entry"])
        module = type(sys)("solution")
        module.__file__ = path
        sys.modules["solution"] = module
        failed = []
        try:
            with open(path, "rb") as fh:
                exec(compile(fh.read(), path, "exec"), module.__dict__)
        except BaseException as exc:  # every test fails; the judge reports why
            failed.append(exc)
            traceback.print_exc()

        def names():
            if failed:
                raise failed[0]
            return dict(vars(module))
    else:  # tests: the folder's modules, imported when the judge asks
        sys.path.insert(0, WORKDIR)
    sandbox_rpc.serve(CFG["rpc"][0], CFG["rpc"][1], names)


def _describe(exc):
    import traceback

    tb = traceback.extract_tb(exc.__traceback__)
    where = f" ({tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno})" if tb else ""
    return f"{type(exc).__name__}: {exc}{where}"[:300]


def judge_asserts(payload):
    """Each assert snippet against the program's names (proxies); one verdict per snippet."""
    import builtins

    link = sandbox_rpc.Link(CFG["rpc"][0], CFG["rpc"][1])
    try:
        names = sandbox_rpc.program_names(link, payload.get("tests", []))
    except BaseException as exc:
        emit({"kind": "program_error", "error": f"{type(exc).__name__}: {exc}"[:300]})
        return
    namespace = {"__name__": "tests", "__builtins__": builtins, **names}
    for i, snippet in enumerate(payload.get("tests", [])):
        try:
            exec(compile(snippet, f"<test {i}>", "exec"), namespace)
            emit({"kind": "result", "test": i, "passed": True, "error": ""})
        except BaseException as exc:
            emit({"kind": "result", "test": i, "passed": False, "error": f"{type(exc).__name__}: {exc}"[:300]})


def judge_tests(payload):
    """A pytest-shaped runner for the toy SWE repositories (module-level and class tests).

    The test files live in this process's folder; every module of the program
    (`CFG["modules"]`, the top-level names of its files) imports as a proxy.
    """
    import importlib.util

    link = sandbox_rpc.Link(CFG["rpc"][0], CFG["rpc"][1])
    sys.meta_path.insert(0, sandbox_rpc.ProgramModules(link, CFG["modules"]))
    sys.path.insert(0, WORKDIR)
    sys.argv = ["tests"]
    for rel in CFG["test_files"]:
        module_name = rel[:-3].replace("/", ".")
        try:
            spec = importlib.util.spec_from_file_location(module_name, os.path.join(WORKDIR, rel))
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            spec.loader.exec_module(module)
        except BaseException as exc:
            emit({"kind": "collect_error", "file": rel, "error": _describe(exc)})
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
                emit({"kind": "result", "test": test_id, "passed": True, "error": ""})
            except BaseException as exc:
                emit({"kind": "result", "test": test_id, "passed": False, "error": _describe(exc)})


def main():
    sys.dont_write_bytecode = True  # the program's folder holds only what the program writes
    set_limits()
    handle_cpu_limit_as_pid1()
    payload = read_payload()
    os.chdir(WORKDIR)
    install_guard()
    {"script": run_script, "serve": run_server, "asserts": judge_asserts, "tests": judge_tests}[CFG["mode"]](payload)


def start():
    """Entry point for the launcher: import what the mode needs, forget our folder, then run."""
    global sandbox_rpc
    if CFG["mode"] != "script":
        import sandbox_rpc
    sys.path.remove(os.path.dirname(os.path.abspath(__file__)))
    del sys.modules[__name__]
    main()
