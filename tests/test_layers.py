"""Import layers of the package, read from the source with ``ast`` (nothing is imported).

Every import counts: ``import lightning_edit.x``, ``from lightning_edit.x import y``, relative imports, and lazy
imports inside functions; the cycle check reads the imports a module runs when it is imported (not those inside
functions, nor those under ``if TYPE_CHECKING``).
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "lightning_edit"
#: (package part, the parts of lightning_edit none of its modules may import); metrics/ has its own test.
RULES = [
    ("stats", ("editors",)),
    ("data", ("editors", "toy")),
    ("editors", ("data", "judges", "toy")),  # an editor gets its cases, kinds and pool from the benchmark
    ("models", ("editors", "data", "scoring", "stats", "toy", "metrics")),
]
#: what data/ may import of judges/: the interface (building a judge, the judged kind, agreement), no judge itself
JUDGE_INTERFACE = (
    "lightning_edit.judges",
    "lightning_edit.judges.base",
    "lightning_edit.judges.kind",
    "lightning_edit.judges.agreement",
)


def module_name(path: Path) -> str:
    """``lightning_edit/data/base.py`` -> ``lightning_edit.data.base``; a package's ``__init__.py`` -> the package."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, module: str, is_package: bool = False, at_import: bool = False) -> set[str]:
    """The ``lightning_edit`` names a module's source imports, anywhere in it (``at_import``: only where the import
    runs when the module is imported), relative imports made absolute.

    ``from a.b import c`` yields ``a.b`` and ``a.b.c`` (``c`` may be a submodule).
    """
    package = module if is_package else module.rpartition(".")[0]
    found = set()
    for node in _nodes(ast.parse(source), at_import):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name == "lightning_edit" or name.startswith("lightning_edit.")}


def _nodes(node: ast.AST, at_import: bool):
    """Every node under ``node`` but ``if TYPE_CHECKING`` blocks (annotations only: they never run, and a runner's
    annotation names the editor that owns it); with ``at_import``, not the bodies of functions either."""
    for child in ast.iter_child_nodes(node):
        if at_import and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            yield from (n for orelse in child.orelse for n in (orelse, *_nodes(orelse, at_import)))
            continue
        yield child
        yield from _nodes(child, at_import)


def package_imports(at_import: bool = False) -> dict[str, set[str]]:
    """Module name -> the lightning_edit names it imports (``at_import``: see :func:`imported_modules`)."""
    return {
        module_name(path): imported_modules(
            path.read_text(encoding="utf-8"), module_name(path), path.name == "__init__.py", at_import
        )
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def within(name: str, part: str) -> bool:
    prefix = f"lightning_edit.{part}"
    return name == prefix or name.startswith(prefix + ".")


@pytest.mark.parametrize(("layer", "forbidden"), RULES, ids=[layer for layer, _ in RULES])
def test_layer_imports_nothing_above_it(layer, forbidden):
    modules = {module: names for module, names in package_imports().items() if within(module, layer)}
    assert len(modules) > 1, f"no modules found under lightning_edit/{layer}"
    wrong = {
        module: sorted(name for name in names if any(within(name, part) for part in forbidden))
        for module, names in modules.items()
    }
    assert not {module: names for module, names in wrong.items() if names}


def test_cases_are_the_bottom_layer():
    """Every layer may import the cases (schema and batching); they import nothing of the package but its errors,
    which import nothing of it."""
    imports = package_imports()
    assert imports["lightning_edit.cases"] == {
        "lightning_edit.errors",
        "lightning_edit.errors.ConfigError",
        "lightning_edit.errors.DataFormatError",
    }
    assert imports["lightning_edit.errors"] == set()


def test_data_uses_only_the_judge_interface():
    """A benchmark builds its judges from their names (the interface); its generator, a program, may use one."""
    modules = set(package_imports())
    wrong = {
        module: sorted(
            name for name in names if within(name, "judges") and name in modules and name not in JUDGE_INTERFACE
        )
        for module, names in package_imports().items()
        if within(module, "data") and not module.endswith(".generator")
    }
    assert not {module: names for module, names in wrong.items() if names}


@pytest.mark.parametrize("at_import", [True, False], ids=["as imported", "anywhere"])
def test_no_circular_import(at_import):
    """No module imports, as it is imported, one that imports it back (a package's own submodules excepted: Python
    imports a package before its submodules); nor anywhere, lazy imports inside functions counted too."""
    imports = package_imports(at_import=at_import)
    graph = {
        module: sorted(name for name in names if name in imports and not module.startswith(name + "."))
        for module, names in imports.items()
    }
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        for name in graph[module]:
            assert name not in path, f"circular import: {' -> '.join(path[path.index(name) :] + [name])}"
            if name not in done:
                visit(name, path + [name])
        done.add(module)

    assert "lightning_edit.editors.protocols" in graph["lightning_edit.editors.base"]  # the graph has its edges
    for module in graph:
        if module not in done:
            visit(module, [module])


def test_nothing_imports_a_benchmark_generator():
    """A benchmark's generator (``data/<benchmark>/generator.py``) is a program that writes its files: no loader, nor
    anything else in the package, imports it (and what it needs: sympy, an LLM client)."""
    generators = {module for module in package_imports() if module.endswith(".generator")}
    assert {"lightning_edit.data.ruleedit.generator", "lightning_edit.data.caseedit.generator"} <= generators
    importers = {module for module, names in package_imports().items() if names & generators}
    assert importers <= {"lightning_edit.toy.rule_corpus"}  # the toy rule corpus is written from RULE-EDIT's prompts


def test_metrics_imports_only_itself():
    outside = {
        module: sorted(name for name in names if not within(name, "metrics"))
        for module, names in package_imports().items()
        if within(module, "metrics")
    }
    assert not {module: names for module, names in outside.items() if names}


def test_only_the_entry_point_imports_the_cli():
    importers = [module for module, names in package_imports().items() if any(within(n, "cli") for n in names)]
    assert importers == ["lightning_edit.console"]  # the console script (and python -m lightning_edit through it)


def test_every_import_form_is_seen():
    source = """
import lightning_edit.editors.rome
from lightning_edit.toy import ToyWorld
from . import counterfact
from ..stats.cache import load_or_compute
from .. import scoring


def lazy():
    from lightning_edit.cli import build_cli
"""
    found = imported_modules(source, "lightning_edit.data.base")
    assert {
        "lightning_edit.editors.rome",
        "lightning_edit.toy",
        "lightning_edit.data.counterfact",
        "lightning_edit.stats.cache",
        "lightning_edit.scoring",
        "lightning_edit.cli",
    } <= found
    assert imported_modules("from .schema import EditCase", "lightning_edit.data", is_package=True) == {
        "lightning_edit.data.schema",
        "lightning_edit.data.schema.EditCase",
    }
    at_import = imported_modules(
        source + "if TYPE_CHECKING:\n    from lightning_edit.judges import Judge\n", "x.y", at_import=True
    )
    assert "lightning_edit.editors.rome" in at_import and "lightning_edit.cli" not in at_import  # not run on import
    assert "lightning_edit.judges" not in at_import
    assert imported_modules("import torch\nfrom torch import nn", "lightning_edit.data.base") == set()


def test_an_editor_imports_no_benchmark_judge_or_client():
    """Importing an editor loads no benchmark (nor its generator), no judge, nor openai. (sympy cannot be checked this
    way: ``import lightning`` itself imports it.)"""
    watched = ("openai", "lightning_edit.judges", "lightning_edit.data")
    code = f"import sys, lightning_edit.editors.rome; print([m for m in {watched!r} if m in sys.modules])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_no_module_an_editor_imports_imports_sympy():
    """``import lightning`` imports sympy (through torch's symbolic shapes), so ``sys.modules`` cannot tell whether the
    package does too; read from the source, no module that importing ROME imports imports sympy or openai."""
    imports = package_imports(at_import=True)
    reached, todo = set(), ["lightning_edit.editors.rome"]
    while todo:
        module = todo.pop()
        if module in reached or module not in imports:
            continue
        reached.add(module)
        todo += [name for name in imports[module] if name in imports]
        todo += [module.rpartition(".")[0]]  # a submodule's package is imported first
    assert {"lightning_edit.editors.base", "lightning_edit.scoring.kinds", "lightning_edit.cases"} <= reached
    outside = {}
    for module in reached:
        path = PACKAGE.parent / (module.replace(".", "/") + ".py")
        path = path if path.is_file() else path.with_suffix("") / "__init__.py"
        for node in _nodes(ast.parse(path.read_text(encoding="utf-8")), at_import=True):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            found = [name for name in names if name.split(".")[0] in ("sympy", "openai")]
            if found:
                outside[module] = found
    assert outside == {}
