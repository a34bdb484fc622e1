"""Import layers of the package, read from the source with ``ast`` (nothing is imported).

Every import counts: ``import lightning_edit.x``, ``from lightning_edit.x import y``, relative imports, and lazy
imports inside functions.
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
    ("models", ("editors", "data", "scoring", "stats", "toy", "metrics")),
]


def module_name(path: Path) -> str:
    """``lightning_edit/data/base.py`` -> ``lightning_edit.data.base``; a package's ``__init__.py`` -> the package."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, module: str, is_package: bool = False) -> set[str]:
    """The ``lightning_edit`` names a module's source imports, anywhere in it, relative imports made absolute.

    ``from a.b import c`` yields ``a.b`` and ``a.b.c`` (``c`` may be a submodule).
    """
    package = module if is_package else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(source)):
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


def package_imports() -> dict[str, set[str]]:
    """Module name -> the lightning_edit names it imports, for every module of the package."""
    return {
        module_name(path): imported_modules(
            path.read_text(encoding="utf-8"), module_name(path), path.name == "__init__.py"
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


def test_metrics_imports_only_itself():
    outside = {
        module: sorted(name for name in names if not within(name, "metrics"))
        for module, names in package_imports().items()
        if within(module, "metrics")
    }
    assert not {module: names for module, names in outside.items() if names}


def test_only_the_entry_point_imports_the_cli():
    importers = [module for module, names in package_imports().items() if any(within(n, "cli") for n in names)]
    assert importers == ["lightning_edit.__main__"]  # python -m lightning_edit


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
    assert imported_modules("import torch\nfrom torch import nn", "lightning_edit.data.base") == set()


def test_an_editor_imports_no_benchmark_judge_or_client():
    """Importing an editor loads neither the judges nor the benchmarks that use them, nor openai. (sympy cannot be
    checked this way: ``import lightning`` itself imports it.)"""
    watched = ("openai", "lightning_edit.judges", "lightning_edit.data.ruleedit", "lightning_edit.data.scedit")
    code = f"import sys, lightning_edit.editors.rome; print([m for m in {watched!r} if m in sys.modules])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
