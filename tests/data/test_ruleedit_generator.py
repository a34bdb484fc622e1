"""The RULE-EDIT rule table and the generated dataset (``builtin:data/ruleedit``), checked with sympy."""

import json
import math
import random
import re
from collections import Counter

import pytest
import sympy

from lightning_edit.data.ruleedit.generator import DECIMALS, description_prompt, format_number, formula_prompt, generate
from lightning_edit.data.ruleedit.rules import BY_KEY, HIERARCHY, RULES, Rule, parse
from lightning_edit.resources import resolve_path

DATA = resolve_path("builtin:data/ruleedit")
POINTS = 30


def test_the_paper_s_79_rules():
    assert len(RULES) == 79 and [rule.id for rule in RULES] == list(range(79))
    assert Counter(rule.dimension for rule in RULES) == {"2D": 44, "3D": 35}
    assert len({rule.key for rule in RULES}) == 79
    assert len({rule.shape for rule in RULES}) == 15  # the paper's 15 figures
    for rule in RULES:
        assert rule.equation().lhs == rule.equation(True).lhs, rule.key
        assert set(map(str, rule.expression().free_symbols)) <= set(rule.symbols), rule.key
        assert set(map(str, rule.expression(True).free_symbols)) <= set(rule.symbols), rule.key


def random_point(rule: Rule, rng: random.Random) -> dict[sympy.Symbol, float]:
    """Real values drawn uniformly in the variables' ranges until the constraints hold."""
    while True:
        values = {variable.symbol: rng.uniform(variable.low, variable.high) for variable in rule.variables}
        if rule.valid({name: sympy.Float(value) for name, value in values.items()}):
            return {rule.symbols[name]: value for name, value in values.items()}


@pytest.mark.parametrize("rule", RULES, ids=[rule.key for rule in RULES])
def test_counterfactual_differs_from_the_true_formula(rule):
    true, counterfactual = rule.expression(), rule.expression(True)
    assert sympy.simplify(true - counterfactual) != 0
    symbols = list(rule.symbols.values())
    true_f, counterfactual_f = (sympy.lambdify(symbols, expr, "math") for expr in (true, counterfactual))
    rng = random.Random(rule.id)
    for _ in range(POINTS):
        point = random_point(rule, rng)
        args = [point[symbol] for symbol in symbols]
        a, b = true_f(*args), counterfactual_f(*args)
        assert math.isfinite(a) and a > 0, (rule.key, point)
        assert not math.isclose(a, b, rel_tol=1e-9), (rule.key, point)


def rule_of(record) -> Rule:
    return RULES[record["case_id"]]


def given_values(rule: Rule, prompt: str) -> dict[sympy.Symbol, sympy.Expr]:
    """The input values an instance prompt states, read back through the rule's ``given`` template."""
    pattern = re.escape(rule.given)
    for variable in rule.variables:
        unit = " degrees" if variable.unit == "degrees" else ""
        pattern = pattern.replace(
            re.escape("{" + variable.symbol + "}"), rf"(?P<v{variable.symbol}>[0-9]+(?:\.[0-9]+)?){unit}", 1
        )
    match = re.search(pattern, prompt)
    assert match, (rule.key, prompt)
    values = {}
    for variable in rule.variables:
        value = sympy.Rational(match.group(f"v{variable.symbol}"))
        assert variable.low <= value <= variable.high
        values[rule.symbols[variable.symbol]] = value * sympy.pi / 180 if variable.unit == "degrees" else value
    return values


def value_of(rule: Rule, counterfactual: bool, values) -> sympy.Expr:
    """The rule's right-hand side at ``values``: definitions substituted, independently of the generator."""
    expr = parse(rule.rhs_text(counterfactual))
    for symbol, definition in reversed(rule.definitions):
        expr = expr.subs(sympy.Symbol(symbol, positive=True), parse(definition))
    return expr.subs(values)


def assert_answer(stored: str, value: sympy.Expr, where) -> None:
    """A stored answer is the exact value: an integer as an integer, else rounded to DECIMALS decimals."""
    final = stored.rpartition("= ")[2]
    if "." in final:
        assert len(final.partition(".")[2]) == DECIMALS, where
        assert abs(float(final) - float(value)) <= 0.5 * 10**-DECIMALS + 1e-9, where
        assert not sympy.simplify(value).is_Integer, where
    else:
        assert sympy.simplify(value - int(final)) == 0, where


def assert_steps(rule: Rule, stored: str, values, where) -> None:
    """The last step of a step-by-step answer, ``lhs = substituted rhs = value``, evaluates to the value."""
    parts = stored.split("; ")[-1].split(" = ")  # "r = 10" when the substitution is the value itself
    lhs, substituted, final = parts[0], parts[1], parts[-1]
    assert lhs == rule.lhs, where
    if not rule.definitions:  # with definitions the shown intermediate values are rounded
        expr = parse(substituted.replace("°", " * π / 180"))
        assert abs(float(expr) - float(final)) <= 0.5 * 10**-DECIMALS + 1e-9, where


def records():
    for folder in sorted(DATA.iterdir(), key=lambda path: path.name):
        if folder.is_dir():
            f_d = json.loads((folder / "f_d.json").read_text(encoding="utf-8"))
            (ins,) = json.loads((folder / "ins.json").read_text(encoding="utf-8"))
            yield folder, f_d, ins


def test_the_dataset_has_79_rules_and_316_instances():
    folders = list(records())
    assert len(folders) == 79
    instances = 0
    for folder, f_d, ins in folders:
        assert [record["case_id"] for record in f_d] == [int(folder.name)] * 2 == [ins["case_id"]] * 2
        assert len(f_d[0]["Instance"]["prompt"]) >= 4
        instances += len(f_d[0]["Instance"]["prompt"])
    assert instances >= 316


def test_every_instance_answer_is_re_derived_with_sympy():
    checked = 0
    for folder, f_d, ins in records():
        rule = rule_of(ins)
        instance = f_d[0]["Instance"]
        items = list(zip(instance["prompt"], instance["target_new"], instance["ground_truth"]))
        items.append((ins["prompt"], ins["target_new"], ins["ground_truth"][0]))
        for prompt, new, true in items:
            values = given_values(rule, prompt)
            where = (folder.name, prompt)
            assert_answer(new, value_of(rule, True, values), where)
            assert_answer(true, value_of(rule, False, values), where)
            assert new != true, where
            if "Substitute" in prompt:
                assert_steps(rule, new, values, where)
                assert_steps(rule, true, values, where)
            checked += 1
    assert checked == 79 * 5


def test_records_have_the_ruleedit_200_shapes_and_both_views():
    for _, (formula, description), ins in records():
        rule = rule_of(ins)
        assert formula["prompt"] == formula_prompt(rule) and formula["target_new"] == rule.counterfactual + "."
        assert formula["ground_truth"] == [rule.formula + "."]
        assert description["prompt"] == description_prompt(rule)
        assert description["target_new"] == rule.counterfactual_description + "."
        assert formula["Rule_Understanding"]["prompt"] == description["prompt"]
        assert description["Rule_Understanding"]["target_new"] == formula["target_new"]
        assert isinstance(formula["Rule_Understanding"]["prompt"], str)
        assert isinstance(formula["Rule_Understanding"]["ground_truth"], list)
        understanding = ins["Rule_Understanding"]
        assert understanding["prompt"] == [formula["prompt"], description["prompt"]]
        assert understanding["target_new"] == [formula["target_new"], description["target_new"]]
        assert rule.subject in formula["rephrase_prompt"] and rule.subject in description["rephrase_prompt"]


def test_locality_neighbours_are_half_same_shape_half_other_shapes():
    by_prompt = {formula_prompt(rule): rule for rule in RULES} | {description_prompt(rule): rule for rule in RULES}
    for _, f_d, ins in records():
        rule = rule_of(ins)
        for record in (*f_d, ins):
            blocks = record["locality"]
            for name, same in (("neighborhood", True), ("distracting", False)):
                neighbours = [by_prompt[prompt] for prompt in blocks[name]["prompt"]]
                assert len(neighbours) == 2 and rule not in neighbours
                assert all((other.shape == rule.shape) == same for other in neighbours)
                assert all(truth.endswith(".") for truth in blocks[name]["ground_truth"])


def test_hierarchy_composes_the_2d_rule_into_the_3d_rule():
    hierarchy = json.loads((DATA / "hierarchy.json").read_text(encoding="utf-8"))
    assert len(hierarchy) == len(HIERARCHY) >= 10
    for pair, record in zip(HIERARCHY, hierarchy):
        lower, upper = BY_KEY[pair.lower], BY_KEY[pair.upper]
        assert (record["rule_2d"], record["rule_3d"]) == (lower.id, upper.id)
        assert lower.dimension == "2D" and upper.dimension == "3D"
        renaming = {sympy.Symbol(a, positive=True): sympy.Symbol(b, positive=True) for a, b in pair.renaming.items()}
        inner = {
            counterfactual: lower.expression(counterfactual).subs(renaming, simultaneous=True)
            for counterfactual in (False, True)
        }
        composition = parse(pair.composition.partition("=")[2])
        placeholder = parse(lower.lhs)
        assert sympy.simplify(composition.subs(placeholder, inner[False]) - upper.expression()) == 0, pair
        edited = composition.subs(placeholder, inner[True])
        assert sympy.simplify(edited - parse(record["Hierarchy"]["target_new"][0].rstrip(".").partition("=")[2])) == 0
        for prompt, new, true in list(zip(*record["Hierarchy"].values()))[1:]:
            values = given_values(upper, prompt)
            assert_answer(new, edited.subs(values), (pair, prompt))
            assert_answer(true, upper.expression().subs(values), (pair, prompt))
            assert new != true


def test_the_shipped_dataset_is_what_the_generator_writes(tmp_path):
    counts = generate(tmp_path / "seed0", seed=0)
    assert counts == {"rules": 79, "f_d_records": 158, "ins_records": 79, "instances": 316, "hierarchy_records": 15}
    shipped = sorted(path.relative_to(DATA) for path in DATA.rglob("*.json"))
    assert shipped == sorted(path.relative_to(tmp_path / "seed0") for path in (tmp_path / "seed0").rglob("*.json"))
    for path in shipped:
        assert (tmp_path / "seed0" / path).read_bytes() == (DATA / path).read_bytes(), path
    generate(tmp_path / "seed1", seed=1)
    assert (tmp_path / "seed1" / "0" / "ins.json").read_bytes() != (DATA / "0" / "ins.json").read_bytes()


def test_answer_format():
    assert format_number(sympy.Integer(12)) == "12"
    assert format_number(sympy.sqrt(36)) == "6"
    assert format_number(sympy.sqrt(2) * sympy.sqrt(8)) == "4"
    assert format_number(sympy.Rational(1, 8)) == "0.13"  # half up
    assert format_number(sympy.Rational(5, 2)) == "2.50"
    assert format_number(sympy.pi) == "3.14"
    assert format_number(sympy.cos(sympy.pi / 3)) == "0.50"
