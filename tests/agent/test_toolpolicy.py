"""The PreToolUse policy: inside the worktree, no git writes."""

from __future__ import annotations

import pytest

from evo.agent.toolpolicy import deny_reason

ALLOWED = [
    ("Read", {"file_path": "recipe.yaml"}),
    ("Edit", {"file_path": "analyzers/new.py", "old_string": "a", "new_string": "b"}),
    ("Write", {"file_path": "{wt}/memory/search_notes.md"}),
    ("Glob", {"pattern": "**/*.py"}),
    ("Grep", {"pattern": "THRESHOLD"}),
    ("Bash", {"command": "git status && git diff --stat | head -5"}),
    ("Bash", {"command": "git log --oneline -3"}),
    ("Bash", {"command": "python -c \"import yaml; print(yaml.safe_load(open('recipe.yaml')))\" 2>&1"}),
    ("Bash", {"command": "/usr/bin/env python3 analyzers/new.py > /dev/null"}),
    ("Bash", {"command": "cd analyzers && ls"}),
    ("TodoWrite", {"todos": []}),
]
DENIED = [
    ("Read", {"file_path": "/etc/passwd"}, "outside the worktree"),
    ("Write", {"file_path": "../sibling/recipe.yaml", "content": ""}, "outside the worktree"),
    ("Edit", {"file_path": ".git/config"}, "git's own files"),
    ("Glob", {"pattern": "../**/*.py"}, "reaches outside"),
    ("Grep", {"pattern": "x", "path": "/"}, "outside the worktree"),
    ("Bash", {"command": "git commit -am x"}, "`git commit` writes"),
    ("Bash", {"command": "git push origin evo/v3"}, "`git push` writes"),
    ("Bash", {"command": "ls; git reset --hard HEAD~1"}, "`git reset` writes"),
    ("Bash", {"command": "echo $(git checkout main)"}, "`git checkout` writes"),
    ("Bash", {"command": "FOO=1 git notes add -m hi"}, "`git notes` writes"),
    ("Bash", {"command": "git branch -D evo/v1"}, "`git branch` writes"),
    ("Bash", {"command": "git -C /tmp status"}, "`git -C` points git outside"),
    ("Bash", {"command": "cat ~/.ssh/id_rsa"}, "outside the worktree"),
    ("Bash", {"command": "echo x > /tmp/leak"}, "outside the worktree"),
    ("Bash", {"command": "cd .. && rm -rf data"}, "outside the worktree"),
    ("Bash", {"command": "cd"}, "home folder"),
    ("Bash", {"command": "echo 'unbalanced"}, "does not parse"),
]


@pytest.mark.parametrize("tool, args", ALLOWED)
def test_allowed(tool, args, worktree):
    args = {k: v.replace("{wt}", str(worktree)) if isinstance(v, str) else v for k, v in args.items()}
    assert deny_reason(tool, args, worktree) is None


@pytest.mark.parametrize("tool, args, why", DENIED)
def test_denied(tool, args, why, worktree):
    reason = deny_reason(tool, args, worktree)
    assert reason is not None and why in reason


def test_symlink_out_of_the_worktree_is_denied(worktree, tmp_path):
    (tmp_path / "secret.txt").write_text("x")
    (worktree / "link.txt").symlink_to(tmp_path / "secret.txt")
    assert "outside the worktree" in deny_reason("Read", {"file_path": "link.txt"}, worktree)
