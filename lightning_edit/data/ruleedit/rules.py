"""The 79 geometry rules of RULE-EDIT (ICLR 2026 submission, appendix C: 44 2D rules, Table 4; 35 3D rules, Table 5).

Each rule is a formula over named variables, written once as text that is both displayed (the edit targets) and
parsed by sympy (:meth:`Rule.equation`): ``*`` for products, ``^`` for powers, ``π``, ``sqrt``, ``sin``/``cos`` of
an angle, ``min``/``max``. Every rule also has a natural-language description and a counterfactual formula and
description (a plausible error: a wrong constant, a missing factor, a swapped operation, a wrong exponent), the
variables with their meaning and the ranges instances are drawn from, and the constraints that make a shape valid.
Where the paper's table is ambiguous or wrong, the choice is written in the rule's ``note``. The table is data,
``assets/tables/ruleedit_rules.json`` (:data:`TABLE`); this module reads it.

Table 5 lists 36 rows under a caption of 35 rules (the paper's text: 79 rules in all); the sphere's radius
``r = d/2`` repeats the circle's radius rule word for word and is left out (:data:`OMITTED`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import sympy
from sympy.parsing.sympy_parser import convert_xor, parse_expr, standard_transformations

from lightning_edit.resources import ASSETS_DIR

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


#: The table itself, data rather than code (rules in order of their ids; fields at their defaults are left out).
TABLE = ASSETS_DIR / "tables" / "ruleedit_rules.json"


def _rule(index: int, spec: dict[str, Any]) -> Rule:
    tuples = {name: tuple(map(tuple, spec[name])) for name in ("definitions",) if name in spec}
    tuples |= {name: tuple(spec[name]) for name in ("constraints",) if name in spec}
    variables = tuple(Variable(**variable) for variable in spec["variables"])
    return Rule(id=index, **(spec | tuples | {"variables": variables}))


_TABLE = json.loads(TABLE.read_text(encoding="utf-8"))
RULES: tuple[Rule, ...] = tuple(_rule(index, spec) for index, spec in enumerate(_TABLE["rules"]))
BY_KEY: dict[str, Rule] = {rule.key: rule for rule in RULES}

#: The row of the paper's Table 5 not counted among its 35 3D rules (see the module docstring).
OMITTED: tuple[dict[str, str], ...] = tuple(_TABLE["omitted"])


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


HIERARCHY: tuple[Hierarchy, ...] = tuple(Hierarchy(**row) for row in _TABLE["hierarchy"])
