"""The floors of docs/architecture.md hold: a module imports only from its own floor or below, no cycles.

Read from the source with ``ast`` (imports inside functions count too: a lazy import is still a
dependency), so the direction cannot rot again.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "kvplan"

#: Floor of each module, by the longest matching dotted prefix (docs/architecture.md draws them).
FLOORS = {
    "kvplan": 0,  # the package's own __init__ (version only)
    "kvplan.units": 0,
    "kvplan.columns": 0,
    "kvplan.releases": 0,
    "kvplan.config": 0,
    "kvplan.notes": 0,
    "kvplan.lazy": 0,
    "kvplan.verdict": 0,
    "kvplan.json_text": 0,
    "kvplan.io": 1,
    "kvplan.budget": 2,
    "kvplan.capacity": 2,
    "kvplan.drift": 2,
    "kvplan.ledger": 2,
    "kvplan.ledger_budget": 2,
    "kvplan.room": 2,
    "kvplan.kvspec": 2,
    "kvplan.load": 2,
    "kvplan.checks": 2,
    "kvplan.gate": 2,
    "kvplan.charts": 3,
    "kvplan.load.charts": 3,  # the load package's charts, on the charts floor
    "kvplan.plan": 4,
    "kvplan.evidence": 5,
    "kvplan.notebook": 6,
    "kvplan.whatif": 6,
    "kvplan.fleet": 6,
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


def test_no_import_cycle_between_modules():
    edges = {
        module: {t for t in targets if t != module and not module.startswith(t + ".")}
        for module, targets in graph().items()
    }
    # a package's __init__ re-exporting its own modules is not a cycle of concepts
    edges = {m: {t for t in ts if not t.startswith(m + ".")} for m, ts in edges.items()}
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
    assert cycles == []


def test_the_floor_rule_sees_an_upward_import():
    # the check itself: the CLI importing the readers is down; a reader importing the pipeline is up
    assert floor("kvplan.cli.budget") > floor("kvplan.io.vllm")
    assert floor("kvplan.io.vllm.boots") < floor("kvplan.plan.decision")
