"""The beam-search serving simulator: algorithmic equivalence, speculation control, KV
bounds, determinism and validation (on a small synthetic step pool)."""

from __future__ import annotations

import json
import pathlib
import random

import pytest

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.sim.beam import (
    BEAM_SETTINGS,
    BeamRequest,
    BeamSearchSpec,
    BeamServeConfig,
    BeamSetting,
    StepPool,
    load_step_pool,
    poisson_beam_requests,
    simulate_beam_search,
)
from reasonserve.sim.beam.cache import NodeCache

DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "prm_beams"


def _pool(seed: int = 0, n: int = 60) -> StepPool:
    """Heavy-tailed step lengths (a few stragglers) and scores in (0, 1)."""
    rng = random.Random(seed)
    trajs = []
    for _ in range(n):
        steps = rng.randint(2, 7)
        trajs.append(tuple((max(1, int(rng.paretovariate(1.5) * 20)), round(rng.random(), 3)) for _ in range(steps)))
    return StepPool(tuple(trajs), (40, 60, 80), "synthetic")


SETTING = BEAM_SETTINGS["1.5b+1.5b"]
SEARCH = BeamSearchSpec(width=16, branching=4, max_model_len=2048)
CONFIGS = {
    "baseline": {},
    "prefix": {"prefix_aware": True},
    "roofline": {"prefix_aware": True, "roofline": True},
    "speculation": {"speculation": True},
    "all": {"prefix_aware": True, "roofline": True, "speculation": True},
}


def _run(requests, **kw):
    return simulate_beam_search(requests, _pool(), BeamServeConfig(SETTING, SEARCH, **kw))


def test_speculation_and_scheduling_never_change_the_selected_beams():
    requests = poisson_beam_requests(_pool(), rate_per_s=0.5, num_requests=6, seed=3)
    results = {name: _run(requests, **kw) for name, kw in CONFIGS.items()}
    base = results["baseline"]
    assert base.summary()["finished_beams"] > 0
    for name, r in results.items():
        assert r.selections == base.selections, name
        assert sorted(r.beams)[0][:3] == sorted(base.beams)[0][:3]
        assert sorted(b[:3] for b in r.beams) == sorted(b[:3] for b in base.beams), name
    spec = results["speculation"].summary()
    assert spec["spec_tokens"] > 0 and spec["spec_tokens_kept"] > 0  # speculation really ran
    assert spec["decode_tokens"] < base.summary()["decode_tokens"]  # and saved real decoding
    assert spec["mean_beam_completion_s"] != base.summary()["mean_beam_completion_s"]


def test_speculation_stops_when_a_request_arrives():
    apart = [BeamRequest("a", 0.0, 50, 1), BeamRequest("b", 1e4, 50, 2)]
    alone = _run(apart, speculation=True).summary()
    assert alone["spec_tokens"] > 0 and alone["speculation_stops"] == 0
    # "b" arrives while "a" is in its first iterations: speculation must stop for it
    first = _run([BeamRequest("a", 0.0, 50, 1)]).summary()["mean_latency_s"]
    close = [BeamRequest("a", 0.0, 50, 1), BeamRequest("b", first / 3, 50, 2)]
    busy = _run(close, speculation=True).summary()
    assert busy["speculation_stops"] >= 1


def test_kv_use_never_exceeds_capacity_and_requests_all_finish(monkeypatch):
    seen = []
    original = NodeCache.make_room

    def watched(self, need):
        ok = original(self, need)
        seen.append((self.used, self.capacity))
        return ok

    monkeypatch.setattr(NodeCache, "make_room", watched)
    tight = BeamSetting("tight", SETTING.generator, SETTING.verifier, SETTING.hardware, 0.2705)
    requests = poisson_beam_requests(_pool(), rate_per_s=2.0, num_requests=5, seed=1)
    result = simulate_beam_search(requests, _pool(), BeamServeConfig(tight, SEARCH, speculation=True))
    assert all(used <= cap for used, cap in seen) and seen
    assert set(result.latencies_s) == {r.request_id for r in requests}
    assert result.summary()["recompute_tokens"] > 0  # memory really was tight


def test_simulation_is_deterministic():
    requests = poisson_beam_requests(_pool(), rate_per_s=1.0, num_requests=3, seed=7)
    a = _run(requests, speculation=True, prefix_aware=True).summary()
    assert a == _run(requests, speculation=True, prefix_aware=True).summary()


def test_the_roofline_allocator_sets_the_split():
    r = _run([BeamRequest("a", 0.0, 50, 1)], roofline=True)
    assert r.plan is not None
    assert r.capacities["generator"] != _run([BeamRequest("a", 0.0, 50, 1)]).capacities["generator"]


def test_the_roofline_plan_is_told_the_models_it_serves():
    one = [BeamRequest("a", 0.0, 50, 1)]
    runs = {p: _run(one, roofline=True, roofline_plan=p) for p in ("whole_beams", "cached_verifier", "prefix_cached")}
    pool = _pool()
    s, step = pool.mean_sequence_tokens(), pool.mean_step_tokens()
    assert step < s / 3  # steps short beside the beams: a cached verifier needs far less KV
    kv = SETTING.verifier.kv_bytes_per_token
    whole, cached = runs["whole_beams"].plan, runs["cached_verifier"].plan
    assert whole.verifier_kv_bytes == whole.prefill_batch * s * kv
    assert cached.verifier_kv_bytes == pytest.approx(cached.prefill_batch * (step + (s - step) / 4) * kv)
    assert cached.verifier_kv_bytes < whole.verifier_kv_bytes
    assert runs["prefix_cached"].plan != cached  # the generator's context changes the plan too
    # a verifier without prefix caching prefills whole beams: the paper's plan is the right one
    off = _run(one, roofline=True, verifier_prefix_caching=False, roofline_plan="cached_verifier")
    assert off.plan == whole


def test_context_share_counts_beams_per_distinct_context_token():
    from reasonserve.sim.beam.tree import SearchTree, context_share

    def trees(width, branching):
        spec = BeamSearchSpec(width=width, branching=branching, max_model_len=2048)
        return [SearchTree(BeamRequest(f"w{q}", 0.0, 50, q), _pool(), spec) for q in range(3)]

    assert context_share(trees(1, 1)) == 1.0  # one beam shares with nobody
    assert context_share(trees(8, 8)) == 8.0  # one parent kept, copied 8 times: one context
    assert 4 <= context_share(trees(16, 4)) <= 16  # siblings share at least B-fold, at most n
    h = context_share(trees(16, 4))
    one = [BeamRequest("a", 0.0, 50, 1)]
    measured = _run(one, roofline=True, roofline_plan="cached_verifier", roofline_prefix_share=h).plan
    s, step = _pool().mean_sequence_tokens(), _pool().mean_step_tokens()
    kv = SETTING.verifier.kv_bytes_per_token
    assert measured.verifier_kv_bytes == pytest.approx(measured.prefill_batch * (step + (s - step) / h) * kv)


@pytest.mark.parametrize("make", [
    lambda: BeamSearchSpec(width=0),
    lambda: BeamSearchSpec(width=4, branching=8),
    lambda: BeamServeConfig(SETTING, SEARCH, lookahead=True),
    lambda: BeamServeConfig(SETTING, SEARCH, max_num_seqs=0),
    lambda: BeamServeConfig(SETTING, SEARCH, roofline_plan="paper"),
    lambda: BeamServeConfig(SETTING, SEARCH, roofline_prefix_share=0.5),
    lambda: BeamServeConfig(SETTING, SEARCH, roofline_prefix_share=True),
    lambda: BeamServeConfig(SETTING, SEARCH, truncation_mean=2.0),
    lambda: BeamSetting("x", SETTING.generator, SETTING.verifier, SETTING.hardware, 0.1),
    lambda: StepPool((((5, 0.5),),), (), "x"),
    lambda: StepPool((((0, 0.5),),), (3,), "x"),
    lambda: StepPool(((0, 0.5),), (3,), "x"),
    lambda: StepPool((((5, float("nan")),),), (3,), "x"),
    lambda: poisson_beam_requests(_pool(), 0.0, 3, 0),
    lambda: simulate_beam_search([], _pool(), BeamServeConfig(SETTING, SEARCH)),
    lambda: simulate_beam_search([BeamRequest("a", 0, 5000, 1)], _pool(), BeamServeConfig(SETTING, SEARCH)),
    lambda: simulate_beam_search([BeamRequest("a", 0, 5, 1)] * 2, _pool(), BeamServeConfig(SETTING, SEARCH)),
])  # fmt: skip
def test_invalid_configs_raise(make):
    with pytest.raises(InvalidArgumentError):
        make()


@pytest.mark.skipif(not DATA.is_dir(), reason="recorded PRM beams not present (../shared/data/prm_beams)")
def test_recorded_pool_loads_with_one_score_per_step():
    pool = load_step_pool(next(DATA.glob("*.jsonl")), max_problems=20)
    assert len(pool.prompt_tokens) == 20 and len(pool.trajectories) == 60
    assert all(tokens >= 1 and 0.0 <= score <= 1.0 for t in pool.trajectories for tokens, score in t)


def test_a_verifier_without_prefix_caching_prefills_whole_beams():
    requests = poisson_beam_requests(_pool(), rate_per_s=0.5, num_requests=3, seed=5)
    cached = _run(requests)
    uncached = _run(requests, verifier_prefix_caching=False)
    assert uncached.selections == cached.selections
    assert uncached.summary()["verifier_prefill_tokens"] > cached.summary()["verifier_prefill_tokens"]
    assert uncached.summary()["mean_latency_s"] > cached.summary()["mean_latency_s"]
    with pytest.raises(InvalidArgumentError):
        BeamServeConfig(SETTING, SEARCH, verifier_prefix_caching=None)  # type: ignore[arg-type]


def _tree(width: int, branching: int, seed: int = 4):
    from reasonserve.sim.beam.tree import SearchTree

    return SearchTree(BeamRequest("t", 0.0, 50, seed), _pool(), BeamSearchSpec(width=width, branching=branching))


@pytest.mark.parametrize("width,branching", [(16, 4), (8, 4), (12, 3)])
def test_search_keeps_n_over_b_and_refills_to_n_copy_by_copy_until_n_finished(width, branching):
    """search-and-learn / FlashTTS artifact: every iteration has n active beams, the best
    n // B non-final ones are kept and copied back to n (parents interleaved); the search
    stops once n beams finished."""
    tree, iterations = _tree(width, branching), 0
    while tree.active:
        assert len(tree.active) == width
        going = sorted((b for b in tree.active if not b.final), key=lambda b: (-b.score, b.beam_id))
        finished_before = len(tree.finished)
        _, children = tree.select()
        iterations += 1
        if not children:
            assert len(tree.finished) >= width or not going
            assert finished_before < width  # it did not run past n finished beams
            break
        kept = going[: width // branching]
        assert tree.selections[-1] == tuple(b.beam_id for b in kept)
        assert [c.beam_id for c in children] == [f"{kept[i % len(kept)].beam_id}.{i // len(kept)}"
                                                 for i in range(width)]  # fmt: skip
        assert all(c.path[-1] == c.beam_id.rpartition(".")[0] for c in children)
        assert len(tree.finished) < width
    assert iterations > 1 and len(tree.finished) >= 1


def test_a_step_longer_than_max_step_tokens_is_cut_there_and_ends_the_beam():
    from reasonserve.sim.beam.tree import SearchTree

    pool = StepPool((((3000, 0.5), (40, 0.6)),), (50,), "long")
    spec = BeamSearchSpec(width=4, branching=4, max_model_len=8192, max_step_tokens=2048)
    beam = SearchTree(BeamRequest("t", 0.0, 50, 1), pool, spec).active[0]
    assert beam.step_tokens == 2048 and beam.final
    short = SearchTree(BeamRequest("t", 0.0, 50, 1), pool, BeamSearchSpec(4, 4, max_model_len=8192,
                                                                          max_step_tokens=4000))
    assert short.active[0].step_tokens == 3000 and not short.active[0].final


def test_the_baseline_kv_split_is_each_vllm_instance_fraction_minus_its_weights():
    s = BEAM_SETTINGS["1.5b+7b"]  # the FlashTTS artifact's baseline: 0.19 / 0.71 of the GPU
    gen, ver = s.baseline_kv_bytes()
    assert gen == pytest.approx(0.19 * s.hardware.memory_bytes - s.generator.weight_bytes)
    assert ver == pytest.approx(0.71 * s.hardware.memory_bytes - s.verifier.weight_bytes)
    assert gen + ver == pytest.approx(s.kv_bytes) and gen < s.kv_bytes / 2
    r = simulate_beam_search([BeamRequest("a", 0.0, 50, 1)], _pool(), BeamServeConfig(s, SEARCH))
    assert r.capacities == {"generator": int(gen // s.generator.kv_bytes_per_token),
                            "verifier": int(ver // s.verifier.kv_bytes_per_token)}  # fmt: skip
    even = BEAM_SETTINGS["1.5b+1.5b"]
    assert even.baseline_kv_bytes() == (even.kv_bytes / 2, even.kv_bytes / 2)
    fast = simulate_beam_search([BeamRequest("a", 0.0, 50, 1)], _pool(), BeamServeConfig(s, SEARCH, roofline=True))
    assert fast.capacities != r.capacities  # FlashTTS's allocator replaces the static split


@pytest.mark.parametrize("fractions", [(0.5, 0.5), (0.05, 0.85), (0.19,), (0.19, "x"), (True, 0.5), (0.0, 0.5)])
def test_bad_baseline_fractions_raise(fractions):
    s = BEAM_SETTINGS["1.5b+7b"]
    with pytest.raises(InvalidArgumentError):
        BeamSetting("x", s.generator, s.verifier, s.hardware, 0.9, fractions)


def test_one_at_a_time_requests_are_served_as_if_alone():
    from reasonserve.sim.beam import one_at_a_time_requests

    requests = one_at_a_time_requests(_pool(), 3, seed=2)
    together = _run(requests, speculation=True).latencies_s
    for r in requests:
        alone = _run([BeamRequest(r.request_id, 0.0, r.prompt_tokens, r.seed)], speculation=True)
        assert together[r.request_id] == pytest.approx(alone.latencies_s[r.request_id])
        # one request alone: the GPU is busy from arrival to the end, with one model at a time
        busy = alone.summary()
        assert busy["generator_s"] > 0 and busy["verifier_s"] > 0
        assert busy["generator_s"] + busy["verifier_s"] == pytest.approx(busy["makespan_s"])
    assert len({r.prompt_tokens for r in one_at_a_time_requests(_pool(), 20, seed=2)}) > 1
    with pytest.raises(InvalidArgumentError):
        one_at_a_time_requests(_pool(), 0, seed=2)


# -- the long-CoT workload (beam_longcot): synthetic files only ------------------------------


def _write_rows(path: pathlib.Path, rows: list, *, gz: bool) -> pathlib.Path:
    import gzip
    import json

    text = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _row(dataset: str, problem: str, text: str) -> dict:
    return {"dataset": dataset, "problem": problem, "full_text": text, "tokens_used": 99}


LONG_TEXTS = [
    _row("aime24", "Find x if x + 1 = 2.", "<think>\nFirst, x.\nThen y\n\nSo x = 1\n\n\n\nDone."),
    _row("math500", "What is 2 + 2?", "It is 4.\n\nYes."),
    _row("amc23", "How many?", "one two three\n\nfour five\n\nsix"),
]


@pytest.mark.parametrize("gz", [True, False])
def test_longcot_texts_become_blank_line_steps_counted_by_the_pool_rule(tmp_path, gz):
    from reasonserve.sim.beam.longcot import load_longcot_pool
    from reasonserve.sim.beam.workload import count_tokens

    path = _write_rows(tmp_path / ("t.jsonl.gz" if gz else "t.jsonl"), LONG_TEXTS, gz=gz)
    pool = load_longcot_pool(path)  # aime24 + amc23: the math500 row is skipped
    assert pool.prompt_tokens == (count_tokens("Find x if x + 1 = 2."), count_tokens("How many?"))
    # "\n" does not end a step, "\n\n" does; "\n\n\n\n" leaves an empty step (1 token)
    steps = [["<think>\nFirst, x.\nThen y", "So x = 1", "", "Done."], ["one two three", "four five", "six"]]
    assert [[t for t, _ in traj] for traj in pool.trajectories] == [[count_tokens(s) for s in t] for t in steps]
    assert [t for t, _ in pool.trajectories[1]] == [3, 2, 1]
    assert all(0.0 <= x < 1.0 for traj in pool.trajectories for _, x in traj)
    only_math = load_longcot_pool(path, datasets=("math500",))
    assert [t for t, _ in only_math.trajectories[0]] == [4, 2]


def test_longcot_keeps_the_first_max_steps_and_never_caps_a_step_itself(tmp_path):
    from reasonserve.sim.beam.longcot import load_longcot_pool
    from reasonserve.sim.beam.tree import SearchTree

    long_step = " ".join(["w"] * 3000)
    text = "\n\n".join([long_step] + [f"step {i}" for i in range(60)])
    path = _write_rows(tmp_path / "t.jsonl", [_row("aime24", "p", text)], gz=False)
    pool = load_longcot_pool(path, max_steps=40)
    assert len(pool.trajectories[0]) == 40 and pool.trajectories[0][0][0] == 3000
    assert len(load_longcot_pool(path, max_steps=5).trajectories[0]) == 5
    # the search cuts the 3,000-token step at max_tokens = 2,048 and ends the beam there
    spec = BeamSearchSpec(width=4, branching=4, max_model_len=8192, max_step_tokens=2048)
    beam = SearchTree(BeamRequest("t", 0.0, 1, 1), pool, spec).active[0]
    assert beam.step_tokens == 2048 and beam.final


def test_longcot_scores_are_a_pure_function_of_the_file_and_the_seed(tmp_path):
    from reasonserve.sim.beam.longcot import load_longcot_pool

    path = _write_rows(tmp_path / "t.jsonl", LONG_TEXTS, gz=False)
    a, b = load_longcot_pool(path, score_seed=7), load_longcot_pool(path, score_seed=7)
    other = load_longcot_pool(path, score_seed=8)
    assert a.trajectories == b.trajectories
    assert [[t for t, _ in x] for x in other.trajectories] == [[t for t, _ in x] for x in a.trajectories]
    assert [[s for _, s in x] for x in other.trajectories] != [[s for _, s in x] for x in a.trajectories]
    scores = [s for traj in a.trajectories for _, s in traj]
    assert len(set(scores)) == len(scores)  # a draw per step, not one per text
    runs = [simulate_beam_search([BeamRequest("a", 0.0, 5, 3)], a, BeamServeConfig(SETTING, SEARCH, **kw))
            for kw in ({}, {"prefix_aware": True, "roofline": True, "speculation": True})]  # fmt: skip
    assert runs[0].selections == runs[1].selections and runs[0].summary()["finished_beams"] > 0


@pytest.mark.parametrize(
    "rows,match",
    [
        (["{not json"], "not a JSON object"),
        (["[1, 2]"], "not a JSON object"),
        ([{"dataset": "aime24", "problem": "p"}], "full_text"),
        ([{"dataset": "aime24", "problem": "p", "full_text": ""}], "full_text"),
        ([{"dataset": "aime24", "full_text": "a\n\nb"}], "problem"),
        ([{"problem": "p", "full_text": "a"}], "dataset"),
        ([_row("math500", "p", "a\n\nb")], "no row of datasets"),
        ([], "no row of datasets"),
    ],
)
def test_longcot_malformed_rows_raise_typed_errors(tmp_path, rows, match):
    from reasonserve.sim.beam.longcot import load_longcot_pool

    path = _write_rows(tmp_path / "t.jsonl", rows, gz=False)
    with pytest.raises(InvalidArgumentError, match=match):
        load_longcot_pool(path)


def test_longcot_missing_unreadable_files_and_bad_arguments_raise(tmp_path):
    from reasonserve.sim.beam.longcot import load_longcot_pool

    with pytest.raises(InvalidArgumentError, match="does not exist"):
        load_longcot_pool(tmp_path / "absent.jsonl.gz")
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        load_longcot_pool(tmp_path)  # a directory
    fake_gz = tmp_path / "plain.jsonl.gz"
    fake_gz.write_text('{"dataset": "aime24"}\n')
    with pytest.raises(InvalidArgumentError, match="unreadable"):
        load_longcot_pool(fake_gz)
    truncated = tmp_path / "cut.jsonl.gz"
    whole = _write_rows(tmp_path / "whole.jsonl.gz", LONG_TEXTS * 50, gz=True).read_bytes()
    truncated.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(InvalidArgumentError, match="unreadable"):
        load_longcot_pool(truncated)
    good = _write_rows(tmp_path / "t.jsonl", LONG_TEXTS, gz=False)
    for kw in ({"max_steps": 0}, {"max_steps": True}, {"score_seed": -1}, {"score_seed": 1.5},
               {"datasets": ()}, {"datasets": "aime24"}, {"datasets": (1,)}):  # fmt: skip
        with pytest.raises(InvalidArgumentError):
            load_longcot_pool(good, **kw)


def test_longcot_hostile_files_raise_typed_errors(tmp_path, monkeypatch):
    import gzip as gzip_mod

    from reasonserve.sim.beam import longcot as beam_longcot
    from reasonserve.sim.beam.longcot import load_longcot_pool

    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 200_000 + "\n")  # json.loads recurses past the interpreter's limit
    with pytest.raises(InvalidArgumentError, match="nested too deeply"):
        load_longcot_pool(deep)
    corrupt = tmp_path / "corrupt.jsonl.gz"  # a valid gzip header, a corrupted deflate body
    good = bytearray(gzip_mod.compress(json.dumps(LONG_TEXTS[0]).encode() * 200))
    good[20:60] = b"\xff" * 40
    corrupt.write_bytes(bytes(good))
    with pytest.raises(InvalidArgumentError, match="unreadable"):
        load_longcot_pool(corrupt)
    monkeypatch.setattr(beam_longcot, "MAX_LINE_CHARS", 64)
    long_line = _write_rows(tmp_path / "long.jsonl", [_row("aime24", "p", "x" * 100)], gz=False)
    with pytest.raises(InvalidArgumentError, match="longer than 64"):
        load_longcot_pool(long_line)
    monkeypatch.setattr(beam_longcot, "MAX_LINE_CHARS", 200)  # the same file under a bound it meets
    assert load_longcot_pool(long_line).trajectories[0][0][0] > 0
