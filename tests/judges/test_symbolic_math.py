"""The sympy judge on formulas of RULE-EDIT's rule table (Liu et al., appendix C: areas, perimeters, volumes and
surface areas of 2D and 3D shapes), rewritten as a model might answer, and on step-by-step numeric answers."""

import pytest

from lightning_edit.judges import JudgeInput, SymbolicMathJudge
from lightning_edit.judges.symbolic_math import final_number

# (reference, prediction): each prediction is the same rule in another form
EQUIVALENT = [
    ("A = xy", "A = x*y"),
    ("A = xy", "A = y \\cdot x"),
    ("P = 2(x + y)", "P = 2x + 2y"),
    ("d = \\sqrt{x^2 + y^2}", "d^2 = x^2 + y^2"),
    ("d^2 = x^2 + y^2", "d = sqrt(x^2 + y^2)"),
    ("R = \\frac{x}{y}", "R = x/y"),
    ("A = x^2", "A = x²"),
    ("P = 4x", "P = x + x + x + x"),
    ("d = \\sqrt{2}x", "d = x√2"),
    ("A = \\frac{P^2}{16}", "16A = P^2"),
    ("A = \\frac{1}{2}xy", "A = xy/2"),
    ("P = x + y + z", "P = z + y + x"),
    ("c = \\sqrt{x^2 + y^2}", "c² = x² + y²"),
    ("A = \\frac{\\sqrt{3}}{4}x^2", "A = (sqrt(3)/4) x^2"),
    ("h = \\sqrt{x^2 - (y/2)^2}", "h = (1/2)sqrt(4x^2 - y^2)"),
    ("A = \\frac{\\sqrt{s(s-x)(s-y)(s-z)}}{2}", "A = sqrt(s(s - x)(s - y)(s - z))/2"),
    ("d = \\sqrt{a^2 + b^2 - 2ab \\cos \\theta}", "d = sqrt(a^2 + b^2 - 2*a*b*cos(θ))"),
    ("A = ab \\sin \\theta", "A = a b sin(θ)"),
    ("A = \\frac{1}{2}pq", "A = pq/2"),
    ("P = 4\\sqrt{(p/2)^2 + (q/2)^2}", "P = 2 sqrt(p^2 + q^2)"),
    ("A = \\frac{1}{2}(a + b)h", "A = (a + b) h / 2"),
    ("m = \\frac{a+b}{2}", "m = a/2 + b/2"),
    ("A = \\pi r^2", "A = πr²"),
    ("C = 2\\pi r", "C = 2πr"),
    ("C = \\pi d", "C = 3.1416 d"),
    ("A = \\pi \\left(\\frac{d}{2}\\right)^2", "A = π d^2 / 4"),
    ("A = \\frac{1}{2}r^2\\theta", "A = θ r^2 / 2"),
    ("P = 2r + r\\theta", "P = r(2 + θ)"),
    ("V = lwh", "V = l × w × h"),
    ("SA = 2(lw + lh + wh)", "SA = 2lw + 2lh + 2wh"),
    ("LSA = 2h(l + w)", "LSA = 2hl + 2hw"),
    ("R = \\frac{1}{2} \\sqrt{l^2 + w^2 + h^2}", "4R^2 = l^2 + w^2 + h^2"),
    ("V = s^3", "V = s·s·s"),
    ("SA = 6s^2", "The surface area is SA = 6s^2."),
    ("R = \\frac{s\\sqrt{3}}{2}", "R = \\frac{\\sqrt{3}}{2} s"),
    ("V = \\frac{1}{3}Bh", "V = Bh/3"),
    ("L = \\frac{1}{2}Pl", "L = 0.5 P l"),
    ("V = \\frac{1}{3}\\pi r^2h", "$V = \\frac{\\pi r^2 h}{3}$"),
    ("SA = \\pi r(r + \\sqrt{r^2 + h^2})", "SA = πr^2 + πr√(r^2 + h^2)"),
    ("V = \\frac{4}{3}\\pi r^3", "V = (4/3)πr^3"),
    ("SA = 4\\pi r^2", "SA = 4 π r ^ 2"),
    ("r = d/2", "d = 2r"),
]
# near misses: a wrong constant, a wrong exponent, a swapped or wrong variable, a wrong quantity
DIFFERENT = [
    ("A = xy", "A = x + y"),
    ("P = 2(x + y)", "P = 2x + y"),
    ("d = \\sqrt{x^2 + y^2}", "d = x + y"),
    ("R = \\frac{x}{y}", "R = y/x"),
    ("A = x^2", "A = x^3"),
    ("P = 4x", "P = 3x"),
    ("A = \\frac{P^2}{16}", "A = P^2/8"),
    ("A = \\frac{1}{2}xy", "A = xy"),
    ("A = \\frac{\\sqrt{3}}{4}x^2", "A = (sqrt(3)/2) x^2"),
    ("h = \\sqrt{x^2 - (y/2)^2}", "h = sqrt(x^2 - y^2)"),
    ("A = \\frac{1}{2}(a + b)h", "A = (a + b) h"),
    ("A = \\pi r^2", "A = 2πr"),
    ("C = 2\\pi r", "C = πr"),
    ("A = \\pi \\left(\\frac{d}{2}\\right)^2", "A = πd^2"),
    ("V = lwh", "V = lw"),
    ("SA = 2(lw + lh + wh)", "SA = lw + lh + wh"),
    ("V = s^3", "V = s^2"),
    ("SA = 6s^2", "SA = 4s^2"),
    ("V = \\frac{1}{3}\\pi r^2h", "V = πr^2 h"),
    ("V = \\frac{4}{3}\\pi r^3", "V = (3/4)πr^3"),
    ("V = \\frac{4}{3}\\pi r^3", "V = (4/3)πr^2"),
    ("SA = 4\\pi r^2", "SA = 4πd^2"),
    ("A = ab \\sin \\theta", "A = ab cos(θ)"),
    ("A = \\frac{1}{2}r^2\\theta", "A = r θ / 2"),
    ("V = \\frac{1}{3}Bh", "V = Bh"),
    ("r = \\frac{B}{s}", "r = s/B"),
    ("LSA = 2\\pi rh", "LSA = πrh"),
    ("A = xy", "P = xy"),
    ("d^2 = x^2 + y^2", "d = x^2 + y^2"),
    ("P = 2r + r\\theta", "P = 2r + θ"),
    ("m = \\frac{a+b}{2}", "m = (a - b)/2"),
    ("SA = \\pi r(r + \\sqrt{r^2 + h^2})", "SA = πr(r + h)"),
    ("C = \\pi d", "C = πr"),
    ("d = s\\sqrt{3}", "d = s√2"),
    ("P = 3x", "P = 2x"),
    ("P = 2x + y", "P = x + 2y"),
    ("A = \\frac{1}{2}pq", "A = pq"),
    ("A = x^2 \\sin \\theta", "A = x sin(θ)"),
    ("BA = lw", "BA = lh"),
    ("SA = 2B + ph", "SA = B + ph"),
    ("V = \\frac{1}{3}s^2h", "V = (1/3) s h^2"),
    ("C = 2\\pi r", "C = 2πd"),
]


def test_the_table_is_balanced_and_large_enough():
    assert len(EQUIVALENT) + len(DIFFERENT) >= 60 and len(EQUIVALENT) == len(DIFFERENT)


@pytest.mark.parametrize(
    ("reference", "prediction", "expected"), [(*p, 1.0) for p in EQUIVALENT] + [(*p, 0.0) for p in DIFFERENT]
)
def test_formula_pairs(reference, prediction, expected):
    verdict = SymbolicMathJudge().judge([JudgeInput.of("", reference, prediction)])[0]
    assert verdict.score == expected, verdict.reason


STEPS = [
    ("Area = length × width = 3 × 4 = 12 square units.", 12.0),
    ("Step 1: r = 3. Step 2: A = π r^2 = 9π ≈ 28.27 cm².", 28.27),
    ("We substitute x = 5 and y = 2: P = 2(5 + 2) = 2 × 7 = 14", 14.0),
    ("The volume is 4/3 × π × 2^3, so the answer is \\boxed{33.51}.", 33.51),
    ("V = s^3 = 3^3\nSo V = 27 m^3", 27.0),
    ("The answer is 1,250.5 m^2", 1250.5),
    ("A = 36π", 113.097),
    ("no number here", None),
]


@pytest.mark.parametrize(("text", "number"), STEPS)
def test_final_number_of_step_by_step_answers(text, number):
    found = final_number(text)
    assert found == (None if number is None else pytest.approx(number, rel=1e-4))


def test_numeric_answers_with_tolerances():
    judge = SymbolicMathJudge(rel_tol=1e-3, abs_tol=1e-6)
    items = [
        JudgeInput.of("", "9π", "A = π·3² = 9π ≈ 28.27"),  # rounded, within 1e-3
        JudgeInput.of("", "A = 12", "A = 3 × 4 = 12"),
        JudgeInput.of("", "28.274", "28.4"),  # 4e-3 off, relatively: not within 1e-3, within 1e-2
        JudgeInput.of("", ["14", "14.0"], "so P is 15"),
    ]
    assert [v.score for v in judge.judge(items)] == [1.0, 1.0, 0.0, 0.0]
    assert SymbolicMathJudge(rel_tol=0.01).judge([items[2]])[0].score == 1.0


def test_unparsable_answers_score_zero_with_a_reason_and_bad_references_are_missing():
    judge = SymbolicMathJudge()
    nonsense = judge.judge(
        [
            JudgeInput.of("", "A = xy", "I do not know the formula for this shape"),
            JudgeInput.of("", "A = xy", "A = ((x"),
            JudgeInput.of("", "A = xy", "().__class__.__bases__[0]"),
            JudgeInput.of("", "A = xy", "A = eval(chr(95) + chr(95))"),
            JudgeInput.of("", "A = xy", "(x for x in y)"),
            JudgeInput.of("", "12", "twelve"),
        ]
    )
    assert [v.score for v in nonsense] == [0.0] * 6 and all(v.reason for v in nonsense)
    missing = judge.judge([JudgeInput.of("", "A = = x", "A = x")])[0]
    assert missing.score is None and "reference" in missing.reason


def test_several_references_and_an_expression_for_an_equation():
    judge = SymbolicMathJudge()
    verdicts = judge.judge(
        [
            JudgeInput.of("", ["A = xy", "A = x + y"], "A = x + y"),
            JudgeInput.of("", "A = πr^2", "πr^2"),
            JudgeInput.of("", "πr^2", "A = πr^2"),
        ]
    )
    assert [v.score for v in verdicts] == [1.0, 1.0, 1.0]


def test_a_worked_reference_is_its_final_number():
    judge = SymbolicMathJudge()
    verdicts = judge.judge(
        [
            JudgeInput.of("q", "P = 2 * (15 + 14) = 58", "P = 2 * (15 + 14) = 58"),
            JudgeInput.of("q", "P = 2 * (15 + 14) = 58", "58"),
            JudgeInput.of("q", "P = 2 * (15 + 14) = 58", "P = 15 + 14 = 29"),
            JudgeInput.of("q", "s = (5 + 6 + 7) / 2 = 9; A = sqrt(9 * 4 * 3 * 2) = 14.7", "A = 14.70"),
        ]
    )
    assert [v.score for v in verdicts] == [1.0, 1.0, 0.0, 1.0]


def test_prose_references_are_missing_or_compared_by_exact_match():
    items = [
        JudgeInput.of("q", "twice the sum of its length and width.", "Twice the sum of its length and width"),
        JudgeInput.of("q", "twice the sum of its length and width.", "the sum of its length and width."),
        JudgeInput.of("q", "P = 2 * (x + y).", "P = 2(x + y)"),
        JudgeInput.of("q", "the square of its side length.", "four times its side length."),  # sympy would parse it
    ]
    assert [v.score for v in SymbolicMathJudge().judge(items)] == [None, None, 1.0, None]
    judge = SymbolicMathJudge(prose_references="exact_match")
    assert [v.score for v in judge.judge(items)] == [1.0, 0.0, 1.0, 0.0]
    assert judge.settings()["prose_references"] == "exact_match" and "in words" in judge.convention
    with pytest.raises(ValueError, match="prose_references"):
        SymbolicMathJudge(prose_references="llm")
