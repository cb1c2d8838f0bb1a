"""Imports point downward only. The packages of ``reasonserve`` sit in layers; a module may
import from its own package and from packages of lower layers, never from its own layer's
other packages or from above. Checked on the sources (``ast``, every import, inside
functions and ``TYPE_CHECKING`` blocks too); no import circle inside a package (at run time:
``TYPE_CHECKING`` imports aside); what a real ``import reasonserve.policies`` loads; and that
no compiled leftover shadows a source module."""

from __future__ import annotations

import ast
import importlib.machinery
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "reasonserve"

# Lowest first. Packages of one layer do not import one another.
LAYERS: list[set[str]] = [
    {"core"},  # errors, value types, views, decisions, the host contract
    {"ops", "paths", "progress"},  # tensor functions (they raise core's errors); data paths; progress bars
    {"cost", "certainindex", "dvr"},  # step costs; answer certainty; decode-verify-rollback
    {"policies", "recordings"},  # scheduling policies; loaders of recorded runs
    {"engine", "sim", "replay"},  # hosts of policies (a real engine, a simulator); replays
    {"clients"},  # the EngineClient protocol over engine, simulator, HTTP
    {"programs"},  # reasoning programs on any client
    {"serve"},  # the OpenAI-compatible server
    {"adapters", "gateway"},  # vLLM, SGLang, Ray Serve; the gateway in front of OpenAI-compatible servers
    {"demo", "engine_demo", "demos"},  # the demos
    {"cli"},  # the command line
    {"__main__"},  # python -m reasonserve
]
LAYER = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def _modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def _imports(module: str, path: Path, *, typing_only: bool = True) -> Iterator[tuple[int, str]]:
    """(line, module imported) for every ``reasonserve`` import of ``path`` (without those in
    ``if TYPE_CHECKING:`` blocks unless ``typing_only``); a relative import resolved against
    ``module``; ``from a import b`` yields ``a.b`` when it is a module."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_bytes(), str(path))
    skipped = set() if typing_only else {id(n) for b in ast.walk(tree) if _typing_block(b) for n in ast.walk(b)}
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [_submodule(f"{base}.{alias.name}") or base for alias in node.names]
        else:
            continue
        yield from ((node.lineno, name) for name in names if name.split(".")[0] == "reasonserve")


def _typing_block(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _submodule(name: str) -> str | None:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return name if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file() else None


def _package(module: str) -> str:
    """The layer unit of a module: ``reasonserve.<package>`` (or a root module's name)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_package_has_a_layer():
    found = {_package(m) for m, _ in _modules()} - {"__init__"}
    assert found <= set(LAYER), f"add to LAYERS: {sorted(found - set(LAYER))}"


def test_no_import_runs_upward_or_across():
    wrong = []
    for module, path in _modules():
        src = _package(module)
        for line, target in _imports(module, path):
            dst = _package(target)
            if dst == "__init__":  # the root package (its version): loaded first by every import
                continue
            # the root __init__ runs before any other module: it may import only ops
            ok = dst == "ops" if src == "__init__" else dst == src or LAYER[dst] < LAYER[src]
            if not ok:
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {src} -> {target}")
    assert not wrong, "imports that run upward or across layers:\n" + "\n".join(wrong)


def _import_graph(prefix: str) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in _modules():
        if module.startswith(prefix):
            imported = _imports(module, path, typing_only=False)
            targets = {t for _, t in imported if t.startswith(prefix) and t != prefix}
            graph[module] = targets - {module}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


@pytest.mark.parametrize("package", ["core", "cost", "certainindex", "policies", "recordings", "sim"])
def test_no_import_circle_inside_a_package(package):
    """No two modules of a package import each other, directly or through others (a
    package's ``__init__`` re-exporting its modules is not an edge back)."""
    assert _cycles(_import_graph(f"reasonserve.{package}.")) == []


def test_importing_the_policies_loads_no_simulator_replay_or_certainindex():
    code = (
        "import sys, reasonserve.policies\n"
        "print(sorted(m for m in sys.modules if m.startswith(('reasonserve.sim', 'reasonserve.replay', "
        "'reasonserve.certainindex', 'reasonserve.recordings', 'reasonserve.engine'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_no_compiled_leftover_shadows_a_source_module():
    """An extension module beside a source (an old mypyc build) would be imported instead of
    the ``.py``: only the native kernels ``_C`` are extensions."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    extensions = [p for p in PACKAGE.rglob("*") if p.name.endswith(suffixes) and not p.name.startswith("_C.")]
    assert extensions == []


def test_the_simulator_holds_no_copy_of_a_program():
    """Reasoning programs run on the simulator as themselves, through ``clients.SimClient``
    (``programs.recorded`` drives ``programs.sc``): no simulator module decides what a
    program decides, so none imports the certainty estimators or the allocation policies
    (``reasonserve.certainindex``) a program decides with."""
    wrong = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {target}"
        for module, path in _modules()
        if _package(module) == "sim"
        for line, target in _imports(module, path)
        if _package(target) == "certainindex"
    ]
    assert not wrong, "the simulator imports a program's decision rules:\n" + "\n".join(wrong)
