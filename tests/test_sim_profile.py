"""Profile-table cost mode: the least-squares fit reproduces its own table, tables
round-trip through JSON, bad tables raise typed errors, the simulator times steps with
the table, and engine steps are measured with the right features."""

import json
import random

import pytest

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.cost.engine_steps import measure_engine_steps
from reasonserve.cost.profile import FORMAT, ProfileRow, ProfileTable, fit_profile, load_profile, save_profile
from reasonserve.engine import Engine, EngineConfig, SamplingParams, make_tiny_checkpoint
from reasonserve.policies import FCFSPolicy
from reasonserve.sim import SimConfig, SimRequest, simulate

TRUE = (0.004, 2e-5, 3e-4, 1e-7)


def _rows(noise=0.0, seed=0):
    rng, rows = random.Random(seed), []
    for prefill in (0, 16, 64, 256):
        for decode in (0, 1, 4, 16):
            for kv in (0, 500, 4000):
                if prefill + decode:
                    t = TRUE[0] + TRUE[1] * prefill + TRUE[2] * decode + TRUE[3] * kv
                    rows.append(ProfileRow(prefill, decode, kv, t * (1 + rng.uniform(-noise, noise))))
    return rows


def test_fit_reproduces_its_own_table():
    exact = fit_profile(_rows())
    assert exact.coefficients == pytest.approx(TRUE, rel=1e-6)
    assert max(exact.relative_errors()) < 1e-9
    noisy = fit_profile(_rows(noise=0.02))  # stated tolerance: 2% noise -> every row within 5%
    assert max(noisy.relative_errors()) < 0.05


def test_round_trip_and_bad_tables(tmp_path):
    table = fit_profile(_rows(), source="synthetic")
    path = tmp_path / "t.json"
    save_profile(table, path)
    assert load_profile(path) == table
    good = json.loads(path.read_text())
    bad = {
        "not json": "{",
        "wrong format": json.dumps({**good, "format": "other/1"}),
        "rows not a list": json.dumps({**good, "rows": 3}),
        "row keys": json.dumps({**good, "rows": [{"prefill_tokens": 1}]}),
        "negative seconds": json.dumps({**good, "rows": [{**good["rows"][0], "seconds": -1.0}]}),
        "float tokens": json.dumps({**good, "rows": [{**good["rows"][0], "kv_tokens": 1.5}]}),
        "coefficients": json.dumps({**good, "coefficients": [1.0, 2.0]}),
        "string coefficient": json.dumps({**good, "coefficients": ["a", 1, 2, 3]}),
    }
    for text in bad.values():
        path.write_text(text)
        with pytest.raises(InvalidArgumentError):
            load_profile(path)
    with pytest.raises(InvalidArgumentError, match="cannot read"):
        load_profile(tmp_path / "missing.json")
    assert good["format"] == FORMAT


def test_fit_needs_enough_varied_rows():
    with pytest.raises(InvalidArgumentError, match="at least 4"):
        fit_profile(_rows()[:3])
    same_mix = [ProfileRow(0, 4, 100 * i, 0.01 + i * 1e-4) for i in range(1, 9)]
    with pytest.raises(InvalidArgumentError, match="vary"):
        fit_profile(same_mix)
    with pytest.raises(InvalidArgumentError, match="no tokens"):
        ProfileRow(0, 0, 5, 0.1)
    with pytest.raises(InvalidArgumentError, match="profile"):
        SimConfig(profile={"coefficients": TRUE})


def test_simulator_times_steps_with_the_table():
    table = ProfileTable((), TRUE)
    cfg = SimConfig(num_instances=1, kv_capacity_tokens=1024, model="qwen2.5-7b", profile=table)
    seq = simulate([SimRequest("a", 0.0, 30, 0, 5)], cfg, FCFSPolicy).sequences[0]
    steps = [table.predict(30, 0, 0)] + [table.predict(0, 1, 30 + i) for i in range(4)]
    assert seq.finished_s == pytest.approx(sum(steps), rel=1e-12)
    assert cfg.cost_model().decode_iterations_s(3, 90, 4) == pytest.approx(
        [cfg.cost_model().step_s([(1, 30 + i), (1, 30 + i), (1, 30 + i)]) for i in range(4)], rel=1e-12
    )


def test_engine_steps_are_measured_with_their_features(tmp_path):
    engine = Engine.from_pretrained(make_tiny_checkpoint(tmp_path),
                                    EngineConfig(block_size=4, num_blocks=64, max_num_batched_tokens=16))  # fmt: skip
    prompts = [[5, 6, 7, 8, 9, 10, 11], [20, 21, 22], [30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41]]
    params = [SamplingParams(max_tokens=m, temperature=0.0, ignore_eos=True) for m in (3, 5, 2)]
    rows, outs, total = measure_engine_steps(engine, prompts, params)
    assert [len(o.token_ids) for o in outs] == [3, 5, 2] and total > 0
    assert sum(r.prefill_tokens for r in rows) == sum(map(len, prompts))  # every prompt token once
    assert sum(r.decode_batch for r in rows) == (3 - 1) + (5 - 1) + (2 - 1)  # first tokens come from prefill
    assert all(r.prefill_tokens + r.decode_batch <= 16 for r in rows)  # the step budget
    assert all(r.seconds > 0 for r in rows)
