"""A stand-in for the Claude Code CLI that speaks the SDK's stream-json control protocol.

claude-agent-sdk starts `cli_path --output-format stream-json --input-format
stream-json ...` and talks NDJSON over stdin/stdout. This script plays the CLI:

1. answers the SDK's `initialize` control request (remembering the PreToolUse
   hook callback ids it registers) and reads the user prompt;
2. for each scripted tool call, emits an assistant message with a tool_use
   block, asks the SDK for the hook decision (`hook_callback` control request),
   refuses tools missing from --allowedTools (as `--permission-mode dontAsk`
   does), and only performs the call (Write / Edit / Read / Bash, in its cwd)
   when nothing denied it; the tool_result goes back as a user message;
3. ends with a result message carrying usage and total_cost_usd, then waits for
   the SDK to close stdin.

The script comes from the JSON file named by $FAKE_CLAUDE_SCRIPT:
{"actions": [{"tool": "Write", "input": {...}}, ...], "usage": {...}, "cost": 0.01,
 "log": "/path/log.jsonl", "error": null | "error_max_turns"}.
Everything it saw and decided is appended to the log as JSON lines.
"""

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

_pending = []


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def read():
    if _pending:
        return _pending.pop(0)
    line = sys.stdin.readline()
    return json.loads(line) if line else None


def wait_response(request_id):
    """Read until the control_response for `request_id`; keep anything else for later."""
    held = []
    while True:
        line = sys.stdin.readline()
        if not line:
            return None
        msg = json.loads(line)
        if msg.get("type") == "control_response" and msg["response"].get("request_id") == request_id:
            _pending.extend(held)
            return msg["response"]
        held.append(msg)


def flag(argv, name):
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def perform(tool, args):
    cwd = Path.cwd()
    if tool == "Write":
        path = cwd / args["file_path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(args["content"])
        return f"wrote {args['file_path']}", False
    if tool == "Edit":
        path = cwd / args["file_path"]
        text = path.read_text()
        if args["old_string"] not in text:
            return f"old_string not found in {args['file_path']}", True
        path.write_text(text.replace(args["old_string"], args["new_string"], 1))
        return f"edited {args['file_path']}", False
    if tool == "Read":
        return (cwd / args["file_path"]).read_text(), False
    if tool == "Bash":
        done = subprocess.run(args["command"], shell=True, cwd=cwd, capture_output=True, text=True, timeout=60)
        return done.stdout + done.stderr, done.returncode != 0
    return f"unsupported tool {tool}", True


def main():
    script = json.loads(Path(os.environ["FAKE_CLAUDE_SCRIPT"]).read_text())
    log = open(script["log"], "a")

    def record(kind, **fields):
        log.write(json.dumps({"kind": kind, **fields}) + "\n")
        log.flush()

    argv = sys.argv[1:]
    record("start", argv=argv, cwd=os.getcwd())
    allowed = set(filter(None, (flag(argv, "--allowedTools") or "").split(",")))
    hooks, prompt, counter = {}, None, 0
    while prompt is None:
        msg = read()
        if msg is None:
            return 1
        if msg.get("type") == "control_request":
            if msg["request"].get("subtype") == "initialize":
                hooks = msg["request"].get("hooks") or {}
                record("initialize", hooks=hooks)
            send({"type": "control_response", "response": {"subtype": "success", "request_id": msg["request_id"],
                                                           "response": {"commands": [], "models": []}}})
        elif msg.get("type") == "user":
            prompt = msg["message"]["content"]
            record("prompt", text=prompt)

    session = str(uuid.uuid4())
    send({"type": "system", "subtype": "init", "session_id": session, "cwd": os.getcwd(), "model": "fake-model",
          "tools": sorted(allowed), "claude_code_version": "2.1.999", "permissionMode": flag(argv, "--permission-mode")})
    for i, action in enumerate(script["actions"]):
        tool, args, tool_use_id = action["tool"], action["input"], f"toolu_{i:02d}"
        send({"type": "assistant", "session_id": session, "parent_tool_use_id": None,
              "message": {"id": f"msg_{i}", "model": "fake-model", "role": "assistant",
                          "content": [{"type": "tool_use", "id": tool_use_id, "name": tool, "input": args}]}})
        denied = None
        for matcher in hooks.get("PreToolUse", []):
            pattern = matcher.get("matcher")
            if pattern not in (None, "", "*") and not re.fullmatch(pattern, tool):
                continue
            for callback_id in matcher.get("hookCallbackIds", []):
                counter += 1
                request_id = f"cli_req_{counter}"
                send({"type": "control_request", "request_id": request_id, "request": {
                    "subtype": "hook_callback", "callback_id": callback_id, "tool_use_id": tool_use_id,
                    "input": {"session_id": session, "transcript_path": "", "cwd": os.getcwd(),
                              "hook_event_name": "PreToolUse", "tool_name": tool, "tool_input": args,
                              "tool_use_id": tool_use_id}}})
                response = wait_response(request_id) or {}
                output = response.get("response") or {}
                specific = output.get("hookSpecificOutput") or {}
                if response.get("subtype") == "error":
                    denied = f"hook error: {response.get('error')}"
                elif specific.get("permissionDecision") == "deny" or output.get("decision") == "block":
                    denied = specific.get("permissionDecisionReason") or output.get("reason") or "denied by hook"
        if denied is None and allowed and tool not in allowed:
            denied = f"{tool} is not in --allowedTools (dontAsk)"
        if denied is None:
            content, is_error = perform(tool, args)
        else:
            content, is_error = f"Permission denied: {denied}", True
        record("tool", tool=tool, input=args, denied=denied, is_error=is_error)
        send({"type": "user", "session_id": session, "parent_tool_use_id": None,
              "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use_id,
                                                       "content": content, "is_error": is_error}]}})

    error = script.get("error")
    send({"type": "result", "subtype": error or "success", "is_error": bool(error), "duration_ms": 12,
          "duration_api_ms": 7, "num_turns": len(script["actions"]) + 1, "session_id": session,
          "total_cost_usd": script.get("cost", 0.0), "usage": script.get("usage", {}),
          "result": "done" if not error else "", "errors": [f"fake CLI stopped: {error}"] if error else []})
    record("result", error=error)
    while sys.stdin.readline():  # the SDK closes stdin once it has the result
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
