"""The toy SWE repositories: building them (with or without git history), finding
their tests, and the allow-listed read-only shell commands an agent may run.

Split from `evo.domains.swe` (the episode and its rewards) along the seam
between "what the repository is" and "what the agent does to it".
"""

from __future__ import annotations

import ast
import os
import subprocess
from pathlib import Path

from evo.domains.base import Task

READ_ONLY = {"ls", "cat", "grep", "head", "tail", "wc", "find"}
FIND_FORBIDDEN = {"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls"}
GIT_SUBCOMMANDS = {"log", "show", "diff"}
GIT_FORBIDDEN = ("--output", "--ext-diff", "--exec-path", "--git-dir", "--work-tree", "--textconv", "--no-index")
_GIT_ENV = {"GIT_AUTHOR_NAME": "dev", "GIT_AUTHOR_EMAIL": "dev@example.com", "GIT_COMMITTER_NAME": "dev",
            "GIT_COMMITTER_EMAIL": "dev@example.com", "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
            "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z", "GIT_CONFIG_NOSYSTEM": "1", "GIT_PAGER": "cat",
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}


def path_argument_ok(arg: str) -> bool:
    """No absolute path, no `..`, no `.git`, in the argument or after any `=` (``--file=../x``),
    and none of find's actions that write or run."""
    for piece in arg.split("="):
        parts = Path(piece).parts
        if os.path.isabs(piece) or ".." in parts or ".git" in parts:
            return False
    return arg not in FIND_FORBIDDEN


def git_argument_ok(arg: str) -> bool:
    """A path-safe argument that does not write files, run programs or leave the repository."""
    return path_argument_ok(arg) and not arg.startswith(GIT_FORBIDDEN)


def run_readonly(repo: Path, argv: list[str], timeout: float = 5) -> str:
    """Run an allow-listed read-only program (already checked) in `repo`; its output."""
    try:
        result = subprocess.run(argv, cwd=repo, capture_output=True, text=True, timeout=timeout,
                                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{argv[0]}: {type(exc).__name__}"
    return result.stdout + result.stderr


def is_test_file(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.startswith("test_") and name.endswith(".py")


def test_ids(files: dict[str, str]) -> list[str]:
    """Test ids (``file::func`` / ``file::Class::method``) found statically in the test files."""
    ids = []
    for path in sorted(p for p in files if is_test_file(p)):
        try:
            tree = ast.parse(files[path])
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                ids.append(f"{path}::{node.name}")
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                ids += [f"{path}::{node.name}::{m.name}" for m in node.body
                        if isinstance(m, ast.FunctionDef) and m.name.startswith("test")]
    return ids


def git(repo: Path, *args: str, input_text: str | None = None, timeout: float = 10) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=repo, env={**_GIT_ENV, "HOME": str(repo)}, input=input_text,
                          capture_output=True, text=True, timeout=timeout)


def write_files(root: Path, files: dict[str, str]) -> None:
    for rel, content in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")


def build_repository(dest: Path, task: Task, with_history: bool) -> None:
    """Create the task's repository in `dest` (git history with the fix, or a plain folder)."""
    dest.mkdir(parents=True)
    files, fix = task.meta["files"], task.meta["fix"]
    if not with_history:
        write_files(dest, files)
        return
    write_files(dest, {**files, **fix})
    for args in (("init", "-q", "-b", "main"), ("add", "-A"), ("commit", "-q", "-m", "Initial implementation")):
        git(dest, *args).check_returncode()
    write_files(dest, files)
    message = task.meta.get("commit_message") or "Refactor for readability"
    for args in (("add", "-A"), ("commit", "-q", "-m", message)):
        git(dest, *args).check_returncode()
