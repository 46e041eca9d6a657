"""`evo report` as a command: progress only on a terminal, --json clean, --open, bad --out, default place."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time

from report_support import EVO, evo, evo_json


def _run_on_a_terminal(args: list, timeout: float = 120.0) -> tuple[int, str, str]:
    """Run `evo` with stderr on a pseudo-terminal (as in an interactive shell); (rc, stdout, terminal text)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([EVO, *map(str, args)], stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL,
                            env={**os.environ, "TERM": "xterm-256color", "COLUMNS": "120"})
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    out = proc.stdout.read().decode()
    proc.wait(timeout=10)
    os.close(master)
    return proc.returncode, out, seen.decode(errors="replace")


def test_progress_shows_on_a_terminal_and_nowhere_else(workspace, tmp_path):
    root = workspace["root"]
    rc, out, terminal = _run_on_a_terminal(["report", "-C", root, "--out", tmp_path / "a.html"])
    assert rc == 0 and "wrote" in out
    assert "reading versions" in terminal, terminal

    rc, out, terminal = _run_on_a_terminal(["report", "-C", root, "--out", tmp_path / "b.html", "--json"])
    assert rc == 0 and json.loads(out)["versions"] == len(workspace["rows"])
    assert "reading versions" not in terminal and terminal.strip() == "", terminal

    piped = evo("report", "-C", root, "--out", tmp_path / "c.html")
    assert piped.stderr == "" and piped.stdout.startswith("wrote ")


def test_open_hands_the_file_to_the_browser(workspace, tmp_path):
    opened = tmp_path / "opened.txt"
    browser = tmp_path / "fake-browser"
    browser.write_text(f"#!{sys.executable}\nimport sys\nopen({str(opened)!r}, 'w').write(sys.argv[1])\n")
    browser.chmod(0o755)
    out = tmp_path / "r.html"
    proc = evo("report", "-C", workspace["root"], "--out", out, "--open", "--json", env={"BROWSER": str(browser)})
    assert json.loads(proc.stdout)["opened"] is True
    for _ in range(50):
        if opened.exists():
            break
        time.sleep(0.1)
    assert opened.read_text() == out.as_uri()


def test_bad_out_or_workspace_is_a_clear_error_and_writes_nothing(workspace, tmp_path):
    folder = tmp_path / "a-folder"
    folder.mkdir()
    proc = evo("report", "-C", workspace["root"], "--out", folder, check=False)
    assert proc.returncode != 0 and "is a directory" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert list(folder.iterdir()) == []
    outside = evo("report", "-C", tmp_path, check=False)
    assert outside.returncode == 1 and "not" in outside.stderr and "Traceback" not in outside.stderr


def test_default_out_is_inside_the_git_ignored_evo_folder(workspace_copy):
    written = evo_json("report", "-C", workspace_copy)
    assert written["path"] == str(workspace_copy / ".evo" / "report.html")
    status = subprocess.run(["git", "status", "--porcelain"], cwd=workspace_copy, capture_output=True, text=True).stdout
    assert status == "", f"the report dirtied the workspace:\n{status}"


def test_the_ci_workflow_uploads_the_report_on_every_pull_request(workspace_copy):
    import yaml

    workflow = yaml.safe_load((workspace_copy / ".github" / "workflows" / "evo-gate.yml").read_text())
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert "pull_request" in triggers
    job = workflow["jobs"]["cheap-checks"]
    assert "if" not in job, "the cheap job must run on every PR, not only on approved ones"
    steps = {s.get("name"): s for s in job["steps"]}
    upload = steps["Upload the report"]
    assert upload["uses"].startswith("actions/upload-artifact@") and upload["with"]["path"] == "evo-report/"
    # The report step's own command line, run as the runner would in the checkout.
    subprocess.run(["bash", "-euo", "pipefail", "-c", steps["Report"]["run"]], cwd=workspace_copy, check=True,
                   env={**os.environ, "PATH": f"{os.path.dirname(EVO)}:{os.environ['PATH']}"}, capture_output=True)
    assert (workspace_copy / "evo-report" / "index.html").stat().st_size > 1_000_000
    assert sorted(p.name for p in (workspace_copy / "evo-report" / "png").glob("*.png"))
