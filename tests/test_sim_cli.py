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
