"""Answer extraction and verification, with math-verify and with the sympy fallback."""

from __future__ import annotations

import threading

import pytest

from evo.domains import answers
from evo.domains.answers import answers_match, extract_answer, partial_credit

VERIFIERS = ["sympy"] + (["math_verify"] if answers.math_verify_available() else [])


@pytest.mark.parametrize("text, mode, expected", [
    ("so the answer is \\boxed{\\frac{1}{2}}.", "boxed", "\\frac{1}{2}"),
    ("first \\boxed{3}, finally \\boxed{x^{2}+1}", "boxed", "x^{2}+1"),
    ("no box, the total is 1,234 apples", "boxed", ""),
    ("no box, the total is 1,234 apples", "last_number", "1234"),
    ("ratio 3/4 then -2.5", "last_number", "-2.5"),
    ("it is 7 and \\boxed{9}", "auto", "9"),
    ("it is 7", "auto", "7"),
    ("<think>maybe 12", "auto", ""),  # reasoning cut off: no final answer
    ("<think>try 5</think> answer \\boxed{6}", "auto", "6"),
    ("we get 8 so \\boxed{1", "auto", ""),  # cut off inside the box: 8 is not the answer
])
def test_extraction(text, mode, expected):
    assert extract_answer(text, mode) == expected


@pytest.mark.parametrize("verifier", VERIFIERS)
@pytest.mark.parametrize("predicted, reference, same", [
    ("0.5", "\\frac{1}{2}", True),
    ("\\dfrac{1}{2}", "\\frac12", True),
    ("2\\sqrt{2}", "\\sqrt{8}", True),
    ("(1, 2)", "(1,2)", True),
    ("x = 5", "5", True),
    ("\\frac{\\pi}{2}", "\\pi/2", True),
    ("3", "4", False),
    ("(1, 3)", "(1, 2)", False),
    ("", "4", False),
])
def test_verification(verifier, predicted, reference, same):
    assert answers_match(predicted, reference, verifier) is same


def test_verification_works_off_the_main_thread():
    """math-verify's default timeout uses SIGALRM, which raises off the main thread."""
    results = []
    worker = threading.Thread(target=lambda: results.append(answers_match("\\frac{2}{4}", "0.5")))
    worker.start()
    worker.join()
    assert results == [True]


def test_partial_credit():
    assert partial_credit("4", "4", True) == 1.0
    assert partial_credit("8", "10", False) == pytest.approx(0.8)
    assert partial_credit("(1, 3)", "(1, 2)", False) == 0.5
    assert partial_credit("", "10", False) == 0.0
    assert partial_credit("banana", "10", False) == 0.0
