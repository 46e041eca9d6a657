"""Final-answer extraction and verification for math-style responses.

Extraction (`extract_answer`): ``boxed`` takes the content of the last
``\\boxed{...}`` (or ``\\fbox{...}``), braces balanced; ``last_number`` takes the
last number in the text (integers, decimals, fractions ``a/b``, thousands
commas); ``auto`` takes the boxed answer when there is one, else the last number.
A response whose ``<think>`` block or last ``\\boxed{`` is still open has no
answer: it was cut off, and a number before the cut is not a final answer.

Verification (`answers_match`): `math-verify` (the Hugging Face parser + sympy
comparison used by open RL math pipelines) when installed, else a sympy
fallback that normalises common LaTeX (``\\frac``, ``\\sqrt``, ``^``, ``\\cdot``,
``\\pi``, ``\\left``/``\\right``, ``\\dfrac``, ``\\%``) and compares tuples element
by element, numerically within 1e-6 relative, or symbolically by simplifying
the difference. Both run without signals in non-main threads (math-verify's
default timeout uses SIGALRM, which only works on the main thread).
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache

_NUMBER = re.compile(r"(?<![\w.])-?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\d])|(?<![\w.])-?\d+(?:\.\d+)?(?:\s*/\s*\d+)?")
_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
_MAX_VERIFY_CHARS = 300  # longer strings are compared literally (sympy can take minutes on them)


def all_boxed(text: str) -> list[str]:
    """Contents of every closed ``\\boxed{...}`` in order, braces balanced."""
    found = []
    for match in _BOX.finditer(text):
        depth, start = 1, match.end()
        for i in range(start, len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    found.append(text[start:i].strip())
                    break
    return found


def extract_boxed(text: str) -> str | None:
    """Content of the last closed ``\\boxed{...}``; None if there is none."""
    boxes = all_boxed(text)
    return boxes[-1] if boxes else None


def has_unclosed_box(text: str) -> bool:
    """True when the last ``\\boxed{`` never closes (a response cut off mid-answer)."""
    matches = list(_BOX.finditer(text))
    if not matches:
        return False
    depth = 1
    for ch in text[matches[-1].end():]:
        depth += ch == "{"
        depth -= ch == "}"
        if depth == 0:
            return False
    return True


def extract_last_number(text: str) -> str | None:
    numbers = _NUMBER.findall(text)
    if not numbers:
        return None
    return re.sub(r"\s+", "", numbers[-1]).replace(",", "")


def open_think(text: str) -> bool:
    return text.count("<think>") > text.count("</think>")


def extract_answer(text: str, mode: str = "auto") -> str:
    """The final answer under `mode` (boxed | last_number | auto), "" when there is none."""
    if open_think(text):
        return ""
    visible = text.rsplit("</think>", 1)[-1] if "</think>" in text else text
    if has_unclosed_box(visible):
        return ""  # cut off while writing the answer; an earlier number is not the answer
    if mode in ("boxed", "auto"):
        boxed = extract_boxed(visible)
        if boxed is not None:
            return boxed
        if mode == "boxed":
            return ""
    if mode in ("last_number", "auto"):
        return extract_last_number(visible) or ""
    raise ValueError(f"extract mode {mode!r} is not boxed, last_number or auto")


@lru_cache(maxsize=1)
def math_verify_available() -> bool:
    try:
        import math_verify  # noqa: F401
    except ImportError:
        return False
    return True


def answers_match(predicted: str, reference: str, verifier: str = "auto") -> bool:
    """Whether `predicted` equals `reference` mathematically (see module docstring)."""
    predicted, reference = predicted.strip(), str(reference).strip()
    if not predicted or not reference:
        return False
    if _normalise_text(predicted) == _normalise_text(reference):
        return True
    if len(predicted) > _MAX_VERIFY_CHARS or len(reference) > _MAX_VERIFY_CHARS:
        return False
    if verifier == "math_verify" or (verifier == "auto" and math_verify_available()):
        return _math_verify_equal(predicted, reference)
    return sympy_equal(predicted, reference)


def _math_verify_equal(predicted: str, reference: str) -> bool:
    from math_verify import parse, verify

    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    gold = parse(f"${reference}$", parsing_timeout=timeout)
    pred = parse(f"${predicted}$", parsing_timeout=timeout)
    if not gold or not pred:
        return sympy_equal(predicted, reference)
    return bool(verify(gold, pred, timeout_seconds=timeout))


def _normalise_text(s: str) -> str:
    s = s.strip().strip("$").strip()
    s = re.sub(r"\\(?:text|mathrm|textbf|mbox)\{([^{}]*)\}", r"\1", s)
    s = s.replace("\\left", "").replace("\\right", "").replace("\\!", "").replace("\\,", "")
    s = s.replace("dfrac", "frac").replace("tfrac", "frac").replace("\\%", "").replace("%", "")
    s = re.sub(r"^[a-zA-Z]\s*=\s*", "", s)  # "x = 5" -> "5"
    return re.sub(r"\s+", "", s).rstrip(".")


def _latex_to_sympy_text(s: str) -> str:
    s = _normalise_text(s)
    for _ in range(5):  # nested fractions / roots, innermost first
        s = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"((\1)/(\2))", s)
        s = re.sub(r"\\frac(\d)(\d)", r"((\1)/(\2))", s)
        s = re.sub(r"\\sqrt\[([^\]]*)\]\{([^{}]*)\}", r"((\2)**(1/(\1)))", s)
        s = re.sub(r"\\sqrt\{([^{}]*)\}", r"sqrt(\1)", s)
    s = s.replace("\\cdot", "*").replace("\\times", "*").replace("\\pi", "pi").replace("^", "**")
    s = s.replace("{", "(").replace("}", ")").replace("\\", "")
    return s


def _split_top_level(s: str) -> list[str]:
    s = s.strip()
    if len(s) >= 2 and s[0] in "([" and s[-1] in ")]":
        inner = s[1:-1]
    else:
        inner = s
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            parts.append(inner[start:i])
            start = i + 1
    parts.append(inner[start:])
    return parts if len(parts) > 1 else [s]


def sympy_equal(predicted: str, reference: str) -> bool:
    """The sympy fallback: element-wise for tuples, numeric within 1e-6, else symbolic."""
    a_parts = _split_top_level(_latex_to_sympy_text(predicted))
    b_parts = _split_top_level(_latex_to_sympy_text(reference))
    if len(a_parts) != len(b_parts):
        return False
    return all(_sympy_scalar_equal(a, b) for a, b in zip(a_parts, b_parts))


def _sympy_scalar_equal(a: str, b: str) -> bool:
    import sympy
    from sympy.parsing.sympy_parser import implicit_multiplication_application, parse_expr, standard_transformations

    transformations = standard_transformations + (implicit_multiplication_application,)
    try:
        ea = parse_expr(a, transformations=transformations, evaluate=True)
        eb = parse_expr(b, transformations=transformations, evaluate=True)
    except Exception:  # sympy raises many kinds on junk input; junk is simply not equal
        return a == b
    try:
        if not ea.free_symbols and not eb.free_symbols:
            va, vb = complex(sympy.N(ea)), complex(sympy.N(eb))
            return abs(va - vb) <= 1e-6 * max(1.0, abs(vb))
        return sympy.simplify(ea - eb) == 0
    except Exception:
        return False


def numeric_value(s: str) -> float | None:
    """A float for a plain numeric answer (``3/4``, ``-2.5``, ``\\frac{1}{2}``), else None."""
    text = _latex_to_sympy_text(s)
    if not re.fullmatch(r"[\d\s.+\-*/()]+", text or "x") or "**" in text:
        return None
    try:
        value = eval(text, {"__builtins__": {}})  # only digits and arithmetic reach here
    except Exception:
        return None
    return float(value) if isinstance(value, (int, float)) else None


def partial_credit(predicted: str, reference: str, correct: bool, verifier: str = "auto") -> float:
    """Continuous credit in [0, 1]: 1 when correct; for tuples the share of matching
    elements; for numbers 1 - |p - r| / max(|r|, 1), floored at 0 (the relative
    error, absolute below 1 so tiny references do not explode it); else 0."""
    if correct:
        return 1.0
    if not predicted:
        return 0.0
    ref_parts = _split_top_level(_normalise_text(reference))
    pred_parts = _split_top_level(_normalise_text(predicted))
    if len(ref_parts) > 1:
        hits = sum(answers_match(p, r, verifier) for p, r in zip(pred_parts, ref_parts))
        return hits / len(ref_parts)
    a, b = numeric_value(predicted), numeric_value(reference)
    if a is None or b is None:
        return 0.0
    return max(0.0, 1.0 - abs(a - b) / max(abs(b), 1.0))
