"""The floors of docs/architecture.md hold: a module imports only from its own floor or below, no cycles.

Read from the source with ``ast`` (imports inside functions count too: a lazy import is still a
dependency), so the direction cannot rot again.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "kvplan"

#: Floor of each module, by the longest matching dotted prefix (docs/architecture.md draws them).
FLOORS = {
    "kvplan": 0,  # the package's own __init__ (data folders, version, lazy_names)
    "kvplan.units": 0,
    "kvplan.columns": 0,
    "kvplan.releases": 0,
    "kvplan.notes": 0,
    "kvplan.escape": 0,
    "kvplan.io": 1,
    "kvplan.budget": 2,
    "kvplan.drift": 2,
    "kvplan.ledger": 2,
    "kvplan.room": 2,
    "kvplan.kvspec": 2,
    "kvplan.load": 2,
    "kvplan.checks": 2,
    "kvplan.charts": 3,
    "kvplan.load.charts": 3,  # the load package's charts, on the charts floor
    "kvplan.plan": 4,
    "kvplan.evidence": 5,
    "kvplan.notebook": 6,
    "kvplan.whatif": 6,
    "kvplan.fleet": 6,
    "kvplan.export": 6,
    "kvplan.cli": 7,
    "kvplan.cli_fleet": 7,
    "kvplan.__main__": 7,
}


def floor(module: str) -> int:
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in FLOORS:
            return FLOORS[prefix]
    raise AssertionError(f"{module} has no floor in tests/test_layers.py FLOORS (and docs/architecture.md)")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """The kvplan modules ``path`` imports (``from kvplan.x import y`` names ``kvplan.x.y`` when a module)."""
    found = set()
    for node in _runtime_nodes(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("kvplan")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kvplan"):
            found.add(node.module)
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                if _is_module(candidate):
                    found.add(candidate)
    return found


def _runtime_nodes(tree: ast.AST):
    """Every node but those under ``if TYPE_CHECKING:`` (annotations only: not a dependency at run time)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            yield from (n for child in node.orelse for n in ast.walk(child))
            continue
        yield node
        yield from _runtime_nodes(node)


def _is_module(name: str) -> bool:
    relative = Path(*name.split(".")[1:])
    return (PACKAGE / relative).with_suffix(".py").is_file() or (PACKAGE / relative / "__init__.py").is_file()


def graph() -> dict[str, set[str]]:
    return {module_name(path): imports(path) for path in sorted(PACKAGE.rglob("*.py"))}


def test_every_import_goes_down_the_floors():
    upward = [
        f"{module} (floor {floor(module)}) imports {target} (floor {floor(target)})"
        for module, targets in graph().items()
        for target in sorted(targets)
        if floor(target) > floor(module)
    ]
    assert upward == []


def import_cycles(graph: dict[str, set[str]]) -> list[str]:
    """Each cycle of ``graph`` once, as ``a -> b -> a``.

    A package's ``__init__`` is a module like any other (issue 23): ``from kvplan.io.vllm import handlers``
    inside ``kvplan/io/vllm/`` imports ``kvplan.io.vllm`` (its ``__init__`` runs first), so a module that the
    ``__init__`` imports and that imports the package back closes a cycle.
    """
    edges = {module: {t for t in targets if t != module} for module, targets in graph.items()}
    cycles, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for target in sorted(edges.get(node, ())):
            if state.get(target) == "open":
                cycles.append(" -> ".join([*stack[stack.index(target) :], target]))
            elif target not in state:
                visit(target, [*stack, target])
        state[node] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    return cycles


def test_no_import_cycle_between_modules():
    assert import_cycles(graph()) == []


def test_the_cycle_check_counts_a_package_init():
    # issue 23: a.x imports the package a (its __init__), which imports a.x: a cycle, not a re-export
    assert import_cycles({"a": {"a.x"}, "a.x": {"a", "b"}, "b": set()}) == ["a -> a.x -> a"]
    assert import_cycles({"a": {"a.x"}, "a.x": {"a.y"}, "a.y": set()}) == []


def test_the_floor_rule_sees_an_upward_import():
    # the check itself: the CLI importing the readers is down; a reader importing the pipeline is up
    assert floor("kvplan.cli.budget") > floor("kvplan.io.vllm")
    assert floor("kvplan.io.vllm.boots") < floor("kvplan.plan.decision")


# --- one definition per public name (issue 23) ----------------------------------------------------

#: Public names still defined in two modules, with the engineer whose work removes the pair. The list only
#: shrinks: the test fails when a listed name is defined once again, so the list stays true.
DEFINED_TWICE_FOR_NOW = {}


def _module_level(statements: list[ast.stmt]):
    """The statements that run when a module is imported: its body and its ``if``/``try`` blocks."""
    for node in statements:
        yield node
        if isinstance(node, ast.If):
            yield from _module_level([*node.body, *node.orelse])
        elif isinstance(node, ast.Try):
            handlers = [statement for handler in node.handlers for statement in handler.body]
            yield from _module_level([*node.body, *handlers, *node.orelse, *node.finalbody])


def defined_names(tree: ast.Module) -> list[str]:
    """Public names a module defines: module-level ``def``, ``class`` or assignment, no leading
    underscore. A name bound by ``import`` (a re-export) is not a definition."""
    names = []
    for node in _module_level(tree.body):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)]
    return [name for name in dict.fromkeys(names) if not name.startswith("_")]


def public_definitions() -> dict[str, list[str]]:
    """The modules defining each public name (:func:`defined_names`)."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for name in defined_names(ast.parse(path.read_text(), filename=str(path))):
            found.setdefault(name, []).append(module_name(path))
    return found


def test_the_name_check_sees_definitions_not_imports():
    source = "from x import y\nimport z\nA = 1\n_b = 2\ndef f():\n    c = 3\nclass K:\n    d = 4\nif t:\n    E = 5\n"
    assert defined_names(ast.parse(source)) == ["A", "f", "K", "E"]


def test_no_public_name_defined_in_two_modules():
    twice = {name: modules for name, modules in public_definitions().items() if len(modules) > 1}
    assert {name: twice[name] for name in sorted(set(twice) - set(DEFINED_TWICE_FOR_NOW))} == {}
    assert sorted(set(DEFINED_TWICE_FOR_NOW) - set(twice)) == []  # fixed: take it off the list


# --- size budgets (issue 23; docs/architecture.md "Budgets") --------------------------------------

#: Lines a module holds (a package's ``__init__`` and ``__main__`` may be shorter).
MODULE_LINES = (80, 400)
#: Lines a function holds, ``def`` to its last line (docstring included), and the parameters it takes
#: (``self``/``cls`` not counted; ``*args`` and ``**kwargs`` one each).
FUNCTION_LINES, FUNCTION_PARAMETERS = 60, 6

#: Today's offenders, each a module or a function (``module.qualname``). The list only shrinks: a new
#: offender fails the test, and so does an entry that no longer offends (take it off the list).
OVER_BUDGET_FOR_NOW: set[str] = set()


def _functions(tree: ast.AST, prefix: str):
    """``(qualified name, node)`` of every function under ``tree``, methods and nested ones too."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = f"{prefix}.{node.name}"
            if not isinstance(node, ast.ClassDef):
                yield name, node
            yield from _functions(node, name)
        else:
            yield from _functions(node, prefix)


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    arguments = function.args
    named = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    if named and named[0].arg in ("self", "cls"):
        named = named[1:]
    return len(named) + (arguments.vararg is not None) + (arguments.kwarg is not None)


def budget_offences() -> dict[str, str]:
    """Each module and function over its budget, with what it holds."""
    found = {}
    low, high = MODULE_LINES
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        module, lines = module_name(path), len(text.splitlines())
        short_allowed = path.name in ("__init__.py", "__main__.py")
        if lines > high or (lines < low and not short_allowed):
            found[module] = f"{lines} lines"
        for name, function in _functions(ast.parse(text, filename=str(path)), module):
            length = function.end_lineno - function.lineno + 1
            parameters = _parameters(function)
            if length > FUNCTION_LINES or parameters > FUNCTION_PARAMETERS:
                found[name] = f"{length} lines, {parameters} parameters"
    return found


def test_modules_and_functions_keep_their_budgets():
    offences = budget_offences()
    assert {name: offences[name] for name in sorted(set(offences) - OVER_BUDGET_FOR_NOW)} == {}
    assert sorted(OVER_BUDGET_FOR_NOW - set(offences)) == []  # within budget now: take it off the list


def test_the_budget_counts_lines_and_parameters():
    tree = ast.parse("class A:\n    def f(self, a, *b, c, **d):\n        pass\n")
    [(name, function)] = list(_functions(tree, "m"))
    assert (name, _parameters(function), function.end_lineno - function.lineno + 1) == ("m.A.f", 4, 2)
