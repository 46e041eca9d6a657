"""What an LLM agent's tool calls may do: stay inside the worktree, never write git.

`deny_reason(tool, tool_input, worktree)` returns a one-line reason to refuse
a call, or None to let the agent's normal permissions decide. The claude
backend calls it from a PreToolUse hook. It is a guard rail for an agent that
means well, not a sandbox: a shell can reach a path through a variable this
check cannot see. The candidate guard (`evo.agent.guard`) checks the diff after
the agent finishes, and the orchestrator alone commits, so a slip here cannot
land in a version.

Rules:
- file tools (Read, Write, Edit, MultiEdit, NotebookEdit, Glob, Grep, LS) must
  name paths inside the worktree (symlinks resolved), and may not write the
  worktree's `.git`;
- Bash: every simple command is checked; `git` may only run read-only
  subcommands (status, diff, log, show, ...) without -C / --git-dir /
  --work-tree; any argument that is a path (absolute, `~`, or with `..`) must
  resolve inside the worktree (the command word itself, e.g.
  `/usr/bin/python3`, may live anywhere; /dev/null and friends are fine).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

FILE_TOOLS = {"Read": "file_path", "Write": "file_path", "Edit": "file_path", "MultiEdit": "file_path",
              "NotebookEdit": "notebook_path", "Glob": "path", "Grep": "path", "LS": "path"}
WRITE_TOOLS = {"Write", "Edit", "MultiEdit", "NotebookEdit"}
GIT_READ_ONLY = {"status", "diff", "log", "show", "ls-files", "ls-tree", "blame", "grep", "rev-parse", "describe",
                 "cat-file", "shortlog", "rev-list", "diff-tree", "name-rev", "help", "version", "--version", "--help"}
GIT_ESCAPES = ("-C", "--git-dir", "--work-tree", "--namespace")
HARMLESS_PATHS = {"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/stdin"}
_WRAPPERS = {"sudo", "env", "command", "nohup", "time", "exec", "xargs", "nice", "timeout"}


def _inside(path: str, worktree: Path) -> bool:
    expanded = os.path.expanduser(path)
    resolved = (worktree / expanded).resolve() if not os.path.isabs(expanded) else Path(expanded).resolve()
    root = worktree.resolve()
    return resolved == root or root in resolved.parents


def _writes_git_dir(path: str, worktree: Path) -> bool:
    resolved = (worktree / os.path.expanduser(path)).resolve()
    git = (worktree / ".git").resolve()
    return resolved == git or git in resolved.parents


def _looks_like_path(token: str) -> bool:
    if token.startswith("-") and "=" in token:
        token = token.split("=", 1)[1]
    return token.startswith(("/", "~")) or token == ".." or token.startswith("../") or "/../" in token or token.endswith("/..")


def _arg_paths(token: str) -> list[str]:
    """Paths hidden in one shell word: `--out=/tmp/x`."""
    if token.startswith("-") and "=" in token:
        token = token.split("=", 1)[1]
    return [token] if _looks_like_path(token) else []


def _segments(command: str) -> list[list[str]]:
    """Simple commands of a shell line: split at ; | & && || ( ) and command substitutions."""
    lexer = shlex.shlex(command.replace("`", " ; ").replace("\n", " ; "), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    segments, current = [], []
    for token in lexer:
        if token and set(token) <= set(";|&()"):
            segments.append(current)
            current = []
        elif token and set(token) <= set("<>&") or token == "$":
            continue  # redirection operators; their target is the next word and is checked as one
        else:
            current.append(token)
    segments.append(current)
    return [seg for seg in segments if seg]


def _check_git(words: list[str]) -> str | None:
    i = 1
    while i < len(words) and words[i].startswith("-"):
        flag = words[i].split("=", 1)[0]
        if flag in GIT_ESCAPES:
            return f"`git {words[i]}` points git outside the worktree; run git without it"
        i += 2 if flag in ("-c",) else 1
    sub = words[i] if i < len(words) else "--help"
    if sub not in GIT_READ_ONLY:
        return f"`git {sub}` writes to the repository; the orchestrator runs every git write (read-only: status, diff, log, show)"
    return None


def _check_bash(command: str, worktree: Path) -> str | None:
    try:
        segments = _segments(command)
    except ValueError:
        return "the command does not parse as shell words (unbalanced quotes?); simplify it"
    for words in segments:
        while words and (words[0] in _WRAPPERS or ("=" in words[0] and not words[0].startswith(("-", "/", "=")))):
            words = words[1:]
        if not words:
            continue
        if Path(words[0]).name == "git":
            reason = _check_git(words)
            if reason:
                return reason
        if words[0] == "cd" and len(words) == 1:
            return "`cd` with no argument goes to the home folder, outside the worktree"
        for token in words[1:]:
            for path in _arg_paths(token):
                if path not in HARMLESS_PATHS and not _inside(path, worktree):
                    return f"{path!r} is outside the worktree {worktree}; work only on files in the worktree"
    return None


def deny_reason(tool: str, tool_input: dict, worktree: str | Path) -> str | None:
    """A one-line reason to refuse this tool call, or None."""
    worktree = Path(worktree)
    tool_input = tool_input or {}
    if tool in FILE_TOOLS:
        path = tool_input.get(FILE_TOOLS[tool])
        if path is None and tool in ("Glob", "Grep", "LS"):
            path = "."
        if path is None:
            return f"{tool} without a {FILE_TOOLS[tool]}; name a file in the worktree"
        if not _inside(str(path), worktree):
            return f"{tool} on {path!r} is outside the worktree {worktree}; work only on files in the worktree"
        if tool in WRITE_TOOLS and _writes_git_dir(str(path), worktree):
            return f"{tool} on {path!r} writes git's own files; the orchestrator runs git"
        pattern = tool_input.get("pattern") if tool == "Glob" else tool_input.get("glob")
        if isinstance(pattern, str) and (pattern.startswith(("/", "~")) or ".." in pattern.split("/")):
            return f"{tool} pattern {pattern!r} reaches outside the worktree; use a relative pattern"
        return None
    if tool == "Bash":
        return _check_bash(str(tool_input.get("command", "")), worktree)
    return None
