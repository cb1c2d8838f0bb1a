"""The modules on the simulator's per-step path (its event loop, instances, quiet
stretches, plans, runs, and the code it calls at every step: the capacity rule, PASCAL's
queues, the ranked fill and the queue orderings), compiled with mypyc when the build could
(``make`` runs ``scripts/compile_sim.py``), else their Python sources: the same code either
way.

The build writes each module's extension beside its source, their shared library
(:data:`LIBRARY`) beside the package and a manifest of the SHA-256 of their sources and of
the ``reasonserve`` modules they import from (mypyc typed the compiled code against those:
:func:`dependencies`) in ``_native.json`` in the package. A compiled module loads only when
every module of the set was built from the sources now on disk (its imports' too), with the
shared library of this tree (loaded from its path here, never another tree's found first on
``sys.path``); otherwise (a source edited since the build, a partial build) or with
``REASONSERVE_PURE_PYTHON=1`` (read once, when the package is imported) every module of the
set, and any other module of the set's packages left an extension by an earlier build, loads
from its source, through a finder placed ahead of the extension modules. A compiled set is
used all or none: compiled modules call one another directly. ``reasonserve/__init__.py``
decides (:func:`prefer_sources`) before any module of the set can be imported.

Standalone (no imports from the package): the build script loads this file by path.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "GROUP", "LIBRARY", "MODULES", "PURE_ENV", "built_current", "compiled", "dependencies", "digests",
    "extension_path", "library_path", "manifest", "prefer_sources", "source_path", "use_sources",
]  # fmt: skip

# the per-step path of simulate(): the event loop, instances, quiet stretches, plans, runs,
# and the code it calls at every step that is not quiet (the capacity rule, the policies')
MODULES = (
    "reasonserve.core.capacity",
    "reasonserve.policies._order",
    "reasonserve.policies._ranked",
    "reasonserve.policies.pascal_queues",
    "reasonserve.sim.step_times",
    "reasonserve.sim.instance",
    "reasonserve.sim.pacing",
    "reasonserve.sim.plan",
    "reasonserve.sim.quiet",
    "reasonserve.sim.run",
    "reasonserve.sim.sequence",
    "reasonserve.sim.simulator",
)
PURE_ENV = "REASONSERVE_PURE_PYTHON"  # 1/true/yes/on: load the sources even when compiled modules exist
MANIFEST = "_native.json"
GROUP = "reasonserve_native"  # mypyc's name for the set: its shared library is LIBRARY
LIBRARY = GROUP + "__mypyc"  # the shared library the modules' extensions import, in src/
_HERE = Path(__file__).resolve().parent  # the reasonserve package's dir
_PACKAGES = frozenset(m.rpartition(".")[0] for m in MODULES)


def source_path(module: str, root: Path = _HERE) -> Path:
    """The source file of ``module`` (a ``reasonserve`` module, one of :data:`MODULES` say)
    under the package dir ``root``."""
    return root.joinpath(*module.split(".")[1:]).with_suffix(".py")


def extension_path(module: str, suffix: str, root: Path = _HERE) -> Path:
    """Where the build puts ``module``'s extension (``suffix``: one of the interpreter's
    extension suffixes), beside its source."""
    source = source_path(module, root)
    return source.with_name(source.stem + suffix)


def _module_source(module: str, root: Path) -> Path | None:
    """The source of any ``reasonserve`` module (a package's ``__init__.py``)."""
    path = root.parent.joinpath(*module.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def dependencies(root: Path = _HERE) -> tuple[str, ...]:
    """The ``reasonserve`` modules the set imports from (absolute imports): mypyc typed the
    compiled code against their classes and functions, so an edit to one makes the build
    stale too. Direct imports only: the set reads nothing else's types."""
    found: set[str] = set()
    for module in MODULES:
        path = _module_source(module, root)
        if path is None:
            continue
        for node in ast.walk(ast.parse(path.read_bytes())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]  # a submodule too
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            found.update(n for n in names if n.split(".")[0] == "reasonserve" and _module_source(n, root))
    return tuple(sorted(found.difference(MODULES)))


def digests(root: Path = _HERE, modules: Sequence[str] = MODULES) -> dict[str, str]:
    """SHA-256 of each of ``modules``' sources (default: the set's) beside ``root``."""
    out = {}
    for m in modules:
        path = _module_source(m, root)
        out[m] = hashlib.sha256(path.read_bytes()).hexdigest() if path is not None else ""
    return out


def manifest(root: Path = _HERE) -> dict:
    """What the build records in :data:`MANIFEST`: the set's and its imports' digests."""
    imports = dependencies(root)
    return {"python": sys.version, "dependencies": list(imports), "digests": digests(root, MODULES + imports)}


def built_current(root: Path = _HERE) -> bool:
    """Whether a complete build is beside the sources in ``root`` and every module its
    manifest names (the set and what it imports) has the source it was built from."""
    built = _built(root)
    return built is not None and digests(root, list(built)) == built


def _built(root: Path) -> dict[str, str] | None:
    """The manifest's digests, or None when there is no complete build beside the sources."""
    try:
        manifest = json.loads((root / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if library_path(root) is None or not all(_extension(root, m) for m in MODULES):
        return None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("dependencies"), list):
        return None  # also a manifest from before the dependencies were recorded
    built = manifest.get("digests")
    if not isinstance(built, dict) or built.keys() != {*MODULES, *manifest["dependencies"]}:
        return None
    return built


def _extension(root: Path, module: str) -> bool:
    return any(extension_path(module, s, root).exists() for s in importlib.machinery.EXTENSION_SUFFIXES)


def _extensions_present(root: Path) -> bool:
    return any(_extension(root, m) for m in MODULES)


def library_path(root: Path = _HERE) -> Path | None:
    """The build's shared library beside the package dir ``root`` (in ``src/``), or None."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = root.parent / (LIBRARY + suffix)
        if path.exists():
            return path
    return None


def _load_library(path: Path) -> bool:
    """Load the shared library from ``path`` before any extension imports it by name (which
    would take the first on ``sys.path``: another tree's build, say); False when another
    one is loaded already or it does not load."""
    loaded = sys.modules.get(LIBRARY)
    if loaded is not None:
        return Path(str(getattr(loaded, "__file__", ""))).resolve() == path.resolve()
    spec = importlib.util.spec_from_file_location(LIBRARY, path)
    if spec is None or spec.loader is None:
        return False
    try:
        module = importlib.util.module_from_spec(spec)
        sys.modules[LIBRARY] = module
        spec.loader.exec_module(module)
    except (ImportError, OSError):
        sys.modules.pop(LIBRARY, None)
        return False
    return True


class _Sources(importlib.abc.MetaPathFinder):
    """Finds the modules of :data:`MODULES`, and any other module of their packages with an
    extension beside its source (one dropped from the set since the build), as their
    ``.py`` sources under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: object = None):
        package = fullname.rpartition(".")[0]
        if fullname not in MODULES and not (package in _PACKAGES and _extension(self.root, fullname)):
            return None
        source = source_path(fullname, self.root)
        return importlib.util.spec_from_file_location(fullname, source) if source.exists() else None


def use_sources(root: Path = _HERE) -> None:
    """Load the modules of :data:`MODULES` from their sources from now on (idempotent;
    a module already imported stays as it is)."""
    if not any(isinstance(f, _Sources) and f.root == root for f in sys.meta_path):
        sys.meta_path.insert(0, _Sources(root))


def prefer_sources(root: Path = _HERE) -> str:
    """Decide, before any module of the set is imported, which implementation loads;
    returns "compiled", "sources" (asked for, or nothing built) or "stale"."""
    if not _extensions_present(root):
        return "sources"
    if os.environ.get(PURE_ENV, "").strip().lower() in ("1", "true", "yes", "on"):
        use_sources(root)
        return "sources"
    library = library_path(root)
    if library is not None and built_current(root) and _load_library(library):
        return "compiled"
    use_sources(root)
    warnings.warn(
        "reasonserve: the compiled simulator modules do not match their sources (they or a module "
        "they import edited since the build, a partial build, or another tree's build loaded); running "
        "the Python sources. "
        "Rebuild: python scripts/compile_sim.py",
        RuntimeWarning,
        stacklevel=2,
    )
    return "stale"


def compiled() -> bool:
    """Whether the imported modules of the set are the compiled ones."""
    loaded = [sys.modules[m] for m in MODULES if m in sys.modules]
    return bool(loaded) and all(not str(getattr(m, "__file__", "")).endswith(".py") for m in loaded)
