"""No module-level registry: a dict, list or set made at module level is never changed by the package's code, read
from the source with ``ast`` (nothing is imported).

A run gets what it needs handed to it (a benchmark's ``sources``, its ``own_kinds``, its judges), never from a
module-level table that code adds to. The process state a module must keep (the stop signals received, the secrets
to mask) is listed in :data:`PROCESS_STATE`, with why; anything else mutated is a failure.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "lightning_edit"
#: module -> the module-level containers it changes on purpose: state of the process, not a registry of things
PROCESS_STATE = {
    # what a signal handler records, where a run is in step, and the launched processes a stop took from Lightning
    "lightning_edit.stopping": {"_signals", "_in_step", "_held"},
    "lightning_edit.redaction": {"_secrets"},  # the secrets this process has read (API keys), masked in all output
}
MUTATORS = {"append", "extend", "insert", "update", "setdefault", "add", "pop", "popitem", "clear", "remove", "discard"}
FACTORIES = {"dict", "list", "set", "defaultdict", "OrderedDict", "Counter", "deque"}
CONTAINERS = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_containers(tree: ast.Module) -> set[str]:
    """The names a module binds at module level to a new dict, list or set (``__all__`` aside)."""
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        called = value.func if isinstance(value, ast.Call) else None
        factory = getattr(called, "id", getattr(called, "attr", None))
        if isinstance(value, CONTAINERS) or factory in FACTORIES:
            names.update(target.id for target in targets if isinstance(target, ast.Name) and target.id != "__all__")
    return names


def _changed(node: ast.AST) -> ast.expr | None:
    """What ``node`` changes in place, if anything: ``x[k] = v``, ``del x[k]``, ``x += y``, ``x.update(...)``."""
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)):
        return node.value
    if isinstance(node, ast.AugAssign):
        return node.target
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
        return node.func.value
    return None


def mutated(tree: ast.Module, names: set[str], modules: dict[str, str]) -> set[str]:
    """Which of ``names`` (bare names) and of ``modules`` (alias -> module, for ``alias.NAME``, given as
    ``module.NAME``) ``tree`` changes in place or rebinds with ``global``; a function's own local of the same name is
    not the module's."""
    found = set()

    def visit(node: ast.AST, local: set[str]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            declared = {name for child in ast.walk(node) if isinstance(child, ast.Global) for name in child.names}
            found.update(declared & names)
            bound = {arg.arg for arg in ast.walk(node.args) if isinstance(arg, ast.arg)}
            bound |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            local = (local | bound) - declared
        target = _changed(node)
        if isinstance(target, ast.Name) and target.id in names and target.id not in local:
            found.add(target.id)
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id in modules:
            found.add(f"{modules[target.value.id]}.{target.attr}")
        for child in ast.iter_child_nodes(node):
            visit(child, local)

    visit(tree, set())
    return found


def mutated_containers() -> dict[str, set[str]]:
    """Module -> its module-level containers that some module of the package changes."""
    trees = {module_name(path): ast.parse(path.read_text(encoding="utf-8")) for path in sorted(PACKAGE.rglob("*.py"))}
    containers = {module: module_containers(tree) for module, tree in trees.items()}
    found: dict[str, set[str]] = {}
    for module, tree in trees.items():
        names = {name: module for name in containers[module]}  # its own, by bare name
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    if alias.name in containers.get(node.module, ()):
                        names[alias.asname or alias.name] = node.module
                    elif f"{node.module}.{alias.name}" in containers:
                        aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                aliases |= {alias.asname: alias.name for alias in node.names if alias.asname and alias.name in trees}
        for name in mutated(tree, set(names), aliases):
            owner, _, attribute = name.rpartition(".")
            if owner:
                if attribute in containers.get(owner, ()):
                    found.setdefault(owner, set()).add(attribute)
            else:
                found.setdefault(names[name], set()).add(name)
    return found


def test_no_module_level_registry():
    changed = mutated_containers()
    unexpected = {
        module: sorted(names - PROCESS_STATE.get(module, set()))
        for module, names in changed.items()
        if names - PROCESS_STATE.get(module, set())
    }
    assert unexpected == {}
    assert "lightning_edit.data.sources" not in changed and "lightning_edit.judges.template_files" not in changed


def test_data_sources_keep_no_module_level_container():
    """What ``--data.path <name>`` can mean is a DataModule's ``sources``, not a catalogue in the sources module."""
    for name in ("sources", "source_cache"):
        tree = ast.parse((PACKAGE / "data" / f"{name}.py").read_text(encoding="utf-8"))
        assert module_containers(tree) == set(), name


def test_every_kind_of_change_is_seen():
    source = """
CATALOGUE = {}
ITEMS: list = []
SEEN = set()
LOCAL = {}


def register(name, value):
    CATALOGUE[name] = value
    ITEMS.append(value)


def forget():
    global SEEN
    SEEN = set()


def shadowed():
    LOCAL = {}
    LOCAL["x"] = 1
"""
    tree = ast.parse(source)
    assert module_containers(tree) == {"CATALOGUE", "ITEMS", "SEEN", "LOCAL"}
    assert mutated(tree, module_containers(tree), {}) == {"CATALOGUE", "ITEMS", "SEEN"}
    other = ast.parse(
        "import lightning_edit.x as x\nfrom lightning_edit.y import TABLE\nx.CATALOGUE['a'] = 1\nTABLE.update(b=2)\n"
    )
    assert mutated(other, {"TABLE"}, {"x": "lightning_edit.x"}) == {"TABLE", "lightning_edit.x.CATALOGUE"}
