"""The policy modules of the compiled set (reasonserve.policies.pascal_queues and
reasonserve.policies._ranked: reasonserve.native.MODULES) decide the same as their sources,
raise the same errors, and load with the rest of the set, all or none.

The in-process tests pin hand-derived decisions on odd-but-possible views (numpy scalars,
floats, NaN/inf/-0.0 times, ints beyond int64, bools, list queues, host columns, a pacer):
they run on the sources here and on the compiled modules in tests/test_sim_compiled.py's
child pytest. The tests marked ``needs_build`` compare a seeded battery of such views over
every user of the ranked fill (PASCAL, Dynasor, App-FIFO, LPM, FlashTTS prefix-aware, the
ranked functions themselves) in two child processes, compiled and sources, and load a
copy of the built tree with a policy module edited (stale) or an old build's leftovers."""

from __future__ import annotations

import importlib
import importlib.machinery
import json
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from itertools import chain
from pathlib import Path

import numpy as np
import pytest

from reasonserve import native
from reasonserve.core.column_store import ColumnStore
from reasonserve.core.decisions import Admit, Preempt
from reasonserve.core.phase import Phase
from reasonserve.core.policy import QUIET_FOREVER
from reasonserve.core.views import RequestView, SchedulerView
from reasonserve.policies import (
    AppFIFOPolicy,
    DynasorPolicy,
    LPMPolicy,
    PascalPolicy,
    PrefixAwarePolicy,
    _ranked,
    pascal_queues,
)
from reasonserve.policies._order import ordered, waiting_ordered
from reasonserve.policies.pacer import TokenPacer

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = ROOT / "src" / "reasonserve"
BUILT = native.built_current(PACKAGE_DIR)
needs_build = pytest.mark.skipif(
    not BUILT, reason="no compiled set matches the sources (python scripts/compile_sim.py)"
)
# tests that start child processes on the tree: once, from the sources run (the compiled
# child pytest of tests/test_sim_compiled.py reruns this file)
parent_only = pytest.mark.skipif(native.compiled(), reason="the compiled child run: its parent starts these")
POLICY_MODULES = [m for m in native.MODULES if m.startswith("reasonserve.policies.")]
NAN, INF = float("nan"), float("inf")
R, A = Phase.REASONING, Phase.ANSWERING


def _req(rid: str, phase: Phase = R, prompt=10, output=0, arrival_s=0.0, **kw) -> RequestView:
    return RequestView(rid, arrival_s, phase, prompt, prompt, output, **kw)


def _view(waiting=(), running=(), free=0, seats=8, now=0.0) -> SchedulerView:
    return SchedulerView(now, tuple(waiting), tuple(running), free, 16, seats)


# -- hand-derived decisions, on whichever implementation this process loaded -------------


@pytest.mark.parametrize("scalar", [np.int64, np.int32, np.float64])
def test_numpy_block_counts_with_nothing_waiting_keep_every_seat(scalar):
    """All fit (2 + 1 <= 10): no decision. The check compares numpy scalars, a numpy bool;
    compiled code declared to return ``bool`` must not refuse it."""
    r = _req("r", num_blocks=scalar(2), blocks_needed=scalar(1))
    for free in (10, scalar(10)):
        view = _view(running=[r], free=free)
        assert list(PascalPolicy().decide(view)) == []
        assert bool(pascal_queues.all_fit(view)) is True
    tight = _view(running=[r], free=scalar(0))  # 2 + 1 > 0 + 2: preempted
    assert list(PascalPolicy(mode="recompute").decide(tight)) == [Preempt("r", "recompute")]


def test_float_block_counts_are_read_as_python_reads_them():
    running = [_req("r", num_blocks=1.5, blocks_needed=0.5, enqueued_s=0.0)]
    waiting = [_req("w", blocks_needed=0.5, enqueued_s=1.0)]
    assert list(PascalPolicy().decide(_view(waiting, running, free=1.0))) == [Admit("w")]  # 2.0 + 0.5 <= 2.5
    assert list(PascalPolicy().decide(_view(waiting, running, free=0.75))) == []  # 0.5 > 0.25: blocked
    view = _view(waiting, running, free=0.75)
    assert _ranked.decide_ranked(view, chain(running, waiting)) == []
    assert _ranked.decide_running_first(view, running, iter(waiting)) == []
    assert _ranked.decide_running_first(_view(waiting, running, free=1.0), running, iter(waiting)) == [
        Admit("w")
    ]


@pytest.mark.parametrize(("used", "expected"), [(0, "5"), (2.5, "2.5"), (4.0, "1"), (4.5, "1"), (NAN, "91")])
def test_quiet_steps_returns_what_python_max_returns(used, expected):
    """A high running request (10 tokens, threshold 100: demoted in 91 steps) with a high
    request waiting: quantum 5 - used, at least 1; ``max(1, 1.0)`` is the int 1 (the first
    of equals), a NaN quantum comparison is False (the demotion bound holds)."""
    view = _view([_req("w", enqueued_s=1.0)], [_req("r", quantum_used=used)])
    policy = PascalPolicy(quantum=5, demote_threshold_tokens=100)
    assert repr(policy.quiet_steps(view)) == expected
    assert repr(pascal_queues.quiet_steps(view, 5, 100)) == expected


def test_quiet_steps_with_huge_and_float_counts():
    big = 2**64
    low = _req("r", prompt=big, quantum_used=big)  # demoted at once (its prompt too), used up
    view = _view([_req("w", enqueued_s=1.0)], [low])
    assert PascalPolicy().quiet_steps(view) == QUIET_FOREVER  # no low request waits: no bound
    answering = _req("a", A, quantum_used=3, num_answer_tokens=1.5)
    view = _view([_req("w", A, enqueued_s=1.0)], [answering])
    assert repr(PascalPolicy(quantum=4).quiet_steps(view)) == "2.5"  # 4 - min(3, 1.5)
    uncounted = _view(view.waiting, [answering._replace(num_answer_tokens=None)])
    assert repr(PascalPolicy(quantum=4).quiet_steps(uncounted)) == "1"  # 4 - 3


@pytest.mark.parametrize(("t_a", "t_b"), [(1, 1.0), (1.0, 1), (0.0, -0.0), (-0.0, 0.0), (np.float64(2), 2)])
def test_equal_enqueue_times_of_mixed_types_go_by_id(t_a, t_b):
    waiting = [_req("b", enqueued_s=t_b, blocks_needed=1), _req("a", enqueued_s=t_a, blocks_needed=1)]
    assert list(PascalPolicy().decide(_view(waiting, free=5))) == [Admit("a"), Admit("b")]
    assert [r.request_id for r in pascal_queues.by_enqueue(waiting)] == ["a", "b"]
    assert [r.request_id for r in ordered(waiting, "enqueued_s")] == ["a", "b"]
    tied = [_req("b", arrival_s=t_b), _req("a", arrival_s=t_a)]  # LPM orders the running by arrival
    assert [r.request_id for r in ordered(tied, "arrival_s")] == ["a", "b"]
    assert list(LPMPolicy().decide(_view([_req("w", blocks_needed=1)], tied, free=0, seats=2))) == []


def test_times_beyond_int64_and_infinities_order_as_python_does():
    times = {"a": 2**64 + 1, "b": 2**64, "c": INF, "d": -INF, "e": 3}
    waiting = [_req(k, enqueued_s=t, blocks_needed=1) for k, t in times.items()]
    assert list(PascalPolicy().decide(_view(waiting, free=5))) == [Admit(k) for k in "debac"]


def test_a_nan_pacer_time_reads_as_no_pacer_and_the_latest_reader_is_preempted():
    """Three fresh answering requests, room for two: the one whose reader has the most
    paced tokens left (latest ``paced_until_s``) ranks last; NaN ranks as no pacer (first)."""
    running = [
        _req(k, A, num_blocks=1, enqueued_s=i, paced_until_s=p, num_answer_tokens=None)
        for i, (k, p) in enumerate([("late", 5.0), ("nan", NAN), ("early", 1.0)])
    ]
    view = _view([_req("w", A, blocks_needed=9, enqueued_s=9.0)], running, free=-1)
    assert list(PascalPolicy().decide(view)) == [Preempt("late", "swap")]
    assert [r.request_id for r in sorted(running, key=pascal_queues.paced)] == ["nan", "early", "late"]


def test_starving_reader_ranks_ahead_of_running_answers():
    running = [_req("r", A, num_blocks=2, quantum_used=0, paced_until_s=20.0)]
    waiting = [_req("w", A, blocks_needed=2, paced_until_s=1.0)]  # 10.0 >= 1.0 + 0.1: starving
    view = _view(waiting, running, now=10.0)
    assert list(PascalPolicy(starving_first=TokenPacer(0.1)).decide(view)) == [
        Preempt("r", "swap"),
        Admit("w"),
    ]
    assert list(PascalPolicy().decide(view)) == []  # without it the running reader keeps its seat
    first = PascalPolicy(starving_first=TokenPacer(0.1))
    assert first.quiet_steps(view) == 500  # w is dry already: r's quantum bounds the stretch
    fresh = _view([waiting[0]._replace(paced_until_s=9.95)], running, now=10.0)
    assert first.quiet_steps(fresh) == 1  # w's reader may run dry at any step


@pytest.mark.parametrize("mode", [None, "recompute", "swap"])
def test_bools_negatives_and_lists_in_a_view(mode):
    """``max_num_seqs=True`` is one seat; a held count of -1 takes a block from the budget
    (2 - 1); list queues decide as tuples do. w1 and w2 rank before r (by turn)."""
    running = [_req("r", num_blocks=-1, blocks_needed=True, enqueued_s=5.0)]  # costs 0
    waiting = [_req("w1", blocks_needed=1, enqueued_s=1.0), _req("w2", blocks_needed=0, enqueued_s=2.0)]
    policy = PascalPolicy(mode=mode)
    one_seat = [Preempt("r", mode), Admit("w1")]  # w1 takes the seat; w2 is blocked, r loses it
    assert list(policy.decide(SchedulerView(0.0, waiting, running, 2, 16, True))) == one_seat  # lists
    assert list(policy.decide(_view(waiting, running, free=2, seats=True))) == one_seat
    assert list(policy.decide(_view(waiting, running, free=2, seats=3))) == [Admit("w1"), Admit("w2")]
    assert list(policy.decide(_view(waiting, running, free=1, seats=3))) == []  # budget 0: w1 blocked


def _with_columns(view: SchedulerView) -> SchedulerView:
    store = ColumnStore()
    for r in view.waiting:
        store.append(r)
    waiting, cols = store.snapshot()
    return SchedulerView(
        view.now_s, waiting, view.running, view.free_blocks, 16, view.max_num_seqs, waiting_columns=cols
    )


@pytest.mark.parametrize("n", [3, 300])
def test_host_columns_decide_as_the_objects(n):
    waiting = [
        _req(
            f"w{i:03d}",
            A if i % 3 == 0 else R,
            prompt=10 + 50 * (i % 4),
            blocks_needed=1 + i % 2,
            enqueued_s=float((7 * i) % n),
        )
        for i in range(n)
    ]
    running = [_req("r", A, num_blocks=3, quantum_used=9, num_answer_tokens=2)]
    view = _view(waiting, running, free=n // 3)
    for policy in (PascalPolicy(quantum=4, demote_threshold_tokens=100), LPMPolicy(), PrefixAwarePolicy()):
        assert list(policy.decide(_with_columns(view))) == list(policy.decide(view)), policy


def test_incomparable_times_raise_the_sorts_type_error():
    waiting = [_req("a", enqueued_s="x"), _req("b", enqueued_s=1.0)]
    with pytest.raises(TypeError, match="not supported between"):
        PascalPolicy().decide(_view(waiting, free=5))
    running = [_req("a", enqueued_s=None), _req("b", enqueued_s=0.0)]  # and a pacer time it cannot add to
    view = _view([_req("w", A, paced_until_s=Decimal("1"))], running, now=5.0)
    for policy in (PascalPolicy(), PascalPolicy(starving_first=TokenPacer(0.1))):
        with pytest.raises(TypeError):
            policy.decide(view)


# -- the battery: the same outcomes compiled and from source ------------------------------

ODD = {
    "blocks": [2.0, 1.5, np.int64(2), np.float64(1.0), -1, True, False, 2**64, INF, NAN, np.int32(1)],
    "tokens": [7.5, np.int64(50), np.float64(30.0), True, 2**64, -3, NAN, 60.0, -0.0],
    "times": [
        "x",
        None,
        Fraction(1, 2),
        Decimal("1"),
        1,
        1.0,
        -0.0,
        0,
        NAN,
        INF,
        -INF,
        np.float64(1.0),
        2**64,
        2**64 + 1,
        np.int64(1),
    ],
    "answer": [None, 0, 10.0, np.int64(2), NAN, 2**70, -1],
    "paced": ["y", Fraction(1, 3), Decimal("0.5"), None, NAN, INF, -0.0, np.float64(0.7), 1, 0.5],
    "free": [5.5, np.int64(4), -2, 2**64, INF, True, np.float64(3.0), NAN],
    "seats": [np.int64(3), 2.5, True, 2**64, 0, np.float64(2.0)],
}


def _pick(rng: random.Random, kind: str, plain, p: float):
    return rng.choice(ODD[kind]) if rng.random() < p else plain


def _random_request(rng: random.Random, i: int, p: float) -> RequestView:
    return RequestView(
        f"r{i:03d}",
        _pick(rng, "times", float(rng.randint(0, 5)), p / 2),
        rng.choice([Phase.PREFILL, R, A]),
        _pick(rng, "tokens", rng.choice([5, 20, 40]), p),
        rng.randint(0, 30),
        _pick(rng, "tokens", rng.randint(0, 40), p),
        num_blocks=_pick(rng, "blocks", rng.randint(0, 3), p),
        blocks_needed=_pick(rng, "blocks", rng.randint(0, 2), p),
        enqueued_s=_pick(rng, "times", float(rng.randint(0, 4)), p),
        quantum_used=_pick(rng, "tokens", rng.randint(0, 12), p),
        num_answer_tokens=_pick(rng, "answer", None, p),
        paced_until_s=_pick(rng, "paced", rng.choice([None, 0.2, 0.9]), p),
        program_id=rng.choice([None, "a", "b"]),
    )


def _random_view(rng: random.Random, p: float) -> SchedulerView:
    reqs = [_random_request(rng, i, p) for i in range(300 if rng.random() < 0.03 else rng.randint(0, 9))]
    cut = rng.randint(0, len(reqs))
    running, waiting = reqs[:cut], reqs[cut:]
    seq = list if rng.random() < 0.2 else tuple
    view = SchedulerView(
        _pick(rng, "times", 1.0, p),
        seq(waiting),
        seq(running),
        _pick(rng, "free", rng.randint(0, 12), p),
        16,
        _pick(rng, "seats", rng.randint(1, 6), p),
    )
    if waiting and rng.random() < 0.3:
        try:
            return _with_columns(view)
        except Exception:  # a value the columns refuse: the view without them
            return view
    return view


def _outcome(call: Callable[[], object]) -> str:
    try:
        return repr(call())
    except Exception as err:  # compared: the same type and message both ways
        return f"!{type(err).__name__}: {err}"


def _ids(requests) -> list:
    return [r.request_id for r in requests]


def _turn(r):
    return (r.enqueued_s, r.request_id)


def _calls(v: SchedulerView, pascal: PascalPolicy) -> dict[str, Callable[[], object]]:
    """The cases of one view: PASCAL and its queue functions, every other user of the
    ranked fill, and the ranked functions themselves."""
    limit, mode, running = pascal.demote_threshold_tokens, pascal.mode, list(v.running)
    return {
        "pascal": lambda: pascal.decide(v),
        "pascal.quiet": lambda: pascal.quiet_steps(v),
        "quiet_steps": lambda: pascal_queues.quiet_steps(v, pascal.quantum, limit),
        "split": lambda: [_ids(q) for q in pascal_queues.split_running(v.running, pascal.quantum, limit)],
        "by_enqueue": lambda: _ids(pascal_queues.by_enqueue(v.waiting)),
        "all_fit": lambda: pascal_queues.all_fit(v),
        "ordered": lambda: _ids(ordered(v.running, "arrival_s")),
        "waiting_ordered": lambda: _ids(waiting_ordered(v, "enqueued_s")),
        "dynasor": lambda: DynasorPolicy(mode=mode).decide(v),
        "app_fifo": lambda: AppFIFOPolicy().decide(v),
        "lpm": lambda: LPMPolicy().decide(v),
        "prefix": lambda: PrefixAwarePolicy().decide(v),
        "ranked": lambda: _ranked.decide_ranked(v, chain(v.running, v.waiting), mode),
        "running_first": lambda: _ranked.decide_running_first(v, running, iter(v.waiting), mode),
        "segments": lambda: _ranked.decide_segments(
            v, [(running, v.waiting, _turn), (running[:1], (), _turn)], mode
        ),
    }


def battery(n: int = 300, seed: int = 14) -> dict[str, str]:
    """Each case's decisions (repr) or error (type and message), by case name."""
    rng, out = random.Random(seed), {}
    for k in range(n):
        v = _random_view(rng, rng.choice([0.0, 0.1, 0.3, 0.6]))
        mode = rng.choice([None, "recompute", "swap"])
        pacer = rng.choice([None, TokenPacer(0.1)])
        pascal = PascalPolicy(rng.choice([1, 5, 10]), rng.choice([0, 30, 60]), mode, starving_first=pacer)
        out.update({f"{k}/{name}": _outcome(call) for name, call in _calls(v, pascal).items()})
    return out


def _kinds() -> dict[str, str]:
    """Each imported module of the set: "compiled" (an extension) or "source"."""
    return {
        m: "source" if str(sys.modules[m].__file__).endswith(".py") else "compiled"
        for m in native.MODULES
        if m in sys.modules
    }


def report() -> dict:
    """What a child process sends back: the set as loaded by the policies alone, then all
    of it imported, and the battery's outcomes."""
    first = _kinds()
    for m in native.MODULES:
        importlib.import_module(m)
    return {"first": first, "all": _kinds(), "compiled": native.compiled(), "outcomes": battery()}


def _child(pure: bool, src: Path = ROOT / "src", code: str = "") -> tuple[dict, str]:
    code = code or (
        "import importlib.util, json, sys\n"
        f"spec = importlib.util.spec_from_file_location('parity', {str(Path(__file__))!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "json.dump(m.report(), sys.stdout)\n"
    )
    env = {**os.environ, native.PURE_ENV: "1" if pure else "0", "PYTHONPATH": str(src)}
    proc = subprocess.run(
        [sys.executable, "-W", "always", "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout), proc.stderr


def test_the_set_loads_all_or_none_as_the_switch_and_the_build_say():
    """Every module of the set is compiled when the build is current and the switch is off,
    else every one is source; the policy modules' functions are then compiled functions."""
    for m in native.MODULES:
        importlib.import_module(m)
    pure = os.environ.get(native.PURE_ENV, "").strip().lower() in ("1", "true", "yes", "on")
    expected = "compiled" if BUILT and not pure else "source"
    assert set(_kinds().values()) == {expected}, _kinds()
    assert native.compiled() is (expected == "compiled")
    native_functions = {
        type(f).__name__
        for f in (
            pascal_queues.all_fit,
            pascal_queues.quiet_steps,
            _ranked.decide_ranked,
            _ranked.fill_segments,
        )
    }
    assert native_functions == ({"builtin_function_or_method"} if expected == "compiled" else {"function"})


def test_the_battery_covers_every_kind_of_outcome():
    out = battery(120)
    errors = {v.split(":")[0] for v in out.values() if v.startswith("!")}
    assert {"!TypeError", "!OverflowError", "!ValueError"} <= errors, errors
    kinds = {k.split("/")[1] for k, v in out.items() if v.startswith("[Preempt")}
    assert {"pascal", "dynasor", "app_fifo", "lpm", "prefix", "ranked", "running_first", "segments"} <= kinds
    assert sum(not v.startswith("!") for v in out.values()) > 0.8 * len(out)


@needs_build
@parent_only
def test_the_battery_decides_the_same_compiled_and_from_source():
    compiled, _ = _child(pure=False)
    sources, _ = _child(pure=True)
    assert set(compiled["first"]) >= set(POLICY_MODULES)  # importing the policies loads them
    assert set(compiled["all"].values()) == {"compiled"} and compiled["compiled"] is True
    assert set(sources["all"].values()) == {"source"} and sources["compiled"] is False
    assert compiled["outcomes"].keys() == sources["outcomes"].keys()
    differ = {
        k: (compiled["outcomes"][k], v)
        for k, v in sources["outcomes"].items()
        if compiled["outcomes"][k] != v
    }
    assert not differ, list(differ.items())[:8]


def _copy_tree(tmp_path: Path) -> Path:
    """The package with its build (extensions, library, manifest), beside no other tree."""
    src = tmp_path / "src"
    shutil.copytree(
        ROOT / "src" / "reasonserve", src / "reasonserve", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(native.library_path(PACKAGE_DIR), src)
    return src


# a child that imports the policies only (the set through them): whether each module of
# the set it loaded is a source
_POLICIES_ONLY = (
    "import json, sys\nimport reasonserve.policies.pascal\nfrom reasonserve import native\n"
    "loaded = [m for m in native.MODULES if m in sys.modules]\n"
    "json.dump({m: sys.modules[m].__file__.endswith('.py') for m in loaded}, sys.stdout)\n"
)


@needs_build
@parent_only
def test_an_edit_to_a_policy_module_alone_runs_every_module_from_source(tmp_path):
    src = _copy_tree(tmp_path)
    loaded, err = _child(pure=False, src=src, code=_POLICIES_ONLY)
    assert set(loaded) == set(native.MODULES) and not any(loaded.values()), loaded  # the copy: compiled
    assert "do not match" not in err
    with (src / "reasonserve" / "policies" / "pascal_queues.py").open("a") as f:
        f.write("# edited\n")
    loaded, err = _child(pure=False, src=src, code=_POLICIES_ONLY)
    assert set(loaded) == set(native.MODULES) and all(loaded.values()), loaded
    assert "do not match their sources" in err


@needs_build
@parent_only
def test_an_old_builds_leftovers_beside_a_current_build_are_ignored(tmp_path):
    """Before the policies joined the set the build wrote its library as
    ``reasonserve_sim__mypyc`` and its manifest in the simulator package."""
    src = _copy_tree(tmp_path)
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    (src / f"reasonserve_sim__mypyc{suffix}").write_bytes(b"")
    (src / "reasonserve" / "sim" / native.MANIFEST).write_text("{not json")
    loaded, err = _child(pure=False, src=src, code=_POLICIES_ONLY)
    assert set(loaded) == set(native.MODULES) and not any(loaded.values()), loaded
    assert "do not match" not in err
    loaded, _ = _child(pure=True, src=src, code=_POLICIES_ONLY)
    assert all(loaded.values()), loaded


@parent_only
def test_an_old_build_alone_runs_every_module_from_source_with_a_warning(tmp_path):
    """A tree built before the policies joined the set (simulator extensions, the library
    ``reasonserve_sim__mypyc``, the manifest in ``sim/``) and not rebuilt: a partial build
    of the set, so the sources run (empty files here: loading one would fail)."""
    src = tmp_path / "src"
    no_build = shutil.ignore_patterns("__pycache__", "*.so", native.MANIFEST)
    shutil.copytree(ROOT / "src" / "reasonserve", src / "reasonserve", ignore=no_build)
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    (src / f"reasonserve_sim__mypyc{suffix}").write_bytes(b"")
    (src / "reasonserve" / "sim" / native.MANIFEST).write_text(json.dumps({"digests": {}}))
    for m in native.MODULES:
        if m.startswith("reasonserve.sim."):
            native.extension_path(m, suffix, src / "reasonserve").write_bytes(b"")
    loaded, err = _child(pure=False, src=src, code=_POLICIES_ONLY)
    assert set(loaded) == set(native.MODULES) and all(loaded.values()), loaded
    assert "do not match their sources" in err


@parent_only
def test_clean_removes_every_build_output_in_every_package_of_the_set(tmp_path):
    """``compile_sim.py --clean``: each module's extension (policies and simulator), one of
    a module dropped from the set, the library, the manifest, and an old build's library
    and manifest; no source."""
    shutil.copytree(ROOT / "scripts", tmp_path / "scripts")
    pkg = tmp_path / "src" / "reasonserve"
    pkg.mkdir(parents=True)
    shutil.copy(PACKAGE_DIR / "native.py", pkg)  # the build script reads the set from it
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    built = [native.extension_path(m, suffix, pkg) for m in [*native.MODULES, "reasonserve.policies.dropped"]]
    built += [
        pkg.parent / f"{native.LIBRARY}{suffix}",
        pkg.parent / f"reasonserve_sim__mypyc{suffix}",
        pkg / native.MANIFEST,
        pkg / "sim" / native.MANIFEST,
    ]
    sources = [native.source_path(m, pkg) for m in native.MODULES]
    for path in built + sources:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "scripts" / "compile_sim.py"), "--clean"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert [p for p in built if p.exists()] == []
    assert all(p.exists() for p in sources)
    assert sorted(p.name for p in pkg.parent.rglob("*") if p.is_file() and p.suffix != ".py") == []
