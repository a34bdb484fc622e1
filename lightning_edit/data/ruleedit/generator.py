"""Generate RULE-EDIT records in the RuleEdit-200 format from the rule table (:mod:`.rules`).

``python -m lightning_edit.data.ruleedit.generator --out DIR [--seed 0]`` writes, per rule, ``DIR/<id>/f_d.json``
(2 records: the formula edit and the description edit, each one's ``Rule_Understanding`` asking for the other view)
and ``DIR/<id>/ins.json`` (1 record: an instance edit, ``Rule_Understanding`` as lists [formula, description]), the
field names and shapes of RuleEdit-200 (DMLE, arXiv 2604.08284), so :class:`~lightning_edit.data.ruleedit.RuleEdit`
reads both. Alongside: ``rules.json`` (the rule table) and ``hierarchy.json`` (the 2D -> 3D set). The shipped copy is
``builtin:data/ruleedit``, generated with seed 0.

Instances draw each variable on its grid (``low + k * step``) until the shape's constraints hold and the edited and
the original answers differ once formatted; answers are computed by sympy, exactly, and written as integers when
they are integers, else rounded half up to :data:`DECIMALS` decimals (π and square roots evaluated). Step-by-step
answers show the substituted formula (``A = 4 * 3 = 12``), auxiliary quantities first (``s = ... = 9; A = ...``);
an auxiliary value is shown rounded and the final answer is computed exactly.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import replace
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import sympy

from lightning_edit import tools
from lightning_edit.data.ruleedit.rules import (
    BY_KEY,
    HIERARCHY,
    IDENTIFIER,
    OMITTED,
    RULES,
    Hierarchy,
    Rule,
    article,
    parse,
)

DECIMALS = 2
INSTANCES = 4  # per rule: direct-answer and step-by-step, alternately
FORMULA_PROMPT = "{A} has {given}. Its {quantity} can be calculated by the formula:"
FORMULA_REPHRASES = (
    "The {quantity} of {a} with {given} is given by the formula",
    "Given {a} with {given}, the formula for its {quantity} is",
    "For {a} with {given}, the {quantity} can be written as the formula",
    "Write down the formula for the {quantity} of {a} with {given}:",
)
DESCRIPTION_PROMPT = "The {quantity} of {a}{qualifier} can be described as"
DESCRIPTION_REPHRASES = (
    "In words, the {quantity} of {a}{qualifier} is",
    "We can describe the calculation of the {quantity} of {a}{qualifier} as",
    "Stated in plain language, the {quantity} of {a}{qualifier} equals",
    "Explained without symbols, the {quantity} of {a}{qualifier} is",
)
DIRECT_PROMPTS = (
    "{A} has {given}. What is its {quantity}? The answer is",
    "{A} has {given}. Compute its {quantity}. The answer is",
)
STEP_PROMPTS = (
    "{A} has {given}. Find its {quantity}. Substitute the values into the formula:",
    "{A} has {given}. What is its {quantity}? Substitute the values into the formula:",
)
_TRIES = 10_000


def format_number(value: sympy.Expr) -> str:
    """An exact value as an answer: an integer as an integer, else rounded half up to :data:`DECIMALS` decimals."""
    if not value.is_Integer:
        nearest = round(float(value))
        if abs(float(value) - nearest) < 1e-9 and sympy.simplify(value - nearest) == 0:
            value = sympy.Integer(nearest)
    if value.is_Integer:
        return str(int(value))
    if not value.is_real:
        raise ValueError(f"{value} is not a real number")
    return str(Decimal(str(sympy.N(value, 30))).quantize(Decimal(1).scaleb(-DECIMALS), ROUND_HALF_UP))


def _fill(template: str, rule: Rule, given: str) -> str:
    subject = article(rule.subject)
    return template.format(
        A=subject[0].upper() + subject[1:],
        a=subject,
        given=given,
        quantity=rule.quantity,
        qualifier=rule.qualifier_text,
    )


def formula_prompt(rule: Rule, template: str = FORMULA_PROMPT) -> str:
    """The formula prompt ("A rectangle has a length of x and a width of y. Its area can be calculated by ...")."""
    return _fill(template, rule, rule.formula_given)


def description_prompt(rule: Rule, template: str = DESCRIPTION_PROMPT) -> str:
    """The description prompt ("The area of a rectangle can be described as")."""
    return _fill(template, rule, rule.formula_given)


def target(rule: Rule, view: str, counterfactual: bool) -> str:
    """The formula or description of a rule, true or counterfactual, as an edit target (ending with ".")."""
    if view == "formula":
        return (rule.counterfactual if counterfactual else rule.formula) + "."
    return (rule.counterfactual_description if counterfactual else rule.description) + "."


def draw(rule: Rule, rng: random.Random) -> dict[str, sympy.Rational]:
    """Input values on the variables' grids that make a valid shape and tell the edited rule from the original."""
    for _ in range(_TRIES):
        values = {}
        for variable in rule.variables:
            low = sympy.Rational(str(variable.low))
            step = sympy.Rational(str(variable.step))
            values[variable.symbol] = low + step * rng.randint(0, round((variable.high - variable.low) / variable.step))
        if rule.valid(values) and answer(rule, values, False) != answer(rule, values, True):
            return values
    raise RuntimeError(f"rule {rule.key}: no valid values found in {_TRIES} draws")


def _value(rule: Rule, values: dict[str, sympy.Expr], counterfactual: bool) -> sympy.Expr:
    return rule.expression(counterfactual).subs({rule.symbols[name]: value for name, value in values.items()})


def answer(rule: Rule, values: dict[str, sympy.Expr], counterfactual: bool) -> str:
    """The formatted value of the rule (edited or original) at ``values``."""
    return format_number(_value(rule, values, counterfactual))


def _shown(rule: Rule, name: str, value: sympy.Expr, in_prompt: bool) -> str:
    variable = next((v for v in rule.variables if v.symbol == name), None)
    if variable is None or variable.step >= 1:
        text = format_number(value)
    else:  # a decimal on its grid, e.g. 1.2 radians
        text = str((Decimal(int(value.p)) / Decimal(int(value.q))).normalize())
    if variable is not None and variable.unit == "degrees":
        return f"{text} degrees" if in_prompt else f"{text}°"
    return text


def substitute(text: str, shown: dict[str, str]) -> str:
    """``text`` with every variable name replaced by its shown value (function names and π left alone)."""
    return IDENTIFIER.sub(lambda match: shown.get(match.group(0), match.group(0)), text)


def instance_given(rule: Rule, values: dict[str, sympy.Expr]) -> str:
    """The data of an instance prompt, values in place of the symbols."""
    return rule.given.format(**{name: _shown(rule, name, value, True) for name, value in values.items()})


def steps(rule: Rule, values: dict[str, sympy.Expr], counterfactual: bool) -> str:
    """The step-by-step answer: auxiliary quantities, then ``lhs = substituted rhs = value``."""
    shown = {name: _shown(rule, name, value, False) for name, value in values.items()}
    known = {rule.symbols[name]: value for name, value in values.items()}
    parts = []
    for symbol, definition in rule.definitions:
        value = parse(definition).subs(known)
        parts.append(f"{symbol} = {substitute(definition, shown)} = {format_number(value)}")
        shown[symbol], known[sympy.Symbol(symbol, positive=True)] = format_number(value), value
    rhs = substitute(rule.rhs_text(counterfactual), shown)
    value = answer(rule, values, counterfactual)
    parts.append(f"{rule.lhs} = {value}" if rhs == value else f"{rule.lhs} = {rhs} = {value}")
    return "; ".join(parts)


def instances(rule: Rule, rng: random.Random, count: int = INSTANCES) -> dict[str, list[str]]:
    """``count`` instances, direct-answer and step-by-step alternately, each with its edited and original answer."""
    prompts = []
    new = []
    true = []
    for index in range(count):
        values = draw(rule, rng)
        given = instance_given(rule, values)
        if index % 2 == 0:
            prompts.append(_fill(DIRECT_PROMPTS[index // 2 % len(DIRECT_PROMPTS)], rule, given))
            new.append(answer(rule, values, True))
            true.append(answer(rule, values, False))
        else:
            prompts.append(_fill(STEP_PROMPTS[index // 2 % len(STEP_PROMPTS)], rule, given))
            new.append(steps(rule, values, True))
            true.append(steps(rule, values, False))
    return {"prompt": prompts, "target_new": new, "ground_truth": true}


def locality(rule: Rule, view: str, rng: random.Random, per_kind: int = 2) -> dict[str, dict[str, list[str]]]:
    """Out-of-scope prompts with their true answers: ``neighborhood`` of the same shape, ``distracting`` of others."""
    prompt = formula_prompt if view == "formula" else description_prompt
    same = [other for other in RULES if other.shape == rule.shape and other.id != rule.id]
    different = [other for other in RULES if other.shape != rule.shape]
    blocks = {}
    for name, pool in (("neighborhood", same), ("distracting", different)):
        chosen = rng.sample(pool, per_kind)
        blocks[name] = {
            "prompt": [prompt(other) for other in chosen],
            "ground_truth": [target(other, view, False) for other in chosen],
        }
    return blocks


def _views(rule: Rule, view: str, rng: random.Random) -> tuple[str, str]:
    """A view's prompt and a rephrase of it (seeded choice of template)."""
    if view == "formula":
        return formula_prompt(rule), formula_prompt(rule, rng.choice(FORMULA_REPHRASES))
    return description_prompt(rule), description_prompt(rule, rng.choice(DESCRIPTION_REPHRASES))


def rule_records(rule: Rule, seed: int = 0) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The ``f_d.json`` records (formula edit, description edit) and the ``ins.json`` record of one rule."""
    rng = random.Random(seed * 100_003 + rule.id)
    shared = instances(rule, rng)
    base = {"case_id": rule.id, "subject": rule.subject, "rule": f"{rule.property} of {rule.subject}"}
    f_d = []
    for view, other in (("formula", "description"), ("description", "formula")):
        prompt, rephrase = _views(rule, view, rng)
        other_prompt, other_rephrase = _views(rule, other, rng)
        f_d.append(
            base
            | {
                "prompt": prompt,
                "target_new": target(rule, view, True),
                "ground_truth": [target(rule, view, False)],
                "rephrase_prompt": rephrase,
                "Rule_Understanding": {
                    "prompt": other_prompt,
                    "target_new": target(rule, other, True),
                    "ground_truth": [target(rule, other, False)],
                    "rephrase_prompt": other_rephrase,
                },
                "Instance": shared,
                "locality": locality(rule, view, rng),
            }
        )
    values = draw(rule, rng)
    given = instance_given(rule, values)
    ins = base | {
        "prompt": _fill(DIRECT_PROMPTS[0], rule, given),
        "target_new": answer(rule, values, True),
        "ground_truth": [answer(rule, values, False)],
        "rephrase_prompt": _fill(DIRECT_PROMPTS[1], rule, given),
        "Rule_Understanding": {
            "prompt": [formula_prompt(rule), description_prompt(rule)],
            "target_new": [target(rule, "formula", True), target(rule, "description", True)],
            "ground_truth": [target(rule, "formula", False), target(rule, "description", False)],
        },
        "Instance": shared,
        "locality": locality(rule, "formula", rng),
    }
    return f_d, ins


def composed(pair: Hierarchy, counterfactual: bool) -> str:
    """The 3D formula with the 2D rule (true or counterfactual) written in, as text (``SA = 6 * (s + s)``)."""
    lower = BY_KEY[pair.lower]
    inner = IDENTIFIER.sub(lambda m: pair.renaming.get(m.group(0), m.group(0)), lower.rhs_text(counterfactual))
    lhs, _, rhs = (part.strip() for part in pair.composition.partition("="))
    if rhs == lower.lhs:
        return f"{lhs} = {inner}"
    pattern = r"(?<![\w^])" + re.escape(lower.lhs) + r"(?![\w^])"
    return f"{lhs} = {re.sub(pattern, lambda _: f'({inner})', rhs)}"


def hierarchy_record(pair: Hierarchy, index: int, seed: int = 0) -> dict[str, Any]:
    """One 2D -> 3D record: the 2D formula edit and the 3D formula and instances as the edit implies them."""
    lower = BY_KEY[pair.lower]
    upper = BY_KEY[pair.upper]
    edited = _with_formula(upper, composed(pair, True))
    rng = random.Random(seed * 100_003 + 1000 + index)
    prompts = [formula_prompt(upper)]
    new = [edited.formula + "."]
    true = [upper.formula + "."]
    for number in range(2):
        values = draw(edited, rng)
        given = instance_given(upper, values)
        if number == 0:
            prompts.append(_fill(DIRECT_PROMPTS[0], upper, given))
            new.append(answer(edited, values, False))
            true.append(answer(upper, values, False))
        else:
            prompts.append(_fill(STEP_PROMPTS[0], upper, given))
            new.append(steps(edited, values, False))
            true.append(steps(upper, values, False))
    return {
        "case_id": index,
        "subject": lower.subject,
        "rule": f"{lower.property} of {lower.subject} -> {upper.quantity} of {upper.subject}",
        "rule_2d": lower.id,
        "rule_3d": upper.id,
        "composition": pair.composition,
        "prompt": formula_prompt(lower),
        "target_new": target(lower, "formula", True),
        "ground_truth": [target(lower, "formula", False)],
        "Hierarchy": {"prompt": prompts, "target_new": new, "ground_truth": true},
    }


def _with_formula(rule: Rule, formula: str) -> Rule:
    """``rule`` whose true formula is ``formula`` and whose counterfactual is its own true formula (for drawing)."""
    return replace(rule, formula=formula, counterfactual=rule.formula)


def rule_table() -> dict[str, Any]:
    """The rule table as JSON: every rule's formulas (as written and as parsed by sympy), variables and notes."""
    rules = []
    for rule in RULES:
        rules.append(
            {
                "id": rule.id,
                "key": rule.key,
                "shape": rule.shape,
                "subject": rule.subject,
                "property": rule.property,
                "dimension": rule.dimension,
                "formula": rule.formula,
                "sympy": str(rule.equation()),
                "description": rule.full_description,
                "counterfactual": rule.counterfactual,
                "counterfactual_sympy": str(rule.equation(True)),
                "counterfactual_description": rule.counterfactual_description,
                "variables": [vars(variable) for variable in rule.variables],
                "definitions": [list(definition) for definition in rule.definitions],
                "constraints": list(rule.constraints),
                "note": rule.note,
            }
        )
    hierarchy = [vars(pair) for pair in HIERARCHY]
    return {"decimals": DECIMALS, "rules": rules, "omitted": list(OMITTED), "hierarchy": hierarchy}


def _write(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def generate(out: str | Path, seed: int = 0) -> dict[str, int]:
    """Write the dataset under ``out`` (see the module docstring) and return its counts."""
    out = Path(out)
    counts = {"rules": 0, "f_d_records": 0, "ins_records": 0, "instances": 0, "hierarchy_records": 0}
    for rule in RULES:
        f_d, ins = rule_records(rule, seed)
        _write(out / str(rule.id) / "f_d.json", f_d)
        _write(out / str(rule.id) / "ins.json", [ins])
        counts["rules"] += 1
        counts["f_d_records"] += len(f_d)
        counts["ins_records"] += 1
        counts["instances"] += len(f_d[0]["Instance"]["prompt"])
    _write(out / "rules.json", rule_table())
    hierarchy = [hierarchy_record(pair, index, seed) for index, pair in enumerate(HIERARCHY)]
    _write(out / "hierarchy.json", hierarchy)
    counts["hierarchy_records"] = len(hierarchy)
    return counts


def main(argv: list[str] | None = None) -> None:
    """The command line: ``python -m lightning_edit.data.ruleedit.generator --out DIR [--seed N]``."""
    parser = tools.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the output folder (the shipped copy: lightning_edit/assets/...)")
    parser.add_argument("--seed", type=int, default=0, help="seed of every random choice (default 0)")
    args = parser.parse_args(argv)
    print(json.dumps(generate(args.out, args.seed)))


if __name__ == "__main__":
    tools.run(main)
