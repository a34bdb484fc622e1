"""The 79 geometry rules of RULE-EDIT (ICLR 2026 submission, appendix C: 44 2D rules, Table 4; 35 3D rules, Table 5).

Each rule is a formula over named variables, written once as text that is both displayed (the edit targets) and
parsed by sympy (:meth:`Rule.equation`): ``*`` for products, ``^`` for powers, ``π``, ``sqrt``, ``sin``/``cos`` of
an angle, ``min``/``max``. Every rule also has a natural-language description and a counterfactual formula and
description (a plausible error: a wrong constant, a missing factor, a swapped operation, a wrong exponent), the
variables with their meaning and the ranges instances are drawn from, and the constraints that make a shape valid.
Where the paper's table is ambiguous or wrong, the choice is written in the rule's ``note``.

Table 5 lists 36 rows under a caption of 35 rules (the paper's text: 79 rules in all); the sphere's radius
``r = d/2`` repeats the circle's radius rule word for word and is left out (:data:`OMITTED`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property

import sympy
from sympy.parsing.sympy_parser import convert_xor, parse_expr, standard_transformations

FUNCTIONS = {"sqrt": sympy.sqrt, "sin": sympy.sin, "cos": sympy.cos, "min": sympy.Min, "max": sympy.Max}
IDENTIFIER = re.compile(r"[^\W\d]\w*")


def parse(text: str) -> sympy.Expr:
    """A formula side as a sympy expression; every name but the functions and ``π`` is a positive real symbol."""
    names = {name: sympy.Symbol(name, positive=True) for name in IDENTIFIER.findall(text) if name not in FUNCTIONS}
    names.pop("π", None)
    local = names | FUNCTIONS | {"π": sympy.pi}
    return parse_expr(text, local_dict=local, transformations=standard_transformations + (convert_xor,))


@dataclass(frozen=True)
class Variable:
    """A variable of a rule's formula.

    Args:
        symbol: its name in the formula (``x``, ``θ``).
        meaning: what it is (``length``).
        low: the smallest value an instance draws.
        high: the largest value an instance draws.
        step: instances draw ``low + k * step``; a step below 1 gives decimals (radians).
        unit: ``degrees`` for an angle given in degrees (converted to radians when evaluated), else empty.
    """

    symbol: str
    meaning: str
    low: float = 2
    high: float = 15
    step: float = 1
    unit: str = ""


@dataclass(frozen=True)
class Rule:
    """One rule: a formula, its description, their counterfactuals and how instances are drawn.

    Args:
        id: the rule's number (its folder in the generated dataset).
        key: ``shape.property``.
        shape: the shape family (triangle variants share ``triangle``): locality neighbours of the same shape.
        subject: the shape as the prompts name it (``right triangle``).
        property: the property (``area``); ``quantity`` is how a question names it (default: ``property``).
        dimension: ``2D`` or ``3D``.
        formula: ``lhs = rhs`` (the paper's left-hand symbol).
        description: what the formula says, as a phrase completing "the area of a rectangle is ...".
        counterfactual: the edited formula, ``lhs = rhs`` with the same left-hand side.
        counterfactual_description: the edited description.
        variables: the input variables, in the order instances give them.
        given: the data of a prompt, with ``{symbol}`` per input variable (``a length of {x} and a width of {y}``).
        formula_given: the data of the formula prompt when it names more than the inputs (default: ``given``).
        definitions: auxiliary quantities ``(symbol, expression)`` the formula uses, computed from the inputs in order.
        constraints: inequalities over the inputs that a valid shape satisfies.
        qualifier: words after the subject in description prompts (``given its three sides``).
        note: how an ambiguity or an error of the paper's table was resolved.
    """

    id: int
    key: str
    shape: str
    subject: str
    property: str
    dimension: str
    formula: str
    description: str
    counterfactual: str
    counterfactual_description: str
    variables: tuple[Variable, ...]
    given: str
    quantity: str = ""
    formula_given: str = ""
    definitions: tuple[tuple[str, str], ...] = ()
    constraints: tuple[str, ...] = ()
    qualifier: str = ""
    note: str = ""

    @property
    def lhs(self) -> str:
        """The left-hand side of the formula as written (``d^2``)."""
        return self.formula.partition("=")[0].strip()

    def rhs_text(self, counterfactual: bool = False) -> str:
        """The right-hand side as written, of the true or the counterfactual formula."""
        return (self.counterfactual if counterfactual else self.formula).partition("=")[2].strip()

    def equation(self, counterfactual: bool = False) -> sympy.Eq:
        """The formula as a sympy equation ``lhs = rhs`` (definitions not substituted)."""
        return sympy.Eq(parse(self.lhs), parse(self.rhs_text(counterfactual)), evaluate=False)

    def expression(self, counterfactual: bool = False) -> sympy.Expr:
        """The right-hand side over the input variables (definitions substituted; angles in the variables' units)."""
        return self._expressions[counterfactual]

    @cached_property
    def _expressions(self) -> tuple[sympy.Expr, sympy.Expr]:
        expressions = []
        for counterfactual in (False, True):
            expr = parse(self.rhs_text(counterfactual))
            for symbol, definition in reversed(self.definitions):
                expr = expr.subs(sympy.Symbol(symbol, positive=True), parse(definition))
            for variable in self.variables:
                if variable.unit == "degrees":
                    symbol = sympy.Symbol(variable.symbol, positive=True)
                    expr = expr.subs(symbol, symbol * sympy.pi / 180)
            expressions.append(expr)
        return expressions[0], expressions[1]

    @cached_property
    def symbols(self) -> dict[str, sympy.Symbol]:
        """The input variables' sympy symbols by name."""
        return {variable.symbol: sympy.Symbol(variable.symbol, positive=True) for variable in self.variables}

    def valid(self, values: dict[str, sympy.Expr]) -> bool:
        """Whether input values satisfy every constraint."""
        substitutions = {self.symbols[name]: value for name, value in values.items()}
        return all(bool(parse(constraint).subs(substitutions)) for constraint in self.constraints)

    @property
    def full_description(self) -> str:
        """The description as a sentence: "The area of a rectangle is the product of its length and width."."""
        return f"The {self.quantity} of {article(self.subject)}{self.qualifier_text} is {self.description}."

    @property
    def qualifier_text(self) -> str:
        return f" {self.qualifier}" if self.qualifier else ""

    def __post_init__(self) -> None:
        if not self.quantity:
            object.__setattr__(self, "quantity", self.property)
        if not self.formula_given:
            object.__setattr__(self, "formula_given", self.given.format(**{v.symbol: v.symbol for v in self.variables}))
        if self.counterfactual.partition("=")[0].strip() != self.lhs:
            raise ValueError(f"rule {self.key}: the counterfactual has another left-hand side")


def article(noun: str) -> str:
    """``rectangle`` -> ``a rectangle``, ``isosceles triangle`` -> ``an isosceles triangle``."""
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


# fmt: off
_TRIANGLE = ("x + y > z", "x + z > y", "y + z > x")
_SIDES = (Variable("x", "first side"), Variable("y", "second side"), Variable("z", "third side"))
_HERON = (("s", "(x + y + z) / 2"), ("B", "sqrt(s * (s - x) * (s - y) * (s - z))"))
_RECTANGLE = dict(
    shape="rectangle",
    subject="rectangle",
    dimension="2D",
    variables=(Variable("x", "length"), Variable("y", "width")),
    given="a length of {x} and a width of {y}",
)
_SQUARE = dict(
    shape="square", subject="square", dimension="2D", variables=(Variable("x", "side length"),),
    given="a side length of {x}",
)
_ANGLE = Variable("θ", "angle between the sides, in degrees", 30, 150, 15, "degrees")
_CIRCLE_R = dict(shape="circle", subject="circle", dimension="2D", variables=(Variable("r", "radius"),))
_CIRCLE_D = dict(
    shape="circle", subject="circle", dimension="2D", variables=(Variable("d", "diameter", 2, 30, 2),),
    given="a diameter of {d}",
)
_SECTOR = dict(
    shape="sector",
    subject="sector",
    dimension="2D",
    variables=(Variable("r", "radius"), Variable("θ", "central angle, in radians", 0.5, 3, 0.1)),
    given="a radius of {r} and a central angle of {θ} radians",
)
_CUBOID = dict(
    shape="cuboid",
    subject="cuboid",
    dimension="3D",
    variables=(Variable("l", "length"), Variable("w", "width"), Variable("h", "height")),
    given="a length of {l}, a width of {w} and a height of {h}",
)
_CUBE = dict(
    shape="cube", subject="cube", dimension="3D", variables=(Variable("s", "side length"),),
    given="a side length of {s}",
)
_ROUND = dict(dimension="3D", variables=(Variable("r", "radius"), Variable("h", "height")),
              given="a radius of {r} and a height of {h}")


# fmt: on


def _rules() -> tuple[Rule, ...]:
    # fmt: off
    specs = [
        # Rectangle
        dict(_RECTANGLE, key="rectangle.area", property="area", formula="A = x * y",
             description="the product of its length and width", counterfactual="A = x + y",
             counterfactual_description="the sum of its length and width"),
        dict(_RECTANGLE, key="rectangle.perimeter", property="perimeter", formula="P = 2 * (x + y)",
             description="twice the sum of its length and width", counterfactual="P = x + y",
             counterfactual_description="the sum of its length and width"),
        dict(_RECTANGLE, key="rectangle.diagonal", property="diagonal", quantity="diagonal length",
             formula="d = sqrt(x^2 + y^2)",
             description="the square root of the sum of the squares of its length and width",
             counterfactual="d = x + y", counterfactual_description="the sum of its length and width"),
        dict(_RECTANGLE, key="rectangle.diagonal_square", property="diagonal square",
             quantity="squared diagonal", formula="d^2 = x^2 + y^2",
             description="the sum of the squares of its length and width", counterfactual="d^2 = (x + y)^2",
             counterfactual_description="the square of the sum of its length and width"),
        dict(_RECTANGLE, key="rectangle.aspect_ratio", property="aspect ratio", formula="R = x / y",
             description="its length divided by its width", counterfactual="R = y / x",
             counterfactual_description="its width divided by its length"),
        # Square
        dict(_SQUARE, key="square.area", property="area", formula="A = x^2",
             description="the square of its side length", counterfactual="A = x + x",
             counterfactual_description="its side length added to itself",
             note="counterfactual as in the paper's case study (A = x + x)"),
        dict(_SQUARE, key="square.perimeter", property="perimeter", formula="P = 4 * x",
             description="four times its side length", counterfactual="P = 2 * x",
             counterfactual_description="twice its side length"),
        dict(_SQUARE, key="square.diagonal", property="diagonal", quantity="diagonal length",
             formula="d = sqrt(2) * x", description="its side length times the square root of 2",
             counterfactual="d = 2 * x", counterfactual_description="twice its side length"),
        dict(_SQUARE, key="square.diagonal_square", property="diagonal square", quantity="squared diagonal",
             formula="d^2 = 2 * x^2", description="twice the square of its side length",
             counterfactual="d^2 = 4 * x^2", counterfactual_description="four times the square of its side length"),
        dict(_SQUARE, key="square.perimeter_area", property="area from perimeter", quantity="area",
             variables=(Variable("P", "perimeter", 4, 60, 4),), given="a perimeter of {P}",
             qualifier="given its perimeter", formula="A = P^2 / 16",
             description="the square of its perimeter divided by 16", counterfactual="A = P^2 / 4",
             counterfactual_description="the square of its perimeter divided by 4"),
        # Triangle
        dict(shape="triangle", subject="triangle", dimension="2D", key="triangle.area_height",
             property="area", variables=(Variable("x", "base"), Variable("y", "height")),
             given="a base of {x} and a height of {y}", qualifier="given its base and height",
             formula="A = (1/2) * x * y", description="half the product of its base and height",
             counterfactual="A = x * y", counterfactual_description="the product of its base and height"),
        dict(shape="triangle", subject="triangle", dimension="2D", key="triangle.perimeter", property="perimeter",
             variables=_SIDES, constraints=_TRIANGLE, given="sides of {x}, {y} and {z}", formula="P = x + y + z",
             description="the sum of its three sides", counterfactual="P = (x + y + z) / 2",
             counterfactual_description="half the sum of its three sides"),
        dict(shape="triangle", subject="right triangle", dimension="2D", key="triangle.right_area",
             property="area", variables=(Variable("x", "first leg"), Variable("y", "second leg")),
             given="legs of {x} and {y}", qualifier="given its legs", formula="A = (1/2) * x * y",
             description="half the product of its two legs", counterfactual="A = x * y",
             counterfactual_description="the product of its two legs"),
        dict(shape="triangle", subject="right triangle", dimension="2D", key="triangle.hypotenuse",
             property="hypotenuse", quantity="hypotenuse length",
             variables=(Variable("x", "first leg"), Variable("y", "second leg")), given="legs of {x} and {y}",
             formula="c = sqrt(x^2 + y^2)", description="the square root of the sum of the squares of its legs",
             counterfactual="c = x^2 + y^2", counterfactual_description="the sum of the squares of its legs"),
        dict(shape="triangle", subject="equilateral triangle", dimension="2D", key="triangle.equilateral_perimeter",
             property="perimeter", variables=(Variable("x", "side length"),), given="a side length of {x}",
             formula="P = 3 * x", description="three times its side length", counterfactual="P = 2 * x",
             counterfactual_description="twice its side length"),
        dict(shape="triangle", subject="equilateral triangle", dimension="2D", key="triangle.equilateral_area",
             property="area", variables=(Variable("x", "side length"),), given="a side length of {x}",
             formula="A = (sqrt(3) / 4) * x^2",
             description="the square root of 3 divided by 4, times the square of its side length",
             counterfactual="A = (sqrt(3) / 2) * x^2",
             counterfactual_description="the square root of 3 divided by 2, times the square of its side length"),
        dict(shape="triangle", subject="isosceles triangle", dimension="2D", key="triangle.isosceles_perimeter",
             property="perimeter", variables=(Variable("x", "equal side"), Variable("y", "base")),
             constraints=("2 * x > y",), given="equal sides of {x} and a base of {y}", formula="P = 2 * x + y",
             description="twice its equal side plus its base", counterfactual="P = x + 2 * y",
             counterfactual_description="its equal side plus twice its base"),
        dict(shape="triangle", subject="isosceles triangle", dimension="2D", key="triangle.isosceles_height",
             property="height", variables=(Variable("x", "equal side"), Variable("y", "base")),
             constraints=("2 * x > y",), given="equal sides of {x} and a base of {y}",
             qualifier="on its base", formula="h = sqrt(x^2 - (y / 2)^2)",
             description="the square root of the square of its equal side minus the square of half its base",
             counterfactual="h = sqrt(x^2 + (y / 2)^2)",
             counterfactual_description="the square root of the square of its equal side plus the square of half "
             "its base"),
        dict(shape="triangle", subject="isosceles triangle", dimension="2D", key="triangle.isosceles_area",
             property="area", variables=(Variable("x", "equal side"), Variable("y", "base")),
             constraints=("2 * x > y",), given="equal sides of {x} and a base of {y}",
             formula="A = (1/2) * y * sqrt(x^2 - (y / 2)^2)",
             description="half its base times the square root of the square of its equal side minus the square "
             "of half its base",
             counterfactual="A = y * sqrt(x^2 - (y / 2)^2)",
             counterfactual_description="its base times the square root of the square of its equal side minus "
             "the square of half its base"),
        dict(shape="triangle", subject="triangle", dimension="2D", key="triangle.heron", property="Heron's formula",
             quantity="area", variables=_SIDES, constraints=_TRIANGLE, definitions=_HERON[:1],
             given="sides of {x}, {y} and {z}",
             formula_given="sides x, y and z and a semiperimeter s = (x + y + z) / 2",
             qualifier="given its three sides", formula="A = sqrt(s * (s - x) * (s - y) * (s - z))",
             description="the square root of the product of its semiperimeter and the semiperimeter minus each "
             "side",
             counterfactual="A = sqrt(s * (s - x) * (s - y) * (s - z)) / 2",
             counterfactual_description="half the square root of the product of its semiperimeter and the "
             "semiperimeter minus each side",
             note="the paper's table writes Heron's formula with a stray /2; the true rule has none, and that "
             "version is the counterfactual"),
        dict(shape="triangle", subject="triangle", dimension="2D", key="triangle.inradius", property="inradius",
             variables=_SIDES, constraints=_TRIANGLE, definitions=_HERON, given="sides of {x}, {y} and {z}",
             formula_given="an area of B and a semiperimeter of s", formula="r = B / s",
             description="its area divided by its semiperimeter", counterfactual="r = B / (2 * s)",
             counterfactual_description="its area divided by its perimeter",
             note="the paper's B (area) and s (semiperimeter) are computed from the sides x, y, z (Heron) so that "
             "instances give a valid triangle"),
        dict(shape="triangle", subject="triangle", dimension="2D", key="triangle.circumradius",
             property="circumradius",
             variables=(Variable("a", "first side"), Variable("b", "second side"), Variable("c", "third side")),
             constraints=("a + b > c", "a + c > b", "b + c > a"),
             definitions=(("s", "(a + b + c) / 2"), ("B", "sqrt(s * (s - a) * (s - b) * (s - c))")),
             given="sides of {a}, {b} and {c}", formula_given="sides a, b and c and an area of B",
             formula="R = a * b * c / (4 * B)", description="the product of its three sides divided by four times "
             "its area", counterfactual="R = a * b * c / (2 * B)",
             counterfactual_description="the product of its three sides divided by twice its area",
             note="the area B is computed from the sides (Heron); s is the semiperimeter"),
        # Parallelogram
        dict(shape="parallelogram", subject="parallelogram", dimension="2D", key="parallelogram.area",
             property="area", variables=(Variable("x", "base"), Variable("y", "height")),
             given="a base of {x} and a height of {y}", qualifier="given its base and height", formula="A = x * y",
             description="the product of its base and height", counterfactual="A = (1/2) * x * y",
             counterfactual_description="half the product of its base and height"),
        dict(shape="parallelogram", subject="parallelogram", dimension="2D", key="parallelogram.perimeter",
             property="perimeter", variables=(Variable("x", "first side"), Variable("y", "second side")),
             given="sides of {x} and {y}", formula="P = 2 * (x + y)",
             description="twice the sum of its two adjacent sides", counterfactual="P = 2 * x * y",
             counterfactual_description="twice the product of its two adjacent sides"),
        dict(shape="parallelogram", subject="parallelogram", dimension="2D", key="parallelogram.diagonal",
             property="diagonal", quantity="diagonal length",
             variables=(Variable("a", "first side"), Variable("b", "second side"), _ANGLE),
             given="sides of {a} and {b} with an angle of {θ} between them",
             formula="d = sqrt(a^2 + b^2 - 2 * a * b * cos(θ))",
             description="the square root of the sum of the squares of its two sides minus twice their product "
             "times the cosine of the angle between them",
             counterfactual="d = sqrt(a^2 + b^2 - a * b * cos(θ))",
             counterfactual_description="the square root of the sum of the squares of its two sides minus their "
             "product times the cosine of the angle between them",
             note="the diagonal opposite the angle θ (law of cosines); θ in degrees in prompts"),
        dict(shape="parallelogram", subject="parallelogram", dimension="2D", key="parallelogram.area_angle",
             property="area", variables=(Variable("a", "first side"), Variable("b", "second side"),
                                         Variable("θ", "angle between the sides, in degrees", 15, 75, 15,
                                                  "degrees")),
             given="sides of {a} and {b} with an angle of {θ} between them",
             qualifier="given two sides and the angle between them", formula="A = a * b * sin(θ)",
             description="the product of its two sides times the sine of the angle between them",
             counterfactual="A = a * b * cos(θ)",
             counterfactual_description="the product of its two sides times the cosine of the angle between them",
             note="θ between 15 and 75 degrees so that the counterfactual stays positive"),
        # Rhombus (the paper's "Diamond")
        dict(shape="rhombus", subject="rhombus", dimension="2D", key="rhombus.area_diagonals", property="area",
             variables=(Variable("p", "first diagonal"), Variable("q", "second diagonal")),
             given="diagonals of {p} and {q}", qualifier="given its diagonals", formula="A = (1/2) * p * q",
             description="half the product of its two diagonals", counterfactual="A = p * q",
             counterfactual_description="the product of its two diagonals", note="the paper calls the shape Diamond"),
        dict(shape="rhombus", subject="rhombus", dimension="2D", key="rhombus.perimeter", property="perimeter",
             variables=(Variable("x", "side length"),), given="a side length of {x}", formula="P = 4 * x",
             description="four times its side length", counterfactual="P = 4 * x^2",
             counterfactual_description="four times the square of its side length"),
        dict(shape="rhombus", subject="rhombus", dimension="2D", key="rhombus.area_angle", property="area",
             variables=(Variable("x", "side length"), _ANGLE),
             given="a side length of {x} and an angle of {θ}", qualifier="given its side and an angle",
             formula="A = x^2 * sin(θ)", description="the square of its side length times the sine of its angle",
             counterfactual="A = (1/2) * x^2 * sin(θ)",
             counterfactual_description="half the square of its side length times the sine of its angle"),
        dict(shape="rhombus", subject="rhombus", dimension="2D", key="rhombus.perimeter_diagonals",
             property="perimeter", variables=(Variable("p", "first diagonal"), Variable("q", "second diagonal")),
             given="diagonals of {p} and {q}", qualifier="given its diagonals",
             formula="P = 4 * sqrt((p / 2)^2 + (q / 2)^2)",
             description="four times the square root of the sum of the squares of half its diagonals",
             counterfactual="P = 4 * sqrt(p^2 + q^2)",
             counterfactual_description="four times the square root of the sum of the squares of its diagonals"),
        dict(shape="rhombus", subject="rhombus", dimension="2D", key="rhombus.side_diagonals",
             property="side from diagonals", quantity="side length",
             variables=(Variable("p", "first diagonal"), Variable("q", "second diagonal")),
             given="diagonals of {p} and {q}", qualifier="given its diagonals",
             formula="x = sqrt((p / 2)^2 + (q / 2)^2)",
             description="the square root of the sum of the squares of half its diagonals",
             counterfactual="x = (p + q) / 2", counterfactual_description="half the sum of its diagonals"),
        # Trapezoid
        dict(shape="trapezoid", subject="trapezoid", dimension="2D", key="trapezoid.area", property="area",
             variables=(Variable("a", "first base"), Variable("b", "second base"), Variable("h", "height")),
             given="bases of {a} and {b} and a height of {h}", formula="A = (1/2) * (a + b) * h",
             description="half the sum of its two bases times its height", counterfactual="A = (a + b) * h",
             counterfactual_description="the sum of its two bases times its height"),
        dict(shape="trapezoid", subject="trapezoid", dimension="2D", key="trapezoid.perimeter",
             property="perimeter", variables=(Variable("a", "longer base"), Variable("b", "shorter base"),
                                              Variable("c", "first leg"), Variable("d", "second leg")),
             constraints=("a > b", "c + d > a - b", "c + a - b > d", "d + a - b > c"),
             given="bases of {a} and {b} and legs of {c} and {d}", formula="P = a + b + c + d",
             description="the sum of its four sides", counterfactual="P = a + b + c",
             counterfactual_description="the sum of its two bases and one leg",
             note="the legs and the difference of the bases form a triangle, so the trapezoid exists"),
        dict(shape="trapezoid", subject="trapezoid", dimension="2D", key="trapezoid.midsegment",
             property="midsegment", quantity="midsegment length",
             variables=(Variable("a", "longer base"), Variable("b", "shorter base")), constraints=("a > b",),
             given="bases of {a} and {b}", formula="m = (a + b) / 2", description="half the sum of its two bases",
             counterfactual="m = (a - b) / 2", counterfactual_description="half the difference of its two bases"),
        dict(shape="trapezoid", subject="isosceles trapezoid", dimension="2D", key="trapezoid.isosceles_diagonal",
             property="diagonal", quantity="diagonal length",
             variables=(Variable("a", "longer base"), Variable("b", "shorter base"), Variable("c", "leg")),
             constraints=("a > b", "2 * c > a - b"), given="bases of {a} and {b} and legs of {c}",
             formula="d = sqrt(c^2 + a * b)",
             description="the square root of the square of its leg plus the product of its two bases",
             counterfactual="d = sqrt(c^2 + ((a - b) / 2)^2)",
             counterfactual_description="the square root of the square of its leg plus the square of half the "
             "difference of its bases",
             note="the paper's table gives d = sqrt(c^2 + ((a - b)/2)^2), which is not the diagonal of an "
             "isosceles trapezoid; the true rule is sqrt(c^2 + ab), and the table's version is the counterfactual"),
        # Circle
        dict(_CIRCLE_R, key="circle.area", property="area", given="a radius of {r}", formula="A = π * r^2",
             description="π times the square of its radius", counterfactual="A = 2 * π * r",
             counterfactual_description="twice π times its radius"),
        dict(_CIRCLE_R, key="circle.circumference", property="circumference", given="a radius of {r}",
             formula="C = 2 * π * r", description="twice π times its radius", counterfactual="C = π * r",
             counterfactual_description="π times its radius"),
        dict(_CIRCLE_D, key="circle.circumference_diameter", property="circumference from diameter",
             quantity="circumference", qualifier="given its diameter", formula="C = π * d",
             description="π times its diameter", counterfactual="C = 2 * π * d",
             counterfactual_description="twice π times its diameter"),
        dict(_CIRCLE_D, key="circle.area_diameter", property="area from diameter", quantity="area",
             qualifier="given its diameter", formula="A = π * (d / 2)^2",
             description="π times the square of half its diameter", counterfactual="A = π * d^2",
             counterfactual_description="π times the square of its diameter"),
        dict(_CIRCLE_R, key="circle.diameter", property="diameter", given="a radius of {r}", formula="d = 2 * r",
             description="twice its radius", counterfactual="d = r / 2", counterfactual_description="half its radius"),
        dict(_CIRCLE_D, key="circle.radius", property="radius", formula="r = d / 2",
             description="half its diameter", counterfactual="r = 2 * d",
             counterfactual_description="twice its diameter"),
        # Sector
        dict(_SECTOR, key="sector.arc_length", property="arc length", formula="L = r * θ",
             description="its radius times its central angle in radians", counterfactual="L = (1/2) * r * θ",
             counterfactual_description="half its radius times its central angle in radians"),
        dict(_SECTOR, key="sector.area", property="area", formula="A = (1/2) * r^2 * θ",
             description="half the square of its radius times its central angle in radians",
             counterfactual="A = r^2 * θ",
             counterfactual_description="the square of its radius times its central angle in radians"),
        dict(_SECTOR, key="sector.perimeter", property="perimeter", formula="P = 2 * r + r * θ",
             description="twice its radius plus its arc length", counterfactual="P = r + r * θ",
             counterfactual_description="its radius plus its arc length"),
        # Cuboid
        dict(_CUBOID, key="cuboid.volume", property="volume", formula="V = l * w * h",
             description="the product of its length, width and height", counterfactual="V = (1/3) * l * w * h",
             counterfactual_description="a third of the product of its length, width and height"),
        dict(_CUBOID, key="cuboid.surface_area", property="surface area", formula="SA = 2 * (l * w + l * h + w * h)",
             description="twice the sum of the areas of its three distinct faces",
             counterfactual="SA = l * w + l * h + w * h",
             counterfactual_description="the sum of the areas of its three distinct faces"),
        dict(_CUBOID, key="cuboid.perimeter", property="edge length sum", quantity="total edge length",
             formula="P = 4 * (l + w + h)", description="four times the sum of its length, width and height",
             counterfactual="P = 2 * (l + w + h)",
             counterfactual_description="twice the sum of its length, width and height",
             note="the paper's Perimeter of a cuboid: the sum of its 12 edges"),
        dict(_CUBOID, key="cuboid.lateral_surface_area", property="lateral surface area",
             formula="LSA = 2 * h * (l + w)", description="twice its height times the sum of its length and width",
             counterfactual="LSA = h * (l + w)",
             counterfactual_description="its height times the sum of its length and width"),
        dict(_CUBOID, key="cuboid.base_area", property="base area", formula="BA = l * w",
             description="the product of its length and width", counterfactual="BA = 2 * l * w",
             counterfactual_description="twice the product of its length and width"),
        dict(_CUBOID, key="cuboid.space_diagonal", property="space diagonal", quantity="space diagonal length",
             formula="d = sqrt(l^2 + w^2 + h^2)",
             description="the square root of the sum of the squares of its length, width and height",
             counterfactual="d = l + w + h", counterfactual_description="the sum of its length, width and height"),
        dict(_CUBOID, key="cuboid.space_diagonal_square", property="space diagonal square",
             quantity="squared space diagonal", formula="d^2 = l^2 + w^2 + h^2",
             description="the sum of the squares of its length, width and height",
             counterfactual="d^2 = (l + w + h)^2",
             counterfactual_description="the square of the sum of its length, width and height"),
        dict(_CUBOID, key="cuboid.inradius", property="inradius", formula="r = (1/2) * min(l, w, h)",
             description="half its smallest dimension", counterfactual="r = (1/2) * max(l, w, h)",
             counterfactual_description="half its largest dimension",
             note="as the paper's table: the radius of the largest sphere inside the cuboid (a cuboid other than a "
             "cube has no sphere touching all faces)"),
        dict(_CUBOID, key="cuboid.circumradius", property="circumradius", formula="R = (1/2) * sqrt(l^2 + w^2 + h^2)",
             description="half the square root of the sum of the squares of its length, width and height",
             counterfactual="R = sqrt(l^2 + w^2 + h^2)",
             counterfactual_description="the square root of the sum of the squares of its length, width and "
             "height"),
        # Cube
        dict(_CUBE, key="cube.volume", property="volume", formula="V = s^3", description="the cube of its side length",
             counterfactual="V = s^2", counterfactual_description="the square of its side length"),
        dict(_CUBE, key="cube.surface_area", property="surface area", formula="SA = 6 * s^2",
             description="six times the square of its side length", counterfactual="SA = 4 * s^2",
             counterfactual_description="four times the square of its side length"),
        dict(_CUBE, key="cube.space_diagonal", property="space diagonal", quantity="space diagonal length",
             formula="d = s * sqrt(3)", description="its side length times the square root of 3",
             counterfactual="d = s * sqrt(2)", counterfactual_description="its side length times the square root of 2"),
        dict(_CUBE, key="cube.inradius", property="inradius", formula="r = s / 2", description="half its side length",
             counterfactual="r = s", counterfactual_description="its side length"),
        dict(_CUBE, key="cube.circumradius", property="circumradius", formula="R = s * sqrt(3) / 2",
             description="half its side length times the square root of 3", counterfactual="R = s * sqrt(2) / 2",
             counterfactual_description="half its side length times the square root of 2"),
        dict(_CUBE, key="cube.base_area", property="base area", formula="BA = s^2",
             description="the square of its side length", counterfactual="BA = 2 * s",
             counterfactual_description="twice its side length"),
        # Prism
        dict(shape="prism", subject="prism", dimension="3D", key="prism.volume", property="volume",
             variables=(Variable("B", "base area", 5, 60), Variable("h", "height")),
             given="a base area of {B} and a height of {h}", formula="V = B * h",
             description="its base area times its height", counterfactual="V = (1/3) * B * h",
             counterfactual_description="a third of its base area times its height"),
        dict(shape="prism", subject="prism", dimension="3D", key="prism.surface_area", property="surface area",
             variables=(Variable("B", "base area", 5, 60), Variable("p", "base perimeter", 10, 40),
                        Variable("h", "height")),
             constraints=("4 * π * B <= p^2",), given="a base area of {B}, a base perimeter of {p} and a height of {h}",
             formula="SA = 2 * B + p * h", description="twice its base area plus its base perimeter times its height",
             counterfactual="SA = B + p * h",
             counterfactual_description="its base area plus its base perimeter times its height",
             note="the base's area and perimeter satisfy the isoperimetric inequality 4πB <= p^2"),
        dict(shape="prism", subject="prism", dimension="3D", key="prism.lateral_area", property="lateral area",
             variables=(Variable("p", "base perimeter", 6, 40), Variable("h", "height")),
             given="a base perimeter of {p} and a height of {h}", formula="LA = p * h",
             description="its base perimeter times its height", counterfactual="LA = 2 * p * h",
             counterfactual_description="twice its base perimeter times its height"),
        dict(shape="prism", subject="triangular prism", dimension="3D", key="prism.triangular_prism",
             property="volume", variables=(Variable("s", "side of the equilateral base"), Variable("h", "height")),
             given="an equilateral base with a side of {s} and a height of {h}",
             formula="V = (sqrt(3) / 4) * s^2 * h",
             description="the square root of 3 divided by 4, times the square of its base side, times its height",
             counterfactual="V = (sqrt(3) / 2) * s^2 * h",
             counterfactual_description="the square root of 3 divided by 2, times the square of its base side, "
             "times its height",
             note="the paper's Triangular Prism row: the base is an equilateral triangle of side s"),
        # Pyramid
        dict(shape="pyramid", subject="pyramid", dimension="3D", key="pyramid.volume", property="volume",
             variables=(Variable("B", "base area", 5, 60), Variable("h", "height")),
             given="a base area of {B} and a height of {h}", formula="V = (1/3) * B * h",
             description="a third of its base area times its height", counterfactual="V = B * h",
             counterfactual_description="its base area times its height"),
        dict(shape="pyramid", subject="pyramid", dimension="3D", key="pyramid.surface_area", property="surface area",
             variables=(Variable("B", "base area", 5, 60), Variable("L", "lateral area", 10, 120)),
             given="a base area of {B} and a lateral area of {L}", formula="SA = B + L",
             description="its base area plus its lateral area", counterfactual="SA = 2 * B + L",
             counterfactual_description="twice its base area plus its lateral area"),
        dict(shape="pyramid", subject="pyramid", dimension="3D", key="pyramid.lateral_area", property="lateral area",
             variables=(Variable("P", "base perimeter", 6, 40), Variable("l", "slant height")),
             given="a base perimeter of {P} and a slant height of {l}", formula="L = (1/2) * P * l",
             description="half its base perimeter times its slant height", counterfactual="L = P * l",
             counterfactual_description="its base perimeter times its slant height",
             note="a regular pyramid (the slant height is the same on every face)"),
        dict(shape="pyramid", subject="square pyramid", dimension="3D", key="pyramid.square_pyramid",
             property="volume", variables=(Variable("s", "base side"), Variable("h", "height")),
             given="a base side of {s} and a height of {h}", formula="V = (1/3) * s^2 * h",
             description="a third of the square of its base side times its height", counterfactual="V = s^2 * h",
             counterfactual_description="the square of its base side times its height"),
        # Cone
        dict(_ROUND, shape="cone", subject="cone", key="cone.volume", property="volume",
             formula="V = (1/3) * π * r^2 * h", description="a third of π times the square of its radius times its "
             "height", counterfactual="V = π * r^2 * h",
             counterfactual_description="π times the square of its radius times its height"),
        dict(_ROUND, shape="cone", subject="cone", key="cone.surface_area", property="surface area",
             formula="SA = π * r * (r + sqrt(r^2 + h^2))",
             description="π times its radius times the sum of its radius and its slant height",
             counterfactual="SA = π * r * (r + h)",
             counterfactual_description="π times its radius times the sum of its radius and its height"),
        dict(_ROUND, shape="cone", subject="cone", key="cone.base_area", property="base area",
             variables=(Variable("r", "radius"),), given="a radius of {r}", formula="BA = π * r^2",
             description="π times the square of its radius", counterfactual="BA = 2 * π * r",
             counterfactual_description="twice π times its radius"),
        dict(_ROUND, shape="cone", subject="cone", key="cone.lateral_surface_area", property="lateral surface area",
             formula="LSA = π * r * sqrt(r^2 + h^2)", description="π times its radius times its slant height",
             counterfactual="LSA = π * r * h", counterfactual_description="π times its radius times its height"),
        # Cylinder
        dict(_ROUND, shape="cylinder", subject="cylinder", key="cylinder.volume", property="volume",
             formula="V = π * r^2 * h", description="π times the square of its radius times its height",
             counterfactual="V = 2 * π * r * h",
             counterfactual_description="twice π times its radius times its height"),
        dict(_ROUND, shape="cylinder", subject="cylinder", key="cylinder.surface_area", property="surface area",
             formula="SA = 2 * π * r * (r + h)",
             description="twice π times its radius times the sum of its radius and height",
             counterfactual="SA = π * r * (r + h)",
             counterfactual_description="π times its radius times the sum of its radius and height"),
        dict(_ROUND, shape="cylinder", subject="cylinder", key="cylinder.base_area", property="base area",
             variables=(Variable("r", "radius"),), given="a radius of {r}", formula="BA = π * r^2",
             description="π times the square of its radius", counterfactual="BA = 2 * π * r^2",
             counterfactual_description="twice π times the square of its radius"),
        dict(_ROUND, shape="cylinder", subject="cylinder", key="cylinder.lateral_surface_area",
             property="lateral surface area", formula="LSA = 2 * π * r * h",
             description="twice π times its radius times its height", counterfactual="LSA = π * r * h",
             counterfactual_description="π times its radius times its height"),
        # Sphere
        dict(shape="sphere", subject="sphere", dimension="3D", key="sphere.volume", property="volume",
             variables=(Variable("r", "radius"),), given="a radius of {r}", formula="V = (4/3) * π * r^3",
             description="four thirds of π times the cube of its radius", counterfactual="V = (4/3) * π * r^2",
             counterfactual_description="four thirds of π times the square of its radius"),
        dict(shape="sphere", subject="sphere", dimension="3D", key="sphere.surface_area", property="surface area",
             variables=(Variable("r", "radius"),), given="a radius of {r}", formula="SA = 4 * π * r^2",
             description="four times π times the square of its radius", counterfactual="SA = 2 * π * r^2",
             counterfactual_description="twice π times the square of its radius"),
        dict(shape="sphere", subject="sphere", dimension="3D", key="sphere.diameter", property="diameter",
             variables=(Variable("r", "radius"),), given="a radius of {r}", formula="d = 2 * r",
             description="twice its radius", counterfactual="d = 2 * π * r",
             counterfactual_description="twice π times its radius"),
        dict(shape="sphere", subject="sphere", dimension="3D", key="sphere.great_circle_area",
             property="great circle area", variables=(Variable("r", "radius"),), given="a radius of {r}",
             formula="A = π * r^2", description="π times the square of its radius", counterfactual="A = 4 * π * r^2",
             counterfactual_description="four times π times the square of its radius"),
    ]
    # fmt: on
    return tuple(Rule(id=index, **spec) for index, spec in enumerate(specs))


RULES: tuple[Rule, ...] = _rules()
BY_KEY: dict[str, Rule] = {rule.key: rule for rule in RULES}

#: The row of the paper's Table 5 not counted among its 35 3D rules (see the module docstring).
OMITTED = ({"key": "sphere.radius", "formula": "r = d / 2", "reason": "identical to circle.radius"},)


@dataclass(frozen=True)
class Hierarchy:
    """A 2D rule inside a 3D rule (the paper's Rule Hierarchical Test).

    Args:
        lower: the 2D rule's key.
        upper: the 3D rule's key.
        composition: the 3D formula written with the 2D rule's left-hand side standing for its right-hand side
            (``SA = 6 * A``).
        renaming: the 2D rule's variables in the 3D rule's names (``{"x": "s"}``).
    """

    lower: str
    upper: str
    composition: str
    renaming: dict[str, str] = field(default_factory=dict, hash=False)


HIERARCHY: tuple[Hierarchy, ...] = (
    Hierarchy("square.area", "cube.surface_area", "SA = 6 * A", {"x": "s"}),
    Hierarchy("square.area", "cube.base_area", "BA = A", {"x": "s"}),
    Hierarchy("square.area", "cube.volume", "V = A * s", {"x": "s"}),
    Hierarchy("square.area", "pyramid.square_pyramid", "V = (1/3) * A * h", {"x": "s"}),
    Hierarchy("rectangle.area", "cuboid.base_area", "BA = A", {"x": "l", "y": "w"}),
    Hierarchy("rectangle.area", "cuboid.volume", "V = A * h", {"x": "l", "y": "w"}),
    Hierarchy("rectangle.perimeter", "cuboid.lateral_surface_area", "LSA = P * h", {"x": "l", "y": "w"}),
    Hierarchy("rectangle.diagonal_square", "cuboid.space_diagonal_square", "d^2 = d^2 + h^2", {"x": "l", "y": "w"}),
    Hierarchy("circle.area", "cylinder.base_area", "BA = A"),
    Hierarchy("circle.area", "cylinder.volume", "V = A * h"),
    Hierarchy("circle.area", "cone.base_area", "BA = A"),
    Hierarchy("circle.area", "cone.volume", "V = (1/3) * A * h"),
    Hierarchy("circle.area", "sphere.great_circle_area", "A = A"),
    Hierarchy("circle.circumference", "cylinder.lateral_surface_area", "LSA = C * h"),
    Hierarchy("triangle.equilateral_area", "prism.triangular_prism", "V = A * h", {"x": "s"}),
)
