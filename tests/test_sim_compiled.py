"""The compiled set (reasonserve.native: the simulator's per-step modules and the policy
code they call; scripts/compile_sim.py, mypyc) against its sources.

The rest of the suite runs the sources (tests/conftest.py). Here the simulator and policy
tests run again, in a child pytest, on the compiled modules; and whole simulations of the
PASCAL setting's policies must come out identical, field by field, both ways. Under
``CI=true`` the compiled build must be there (``make test`` builds it); elsewhere these
skip without it."""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from reasonserve import native

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = ROOT / "src" / "reasonserve"
# the simulator's and the policies' tests (not the Ray Serve and HTTP hosts': the policy
# tests cover the decisions those hosts apply)
SIM_TESTS = sorted(
    str(p.relative_to(ROOT))
    for p in (ROOT / "tests").glob("test_*.py")
    if p.name != Path(__file__).name
    and not p.name.startswith(("test_ray_serve", "test_clients_http"))
    and ("reasonserve.sim" in p.read_text() or "reasonserve.policies" in p.read_text())
)


BUILT = native.built_current(PACKAGE_DIR)  # read once: hashes the set's sources and imports

if not BUILT and os.environ.get("CI") == "true":
    raise AssertionError("CI: the compiled simulator modules are missing or stale (make test builds them)")
# the tests that run the compiled modules; the loader's own test runs without a build
needs_build = pytest.mark.skipif(
    not BUILT, reason="no compiled simulator modules match the sources (python scripts/compile_sim.py)"
)


def _env(pure: bool) -> dict[str, str]:
    return {**os.environ, native.PURE_ENV: "1" if pure else "0"}


@needs_build
def test_the_simulator_and_policy_tests_pass_on_the_compiled_modules():
    assert len(SIM_TESTS) >= 20 and "tests/test_policies_fast_paths.py" in SIM_TESTS, SIM_TESTS
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "not sources_only", *SIM_TESTS]
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(pure=False), capture_output=True, text=True, timeout=1200)
    assert "reasonserve compiled set: compiled" in proc.stdout, proc.stdout[-3000:]
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout


_RUN = textwrap.dedent("""
    import json, sys
    from reasonserve.core.decisions import Stop
    from reasonserve.policies import FCFSPolicy, PascalPolicy, RoundRobinPolicy
    from reasonserve.policies.router import LeastKVRouter, PascalRouter
    from reasonserve import native
    from reasonserve.sim import SimConfig, SimRequest, simulate

    class Stops(PascalPolicy):  # also stops waiting requests: the finish path
        def decide(self, view):
            return [Stop(r.request_id) for r in view.waiting if r.request_id.endswith("3")] or super().decide(view)

    setups = {
        "fcfs": (FCFSPolicy, LeastKVRouter()),
        "rr": (lambda: RoundRobinPolicy(quantum=8, mode="swap"), LeastKVRouter()),
        "pascal": (lambda: PascalPolicy(quantum=9, demote_threshold_tokens=70), PascalRouter()),
        "pascal_fixed": (lambda: PascalPolicy(quantum=9, demote_threshold_tokens=70), PascalRouter(adaptive=False)),
        "pascal_stops": (lambda: Stops(quantum=9, demote_threshold_tokens=70), PascalRouter()),
    }
    reqs = [SimRequest(f"r{i:03d}", 0.03 * i + 0.5 * (i % 7 == 0), 12 + i % 9, 20 + 11 * (i % 5), 15 + 7 * (i % 4))
            for i in range(150)]
    out = {}
    for name, (factory, router) in setups.items():
        for preemption, skip, k in (("swap", True, 1), ("recompute", True, 1), ("swap", False, 1), ("swap", True, 8)):
            cfg = SimConfig(num_instances=3, kv_capacity_tokens=480, block_size=4, model="qwen2.5-7b",
                            quantum_tokens=8, preemption=preemption, skip_quiet_steps=skip,
                            decode_steps_per_event=k)
            res = simulate(reqs, cfg, factory, router, check_every_step=True)
            out[f"{name}/{preemption}/{skip}/{k}"] = [
                repr(res.end_s), res.steps, sorted(res.placements.items()), [repr(m) for m in res.migrations],
                [repr(s) for s in res.sequences],
            ]
    json.dump({"compiled": native.compiled(), "runs": out}, sys.stdout)
""")


def _runs(pure: bool) -> dict:
    proc = subprocess.run([sys.executable, "-c", _RUN], cwd=ROOT, env=_env(pure), capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)


@needs_build
def test_compiled_and_source_simulations_are_identical():
    compiled, sources = _runs(pure=False), _runs(pure=True)
    assert compiled["compiled"] is True and sources["compiled"] is False
    assert compiled["runs"].keys() == sources["runs"].keys() and len(compiled["runs"]) == 20
    for key, run in sources["runs"].items():
        assert compiled["runs"][key] == run, key
    pascal = sources["runs"]["pascal/swap/True/1"]
    assert pascal[3] and any("num_preemptions=0" not in s for s in pascal[4])  # migrations and preemptions ran
    assert any("finish_reason='stop'" in s for s in sources["runs"]["pascal_stops/swap/True/1"][4])


def test_the_loader_picks_compiled_sources_or_stale(tmp_path, monkeypatch):
    """Extensions that match the manifest load; an edited source, a broken manifest or the
    environment switch load every module of the set from source (a finder ahead of the
    extensions); no extension at all: the sources, without a finder."""
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))  # the finder goes into this copy
    monkeypatch.delenv(native.PURE_ENV, raising=False)
    pkg = tmp_path / "reasonserve"
    for m in native.MODULES:
        _write(native.source_path(m, pkg), "x = 1\n")
    assert native.prefer_sources(pkg) == "sources" and not _finders(pkg)
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    for m in native.MODULES:
        native.extension_path(m, suffix, pkg).write_bytes(b"")
    (pkg / native.MANIFEST).write_text(json.dumps(native.manifest(pkg)))
    library = tmp_path / (native.LIBRARY + suffix)  # the shared library, beside the package
    library.write_bytes(b"")
    monkeypatch.setitem(sys.modules, native.LIBRARY, types.SimpleNamespace(__file__=str(library)))  # loaded
    assert native.prefer_sources(pkg) == "compiled" and not _finders(pkg)
    monkeypatch.setenv(native.PURE_ENV, "1")
    assert native.prefer_sources(pkg) == "sources" and len(_finders(pkg)) == 1
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if f not in _finders(pkg)])
    monkeypatch.delenv(native.PURE_ENV)
    native.source_path(native.MODULES[-1], pkg).write_text("x = 2\n")
    with pytest.warns(RuntimeWarning, match="do not match their sources"):
        assert native.prefer_sources(pkg) == "stale"
    (finder,) = _finders(pkg)
    for m in native.MODULES:  # every package of the set: core, the policies and the simulator
        assert finder.find_spec(m, None).origin == str(native.source_path(m, pkg))
    assert {m.split(".")[1] for m in native.MODULES} == {"core", "policies", "sim"}
    assert finder.find_spec("reasonserve.sim.config", None) is None  # not in the set: the usual finders
    (pkg / native.MANIFEST).write_text("{not json")
    assert native._built(pkg) is None


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _finders(root: Path) -> list:
    return [f for f in sys.meta_path if getattr(f, "root", None) == root]


def test_the_loader_runs_the_sources_without_this_trees_library_or_with_a_leftover_extension(tmp_path, monkeypatch):
    """The extensions import their shared library by name: without this tree's beside the
    package (a partial build), or with another tree's loaded already, the first on
    ``sys.path`` would run, stale: the sources run. An extension of a module dropped
    from the set since the build loads from source too (never a mixed set)."""
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.delenv(native.PURE_ENV, raising=False)
    pkg = tmp_path / "reasonserve"
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    for m in [*native.MODULES, "reasonserve.sim.dropped", "reasonserve.policies.dropped"]:
        _write(native.source_path(m, pkg), "x = 1\n")
        native.extension_path(m, suffix, pkg).write_bytes(b"")
    (pkg / native.MANIFEST).write_text(json.dumps(native.manifest(pkg)))
    with pytest.warns(RuntimeWarning, match="do not match their sources"):
        assert native.prefer_sources(pkg) == "stale"  # no library beside the package
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if f not in _finders(pkg)])
    library = tmp_path / (native.LIBRARY + suffix)
    library.write_bytes(b"")
    other = tmp_path / "other" / library.name
    monkeypatch.setitem(sys.modules, native.LIBRARY, types.SimpleNamespace(__file__=str(other)))
    with pytest.warns(RuntimeWarning, match="another tree's build"):
        assert native.prefer_sources(pkg) == "stale"  # another tree's library is loaded
    (finder,) = _finders(pkg)
    assert finder.find_spec("reasonserve.sim.dropped", None).origin == str(pkg / "sim" / "dropped.py")
    assert finder.find_spec("reasonserve.policies.dropped", None).origin == str(pkg / "policies" / "dropped.py")
    assert finder.find_spec("reasonserve.sim.config", None) is None  # no extension: the usual finders
    assert finder.find_spec("reasonserve.core.dropped", None) is None  # not a package of the set
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if f not in _finders(pkg)])
    monkeypatch.delitem(sys.modules, native.LIBRARY)
    with pytest.warns(RuntimeWarning):
        assert native.prefer_sources(pkg) == "stale"  # this tree's library does not load (empty file)
    assert native.LIBRARY not in sys.modules


def test_an_edit_to_a_module_the_set_imports_makes_the_build_stale(tmp_path, monkeypatch):
    """mypyc typed the compiled code against the classes the set imports (a decision's
    field types, say): an edit there since the build runs the sources, like an edit in
    the set; a manifest from before the imports were recorded is stale too."""
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.delenv(native.PURE_ENV, raising=False)
    pkg = tmp_path / "reasonserve"
    decisions = pkg / "core" / "decisions.py"
    _write(decisions, "class Order:\n    request_ids: tuple[str, ...]\n")
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    for m in native.MODULES:
        _write(native.source_path(m, pkg), "from reasonserve.core.decisions import Order\nimport os, reasonserve.missing\n")
        native.extension_path(m, suffix, pkg).write_bytes(b"")
    assert native.dependencies(pkg) == ("reasonserve.core.decisions",)  # not os, not a missing module
    library = tmp_path / (native.LIBRARY + suffix)
    library.write_bytes(b"")
    monkeypatch.setitem(sys.modules, native.LIBRARY, types.SimpleNamespace(__file__=str(library)))
    built = native.manifest(pkg)
    (pkg / native.MANIFEST).write_text(json.dumps(built))
    assert native.prefer_sources(pkg) == "compiled"
    decisions.write_text("class Order:\n    request_ids: list[str]\n")
    with pytest.warns(RuntimeWarning, match="a module they import edited"):
        assert native.prefer_sources(pkg) == "stale"
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if f not in _finders(pkg)])
    old = {"digests": native.digests(pkg)}  # the set's digests only, as the first builds wrote
    (pkg / native.MANIFEST).write_text(json.dumps(old))
    with pytest.warns(RuntimeWarning):
        assert native.prefer_sources(pkg) == "stale"
