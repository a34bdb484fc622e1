"""Equivalence of formulas and numbers with sympy, for rule answers such as ``A = xy`` or ``V = (4/3)πr^3``.

Parsing accepts the forms rule answers take: ``A = x*y``, ``P = 2(x+y)``, ``V = (4/3)πr^3``, ``d^2 = x^2 + y^2``,
LaTeX-ish ``\\frac{a}{b}``, ``\\sqrt{x}``, ``\\cdot``, ``^``, implicit multiplication (``lwh``, ``2πr``), unicode
``π θ √ ² ³ × ·``, and a formula inside a sentence ("The area is A = lw."). Names of at most three letters are split
into one-letter variables (``lwh`` is l*w*h); longer names (``side``, ``Area``) stay whole, as does the name on the
left of ``=`` (``SA``, ``LSA``). Every variable is a positive real (lengths, areas, angles).

Decisions:

- two expressions are equivalent when ``simplify(a - b) == 0``, or else when they agree (within the tolerance) at
  ``n_points`` random points (uniform in [0.5, 3.5], seeded with ``seed``);
- an equation is compared as an equation: both are solved for the quantity on the reference's left (the one
  variable in it), and the solution sets must match; ``d^2 = x^2 + y^2`` and ``d = sqrt(x^2 + y^2)`` are therefore
  equivalent (d is positive). An answer that never gives that quantity is not equivalent; the name matters
  (``Area = lw`` does not answer ``A = lw``). Equations the solver cannot handle are equivalent when their
  ``lhs - rhs`` are proportional. An expression answer to an equation reference (``πr^2`` for ``A = πr^2``) is
  read as giving the reference's quantity;
- a numeric reference (or a worked one, ``P = 2 * (4 + 3) = 14``: its final number) is compared with the final
  number of the prediction (a step-by-step answer's last result:
  ``\\boxed{}``, else the value after the last ``=``, else the last number not in an exponent), within ``rel_tol``
  and ``abs_tol`` (``math.isclose``); the same tolerance applies at the random points, so ``3.14d`` matches ``πd``
  with the default 1e-3.

A prediction that cannot be parsed scores 0 with the reason; a reference that cannot be parsed gives a missing
verdict (the benchmark's fault, not the model's); so does a reference in words (three words in a row and no ``=``: a
rule's description, which sympy would read as a product of letters), unless ``prose_references`` asks for exact
match. Nothing raises. sympy's parser evaluates its text as Python, so a text is first restricted to formula
characters (no quotes, brackets, attribute dots, ``__`` or Python keywords) and parsed with a namespace of sympy's
functions only: every other name becomes a symbol.
"""

from __future__ import annotations

import keyword
import math
import random
import re
from typing import Any, Literal

import sympy
from sympy.parsing.sympy_parser import (
    convert_xor,
    implicit_application,
    implicit_multiplication,
    parse_expr,
    split_symbols_custom,
    standard_transformations,
)

from lightning_edit.judges.base import Judge, JudgeInput, Verdict
from lightning_edit.judges.exact_match import normalize_answer

_FUNCTIONS = {
    "sqrt": sympy.sqrt, "cbrt": sympy.cbrt, "sin": sympy.sin, "cos": sympy.cos, "tan": sympy.tan, "exp": sympy.exp,
    "log": sympy.log, "ln": sympy.log, "abs": sympy.Abs, "min": sympy.Min, "max": sympy.Max, "pi": sympy.pi,
}  # fmt: skip
_GREEK = {
    "π": "pi", "θ": "theta", "α": "alpha", "β": "beta", "γ": "gamma", "φ": "phi", "ρ": "rho", "λ": "lamda",
    "μ": "mu", "ω": "omega", "τ": "tau",
}  # fmt: skip
_GREEK_NAMES = {"eta", "chi", "phi", "psi", "mu", "nu", "xi", "rho", "tau", *_GREEK.values()}
_GLOBALS: dict[str, Any] = {
    **_FUNCTIONS,
    **{name: getattr(sympy, name) for name in ("Symbol", "Integer", "Float", "Rational", "Function", "Number")},
}
_LETTERS = {c: sympy.Symbol(c, positive=True) for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"}
_TRANSFORMATIONS = standard_transformations + (
    split_symbols_custom(lambda name: len(name) <= 3 and "_" not in name and name not in _GREEK_NAMES),
    implicit_multiplication,
    implicit_application,
    convert_xor,
)
_SAFE = re.compile(r"^[A-Za-z0-9_ +\-*/^().,=]*$")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_NUMBER = re.compile(r"(?<![\^\w.])-?\d+(?:,\d{3})*(?:\.\d+)?(?:\s*/\s*\d+(?![\d.]))?")
_EQUATION = re.compile(r"[A-Za-z]\w*(?:\^\d+|[²³])?\s*=\s*[^=\n]+?(?=\s*(?:[.;](?:\s|$)|,\s+[a-z]|\n|$))")
_MAX_LENGTH = 300
_PROSE = re.compile(r"[A-Za-z]{2,}\s+[A-Za-z]{2,}\s+[A-Za-z]{2,}")  # three words in a row: a description


class UnparsableError(ValueError):
    """A text that is not a formula or number this judge reads."""


def _braced(text: str, start: int) -> tuple[str, int]:
    """The content of the ``{...}`` group opening at ``text[start]`` and the index after it."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start + 1 : i], i + 1
    raise UnparsableError("unbalanced braces")


def _latex(text: str) -> str:
    """``\\frac``, ``\\sqrt`` and ``\\text`` groups rewritten with parentheses (nested groups too)."""
    command = re.compile(r"\\(d?t?frac|sqrt|text|mathrm|operatorname)\s*(\[[^\]]*\])?\s*(?=\{)")
    while match := command.search(text):
        first, end = _braced(text, match.end())
        name = match.group(1)
        root = match.group(2)
        if name.endswith("frac"):
            second, end = _braced(text, end)
            replacement = f" (({_latex(first)})/({_latex(second)})) "
        elif name == "sqrt":
            replacement = f" (({_latex(first)})**(1/({root[1:-1]}))) " if root else f" sqrt({_latex(first)}) "
        else:
            replacement = f" {first} "
        text = text[: match.start()] + replacement + text[end:]
    return text


def normalize(text: str) -> str:
    """The text in sympy's syntax (see the module docstring), or :class:`UnparsableError`."""
    text = text.strip().rstrip(".").strip()
    text = re.sub(r"\\left|\\right|\\[,;:! ]|\$|\\\(|\\\)|\\\[|\\\]", " ", text)
    text = _latex(text)
    for symbol, plain in {"\\cdot": "*", "\\times": "*", "×": "*", "·": "*", "∗": "*", "\\div": "/", "÷": "/"}.items():
        text = text.replace(symbol, plain)
    text = text.replace("−", "-").replace("²", "^2").replace("³", "^3").replace("⁴", "^4")
    for letter, name in _GREEK.items():
        text = text.replace(letter, f" {name} ")
    text = re.sub(r"√\s*(\d+(?:\.\d+)?|[A-Za-z])", r" sqrt(\1)", text).replace("√", " sqrt")
    text = re.sub(r"\\([A-Za-z]+)", r" \1 ", text).replace("{", "(").replace("}", ")")
    text = re.sub(r"(?<![\w.])([A-Za-z])(\d+)\b", r"\1_\2", text)  # b1 is b_1, not b*1
    if not _SAFE.match(text) or "__" in text or re.search(r"(?<!\d)\.|\.(?!\d)", text):
        raise UnparsableError(f"unexpected characters in {text.strip()!r}")
    if any(keyword.iskeyword(word) for word in re.findall(r"[A-Za-z_]\w*", text)):
        raise UnparsableError(f"a Python keyword in {text.strip()!r}")  # sympy evaluates the text as Python
    return text


def _expression(text: str) -> sympy.Expr:
    if not text.strip():
        raise UnparsableError("empty expression")
    try:
        expression = parse_expr(
            text, local_dict=dict(_LETTERS), global_dict=dict(_GLOBALS), transformations=_TRANSFORMATIONS
        )
    except Exception as error:  # sympy raises anything from SyntaxError to TypeError on bad input
        raise UnparsableError(f"{text.strip()!r} is not a formula ({type(error).__name__})") from error
    if not isinstance(expression, sympy.Expr):
        raise UnparsableError(f"{text.strip()!r} is not an expression")
    return expression.subs({s: sympy.Symbol(s.name, positive=True) for s in expression.free_symbols})


def parse(text: str) -> sympy.Expr | sympy.Eq:
    """A formula, equation or number as sympy reads it, or :class:`UnparsableError`."""
    if len(text) > _MAX_LENGTH:
        raise UnparsableError(f"longer than {_MAX_LENGTH} characters")
    sides = normalize(text).split("=")
    if len(sides) > 2:
        raise UnparsableError("more than one '='")
    if len(sides) == 1:
        return _expression(sides[0])
    left, right = sides
    lhs = sympy.Symbol(left.strip(), positive=True) if _NAME.match(left.strip()) else _expression(left)
    return sympy.Eq(lhs, _expression(right), evaluate=False)


def _looks_like_prose(text: str) -> bool:
    """Two words in a row, neither a function or Greek name: a sentence, not a formula."""
    known = set(_FUNCTIONS) | _GREEK_NAMES
    words = re.findall(r"\b([A-Za-z]{2,})\s+(?=([A-Za-z]{2,})\b)", normalize(text))
    return any(a not in known and b not in known for a, b in words)


def _candidates(text: str) -> list[str]:
    """Where a formula may be in an answer: ``\\boxed{}``, math segments, the whole text, equations in lines."""
    found = []
    for match in re.finditer(r"\\boxed\s*(?=\{)", text):
        found.append(_braced(text, match.end())[0])
    found += reversed([a or b for a, b in re.findall(r"\$+([^$]+)\$+|\\\((.+?)\\\)", text)])
    found.append(text)
    for line in reversed(text.strip().splitlines()):
        found += reversed(_EQUATION.findall(line))
    return found


def parse_answer(text: str) -> sympy.Expr | sympy.Eq:
    """The formula of an answer that may hold prose around it (see :func:`_candidates`)."""
    errors = []
    for candidate in _candidates(text):
        try:
            if _looks_like_prose(candidate):
                raise UnparsableError("prose, not a formula")
            return parse(candidate)
        except UnparsableError as error:
            errors.append(str(error))
    raise UnparsableError(errors[-1] if errors else "no formula found")


def final_number(text: str) -> float | None:
    """The final number of a (step-by-step) answer: ``\\boxed{}``, else the value after the last ``=`` or ``≈``,
    else the last number that is not an exponent; None if there is none."""
    boxed = [_braced(text, m.end())[0] for m in re.finditer(r"\\boxed\s*(?=\{)", text)]
    tail = re.split(r"=|≈", text)[-1] if re.search(r"=|≈", text) else None
    for candidate in [*boxed[-1:], *([tail.strip().split("\n")[0].rstrip(".")] if tail else [])]:
        try:
            value = parse(candidate)
        except UnparsableError:
            continue
        if isinstance(value, sympy.Expr) and not value.free_symbols and value.is_real:
            return float(value)
    numbers = _NUMBER.findall(text)
    if not numbers:
        return None
    number = numbers[-1].replace(",", "")
    numerator, _, denominator = number.partition("/")
    return float(numerator) / float(denominator) if denominator else float(numerator)


class SymbolicMathJudge(Judge):
    """1 if the prediction is equivalent to a reference (formula, equation or number), else 0; see the module.

    Args:
        rel_tol: relative tolerance of numeric comparisons (answers, and formulas at the random points).
        abs_tol: absolute tolerance of the same.
        n_points: random points of the numeric check.
        seed: seed of the random points.
        prose_references: a reference in words (a rule's description), which sympy cannot read, gives a
            ``missing`` verdict, or is compared by ``exact_match`` (SQuAD normalisation).
    """

    convention = "1 if the answer is equivalent to a reference by sympy (simplification, else random points)"

    def __init__(
        self,
        rel_tol: float = 1e-3,
        abs_tol: float = 1e-6,
        n_points: int = 8,
        seed: int = 0,
        prose_references: Literal["missing", "exact_match"] = "missing",
        cache_dir: str | None = None,
    ):
        super().__init__(cache_dir)
        if prose_references not in ("missing", "exact_match"):
            raise ValueError(f"prose_references={prose_references!r}: one of missing, exact_match")
        self.rel_tol = rel_tol
        self.abs_tol = abs_tol
        self.n_points = n_points
        self.seed = seed
        self.prose_references = prose_references
        if prose_references == "exact_match":
            self.convention += "; a reference in words by SQuAD exact match"

    def settings(self) -> dict[str, Any]:
        return {
            "rel_tol": self.rel_tol,
            "abs_tol": self.abs_tol,
            "n_points": self.n_points,
            "seed": self.seed,
            "prose_references": self.prose_references,
        }

    def evaluate(self, items: list[JudgeInput]) -> list[Verdict]:
        return [self._verdict(item) for item in items]

    def _verdict(self, item: JudgeInput) -> Verdict:
        reasons = []
        for reference in item.references:
            if _PROSE.search(reference) and "=" not in reference:  # words, which sympy would read as symbols
                if self.prose_references == "missing":
                    return Verdict(None, f"reference {reference!r} is words, not a formula or number")
                if normalize_answer(item.prediction) == normalize_answer(reference):
                    return Verdict(1.0, f"matches the reference in words {reference!r}")
                reasons.append(f"does not match the reference in words {reference!r}")
                continue
            try:
                expected = _reference(reference)
            except UnparsableError as error:
                return Verdict(None, f"reference {reference!r} cannot be parsed: {error}")
            try:
                equal, reason = self._compare(item.prediction, expected)
            except UnparsableError as error:
                return Verdict(0.0, f"prediction cannot be parsed: {error}")
            if equal:
                return Verdict(1.0, reason)
            reasons.append(reason)
        return Verdict(0.0, "; ".join(reasons))

    def _compare(self, prediction: str, expected: sympy.Expr | sympy.Eq) -> tuple[bool, str]:
        if isinstance(expected, sympy.Eq) and not expected.rhs.free_symbols:
            expected = expected.rhs  # an instance's answer, "A = 12": its number
        if isinstance(expected, sympy.Expr) and not expected.free_symbols:
            value = final_number(prediction)
            if value is None:
                raise UnparsableError("no number in the prediction")
            close = self._close(value, complex(expected))
            return close, f"{value:g} {'is' if close else 'is not'} {float(expected):g} within the tolerance"
        answer = parse_answer(prediction)
        if isinstance(answer, sympy.Expr) and isinstance(expected, sympy.Expr):
            return self._same_expression(answer, expected)
        return self._same_equation(answer, expected)

    def _close(self, a: complex, b: complex) -> bool:
        return abs(a - b) <= max(self.rel_tol * max(abs(a), abs(b)), self.abs_tol)

    def _same_expression(self, a: sympy.Expr, b: sympy.Expr) -> tuple[bool, str]:
        try:
            if sympy.simplify(a - b) == 0:
                return True, "equivalent by simplification"
        except Exception:  # simplify may fail on exotic input; the numeric check decides
            pass
        rng = random.Random(self.seed)
        symbols = sorted(a.free_symbols | b.free_symbols, key=lambda s: s.name)
        checked = 0
        for _ in range(self.n_points):
            point = {s: rng.uniform(0.5, 3.5) for s in symbols}
            try:
                va = complex(a.evalf(subs=point))
                vb = complex(b.evalf(subs=point))
            except (TypeError, ValueError, ZeroDivisionError):
                continue  # not a number at this point (a pole, a symbol left over)
            if not (math.isfinite(abs(va)) and math.isfinite(abs(vb))):
                continue
            if not self._close(va, vb):
                where = ", ".join(f"{s}={v:.3g}" for s, v in point.items())
                return False, f"{a} differs from {b} at {where}"
            checked += 1
        if checked == 0:
            return False, f"{a} and {b} could not be evaluated at any point"
        return True, f"{a} equals {b} at {checked} random points"

    def _same_equation(self, answer: sympy.Expr | sympy.Eq, expected: sympy.Expr | sympy.Eq) -> tuple[bool, str]:
        target = _quantity(expected) if isinstance(expected, sympy.Eq) else _quantity(answer)
        if target is None:
            if not (isinstance(answer, sympy.Eq) and isinstance(expected, sympy.Eq)):
                return False, "an expression cannot answer an equation without a single quantity on its left"
            return self._proportional(answer, expected)
        answer, expected = (x if isinstance(x, sympy.Eq) else sympy.Eq(target, x) for x in (answer, expected))
        if target not in answer.free_symbols:
            return False, f"the prediction does not give {target}"
        try:
            solutions = sympy.solve(answer, target), sympy.solve(expected, target)
        except Exception:  # solve raises NotImplementedError and others on what it cannot handle
            solutions = [], []
        if not (solutions[0] and solutions[1]):
            return self._proportional(answer, expected)
        if len(solutions[0]) != len(solutions[1]):
            return False, f"{target} = {solutions[0]} against {solutions[1]}"
        for a, b in zip(solutions[0], solutions[1]):
            same, reason = self._same_expression(a, b)
            if not same:
                return False, f"solved for {target}: {reason}"
        return True, f"solved for {target}: {reason}"

    def _proportional(self, answer: sympy.Eq, expected: sympy.Eq) -> tuple[bool, str]:
        ratio = sympy.simplify((answer.lhs - answer.rhs) / (expected.lhs - expected.rhs))
        if ratio.free_symbols or ratio == 0:
            return False, "the equations are not proportional"
        return True, f"the equations are proportional (factor {ratio})"


def _reference(text: str) -> sympy.Expr | sympy.Eq:
    """A reference as :func:`parse` reads it; a worked answer (``P = 2 * (4 + 3) = 14``, ``s = ...; A = ...``) is
    its final number."""
    try:
        return parse(text)
    except UnparsableError:
        if text.count("=") < 2 or (value := final_number(text)) is None:
            raise
        return sympy.Float(value) if value != int(value) else sympy.Integer(int(value))


def _quantity(formula: sympy.Expr | sympy.Eq) -> sympy.Symbol | None:
    """The one variable on the left of an equation (``d`` in ``d^2 = ...``), or None."""
    if not isinstance(formula, sympy.Eq) or len(formula.lhs.free_symbols) != 1:
        return None
    return next(iter(formula.lhs.free_symbols))
