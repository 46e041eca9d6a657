"""Find the program in a response: fenced Markdown blocks and ``<tool>python`` calls.

Shared by the code domain (the answer is a program) and the math domain's code
interpreter (a program is a tool call). A fence that opens and never closes is
reported as ``unclosed``: the response was cut off mid-program, which is a
format failure, not something to run.
"""

from __future__ import annotations

import re

PYTHON_LANGS = ("python", "py", "python3", "")
_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)[^\n]*\n", re.M)
_CLOSE = re.compile(r"^[ \t]*```[ \t]*$", re.M)
_TOOL = re.compile(r"<tool>\s*python\b[ \t]*\n?(.*?)(?:</tool>|\Z)", re.S)


def fenced_blocks(text: str) -> tuple[list[tuple[str, str]], bool]:
    """All closed ``` blocks as (language, code), and whether a last fence is left open."""
    blocks: list[tuple[str, str]] = []
    pos = 0
    while True:
        opening = _FENCE.search(text, pos)
        if not opening:
            return blocks, False
        closing = _CLOSE.search(text, opening.end())
        if not closing:
            return blocks, True
        blocks.append((opening.group(1).lower(), text[opening.end():closing.start()]))
        pos = closing.end()


def last_python_block(text: str, langs: tuple[str, ...] = PYTHON_LANGS) -> tuple[str | None, str]:
    """The last closed block in one of `langs`: (code, "ok") | (None, "none") | (None, "unclosed")."""
    blocks, open_fence = fenced_blocks(text)
    python = [code for lang, code in blocks if lang in langs]
    if python:
        return python[-1], "ok"
    return None, "unclosed" if open_fence else "none"


def tool_call(text: str) -> str | None:
    """The code of the last ``<tool>python ...</tool>`` call (closing tag optional: a stop string may eat it)."""
    calls = _TOOL.findall(text)
    return calls[-1].strip("\n") if calls else None
