"""Hostile probe recordings: every malformed file is a typed error naming the file (and row).

``tests/test_stopping_replay.py`` covers bad token positions, missing label fields,
empty trajectories and the skipped-row counts; here: ``meta.json`` (whose budget the
shipped rule reads), probe rows with the wrong number of fields, a trajectory
labelled twice, labels that are not JSON objects or carry NaN, and unreadable files.
"""

import csv
import gzip
import json

import pytest

from reasonserve.cli import main
from reasonserve.core import InvalidArgumentError
from reasonserve.replay.probe_runs import load_run
from test_calibration_and_replay import _write_probe_run


@pytest.fixture
def run(tmp_path):
    folder = tmp_path / "probes" / "m1__math500__seed_1"
    _write_probe_run(folder, n_problems=6, seed=0)
    return folder


def _append_probe_row(folder, row):
    with gzip.open(folder / "probes.csv.gz", "at", newline="") as fh:
        csv.writer(fh).writerow(row)


def test_meta_budget_and_interval_are_read_and_an_absent_meta_is_not_recorded(run):
    (run / "meta.json").write_text(json.dumps({"budget_tokens": 3072, "probe_interval_tokens": 64}))
    assert {(t.budget, t.interval) for t in load_run(run)} == {(3072, 64)}
    assert {t.observations()[0].budget_tokens for t in load_run(run)} == {3072}
    (run / "meta.json").unlink()
    assert {(t.budget, t.interval) for t in load_run(run)} == {(0, 0)}
    (run / "meta.json").write_text(json.dumps({"budget_tokens": None}))
    assert {t.budget for t in load_run(run)} == {0}


@pytest.mark.parametrize("text", ["{not json", "[3072]", '"3072"', "\ud800".encode("utf-8", "surrogatepass")])
def test_an_unreadable_meta_names_the_file(run, text):
    path = run / "meta.json"
    path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
    with pytest.raises(InvalidArgumentError, match=r"meta\.json: (unreadable|expected a JSON object)"):
        load_run(run)


@pytest.mark.parametrize("value", ["3072", 0, -64, 3072.5, True, "NaN", [3072]])
@pytest.mark.parametrize("key", ["budget_tokens", "probe_interval_tokens"])
def test_a_malformed_budget_or_interval_names_the_file_and_key(run, key, value):
    # json.dumps writes float("nan") as the bare NaN that json.loads accepts
    payload = json.dumps({key: float("nan") if value == "NaN" else value})
    (run / "meta.json").write_text(payload)
    with pytest.raises(InvalidArgumentError, match=rf"meta\.json: {key} must be a whole number >= 1"):
        load_run(run)


@pytest.mark.parametrize("row", [["math500", 0, 0, 64, "1", "", True, "extra"], ["math500", 0, 0, 64, "1"]])
def test_a_probe_row_with_the_wrong_number_of_fields_names_the_row(run, row):
    _append_probe_row(run, row)
    with pytest.raises(InvalidArgumentError, match=r"probes\.csv\.gz:\d+: \d+ fields named, the header has 7"):
        load_run(run)


def test_a_trajectory_labelled_twice_names_the_second_label(run):
    lines = (run / "labels.jsonl").read_text().splitlines()
    (run / "labels.jsonl").write_text("\n".join([*lines, lines[2]]) + "\n")
    with pytest.raises(InvalidArgumentError, match=rf"labels\.jsonl:{len(lines) + 1}: .* is labelled twice"):
        load_run(run)


@pytest.mark.parametrize(
    "line, match",
    [
        ("[1, 2]", r"labels\.jsonl:7: expected a JSON object"),
        ("{bad", r"labels\.jsonl:7: not valid JSON"),
        ('{"dataset": "math500", "problem_id": 9, "rollout_id": 0, "target": "1", "tokens_used": NaN}',
         r"labels\.jsonl:7: tokens_used: expected a whole number"),
    ],
)  # fmt: skip
def test_bad_label_lines_name_the_row(run, line, match):
    with open(run / "labels.jsonl", "a") as fh:
        fh.write(line + "\n")
    with pytest.raises(InvalidArgumentError, match=match):
        load_run(run)


def test_unreadable_probe_files_name_the_file(run):
    (run / "probes.csv.gz").write_bytes(gzip.compress(b"dataset,problem_id\n")[:-6])  # truncated
    with pytest.raises(InvalidArgumentError, match=r"probes\.csv\.gz: (unreadable|probe columns missing)"):
        load_run(run)
    (run / "probes.csv.gz").write_bytes(b"not gzip at all")
    with pytest.raises(InvalidArgumentError, match=r"probes\.csv\.gz: unreadable"):
        load_run(run)
    (run / "probes.csv.gz").write_bytes(gzip.compress(b""))
    with pytest.raises(InvalidArgumentError, match=r"probes\.csv\.gz: probe columns missing"):
        load_run(run)


def test_the_replay_command_reports_a_bad_recording_without_a_traceback(run, capsys):
    (run / "meta.json").write_text(json.dumps({"budget_tokens": -1}))
    code = main(["replay", "probes", "--data", str(run.parents[1]), "--no-stopping"])
    err = capsys.readouterr().err
    assert code != 0 and "meta.json: budget_tokens must be a whole number >= 1" in err and "Traceback" not in err
