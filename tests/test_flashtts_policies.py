"""FlashTTS policies: SelectSpec, two-phase speculation control, look-ahead grouping,
prefix-aware ordering and the roofline KV allocator."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonserve.core import Phase
from reasonserve.core.decisions import Abort, Admit, Order, Preempt
from reasonserve.core.errors import InvalidArgumentError, InvalidTypeError
from reasonserve.core.views import RequestView, SchedulerView
from reasonserve.policies import REGISTRY
from reasonserve.policies.flashtts import (
    LookaheadVerification,
    PrefixAwarePolicy,
    PrefixCachedVerifier,
    RooflineKVAllocator,
    SelectSpec,
    SpecSlot,
    SpeculationState,
    TwoPhaseSpeculation,
    VerifyCandidate,
    eviction_cost,
    prefix_order,
)
from reasonserve.sim import HARDWARE, RooflineCostModel
from reasonserve.sim.beam.models import BEAM_MODELS

# -- SelectSpec ---------------------------------------------------------------------------


def test_selectspec_bins_split_scores_by_rank_best_first():
    scores = {f"b{i}": s for i, s in enumerate([0.1, 0.9, 0.5, 0.7, 0.3, 0.8, 0.2, 0.6])}
    bins = SelectSpec(branching=4).bins(scores)
    by_score = sorted(scores, key=lambda b: -scores[b])
    assert [bins[b] for b in by_score] == [1, 1, 2, 2, 3, 3, 4, 4]
    assert SelectSpec(branching=4).potentials(scores)["b1"] == 4  # M = B - j + 1
    assert SelectSpec(branching=4).potentials(scores)["b0"] == 1


def test_selectspec_equal_scores_share_a_bin():
    bins = SelectSpec(branching=2).bins({"a": 0.5, "b": 0.5, "c": 0.5, "d": 0.1})
    assert bins["a"] == bins["b"] == bins["c"] == 1 and bins["d"] == 2


def test_selectspec_rank_fills_highest_potential_first_ties_by_id():
    sel = SelectSpec(branching=3)
    pots = {"x": 1, "b": 3, "a": 3, "c": 2}
    slots = sel.rank(["x", "c", "b", "a"], pots, free_slots=7)
    assert [(s.beam_id, s.branch) for s in slots] == [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1),
                                                       ("b", 2), ("c", 0)]  # fmt: skip
    assert sel.rank(["x", "c"], pots, free_slots=10, used={"c": 1}) == [
        *[s for s in sel.rank(["c"], pots, 10, used={"c": 1})],
        *sel.rank(["x"], pots, 10),
    ]
    assert len(sel.rank(["c"], pots, 10, used={"c": 1})) == 1  # at most M_i branches in all
    assert sel.rank(["a"], pots, 0) == []


def _plain_bins(scores, branching):
    """The definition: rank by score (best first, ties by id); equal scores take the bin of
    the best-ranked among them; bin = rank * B // n + 1."""
    ranked = sorted(scores, key=lambda b: (-scores[b], b))
    out, first_rank = {}, {}
    for rank, b in enumerate(ranked):
        r = first_rank.setdefault(scores[b], rank)
        out[b] = r * branching // len(ranked) + 1
    return out


def _plain_rank(finished, potentials, free_slots, used):
    slots = []
    for b in sorted(set(finished), key=lambda b: (-potentials.get(b, 1), b)):
        m = potentials.get(b, 1)
        slots += [SpecSlot(b, k, m) for k in range(used.get(b, 0), m)]
    return slots[:free_slots]


_IDS = st.sampled_from([f"b{i}" for i in range(40)])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_IDS, st.sampled_from([0.0, 0.25, 0.5, 0.9, 1.0, -3.0]), max_size=40),
       st.integers(1, 6))  # fmt: skip
def test_selectspec_bins_equal_the_definition(scores, branching):
    assert SelectSpec(branching=branching).bins(scores) == _plain_bins(scores, branching)


@settings(max_examples=300, deadline=None)
@given(st.lists(_IDS, max_size=50), st.dictionaries(_IDS, st.integers(1, 4), max_size=40), st.integers(0, 60),
       st.one_of(st.just({}), st.dictionaries(_IDS, st.integers(0, 5), max_size=10)))  # fmt: skip
def test_selectspec_rank_equals_the_definition(finished, potentials, free_slots, used):
    got = SelectSpec(branching=4).rank(finished, potentials, free_slots, used=used)
    assert got == _plain_rank(finished, potentials, free_slots, used)


@pytest.mark.parametrize("finished", [["b3", "b1", "b2"], ["b3", "b1", "b3", "b2", "b1"], ("b2", "b2")])
def test_selectspec_rank_counts_a_repeated_beam_once(finished):
    """Both branches of the duplicate check: unique ids are ranked as given, repeated ones
    once each (a beam listed twice must not get twice its M_i branches)."""
    potentials = {"b1": 2, "b2": 2, "b3": 1}
    got = SelectSpec(branching=2).rank(finished, potentials, 10)
    assert got == _plain_rank(finished, potentials, 10, {})
    assert len(got) == sum(potentials[b] for b in set(finished))


def test_selectspec_rank_reads_potentials_with_get_semantics():
    """Every branch of the look-up: a dict holding every beam (one C-level pass), a dict
    missing one (the default 1), a defaultdict (its __missing__ must not run) and a
    read-only mapping give the plain definition's slots."""
    from collections import defaultdict
    from types import MappingProxyType

    finished = ["b3", "b1", "b2", "b4"]
    full = {"b1": 2, "b2": 4, "b3": 1, "b4": 3}
    for pots in (full, {"b1": 2, "b2": 4}, defaultdict(lambda: 4, {"b2": 3}), MappingProxyType(full)):
        want = _plain_rank(finished, dict(pots), 7, {})
        assert SelectSpec(branching=4).rank(finished, pots, 7) == want
    assert SelectSpec(branching=4).rank(["b1"], full, 9) == _plain_rank(["b1"], full, 9, {})


def test_selectspec_rank_names_a_bad_potential():
    for bad in (True, 0, 5, 2.0):
        with pytest.raises(InvalidArgumentError, match="potentials"):
            SelectSpec(branching=4).rank(["a"], {"a": 1, "z": bad}, 3)


def test_selectspec_truncation_keeps_all_for_the_original_and_about_r_for_copies():
    sel, rng = SelectSpec(truncation_mean=0.85, truncation_std=0.1), random.Random(0)
    assert sel.kept_tokens(200, 0, rng) == 200
    kept = [sel.kept_tokens(1000, 1, rng) for _ in range(2000)]
    assert all(0 <= k <= 1000 for k in kept)
    assert abs(sum(kept) / len(kept) / 1000 - 0.85) < 0.01
    assert sel.kept_tokens(1000, 2, random.Random(5)) == sel.kept_tokens(1000, 2, random.Random(5))


@pytest.mark.parametrize("kwargs", [{"branching": 0}, {"branching": 2.0}, {"truncation_mean": 1.5},
                                    {"truncation_std": -0.1}, {"truncation_mean": math.nan}])  # fmt: skip
def test_selectspec_rejects_bad_config(kwargs):
    with pytest.raises(InvalidArgumentError):
        SelectSpec(**kwargs)


def test_selectspec_rejects_bad_inputs():
    with pytest.raises(InvalidArgumentError, match="score"):
        SelectSpec().bins({"a": math.nan})
    with pytest.raises(InvalidArgumentError, match="free_slots"):
        SelectSpec().rank(["a"], {}, -1)


# -- two-phase speculation ---------------------------------------------------------------


def _req(rid: str, blocks: int = 4, need: int = 1) -> RequestView:
    return RequestView(rid, 0.0, Phase.REASONING, 10, 10, 5, num_blocks=blocks, blocks_needed=need)


def _view(waiting=(), running=(), free=100) -> SchedulerView:
    return SchedulerView(1.0, tuple(waiting), tuple(running), free, 1, 64, 1000)


def test_speculation_runs_only_with_an_empty_queue_and_room():
    ctl = TwoPhaseSpeculation()
    decisions, state = ctl.decide(_view(running=[_req("r1"), _req("s1")]), SpeculationState(frozenset({"s1"})))
    assert decisions == [] and state.speculating and state.speculative_ids == {"s1"}


def test_a_new_request_stops_speculation_at_once():
    ctl, spec = TwoPhaseSpeculation(), SpeculationState(frozenset({"s1", "s2", "s3"}), True)
    view = _view(waiting=[_req("new", 0, 4), _req("s3", 0, 1)], running=[_req("r1"), _req("s2"), _req("s1")])
    decisions, state = ctl.decide(view, spec)
    assert decisions == [Preempt("s1", "recompute"), Preempt("s2", "recompute"), Abort("s3", "speculation stopped")]
    assert not state.speculating and state.speculative_ids == frozenset() and state.stops == 1
    assert spec.speculating and spec.speculative_ids == {"s1", "s2", "s3"}  # the old state is untouched


def test_memory_pressure_stops_speculation_and_real_requests_stay():
    spec = SpeculationState(frozenset({"s1"}), True)
    decisions, state = TwoPhaseSpeculation().decide(_view(running=[_req("r1", need=3), _req("s1")], free=2), spec)
    assert decisions == [Preempt("s1", "recompute")] and not state.speculating


def test_waiting_speculative_branches_alone_do_not_stop_speculation():
    spec = SpeculationState(frozenset({"s1"}), True)
    decisions, state = TwoPhaseSpeculation().decide(_view(waiting=[_req("s1", 0)]), spec)
    assert decisions == [] and state.speculating


def test_speculation_state_is_validated():
    with pytest.raises(InvalidArgumentError):
        SpeculationState({"a"})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        TwoPhaseSpeculation().decide(_view(), "phase2")  # type: ignore[arg-type]


# -- look-ahead verification -------------------------------------------------------------


def test_lookahead_groups_a_complete_speculative_step_with_the_current_one():
    cands = [VerifyCandidate("b", 30, 40, True), VerifyCandidate("a", 20, 5, False), VerifyCandidate("c", 7)]
    out = LookaheadVerification().group(cands)
    assert [(r.beam_id, r.new_tokens, r.num_steps) for r in out] == [("a", 20, 1), ("b", 70, 2), ("c", 7, 1)]
    off = LookaheadVerification(enabled=False).group(cands)
    assert [r.num_steps for r in off] == [1, 1, 1]


def test_lookahead_rejects_bad_candidates():
    with pytest.raises(InvalidArgumentError):
        VerifyCandidate("a", 10, 0, True)
    with pytest.raises(InvalidArgumentError):
        VerifyCandidate("a", -1)
    with pytest.raises(InvalidArgumentError, match="twice"):
        LookaheadVerification().group([VerifyCandidate("a", 1), VerifyCandidate("a", 2)])
    with pytest.raises(InvalidArgumentError, match="enabled"):
        LookaheadVerification(enabled="yes")  # type: ignore[arg-type]


# -- prefix-aware ordering ---------------------------------------------------------------


@st.composite
def _trees(draw, max_beams: int = 9):
    """Beam paths of a random search tree, listed copy by copy (parents interleaved)."""
    n = draw(st.integers(1, max_beams))
    paths, nodes = [], 0
    for _ in range(n):
        if paths and draw(st.booleans()):
            base = draw(st.sampled_from(paths))
            base = base[: draw(st.integers(1, len(base)))]
        else:
            base = (0,)
        extra = draw(st.integers(0, 3))
        paths.append(base + tuple(range(nodes + 1, nodes + 1 + extra)))
        nodes += extra
    return paths


def _shared(a, b) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@settings(max_examples=150, deadline=None)
@given(_trees())
def test_prefix_order_takes_the_longest_shared_prefix_next(paths):
    order = prefix_order(paths)
    assert sorted(order) == list(range(len(paths)))
    for i in range(len(order) - 1):
        here, rest = paths[order[i]], [paths[j] for j in order[i + 1 :]]
        assert _shared(here, paths[order[i + 1]]) == max(_shared(here, p) for p in rest)


@settings(max_examples=150, deadline=None)
@given(_trees(), st.integers(1, 3))
def test_prefix_order_cost_is_never_worse_than_fcfs(paths, batch):
    order = prefix_order(paths)
    assert eviction_cost([paths[i] for i in order], batch) <= eviction_cost(paths, batch)


@settings(max_examples=60, deadline=None)
@given(_trees(max_beams=6))
def test_prefix_order_cost_equals_brute_force_with_one_beam_per_batch(paths):
    best = min(eviction_cost([paths[i] for i in p], 1) for p in itertools.permutations(range(len(paths))))
    assert eviction_cost([paths[i] for i in prefix_order(paths)], 1) == best


def test_eviction_cost_counts_nodes_not_shared_with_the_next_batch():
    assert eviction_cost([(0, 1), (0, 2), (0, 1, 3)], 1) == (2 - 1) + (2 - 1) + 3
    with pytest.raises(InvalidArgumentError):
        eviction_cost([(0,)], 0)


def test_prefix_policy_groups_beams_of_the_same_parent():
    running = [RequestView("run", 0.0, Phase.REASONING, 10, 10, 5, num_blocks=4, blocks_needed=1)]
    parents = ["p1", "p2", "p1", "p2", "p1"]
    waiting = [RequestView(f"w{i}", 1.0 + i, Phase.PREFILL, 10, 0, 0, blocks_needed=2, prefix_hashes=(7, hash(p)))
               for i, p in enumerate(parents)]  # fmt: skip
    view = SchedulerView(5.0, tuple(waiting), tuple(running), 100, 16, 64, 200)
    decisions = PrefixAwarePolicy().decide(view)
    assert decisions[0] == Order(("run",))
    assert [d.request_id for d in decisions if isinstance(d, Admit)] == ["w0", "w2", "w4", "w1", "w3"]
    assert PrefixAwarePolicy().decide(view) == decisions  # deterministic
    assert REGISTRY["flashtts_prefix"] is PrefixAwarePolicy


# -- roofline KV allocator ---------------------------------------------------------------


def _costs():
    hw = HARDWARE["rtx4090"]
    return RooflineCostModel(hw, BEAM_MODELS["qwen2.5-math-7b"]), RooflineCostModel(hw, BEAM_MODELS["skywork-prm-1.5b"])


def _t_tot(gen, ver, n, s, s_dec, b_pre, b_dec) -> float:
    pre = -(-n // b_pre) * ver.step_s([(s, 0)] * b_pre)
    return pre + -(-n // b_dec) * s_dec * gen.step_s([(1, s_dec // 2)] * b_dec)


@pytest.mark.parametrize("n,s,s_dec,blocks", [(12, 300, 80, 9), (20, 500, 200, 25), (7, 100, 400, 14), (30, 200, 60, 16)])
def test_allocator_matches_brute_force_and_respects_memory(n, s, s_dec, blocks):
    gen, ver = _costs()
    kv_pre, kv_dec = s * ver.model.kv_bytes_per_token, s_dec * gen.model.kv_bytes_per_token
    memory = blocks * (kv_pre + kv_dec) / 2
    plan = RooflineKVAllocator(gen, ver, allow_offload=False).plan(
        memory_bytes=memory, num_beams=n, verify_tokens=s, decode_tokens=s_dec)
    assert plan.prefill_batch * kv_pre + plan.decode_batch * kv_dec <= memory
    assert plan.verifier_kv_bytes + plan.generator_kv_bytes <= memory + 1e-6
    grid = [(bp, bd) for bp in range(1, blocks * 2) for bd in range(1, blocks * 4)
            if bp * kv_pre + bd * kv_dec <= memory]  # fmt: skip
    best = min(_t_tot(gen, ver, n, s, s_dec, bp, bd) for bp, bd in grid)
    assert plan.total_s == pytest.approx(best, rel=1e-9)
    assert _t_tot(gen, ver, n, s, s_dec, plan.prefill_batch, plan.decode_batch) == pytest.approx(best, rel=1e-9)


def test_allocator_picks_offloading_when_it_is_faster():
    gen, ver = _costs()
    s, s_dec, n = 400, 100, 64
    memory = 2.0 * s * ver.model.kv_bytes_per_token + 3 * s_dec * gen.model.kv_bytes_per_token
    plan = RooflineKVAllocator(gen, ver).plan(memory_bytes=memory, num_beams=n, verify_tokens=s,
                                              decode_tokens=s_dec, num_switches=1)  # fmt: skip
    assert plan.offload and plan.offload_s < plan.shared_s and plan.total_s == plan.offload_s
    assert plan.verifier_kv_bytes == plan.generator_kv_bytes == memory
    many = RooflineKVAllocator(gen, ver).plan(memory_bytes=memory, num_beams=n, verify_tokens=s,
                                              decode_tokens=s_dec, num_switches=10_000)  # fmt: skip
    assert not many.offload and many.total_s == many.shared_s  # transfers now cost more than they save
    shared = RooflineKVAllocator(gen, ver, allow_offload=False).plan(
        memory_bytes=memory, num_beams=n, verify_tokens=s, decode_tokens=s_dec)
    assert not shared.offload and math.isinf(shared.offload_s)


def test_allocator_returns_the_only_plan_even_when_its_time_overflows():
    """Memory for one model at a time and a host link so slow that the offloading plan's
    time overflows to inf: that plan is still the one that fits (it was an AttributeError
    on None, the inf not being faster than the missing shared plan's inf)."""
    gen, ver = _costs()
    slow = replace(gen.hardware, host_link_bytes_s=1e-300)
    gen, ver = replace(gen, hardware=slow), replace(ver, hardware=slow)
    s, s_dec = 400, 100
    memory = 1.01 * max(s * ver.model.kv_bytes_per_token, s_dec * gen.model.kv_bytes_per_token)
    plan = RooflineKVAllocator(gen, ver).plan(memory_bytes=memory, num_beams=8, verify_tokens=s,
                                              decode_tokens=s_dec, num_switches=10)  # fmt: skip
    assert plan.offload and math.isinf(plan.shared_s) and plan.total_s == plan.offload_s == math.inf


@pytest.mark.parametrize("kwargs,match", [
    ({"memory_bytes": 0}, "memory_bytes"), ({"memory_bytes": math.inf}, "finite"),
    ({"memory_bytes": math.nan}, "memory_bytes"), ({"num_beams": 0}, "num_beams"), ({"verify_tokens": 1.5}, "verify"),
    ({"decode_tokens": -1}, "decode"), ({"num_switches": -1}, "switches"), ({"memory_bytes": 10.0}, "fits no"),
    ({"verifier_cache": 50}, "verifier_cache"), ({"verifier_cache": PrefixCachedVerifier(150, 2)}, "new_tokens"),
    ({"generator_prefix_share": 0.9}, "generator_prefix_share"), ({"generator_prefix_share": True}, "generator"),
    ({"generator_prefix_share": math.nan}, "generator"), ({"generator_prefix_share": 2, "decode_tokens": 120}, "decode"),
])  # fmt: skip
def test_allocator_rejects_bad_input(kwargs, match):
    gen, ver = _costs()
    args = {"memory_bytes": 1e9, "num_beams": 8, "verify_tokens": 100, "decode_tokens": 50, **kwargs}
    with pytest.raises(InvalidArgumentError, match=match):
        RooflineKVAllocator(gen, ver).plan(**args)
    with pytest.raises(InvalidArgumentError):
        RooflineKVAllocator(gen, "h100")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="allow_offload"):
        RooflineKVAllocator(gen, ver, allow_offload=1)  # type: ignore[arg-type]


def _t_cached(gen, ver, n, s, s_dec, b_pre, b_dec, new, v_share, g_share) -> tuple[float, float, float]:
    """(T_tot, verifier KV tokens per sequence, generator KV tokens per sequence) of the
    prefix-cached plan written out plainly: one wave of all N keeps the tree cached (only the
    new tokens are prefilled, the generator decodes on its cached context); several waves
    re-prefill each sequence's share of the evicted prefix."""
    f = new + (s - new) / v_share
    pre_chunk = (new, s - new) if b_pre >= n else (f, s - f)
    pre = -(-n // b_pre) * ver.step_s([pre_chunk] * b_pre)
    if g_share is None:
        return pre + -(-n // b_dec) * s_dec * gen.step_s([(1, s_dec // 2)] * b_dec), f, s_dec
    context = s - s_dec
    part = context / g_share
    wave = s_dec * gen.step_s([(1, context + s_dec // 2)] * b_dec)
    if b_dec < n:
        wave += gen.step_s([(part, context - part)] * b_dec)
    return pre + -(-n // b_dec) * wave, f, s_dec + part


@pytest.mark.parametrize("n,s,s_dec,blocks", [(12, 300, 80, 9), (20, 500, 40, 25), (7, 400, 100, 14), (30, 200, 60, 16)])
@pytest.mark.parametrize("new,v_share,g_share", [(40, 4, None), (40, 4, 4), (25, 1, 2.5), (200, 3, None)])
def test_prefix_cached_allocator_matches_brute_force(n, s, s_dec, blocks, new, v_share, g_share):
    gen, ver = _costs()
    kv_v, kv_g = ver.model.kv_bytes_per_token, gen.model.kv_bytes_per_token
    _, f, g = _t_cached(gen, ver, n, s, s_dec, 1, 1, new, v_share, g_share)
    memory = blocks * (f * kv_v + g * kv_g) / 2
    plan = RooflineKVAllocator(gen, ver, allow_offload=False).plan(
        memory_bytes=memory, num_beams=n, verify_tokens=s, decode_tokens=s_dec,
        verifier_cache=PrefixCachedVerifier(new, v_share), generator_prefix_share=g_share)  # fmt: skip
    assert plan.prefill_batch * f * kv_v + plan.decode_batch * g * kv_g <= memory * (1 + 1e-12)
    assert plan.verifier_kv_bytes == pytest.approx(plan.prefill_batch * f * kv_v)
    grid = [(bp, bd) for bp in range(1, blocks * 2) for bd in range(1, blocks * 4)
            if bp * f * kv_v + bd * g * kv_g <= memory]  # fmt: skip
    best = min(_t_cached(gen, ver, n, s, s_dec, bp, bd, new, v_share, g_share)[0] for bp, bd in grid)
    assert plan.total_s == pytest.approx(best, rel=1e-9)
    mine = _t_cached(gen, ver, n, s, s_dec, plan.prefill_batch, plan.decode_batch, new, v_share, g_share)[0]
    assert mine == pytest.approx(best, rel=1e-9)


def test_a_whole_beam_cache_with_no_sharing_is_the_papers_plan():
    gen, ver = _costs()
    args = {"memory_bytes": 4e8, "num_beams": 48, "verify_tokens": 600, "decode_tokens": 70}
    paper = RooflineKVAllocator(gen, ver).plan(**args)
    assert RooflineKVAllocator(gen, ver).plan(**args, verifier_cache=PrefixCachedVerifier(600, 1)) == paper


def test_prefix_cached_verifier_gets_less_memory_when_steps_are_short():
    gen, ver = _costs()
    n, s, step = 64, 1200, 50  # short steps on long beams (the long-CoT workload's shape)
    args = {"memory_bytes": 3e9, "num_beams": n, "verify_tokens": s, "decode_tokens": step, "num_switches": 2}
    whole = RooflineKVAllocator(gen, ver).plan(**args)
    cached = RooflineKVAllocator(gen, ver).plan(**args, verifier_cache=PrefixCachedVerifier(step, 4))
    kv = ver.model.kv_bytes_per_token
    assert not whole.offload and not cached.offload and whole.prefill_batch == cached.prefill_batch == n
    assert whole.verifier_kv_bytes == pytest.approx(n * s * kv)
    assert cached.verifier_kv_bytes == pytest.approx(n * (step + (s - step) / 4) * kv)  # < a quarter
    assert cached.generator_kv_bytes > whole.generator_kv_bytes
    assert cached.total_s < whole.total_s  # one wave prefills only the new steps
    # several waves re-prefill the evicted prefixes: slower than one wave, faster than whole beams
    tight = {**args, "memory_bytes": (n // 2) * (step + (s - step) / 4) * kv + n * step * gen.model.kv_bytes_per_token}
    waves = RooflineKVAllocator(gen, ver, allow_offload=False).plan(
        **tight, verifier_cache=PrefixCachedVerifier(step, 4))
    assert waves.prefill_batch < n and waves.total_s > cached.total_s


def test_offloading_moves_the_cached_footprint():
    gen, ver = _costs()
    s, step, n = 1000, 50, 32
    cache = PrefixCachedVerifier(step, 4)
    f = cache.footprint_tokens(s)
    memory = n * f * ver.model.kv_bytes_per_token  # the verifier's tree alone fills it
    plan = RooflineKVAllocator(gen, ver).plan(memory_bytes=memory, num_beams=n, verify_tokens=s,
                                              decode_tokens=step, verifier_cache=cache)  # fmt: skip
    assert plan.offload and plan.prefill_batch == n
    pre = ver.step_s([(step, s - step)] * n)
    dec = step * gen.step_s([(1, step // 2)] * plan.decode_batch) * -(-n // plan.decode_batch)
    moved = ver.swap_s(n * f) + gen.swap_s(plan.decode_batch * step)
    assert plan.offload_s == pytest.approx(pre + dec + 2 * moved, rel=1e-9)


@pytest.mark.parametrize("make,match", [
    (lambda: PrefixCachedVerifier(0, 4), "new_tokens"), (lambda: PrefixCachedVerifier(1.5, 4), "new_tokens"),
    (lambda: PrefixCachedVerifier(50, 0.5), "prefix_share"), (lambda: PrefixCachedVerifier(50, math.inf), "prefix_share"),
    (lambda: PrefixCachedVerifier(50, True), "prefix_share"), (lambda: PrefixCachedVerifier(50, "4"), "prefix_share"),
    (lambda: PrefixCachedVerifier(500, 4).footprint_tokens(100), "new_tokens"),
])  # fmt: skip
def test_prefix_cached_verifier_rejects_bad_parameters(make, match):
    with pytest.raises(InvalidArgumentError, match=match):
        make()


def test_speculative_ids_are_non_empty_strings_and_a_bare_id_is_not_split():
    for ids in ({1}, {None}, {""}, {"ok", 2}):
        with pytest.raises(InvalidTypeError, match="non-empty str"):
            SpeculationState(frozenset(ids))
    with pytest.raises(InvalidTypeError, match="sequence of ids"):
        SpeculationState().with_branches("spec-1")  # would add {"s", "p", "e", "c", "-", "1"}
    assert SpeculationState().with_branches(["spec-1"]).speculative_ids == frozenset({"spec-1"})


def test_selectspec_rank_rejects_a_bare_id_and_potentials_out_of_range():
    sel = SelectSpec(branching=3)
    with pytest.raises(InvalidTypeError, match="sequence of beam ids"):
        sel.rank("ab", {}, 4)  # would rank beams "a" and "b"
    for bad in (0, 4, 2.5, True, 10**12, 10**30, -(10**30)):  # 10**30: beyond int64  # 10**12 with free_slots 10**12: a list without end
        with pytest.raises(InvalidArgumentError, match=r"potentials must be ints in \[1, 3\]"):
            sel.rank(["a"], {"a": bad}, 10**12)
    assert len(sel.rank(["a"], {"a": 3}, 10**12)) == 3
