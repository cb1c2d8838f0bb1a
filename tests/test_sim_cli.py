"""``reasonserve sim``: JSON out, bad options refused with a typed, named error."""

import json

from reasonserve.cli import main
from test_sim import _write_fake_traces


def test_sim_cli_writes_a_json_summary(tmp_path, capsys):
    _write_fake_traces(tmp_path)
    out = tmp_path / "sim.json"
    argv = ["sim", "--data", str(tmp_path), "--requests", "20", "--rate", "5", "--instances", "2",
            "--model", "qwen2.5-7b", "--policy", "pascal", "--quantum", "16", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    summary = json.loads(out.read_text())
    assert (
        summary["num_requests"] == 20 and summary["policy"] == "pascal" and summary["router"] == "pascal_alg1"
    )
    assert summary["ttft_s"]["max"] >= summary["ttft_s"]["p50"] > 0


def test_sim_cli_refuses_bad_options(tmp_path, capsys):
    _write_fake_traces(tmp_path)
    assert main(["sim", "--data", str(tmp_path), "--policy", "pascal", "--quantum", "0"]) == 2
    assert "quantum" in capsys.readouterr().err
    assert main(["sim", "--data", str(tmp_path), "--instances", "0"]) == 2
    assert "num_instances" in capsys.readouterr().err
    for rate in ("nan", "inf", "0", "-1"):
        assert main(["sim", "--data", str(tmp_path), "--rate", rate, "--requests", "3"]) == 2
        assert "rate" in capsys.readouterr().err
    # a rate so low that the requests arrive after max_sim_s: the workload, not a stuck policy
    assert main(["sim", "--data", str(tmp_path), "--rate", "1e-300", "--requests", "3"]) == 2
    assert "past max_sim_s" in capsys.readouterr().err


def test_sim_cli_profile_cost_model(tmp_path, capsys):
    from reasonserve.cost.profile import ProfileTable, save_profile

    _write_fake_traces(tmp_path)
    save_profile(ProfileTable((), (0.01, 1e-5, 1e-4, 1e-7), "test"), tmp_path / "table.json")
    out = tmp_path / "sim.json"
    base = ["sim", "--data", str(tmp_path), "--requests", "10", "--instances", "2", "--model", "qwen2.5-7b"]
    assert main([*base, "--cost-model", "profile", "--profile-table", str(tmp_path / "table.json"),
                 "--decode-steps-per-event", "8", "--out", str(out)]) == 0  # fmt: skip
    summary = json.loads(out.read_text())
    assert summary["cost_model"] == "profile" and summary["num_requests"] == 10
    assert main([*base, "--cost-model", "profile"]) == 2
    assert "--profile-table" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("[]")
    assert main([*base, "--cost-model", "profile", "--profile-table", str(tmp_path / "bad.json")]) == 2
    assert "not a profile table" in capsys.readouterr().err
    assert main([*base, "--decode-steps-per-event", "0"]) == 2
    assert "decode_steps_per_event" in capsys.readouterr().err


def test_progress_reports_reach_every_request(tmp_path, capsys, monkeypatch):
    from reasonserve.policies import FCFSPolicy
    from reasonserve.sim import SimConfig, simulate
    from reasonserve.sim.cluster import simulator as simulator_module
    from reasonserve.sim.workloads.requests import LengthTable, poisson_workload

    reqs = poisson_workload(LengthTable(((16, 30, 10),), "fixture"), 50.0, 60, seed=0)
    seen: list[tuple[int, int]] = []
    cfg = SimConfig(num_instances=2, model="qwen2.5-7b", kv_capacity_tokens=2048, skip_quiet_steps=False)
    monkeypatch.setattr(simulator_module, "_PROGRESS_EVERY", 50)  # report often on this small run
    simulate(reqs, cfg, FCFSPolicy, progress=lambda done, known: seen.append((done, known)))
    assert len(seen) > 2 and seen[-1] == (60, 60)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen) and all(k == 60 for _, k in seen)
    assert any(0 < d < 60 for d, _ in seen)  # reported mid-run, not only at the end

    _write_fake_traces(tmp_path)
    argv = ["sim", "--data", str(tmp_path), "--requests", "5", "--instances", "1", "--model", "qwen2.5-7b",
            "--out", str(tmp_path / "s.json")]  # fmt: skip
    assert main([*argv, "--progress"]) == 0
    assert "5/5 requests finished" in capsys.readouterr().err
    assert main([*argv, "--no-progress"]) == 0
    assert "requests finished" not in capsys.readouterr().err
