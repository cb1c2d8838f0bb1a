"""``--setting``: which rule a replay's top-level numbers describe; recordings from elsewhere."""

import csv
import gzip
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonserve.cli import main
from reasonserve.core import InvalidArgumentError
from reasonserve.recordings import read_jsonl
from reasonserve.replay import cot, probes, sc
from reasonserve.replay.probe_rules import TokenWindowRule
from reasonserve.replay.probe_runs import load_run
from reasonserve.replay.settings import SAMPLE_KEYS, TOKEN_KEYS, parse_setting
from test_calibration_and_replay import _write_probe_run, _write_sc


def test_parse_setting_accepts_names_and_pairs():
    assert parse_setting("dev", TOKEN_KEYS) == "dev"
    assert parse_setting(" calibrated ", SAMPLE_KEYS) == "calibrated"
    assert parse_setting("all", SAMPLE_KEYS) == {}
    assert parse_setting("agree=2432, min=2048", TOKEN_KEYS) == {"agree": 2432, "min": 2048}
    assert parse_setting("agree=2,reward=-1.5,entropy=0.6", SAMPLE_KEYS) == {
        "agree": 2, "reward": -1.5, "entropy": 0.6}  # fmt: skip


@pytest.mark.parametrize(
    "text, match",
    [
        ("agree", "key=value"),
        ("window=3", "key=value"),  # not a token-window key
        ("agree=2,agree=3", "twice"),
        ("agree=2.5", "integer"),
        ("agree=__import__('os')", "integer"),
        ("min=-1", ">= 0"),
        ("agree=1e999", "integer"),
        ("", "key=value"),
        ("agree=1" + ",min=1" * 100, "at most"),
    ],
)
def test_parse_setting_rejects_bad_strings(text, match):
    with pytest.raises(InvalidArgumentError, match=match):
        parse_setting(text, TOKEN_KEYS)


def test_parse_setting_rejects_non_finite_numbers():
    with pytest.raises(InvalidArgumentError, match="finite"):
        parse_setting("reward=nan", SAMPLE_KEYS)
    with pytest.raises(InvalidArgumentError, match="finite"):
        parse_setting("entropy=inf", SAMPLE_KEYS)


def test_rules_validate_their_fields():
    with pytest.raises(InvalidArgumentError):
        TokenWindowRule(0)
    with pytest.raises(InvalidArgumentError):
        TokenWindowRule(64, -1)
    with pytest.raises(InvalidArgumentError, match="agree"):
        TokenWindowRule.from_setting({"min": 10})
    with pytest.raises(InvalidArgumentError):
        sc.SCRule(agree=0)
    with pytest.raises(InvalidArgumentError):
        sc.SCRule(entropy=1.5)
    with pytest.raises(InvalidArgumentError):
        sc.SCRule(reward_gate=float("nan"))


@settings(max_examples=300)
@given(st.integers(1, 10**6), st.integers(0, 10**6))
def test_token_rule_spec_round_trips(tokens, min_tokens):
    rule = TokenWindowRule(tokens, min_tokens)
    assert probes.headline_rule(rule.spec, probes.DEV_SETTING) == rule


@settings(max_examples=300)
@given(
    st.none() | st.integers(1, 50),
    st.none() | st.floats(0, 1),
    st.integers(1, 50),
    st.none() | st.floats(-1e6, 1e6, allow_nan=False),
    st.none() | st.integers(1, 50),
)
def test_sc_rule_spec_round_trips(agree, entropy, min_samples, reward, max_samples):
    rule = sc.SCRule(agree, entropy, min_samples, reward, max_samples)
    assert sc.headline_rule(rule.spec) == rule  # floats exactly: a gate must not move


def _probe_runs(tmp_path):
    for i, name in enumerate(["m1__math500__seed_1", "m2__math500__seed_1", "m1__amc23__seed_2"]):
        _write_probe_run(tmp_path / "probes" / name, seed=i)
    return sorted((tmp_path / "probes").iterdir())


def test_probe_replay_headline_is_the_shipped_setting_unless_asked(tmp_path):
    folders = _probe_runs(tmp_path)
    dev = probes.replay_probes(folders)
    row = next(v for k, v in dev["rules"].items() if k.startswith("probes development setting"))
    assert dev["setting_spec"] == probes.DEV_SETTING.spec
    assert {k: dev[k] for k in row} == row  # top level = the shipped setting, applied unchanged
    assert dev["calibrated"] == dev["rules"]["calibrated, out-of-sample"]
    cal = probes.replay_probes(folders, setting="calibrated")
    assert {k: cal[k] for k in cal["calibrated"]} == cal["calibrated"]
    fixed = probes.replay_probes(folders, setting="agree=128")
    assert fixed["setting"] == "agree 128 tok" and "setting (agree 128 tok), fixed" in fixed["rules"]
    assert fixed["savings"] > dev["savings"]  # synthetic answers settle after at most 8 probes


def test_sc_replay_headline_is_the_shipped_setting_unless_asked(tmp_path):
    path = tmp_path / "s.jsonl"
    _write_sc(path)
    dev = sc.replay_sc(path)
    assert dev["setting"] == "2 agree" and {k: dev[k] for k in dev["calibrated"]} != dev["calibrated"]
    assert {k: dev[k] for k in dev["rules"]["stop when 2 agree"]} == dev["rules"]["stop when 2 agree"]
    cal = sc.replay_sc(path, setting="calibrated")
    assert {k: cal[k] for k in cal["calibrated"]} == cal["calibrated"]
    chosen = sc.replay_sc(path, setting=cal["chosen_spec"])  # the printed choice replays as given
    assert chosen["setting"] == cal["chosen"]


def test_cli_reports_bad_settings_and_recordings_without_a_traceback(tmp_path, capsys):
    _probe_runs(tmp_path)
    assert main(["replay", "probes", "--data", str(tmp_path), "--setting", "agree=x"]) == 2
    assert "agree='x'" in capsys.readouterr().err
    (tmp_path / "probes" / "m1__amc23__seed_2" / "labels.jsonl").write_text('{"dataset": "amc23"}\n')
    assert main(["replay", "probes", "--data", str(tmp_path)]) == 2
    assert "labels.jsonl:1" in capsys.readouterr().err
    out = tmp_path / "r.json"
    cot_text = tmp_path / "t.jsonl"
    cot_text.write_text("\n".join(json.dumps({"full_text": "x " * 300 + "\\boxed{1}", "target": "1",
                                              "final_answer": "1", "problem_id": i}) for i in range(6)))  # fmt: skip
    assert main(["replay", "cot", "--traces", str(cot_text), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["setting_spec"] == cot.DEV_SETTING.spec


def test_read_jsonl_skips_blank_lines_and_names_bad_ones(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"a": 1}\n\n   \n{"a": 2}\n')
    assert list(read_jsonl(path)) == [(1, {"a": 1}), (4, {"a": 2})]
    path.write_text('{"a": 1}\n[1, 2]\n')
    with pytest.raises(InvalidArgumentError, match=r"a\.jsonl:2: expected a JSON object"):
        list(read_jsonl(path))
    path.write_text('{"a": 1}\n{"a": \n')
    with pytest.raises(InvalidArgumentError, match=r"a\.jsonl:2: not valid JSON"):
        list(read_jsonl(path))
    path.write_text("[" * 100_000 + "\n")
    with pytest.raises(InvalidArgumentError, match="not valid JSON"):
        list(read_jsonl(path))
    bad_gz = tmp_path / "b.jsonl.gz"
    bad_gz.write_bytes(b"not gzip at all")
    with pytest.raises(InvalidArgumentError, match="unreadable"):
        list(read_jsonl(bad_gz))
    with pytest.raises(InvalidArgumentError, match="no such file"):
        list(read_jsonl(tmp_path / "missing.jsonl"))


def _one_trajectory_run(folder, positions, label):
    folder.mkdir()
    with gzip.open(folder / "probes.csv.gz", "wt", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["dataset", "problem_id", "rollout_id", "token_position", "probe_answer"])
        w.writerows(["math500", 0, 0, pos, "12"] for pos in positions)
    (folder / "labels.jsonl").write_text("\n" + json.dumps(label) + "\n\n")


def test_load_run_accepts_other_recorders_spellings(tmp_path):
    # No probe_text column, float positions, a numeric final answer, blank lines.
    label = {"problem_id": 0, "rollout_id": 0, "dataset": "math500", "target": 12, "final_answer": 12,
             "tokens_used": 200}  # fmt: skip
    _one_trajectory_run(tmp_path / "run", ["64.0", "128"], label)
    (tr,) = load_run(tmp_path / "run")
    assert tr.positions == (64, 128) and tr.final_correct and tr.finished is None


@pytest.mark.parametrize(
    "positions, label, match",
    [
        (["64"], {"problem_id": 0, "rollout_id": 0, "dataset": "math500", "target": "1"}, "tokens_used"),
        (["64"], {"problem_id": 0, "rollout_id": 0, "dataset": "math500", "target": "1", "tokens_used": -5},
         "tokens_used"),
        (["sixty"], {"problem_id": 0, "rollout_id": 0, "dataset": "math500", "target": "1", "tokens_used": 9},
         "token_position"),
        (["64.5"], {"problem_id": 0, "rollout_id": 0, "dataset": "math500", "target": "1", "tokens_used": 9},
         "token_position"),
    ],
)
def test_load_run_names_malformed_recordings(tmp_path, positions, label, match):
    _one_trajectory_run(tmp_path / "run", positions, label)
    with pytest.raises(InvalidArgumentError, match=match):
        load_run(tmp_path / "run")


def test_load_run_needs_probe_columns(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    with gzip.open(folder / "probes.csv.gz", "wt", newline="") as fh:
        fh.write("dataset,problem_id\nmath500,0\n")
    (folder / "labels.jsonl").write_text("")
    with pytest.raises(InvalidArgumentError, match="rollout_id"):
        load_run(folder)
