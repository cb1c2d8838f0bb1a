"""``reasonserve replay probes``: the early-exit section, skipped-row counts, bad recordings."""

import csv
import gzip
import io
import json
import sys

import pytest

from reasonserve.cli import main
from reasonserve.core import InvalidArgumentError
from reasonserve.replay import probes
from reasonserve.replay.probe_runs import load_run
from test_calibration_and_replay import _write_probe_run


def _runs(tmp_path):
    for i, name in enumerate(["m1__math500__seed_1", "m2__math500__seed_1", "m1__amc23__seed_2", "m2__amc23__seed_2"]):
        _write_probe_run(tmp_path / "probes" / name, n_problems=10, seed=i)
    return sorted((tmp_path / "probes").iterdir())


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_replay_reports_the_early_exit_section(tmp_path, capsys, monkeypatch):
    _runs(tmp_path)
    out = tmp_path / "r.json"
    monkeypatch.setattr(sys, "stderr", _Terminal())
    assert main(["replay", "probes", "--data", str(tmp_path), "--json", str(out), "--png", str(tmp_path / "p.png")]) == 0
    assert "[" + "#" * 30 + "] 5/5 early-exit stages" in sys.stderr.getvalue()  # its progress, stage by stage
    printed = capsys.readouterr().out
    assert "early exit" in printed and "exit answer differs" in printed
    section = json.loads(out.read_text())["stopping"]
    shipped = next(v for k, v in section["rules"].items() if k.startswith("shipped default"))
    assert set(shipped["per_model"]) == {"m1", "m2"} and set(shipped["per_dataset"]) == {"amc23", "math500"}
    assert sum(o["n"] for o in shipped["per_model"].values()) == shipped["n"] == 40
    assert 0 <= shipped["exit_differs_from_final"] <= 1
    oracle = section["rules"]["oracle (context)"]
    assert oracle["exit_differs_from_final"] == 0 and oracle["accuracy"] == oracle["baseline_accuracy"]
    assert set(section["cross_validated"]) == {"0.0", "0.005", "0.01", "0.02"}
    for cv in section["cross_validated"].values():
        assert cv["learned, leave one model out"]["n"] == 40 and len(cv["k chosen per held-out model"]) == 2
    assert (tmp_path / "p-stopping.png").stat().st_size > 0
    assert main(["replay", "probes", "--data", str(tmp_path), "--no-stopping", "--json", str(out)]) == 0
    assert "stopping" not in json.loads(out.read_text())


def test_skipped_rows_are_counted_and_printed(tmp_path, capsys):
    folders = _runs(tmp_path)
    with gzip.open(folders[0] / "probes.csv.gz", "at", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["math500", 0, 0, 10**6, "1", "", True])  # after tokens_used
        w.writerow(["math500", 999, 0, 64, "1", "", True])  # no label
        w.writerow(["math500", 999, 0, 128, "1", "", True])
    skipped = {}
    load_run(folders[0], skipped=skipped)
    assert skipped == {"probes after tokens_used": 1, "probe rows without a label": 2}
    report = probes.replay_probes(folders)
    assert report["skipped"] == skipped
    assert main(["replay", "probes", "--data", str(tmp_path), "--no-stopping"]) == 0
    assert "1 probes after tokens_used, 2 probe rows without a label" in capsys.readouterr().out


@pytest.mark.parametrize("position", ["nan", "inf", "-64", "", "1e400"])
def test_bad_positions_name_the_file_and_row(tmp_path, position):
    folders = _runs(tmp_path)
    with gzip.open(folders[1] / "probes.csv.gz", "at", newline="") as fh:
        csv.writer(fh).writerow(["math500", 0, 0, position, "1", "", True])
    with pytest.raises(InvalidArgumentError, match=r"probes\.csv\.gz:\d+: token_position"):
        load_run(folders[1])


def test_empty_trajectories_are_kept_and_run_to_the_end(tmp_path):
    folders = _runs(tmp_path)
    label = {"problem_id": 77, "rollout_id": 0, "dataset": "math500", "target": "1", "final_answer": "1",
             "tokens_used": 500}  # fmt: skip
    with open(folders[0] / "labels.jsonl", "a") as fh:
        fh.write(json.dumps(label) + "\n")
    trajs = load_run(folders[0])
    empty = next(t for t in trajs if t.key[1] == "77")
    assert empty.positions == () and empty.observations() == []
    report = probes.replay_probes(folders, stopping=True)
    assert report["trajectories"] == 41
    assert next(v for k, v in report["stopping"]["rules"].items() if k.startswith("shipped"))["n"] == 41


def test_missing_label_fields_name_the_row(tmp_path):
    folders = _runs(tmp_path)
    with open(folders[0] / "labels.jsonl", "a") as fh:
        fh.write(json.dumps({"problem_id": 1, "rollout_id": 0, "dataset": "math500", "target": "1"}) + "\n")
    with pytest.raises(InvalidArgumentError, match=r"labels\.jsonl:11: .*tokens_used"):
        load_run(folders[0])


def test_text_probing_hands_the_reasoning_text_between_probes_to_the_rules():
    from reasonserve.replay import cot

    words = " ".join(f"w{i}" for i in range(200))
    text = f"<think> {words} Wait, so the answer is 7. Let me verify. {words} </think>"
    tr = cot.trace_trajectory(("d", "0", "0"), "r", text, "7", "7", interval_tokens=64)
    observations = tr.observations()
    assert len(observations) == len(tr.positions) >= 5
    assert "".join(o.reasoning_tail for o in observations) == text[: len("".join(tr.tails))]
    assert text.startswith("".join(tr.tails)) and all(o.reasoning_tail for o in observations)
    assert any("Let me verify" in o.reasoning_tail for o in observations)
