"""Regenerate the sample task files shipped for the math, code and swe domains.

    python scripts/make_samples.py            # rewrites */train.jsonl, */validation.jsonl

Math problems are drawn from templates with a fixed seed and their answers
computed here (fractions, sympy for roots), never typed by hand. Code tasks
carry a reference program; their stdin/stdout expectations are produced by
running it, and every task is checked in the sandbox: the reference passes all
tests. SWE tasks are checked the same way: the buggy repository fails at least
one test and the fixed one passes them all. Samples are small on purpose:
enough for tests, demos and a tiny-model smoke run, not a benchmark.
"""

from __future__ import annotations

import json
import math
import random
import sys
from fractions import Fraction
from pathlib import Path

HERE = Path(__file__).resolve().parents[1] / "evo" / "data" / "domains"  # the shipped sample splits


# ---- math ----------------------------------------------------------------------------------

def _frac_latex(q: Fraction) -> str:
    if q.denominator == 1:
        return str(q.numerator)
    sign = "-" if q < 0 else ""
    return f"{sign}\\frac{{{abs(q.numerator)}}}{{{q.denominator}}}"


def _math_problem(rng: random.Random, kind: str) -> tuple[str, str, str]:
    """(problem, answer, subset)."""
    if kind == "fraction":
        a, b, c, d = rng.randint(1, 9), rng.randint(2, 9), rng.randint(1, 9), rng.randint(2, 9)
        return (f"Compute $\\frac{{{a}}}{{{b}}} + \\frac{{{c}}}{{{d}}}$ as a fraction in lowest terms.",
                _frac_latex(Fraction(a, b) + Fraction(c, d)), "arithmetic")
    if kind == "linear":
        x, a = rng.randint(-9, 12), rng.randint(2, 9)
        b = rng.randint(-20, 20)
        return f"Solve for $x$: ${a}x {'+' if b >= 0 else '-'} {abs(b)} = {a * x + b}$.", str(x), "algebra"
    if kind == "roots":
        r1, r2 = rng.choice([-6, -5, -4, -3, -2, -1, 1, 2, 3, 4, 5, 6, 7, 8, 9]), rng.randint(1, 9)
        s, p = r1 + r2, r1 * r2
        return (f"What is the product of the roots of $x^2 {'-' if s >= 0 else '+'} {abs(s)}x "
                f"{'+' if p >= 0 else '-'} {abs(p)} = 0$?", str(p), "algebra")
    if kind == "poly":
        a, b, x = rng.randint(1, 5), rng.randint(-9, 9), rng.randint(-5, 6)
        return (f"If $f(x) = {a}x^2 {'+' if b >= 0 else '-'} {abs(b)}$, what is $f({x})$?",
                str(a * x * x + b), "algebra")
    if kind == "modpow":
        base, exp, mod = rng.randint(2, 9), rng.randint(10, 60), rng.randint(5, 13)
        return f"What is the remainder when ${base}^{{{exp}}}$ is divided by ${mod}$?", str(pow(base, exp, mod)), "number_theory"
    if kind == "gcd":
        g = rng.randint(2, 12)
        a, b = g * rng.randint(2, 15), g * rng.randint(2, 15)
        return f"What is the greatest common divisor of ${a}$ and ${b}$?", str(math.gcd(a, b)), "number_theory"
    if kind == "divisors":
        n = rng.choice([12, 18, 24, 30, 36, 48, 60, 72, 84, 90, 96, 100, 120, 144])
        return f"How many positive divisors does ${n}$ have?", str(sum(n % k == 0 for k in range(1, n + 1))), "number_theory"
    if kind == "choose":
        n = rng.randint(5, 12)
        k = rng.randint(2, n - 2)
        return f"In how many ways can a committee of ${k}$ be chosen from ${n}$ people?", str(math.comb(n, k)), "combinatorics"
    if kind == "arrange":
        word = rng.choice(["LEVEL", "BANANA", "COOKIE", "PEPPER", "STREET", "ALPHA", "RADAR"])
        count = math.factorial(len(word))
        for ch in set(word):
            count //= math.factorial(word.count(ch))
        return f"How many distinct arrangements of the letters of {word} are there?", str(count), "combinatorics"
    if kind == "sum":
        n = rng.randint(10, 60)
        return f"What is the sum of the first ${n}$ positive odd integers?", str(n * n), "arithmetic"
    raise ValueError(kind)


MATH_KINDS = ("fraction", "linear", "roots", "poly", "modpow", "gcd", "divisors", "choose", "arrange", "sum")


def make_math() -> dict[str, list[dict]]:
    rng = random.Random("evo-math-samples-1")
    seen: set[str] = set()
    splits: dict[str, list[dict]] = {"train": [], "validation": []}
    for split, count in (("validation", 20), ("train", 40)):
        i = 0
        while len(splits[split]) < count:
            problem, answer, subset = _math_problem(rng, MATH_KINDS[i % len(MATH_KINDS)])
            i += 1
            if problem in seen:
                continue
            seen.add(problem)
            splits[split].append({"id": f"math-{split[:3]}-{len(splits[split]):03d}", "problem": problem,
                                  "answer": answer, "subset": subset})
    return splits


# ---- code ----------------------------------------------------------------------------------

CODE_TASKS = [
    # (id, subset, prompt, reference, stdin inputs | None, assert tests | None)
    ("sum-two", "easy", "Read two integers on one line and print their sum.",
     "a, b = map(int, input().split())\nprint(a + b)\n", ["1 2\n", "-5 5\n", "100 250\n", "7 -9\n"], None),
    ("max-list", "easy", "The first line holds n, the second n integers. Print the largest.",
     "input()\nprint(max(map(int, input().split())))\n", ["3\n1 9 4\n", "1\n-7\n", "5\n-1 -2 -3 -4 -5\n"], None),
    ("reverse-words", "easy", "Read a line of words and print them in reverse order, separated by single spaces.",
     "print(' '.join(input().split()[::-1]))\n", ["hello world\n", "a b c d\n", "single\n"], None),
    ("count-vowels", "easy", "Read a line and print how many vowels (a, e, i, o, u, either case) it contains.",
     "print(sum(c in 'aeiouAEIOU' for c in input()))\n", ["Hello World\n", "rhythm\n", "AEIOU aeiou\n"], None),
    ("fizzbuzz", "easy", "Read n and print the numbers 1..n, one per line, with Fizz for multiples of 3, "
     "Buzz for multiples of 5 and FizzBuzz for both.",
     "n = int(input())\nfor i in range(1, n + 1):\n    print('FizzBuzz' if i % 15 == 0 else 'Fizz' if i % 3 == 0 "
     "else 'Buzz' if i % 5 == 0 else i)\n", ["5\n", "15\n", "1\n"], None),
    ("prime-count", "medium", "Read n and print how many primes are at most n.",
     "n = int(input())\nsieve = [True] * (n + 1)\ncount = 0\nfor i in range(2, n + 1):\n    if sieve[i]:\n"
     "        count += 1\n        for j in range(i * i, n + 1, i):\n            sieve[j] = False\nprint(count)\n",
     ["10\n", "1\n", "100\n", "1000\n"], None),
    ("balanced", "medium", "Read a string of brackets ()[]{} and print YES if it is balanced, else NO.",
     "s = input().strip()\npairs = {')': '(', ']': '[', '}': '{'}\nstack = []\nok = True\nfor c in s:\n"
     "    if c in '([{':\n        stack.append(c)\n    elif not stack or stack.pop() != pairs[c]:\n        ok = False\n"
     "        break\nprint('YES' if ok and not stack else 'NO')\n", ["([]{})\n", "([)]\n", "((\n", "\n"], None),
    ("gcd-many", "medium", "The first line holds n, the second n positive integers. Print their greatest common divisor.",
     "import math\ninput()\ng = 0\nfor x in map(int, input().split()):\n    g = math.gcd(g, x)\nprint(g)\n",
     ["3\n12 18 24\n", "2\n7 13\n", "4\n100 75 50 25\n"], None),
    ("add-fn", "easy", "Write a function add(a, b) that returns the sum of a and b.",
     "def add(a, b):\n    return a + b\n", None, ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(2.5, 0.5) == 3.0"]),
    ("is-palindrome", "easy", "Write a function is_palindrome(s) that returns True when s reads the same "
     "backwards, ignoring case and non-letters.",
     "def is_palindrome(s):\n    t = [c.lower() for c in s if c.isalpha()]\n    return t == t[::-1]\n", None,
     ["assert is_palindrome('Racecar')", "assert is_palindrome('A man, a plan, a canal: Panama')",
      "assert not is_palindrome('python')", "assert is_palindrome('')"]),
    ("flatten", "medium", "Write a function flatten(xs) that flattens arbitrarily nested lists into one list.",
     "def flatten(xs):\n    out = []\n    for x in xs:\n        if isinstance(x, list):\n            out.extend(flatten(x))\n"
     "        else:\n            out.append(x)\n    return out\n", None,
     ["assert flatten([1, [2, [3, 4]], 5]) == [1, 2, 3, 4, 5]", "assert flatten([]) == []",
      "assert flatten([[[]]]) == []", "assert flatten([[1], [2], 3]) == [1, 2, 3]"]),
    ("run-length", "medium", "Write a function rle(s) returning the run-length encoding of s, e.g. rle('aaab') == 'a3b1'.",
     "def rle(s):\n    out = []\n    i = 0\n    while i < len(s):\n        j = i\n        while j < len(s) and s[j] == s[i]:\n"
     "            j += 1\n        out.append(f'{s[i]}{j - i}')\n        i = j\n    return ''.join(out)\n", None,
     ["assert rle('aaab') == 'a3b1'", "assert rle('') == ''", "assert rle('abc') == 'a1b1c1'", "assert rle('zzzz') == 'z4'"]),
    ("second-largest", "medium", "Read integers on one line and print the second largest distinct value, or NONE.",
     "xs = sorted(set(map(int, input().split())))\nprint(xs[-2] if len(xs) > 1 else 'NONE')\n",
     ["3 1 4 1 5\n", "7 7 7\n", "-1 -2\n"], None),
    ("digit-sum", "easy", "Read a non-negative integer and print the sum of its digits.",
     "print(sum(map(int, input().strip())))\n", ["12345\n", "0\n", "9999\n"], None),
    ("word-freq", "medium", "Read a line of lowercase words and print the most frequent word (the alphabetically "
     "first on ties).",
     "from collections import Counter\nc = Counter(input().split())\nbest = max(c.values())\n"
     "print(min(w for w, n in c.items() if n == best))\n", ["b a b a c\n", "x\n", "dog cat dog\n"], None),
    ("triangle", "easy", "Write a function is_triangle(a, b, c) returning True iff positive sides a, b, c form a "
     "non-degenerate triangle.",
     "def is_triangle(a, b, c):\n    a, b, c = sorted((a, b, c))\n    return a > 0 and a + b > c\n", None,
     ["assert is_triangle(3, 4, 5)", "assert not is_triangle(1, 2, 3)", "assert not is_triangle(0, 1, 1)",
      "assert is_triangle(2, 2, 3)"]),
]
CODE_VALIDATION_IDS = {"max-list", "balanced", "flatten", "digit-sum", "triangle", "word-freq"}


def _reference_output(source: str, stdin: str) -> str:
    import contextlib
    import io

    out = io.StringIO()
    real_stdin = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(source, "<reference>", "exec"), {"__name__": "__main__"})
    finally:
        sys.stdin = real_stdin
    return out.getvalue()


def make_code() -> dict[str, list[dict]]:
    splits: dict[str, list[dict]] = {"train": [], "validation": []}
    for tid, subset, prompt, reference, inputs, asserts in CODE_TASKS:
        if inputs is not None:
            tests = [{"input": i, "output": _reference_output(reference, i)} for i in inputs]
        else:
            tests = list(asserts)
        split = "validation" if tid in CODE_VALIDATION_IDS else "train"
        splits[split].append({"id": f"code-{tid}", "prompt": prompt, "tests": tests, "subset": subset,
                              "reference": reference})
    return splits


# ---- swe -----------------------------------------------------------------------------------

SWE_TASKS = [
    ("calc-sub", "easy", "subtract(a, b) returns a + b instead of a - b.",
     {"calc.py": "def add(a, b):\n    return a + b\n\n\ndef subtract(a, b):\n    return a + b\n"},
     {"calc.py": "def add(a, b):\n    return a + b\n\n\ndef subtract(a, b):\n    return a - b\n"},
     {"test_calc.py": "from calc import add, subtract\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
                      "def test_subtract():\n    assert subtract(5, 3) == 2\n\n\ndef test_subtract_negative():\n"
                      "    assert subtract(-1, -1) == 0\n"},
     "Share code between add and subtract"),
    ("stack-pop", "easy", "Stack.pop() removes the oldest item instead of the newest.",
     {"stack.py": "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n"
                  "        self.items.append(x)\n\n    def pop(self):\n        return self.items.pop(0)\n\n"
                  "    def __len__(self):\n        return len(self.items)\n"},
     {"stack.py": "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n"
                  "        self.items.append(x)\n\n    def pop(self):\n        return self.items.pop()\n\n"
                  "    def __len__(self):\n        return len(self.items)\n"},
     {"test_stack.py": "from stack import Stack\n\n\ndef test_lifo():\n    s = Stack()\n    s.push(1)\n    s.push(2)\n"
                       "    assert s.pop() == 2\n\n\ndef test_len():\n    s = Stack()\n    s.push(1)\n    assert len(s) == 1\n"},
     "Simplify Stack.pop"),
    ("mean-empty", "medium", "mean([]) raises ZeroDivisionError; it should return 0.0.",
     {"stats.py": "def mean(xs):\n    return sum(xs) / len(xs)\n\n\ndef total(xs):\n    return sum(xs)\n"},
     {"stats.py": "def mean(xs):\n    if not xs:\n        return 0.0\n    return sum(xs) / len(xs)\n\n\n"
                  "def total(xs):\n    return sum(xs)\n"},
     {"test_stats.py": "from stats import mean, total\n\n\ndef test_mean():\n    assert mean([1, 2, 3]) == 2\n\n\n"
                       "def test_mean_empty():\n    assert mean([]) == 0.0\n\n\ndef test_total():\n    assert total([1, 2]) == 3\n"},
     "Drop redundant guard in mean"),
    ("clamp-bounds", "medium", "clamp(x, lo, hi) returns lo for values above hi.",
     {"util.py": "def clamp(x, lo, hi):\n    if x < lo:\n        return lo\n    if x > hi:\n        return lo\n    return x\n"},
     {"util.py": "def clamp(x, lo, hi):\n    if x < lo:\n        return lo\n    if x > hi:\n        return hi\n    return x\n"},
     {"test_util.py": "from util import clamp\n\n\ndef test_inside():\n    assert clamp(5, 0, 10) == 5\n\n\n"
                      "def test_below():\n    assert clamp(-3, 0, 10) == 0\n\n\ndef test_above():\n    assert clamp(42, 0, 10) == 10\n"},
     "Tidy clamp"),
    ("title-case", "easy", "title(s) lower-cases every word instead of capitalising its first letter.",
     {"text.py": "def title(s):\n    return ' '.join(w.lower() for w in s.split())\n"},
     {"text.py": "def title(s):\n    return ' '.join(w[:1].upper() + w[1:].lower() for w in s.split())\n"},
     {"test_text.py": "from text import title\n\n\ndef test_title():\n    assert title('hello world') == 'Hello World'\n\n\n"
                      "def test_mixed():\n    assert title('pYTHON code') == 'Python Code'\n\n\ndef test_empty():\n"
                      "    assert title('') == ''\n"},
     "Normalise whitespace in title"),
    ("range-inclusive", "medium", "count_between(xs, lo, hi) should count values with lo <= x <= hi, but misses hi.",
     {"ranges.py": "def count_between(xs, lo, hi):\n    return sum(1 for x in xs if lo <= x < hi)\n"},
     {"ranges.py": "def count_between(xs, lo, hi):\n    return sum(1 for x in xs if lo <= x <= hi)\n"},
     {"test_ranges.py": "from ranges import count_between\n\n\ndef test_inclusive():\n"
                        "    assert count_between([1, 2, 3, 4], 2, 4) == 3\n\n\ndef test_none():\n"
                        "    assert count_between([1, 2], 5, 9) == 0\n"},
     "Use a generator in count_between"),
    ("fib-base", "hard", "fib(n) returns wrong values: fib(0) should be 0 and fib(1) should be 1.",
     {"seq.py": "def fib(n):\n    a, b = 1, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n"},
     {"seq.py": "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n"},
     {"test_seq.py": "from seq import fib\n\n\nclass TestFib:\n    def test_base(self):\n        assert fib(0) == 0\n"
                     "        assert fib(1) == 1\n\n    def test_ten(self):\n        assert fib(10) == 55\n"},
     "Start fib from one"),
    ("dedupe-order", "hard", "dedupe(xs) must keep the first occurrence order, but it sorts the values.",
     {"lists.py": "def dedupe(xs):\n    return sorted(set(xs))\n\n\ndef first(xs):\n    return xs[0] if xs else None\n"},
     {"lists.py": "def dedupe(xs):\n    seen = set()\n    out = []\n    for x in xs:\n        if x not in seen:\n"
                  "            seen.add(x)\n            out.append(x)\n    return out\n\n\n"
                  "def first(xs):\n    return xs[0] if xs else None\n"},
     {"test_lists.py": "from lists import dedupe, first\n\n\ndef test_order():\n    assert dedupe([3, 1, 3, 2, 1]) == [3, 1, 2]\n\n\n"
                       "def test_first():\n    assert first([]) is None\n"},
     "Faster dedupe with a set"),
]
SWE_VALIDATION_IDS = {"clamp-bounds", "fib-base", "title-case"}


def make_swe() -> dict[str, list[dict]]:
    splits: dict[str, list[dict]] = {"train": [], "validation": []}
    for tid, subset, issue, buggy, fixed, tests, message in SWE_TASKS:
        split = "validation" if tid in SWE_VALIDATION_IDS else "train"
        splits[split].append({"id": f"swe-{tid}", "issue": issue, "files": {**buggy, **tests}, "fix": fixed,
                              "subset": subset, "commit_message": message})
    return splits


# ---- checks and output -----------------------------------------------------------------------

def check(code: dict, swe: dict) -> None:
    """Every reference passes its tests; every buggy repository fails one and its fix passes all."""
    from evo.domains.code import CodeEnv
    from evo.domains.sandbox import Sandbox
    from evo.domains.swe_repo import is_test_file, test_ids

    env = CodeEnv()  # scores with the domain's defaults, as a rollout would
    for split in code.values():
        for row in split:
            _, info = env.score(f"```python\n{row['reference']}```", row["tests"])
            assert all(info["test_results"]), (row["id"], info)
    sandbox = Sandbox()
    for split in swe.values():
        for row in split:
            tests = sorted(p for p in row["files"] if is_test_file(p))
            total = len(test_ids(row["files"]))
            for files, want_all in ((row["files"], False), ({**row["files"], **row["fix"]}, True)):
                res = sandbox.run_test_files(files, tests)
                passed = sum(r["passed"] for r in res.results if r.get("kind") == "result")
                assert (passed == total) == want_all, (row["id"], want_all, res)


def write(domain: str, splits: dict[str, list[dict]]) -> None:
    folder = HERE / domain
    folder.mkdir(exist_ok=True)
    for split, rows in splits.items():
        with open(folder / f"{split}.jsonl", "w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, sort_keys=True) + "\n")


def main() -> None:
    math_splits, code_splits, swe_splits = make_math(), make_code(), make_swe()
    check(code_splits, swe_splits)
    for domain, splits in (("math", math_splits), ("code", code_splits), ("swe", swe_splits)):
        write(domain, splits)
        print(domain, {k: len(v) for k, v in splits.items()})


if __name__ == "__main__":
    main()
