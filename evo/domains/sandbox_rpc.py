"""The wire between a program under test and the process that judges it (both jailed; never imported by evo).

In ``asserts`` and ``tests`` runs the sandbox starts two processes that share
no memory, no files and no descriptors: the *server* runs the program
(``solution.py``, or a repository's modules) and answers requests; the *judge*
runs the tests, in which every name the program defines is a proxy. Calling a
proxy sends the call to the server; what comes back is either a plain value
(None, bool, int, float, complex, str, bytes, and lists / tuples / dicts / sets
of them, re-parsed on the judge's side with `ast.literal_eval`, so it is a fresh
builtin object whose comparisons the program cannot touch) or a handle to an
object that stays in the server (a function, a class, an instance). Tests
compare on the judge's side, and a handle equals only itself: an object with a
rigged ``__eq__`` never equals an expected value. The judge sends its verdicts
to the parent on a pipe the server does not hold, so nothing the program does
in its own memory (walking frames, patching builtins or the assert machinery,
printing fake verdicts, exiting early) can produce a pass. Nor can it stand in
for what the tests take from elsewhere: its names never shadow a builtin, and
a standard-library module the tests use (a repository's ``re.py``, a fake
``math`` in a solution whose asserts call ``math.isclose``) is the judge's own.

On handles the judge supports attribute get/set/delete, calls (arguments must
be plain values or handles), item get/set/delete, len, iteration, ``in``,
truth, str/repr, dir, isinstance/issubclass against a class handle. Exceptions
the program raises arrive as the builtin exception of the same name, or, for
the program's own exception classes, a stand-in subclass of its nearest builtin
base (one per class, so both ``except ValueError`` and ``except mod.MyError``
work). Not supported: passing judge-side functions or objects to the program,
arithmetic operators on handles, ``with`` on handles; a program that exits, is
killed or answers garbage makes every later call raise `ProgramError`.

Messages are one line each: the repr of a tuple (requests) or a dict (replies).
"""

import ast
import builtins
import os
import sys
import types

MAX_MESSAGE = 1 << 20  # bytes per reply line; a bigger value fails the call
MAX_INT_DIGITS = 100_000  # both ends: a factorial crosses as a number, a million-digit parse does not
# the program may not stand in for these on the judge's side (a fake `re` or `math` would answer for the tests)
RESERVED = frozenset(sys.stdlib_module_names) | frozenset(sys.builtin_module_names) | frozenset(dir(builtins))
_PLAIN = (type(None), bool, int, float, complex, str, bytes)
_REF = "\0ref"  # a handle inside a request: the tuple (_REF, handle)


class ProgramError(Exception):
    """The program under test failed in a way no builtin exception names (exited, garbage, SystemExit)."""


def plain(value, depth=0):
    """True for values that cross as literals: builtin scalars and builtin containers of them."""
    kind = type(value)
    if kind in _PLAIN:
        return True
    if depth > 40:
        return False
    if kind in (list, tuple, set):
        return all(plain(v, depth + 1) for v in value)
    if kind is dict:
        return all(plain(k, depth + 1) and plain(v, depth + 1) for k, v in value.items())
    return False


class _SpecialFloats(ast.NodeTransformer):
    """repr() writes nan and inf as bare names; literal_eval needs constants."""

    def visit_Name(self, node):
        if node.id in ("nan", "inf"):
            return ast.copy_location(ast.Constant(float(node.id)), node)
        raise ValueError(f"unexpected name {node.id!r}")


def parse_literal(text):
    """`ast.literal_eval` that also reads repr's nan / inf."""
    tree = ast.parse(text, mode="eval")
    return ast.literal_eval(_SpecialFloats().visit(tree).body)


def _write_all(fd, data):
    while data:
        data = data[os.write(fd, data):]


# ---- the server: runs the program, answers the judge ----------------------------------------------

def _builtin_base(cls):
    """Name of the nearest builtin class in an exception class's MRO."""
    for klass in cls.__mro__:
        if getattr(builtins, klass.__name__, None) is klass:
            return klass.__name__
    return "Exception"


def serve(req_fd, rep_fd, names=None):
    """Answer requests until the judge hangs up. `names()` gives the program's globals ("names" op)."""
    sys.set_int_max_str_digits(MAX_INT_DIGITS)
    handles, index = {}, {}

    def ref(obj):
        h = index.get(id(obj))
        if h is None:
            h = len(handles) + 1
            handles[h], index[id(obj)] = obj, h
        return h

    def unwire(value):
        kind = type(value)
        if kind is tuple and len(value) == 2 and value[0] == _REF:
            return handles[value[1]]
        if kind in (list, tuple, set):
            return kind(unwire(v) for v in value)
        if kind is dict:
            return {unwire(k): unwire(v) for k, v in value.items()}
        return value

    def encode(value):
        if plain(value):
            try:
                return "{'v': %s}" % repr(value)
            except ValueError:  # e.g. an int past the str-digits limit: send it as a handle
                pass
        desc = {"h": ref(value)}
        if isinstance(value, type) and issubclass(value, BaseException):
            desc.update(k="exc", n=str(value.__name__)[:80], b=_builtin_base(value))
        elif isinstance(value, types.ModuleType):
            desc.update(k="module", p=hasattr(value, "__path__"))
        return repr(desc)

    def failure(exc):
        cls = type(exc)
        builtin = getattr(builtins, cls.__name__, None) is cls
        args = exc.args if plain(exc.args) and len(repr(exc.args)) < 2000 else (str(exc)[:300],)
        return repr({"e": str(cls.__name__)[:80], "b": _builtin_base(cls), "c": None if builtin else ref(cls),
                     "a": args})

    def public(module):
        listed = getattr(module, "__all__", None)
        if isinstance(listed, (list, tuple)) and all(type(n) is str for n in listed):
            return list(listed)
        return [n for n in vars(module) if not n.startswith("_")]

    def all_names():
        return "{'names': {%s}}" % ", ".join(f"{k!r}: {encode(v)}" for k, v in names().items()
                                              if type(k) is str and not (k.startswith("__") and k.endswith("__")))

    def next_item(it):
        return next(it)

    ops = {
        "getattr": getattr, "setattr": setattr, "delattr": delattr,
        "call": lambda f, args, kwargs: f(*args, **kwargs),
        "getitem": lambda o, k: o[k], "setitem": lambda o, k, v: o.__setitem__(k, v),
        "delitem": lambda o, k: o.__delitem__(k),
        "len": len, "bool": bool, "str": str, "repr": repr, "dir": lambda o: sorted(map(str, dir(o))),
        "contains": lambda o, v: v in o, "iter": iter, "next": next_item,
        "isinstance": isinstance, "issubclass": issubclass, "public": public,
        "import": lambda name: __import__(name) and sys.modules[name],
    }
    reader = os.fdopen(req_fd, "rb")
    while True:
        line = reader.readline()
        if not line:
            return
        try:
            op, *args = eval(line, {"__builtins__": {}, "nan": float("nan"), "inf": float("inf")})
            text = all_names() if op == "names" else encode(ops[op](*unwire(tuple(args))))
        except BaseException as exc:  # the program's SystemExit, KeyboardInterrupt, ... included
            try:
                text = failure(exc)
            except BaseException:
                text = "{'e': 'Exception', 'b': 'Exception', 'c': None, 'a': ('unreportable error',)}"
        _write_all(rep_fd, text.encode("utf-8", "backslashreplace") + b"\n")


# ---- the judge: proxies for the program's names ---------------------------------------------------

class Link:
    """The judge's end of the wire: one request at a time, replies decoded strictly."""

    def __init__(self, req_fd, rep_fd):
        sys.set_int_max_str_digits(MAX_INT_DIGITS)
        self.req_fd = req_fd
        self.replies = os.fdopen(rep_fd, "rb")
        self.proxies, self.exceptions = {}, {}
        self.dead = None

    def ask(self, op, *args):
        if self.dead:
            raise ProgramError(self.dead)
        request = (repr((op, *(_wire(a) for a in args))) + "\n").encode()
        try:
            _write_all(self.req_fd, request)
            line = self.replies.readline(MAX_MESSAGE + 1)
        except OSError:
            line = b""
        if not line.endswith(b"\n"):
            self.dead = "the program under test exited" if not line else "the program sent an oversized reply"
            raise ProgramError(self.dead)
        try:
            reply = parse_literal(line.decode("utf-8"))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, UnicodeDecodeError):
            raise ProgramError("the program sent a reply the judge cannot read") from None  # this call fails
        return self.decode(reply, op)

    def decode(self, reply, op=None):
        if type(reply) is not dict:
            raise ProgramError("the program sent a malformed reply")
        if "v" in reply:
            return reply["v"]
        if "h" in reply and type(reply["h"]) is int:
            return self._handle(reply)
        if "e" in reply:
            raise self._exception(reply)
        if op == "names" and type(reply.get("names")) is dict:
            return {k: self.decode(v) for k, v in reply["names"].items() if type(k) is str}
        raise ProgramError("the program sent a malformed reply")

    def _handle(self, reply):
        h = reply["h"]
        if reply.get("k") == "exc":
            return self._exception_class(h, reply.get("n"), reply.get("b"))
        if h not in self.proxies:
            self.proxies[h] = Proxy(self, h)
        return self.proxies[h]

    def _exception_class(self, h, name, base):
        if h not in self.exceptions:
            parent = getattr(builtins, base, None) if type(base) is str else None
            if not (isinstance(parent, type) and issubclass(parent, Exception)):
                parent = ProgramError
            name = name if type(name) is str and name.isidentifier() else "ProgramException"
            self.exceptions[h] = type(name, (parent,), {"__module__": "program"})
        return self.exceptions[h]

    def _exception(self, reply):
        name, base, cls_h, args = reply.get("e"), reply.get("b"), reply.get("c"), reply.get("a")
        args = args if type(args) is tuple else ()
        if type(cls_h) is int:
            cls = self._exception_class(cls_h, name, base)
        else:
            cls = getattr(builtins, name, None) if type(name) is str else None
            if not (isinstance(cls, type) and issubclass(cls, Exception)):
                cls = ProgramError  # SystemExit, KeyboardInterrupt, GeneratorExit, or nonsense
                args = (f"the program raised {name}: {args[0] if args else ''}",)
        try:
            return cls(*args)
        except Exception:
            return cls(*map(str, args)) if cls is not ProgramError else ProgramError(str(args))


def _wire(value):
    """A judge-side value as it goes into a request (handles become references)."""
    kind = type(value)
    if kind is Proxy:
        return (_REF, object.__getattribute__(value, "_evo_h"))
    if kind is RemoteModule:
        return (_REF, value.__dict__["_evo_h"])
    if kind in _PLAIN:
        return value
    if kind in (list, tuple, set):
        return kind(_wire(v) for v in value)
    if kind is dict:
        return {_wire(k): _wire(v) for k, v in value.items()}
    raise TypeError(f"cannot pass a {kind.__name__} to the program under test (only plain values and its own objects)")


def _ask(proxy, op, *args):
    return object.__getattribute__(proxy, "_evo_link").ask(op, proxy, *args)


class Proxy:
    """A judge-side stand-in for an object living in the server. Equal only to itself."""

    __slots__ = ("_evo_link", "_evo_h", "__weakref__")

    def __init__(self, link, h):
        object.__setattr__(self, "_evo_link", link)
        object.__setattr__(self, "_evo_h", h)

    def __getattr__(self, name):
        return _ask(self, "getattr", name)

    def __setattr__(self, name, value):
        _ask(self, "setattr", name, value)

    def __delattr__(self, name):
        _ask(self, "delattr", name)

    def __call__(self, *args, **kwargs):
        return _ask(self, "call", args, kwargs)

    def __getitem__(self, key):
        return _ask(self, "getitem", key)

    def __setitem__(self, key, value):
        _ask(self, "setitem", key, value)

    def __delitem__(self, key):
        _ask(self, "delitem", key)

    def __len__(self):
        return _ask(self, "len")

    def __bool__(self):
        return _ask(self, "bool")

    def __contains__(self, value):
        return _ask(self, "contains", value)

    def __iter__(self):
        return _ask(self, "iter")

    def __next__(self):
        return _ask(self, "next")

    def __str__(self):
        return _ask(self, "str")

    def __repr__(self):
        try:
            text = _ask(self, "repr")
        except Exception:
            text = None
        return text if type(text) is str else f"<program object {object.__getattribute__(self, '_evo_h')}>"

    def __dir__(self):
        return _ask(self, "dir")

    def __instancecheck__(self, obj):
        return object.__getattribute__(self, "_evo_link").ask("isinstance", obj, self) is True

    def __subclasscheck__(self, cls):
        return object.__getattribute__(self, "_evo_link").ask("issubclass", cls, self) is True


class RemoteModule(types.ModuleType):
    """A module of the program, imported in the server; attribute access goes over the wire."""

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self.__dict__["_evo_link"].ask("getattr", self, name)

    def __setattr__(self, name, value):
        if (name.startswith("__") and name.endswith("__")) or name.startswith("_evo") or type(value) is RemoteModule:
            super().__setattr__(name, value)  # the import system's bookkeeping stays here
        else:
            self.__dict__["_evo_link"].ask("setattr", self, name, value)


class ProgramModules:
    """A meta-path finder: the program's top-level modules are imported in the server, never here."""

    def __init__(self, link, tops):
        self.link, self.tops = link, set(tops) - RESERVED  # a repository's re.py never replaces the tests' re

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] not in self.tops:
            return None
        from importlib.machinery import ModuleSpec

        desc = self.link.ask("import", name)  # raises the program's ImportError / SyntaxError here
        if type(desc) is not Proxy:
            raise ImportError(f"the program's {name} is not a module")
        spec = ModuleSpec(name, self, is_package=True)
        spec.loader_state = object.__getattribute__(desc, "_evo_h")
        return spec

    def create_module(self, spec):
        module = RemoteModule(spec.name)
        module.__dict__["_evo_link"], module.__dict__["_evo_h"] = self.link, spec.loader_state
        names = self.link.ask("public", module)
        if type(names) is list:
            module.__dict__["__all__"] = [n for n in names if type(n) is str and n not in RESERVED]
        return module

    def exec_module(self, module):
        pass


def program_names(link, snippets=()):
    """The program's globals as judge-side values, for the assert snippets to run against.

    Never a builtin's name, and never a standard-library module's name that the
    snippets use as a module (``math.isclose(...)``, written for a solution that
    imports math): those are the judge's own real modules.
    """
    names = {k: v for k, v in link.ask("names").items()
             if not (k.startswith("__") and k.endswith("__")) and not hasattr(builtins, k)}
    for snippet in snippets:
        try:
            tree = ast.parse(snippet)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in RESERVED:
                try:
                    names[node.value.id] = __import__(node.value.id)
                except ImportError:
                    names.pop(node.value.id, None)
    return names
