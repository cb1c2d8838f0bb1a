"""The command line: ``reasonserve demo`` prints the report and writes JSON."""

import json
import subprocess
import sys

import pytest

from reasonserve.cli import main


def test_engine_demo_proves_deterministic_requests_identical(tmp_path, capsys):
    out = tmp_path / "engine.json"
    assert main(["demo", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "identical tokens in all 3 runs: 8/8" in text
    report = json.loads(out.read_text())
    assert report["all_deterministic_identical"] and len(report["runs"]) == 3
    assert all(r["verify_passes"] > 0 and r["tokens_per_s"] > 0 for r in report["runs"])


def test_ops_demo_reports_deterministic_runs_identical(tmp_path, capsys):
    out = tmp_path / "demo.json"
    assert main(["demo-ops", "--batches", "3", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "deterministic_mode(): 3/3 identical" in text
    report = json.loads(out.read_text())
    assert len(report["trials"]) == 3
    assert all(t["deterministic_identical"] for t in report["trials"])
    assert report["speed"]["ratio"] > 0


def test_demo_rejects_a_bad_batch_count():
    with pytest.raises(ValueError, match="batches"):
        main(["demo-ops", "--batches", "0"])


def test_module_entry_point_runs():
    proc = subprocess.run([sys.executable, "-m", "reasonserve", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "demo" in proc.stdout
