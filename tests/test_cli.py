"""The command line: every subcommand runs on tiny inputs; data, output paths, flags, help.

``TESTED`` names, for every command the parser knows, the test that runs it; a new
command without a test fails ``test_every_command_has_a_test_that_runs_it``.
"""

import argparse
import io
import json
import pathlib
import subprocess
import sys

import pytest
import tomllib

import reasonserve
from reasonserve import paths
from reasonserve.cli import _parser, main
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.progress import ProgressBar, track
from test_calibration_and_replay import _write_probe_run, _write_sc
from test_sim import _write_fake_traces

TESTED = {
    "demo": "test_cli::test_engine_demo_proves_deterministic_requests_identical",
    "demo-ops": "test_cli::test_ops_demo_reports_deterministic_runs_identical",
    "check-determinism": "test_cli::test_check_determinism_prints_a_verdict_and_draws_progress_on_a_terminal",
    "replay probes": "test_cli::test_replay_probes_from_any_folder_with_the_data_in_the_environment",
    "replay sc": "test_calibration_and_replay::test_replay_sc_on_synthetic_samples",
    "replay cot": "test_calibration_and_replay::test_cot_text_probing_reads_complete_answers_only",
    "replay prm": "test_calibration_and_replay::test_prm_and_mcts_loaders",
    "replay mcts": "test_calibration_and_replay::test_prm_and_mcts_loaders",
    "calibrate probes": "test_cli::test_calibrate_every_kind_prints_its_choice",
    "calibrate sc": "test_cli::test_calibrate_every_kind_prints_its_choice",
    "calibrate cot": "test_cli::test_calibrate_every_kind_prints_its_choice",
    "calibrate prm": "test_cli::test_calibrate_every_kind_prints_its_choice",
    "calibrate mcts": "test_cli::test_calibrate_every_kind_prints_its_choice",
    "sim": "test_cli::test_sim_runs_from_any_folder_with_the_data_in_the_environment",
    "adapter": "test_adapter_cli::test_vllm_phase_aware_flags_carry_the_validated_settings",
    "serve": "test_serve_supervision::test_sigterm_drains_and_exits_zero_in_bounded_time",
    "gateway": "test_gateway_live::test_the_gateway_command_serves_until_sigterm",
}


def _commands(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every runnable command (``replay probes``, ``sim``, ...) and its parser."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found |= _commands(child, f"{prefix} {name}".strip()) or {f"{prefix} {name}".strip(): child}
    return found


def test_every_command_has_a_test_that_runs_it():
    commands = _commands(_parser())
    assert set(commands) == set(TESTED), "add the new command's test to TESTED"
    for where in set(TESTED.values()):
        module, name = where.split("::")
        assert f"\ndef {name}(" in (pathlib.Path(__file__).parent / f"{module}.py").read_text(), where


def test_every_flag_says_what_it_does():
    silent = [f"reasonserve {command} {'/'.join(action.option_strings) or action.dest}"
              for command, parser in {"": _parser(), **_commands(_parser())}.items()
              for action in parser._actions
              if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))
              and (not action.help or action.help == argparse.SUPPRESS)]  # fmt: skip
    assert silent == []


def test_version_is_the_package_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    project = tomllib.loads((pathlib.Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    assert capsys.readouterr().out.strip() == f"reasonserve {reasonserve.__version__}" == f"reasonserve {project['version']}"


@pytest.mark.slow  # the whole demo: 3 engine runs of 24-33 requests
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
    with pytest.raises(SystemExit):
        main(["demo-ops", "--batches", "0"])
    assert "must be >= 1" in capsys.readouterr().err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_check_determinism_prints_a_verdict_and_draws_progress_on_a_terminal(capsys, monkeypatch):
    monkeypatch.setattr(sys, "stderr", _Terminal())
    assert main(["check-determinism", "--cases", "2"]) == 0
    assert "VERDICT: batch-invariant" in capsys.readouterr().out
    drawn = sys.stderr.getvalue()
    assert "check-determinism [" in drawn and "2/2 cases" in drawn and drawn.endswith("\n")


def test_replay_probes_from_any_folder_with_the_data_in_the_environment(tmp_path, capsys, monkeypatch):
    for i, name in enumerate(["m1__math500__seed_1", "m2__math500__seed_1"]):
        _write_probe_run(tmp_path / "data" / "probes" / name, seed=i)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv(paths.DATA_ENV, str(tmp_path / "data"))
    assert main(["replay", "probes", "--no-stopping", "--json", "r.json"]) == 0
    assert json.loads((elsewhere / "r.json").read_text())["runs"] == ["m1__math500__seed_1", "m2__math500__seed_1"]
    assert capsys.readouterr().err == ""  # no progress bar when stderr is not a terminal
    monkeypatch.setattr(sys, "stderr", _Terminal())
    assert main(["replay", "probes", "--no-stopping"]) == 0
    drawn = sys.stderr.getvalue()
    assert "2/2 runs loaded" in drawn and "folds cross-validated" in drawn


def _calibration_inputs(root: pathlib.Path) -> dict[str, list[str]]:
    for i, name in enumerate(["m1__math500__seed_1", "m2__math500__seed_1"]):
        _write_probe_run(root / "probes" / name, seed=i)
    _write_sc(root / "sc.jsonl")
    words = " ".join(["step"] * 70)
    text = f"<think> {words} so the answer is 7. {words} \\boxed{{8}} {words} </think> \\boxed{{8}}"
    (root / "t.jsonl").write_text("\n".join(json.dumps({"full_text": text, "target": "8", "final_answer": "8",
                                                        "problem_id": i}) for i in range(6)))  # fmt: skip
    rows = [{"answer": str(i), "completions": [f"\\boxed{{{i}}}", f"\\boxed{{{i + 1}}}"],
             "scores": [[0.9, 0.8], [0.5, 0.2]]} for i in range(6)]  # fmt: skip
    (root / "b.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    sheets = root / "rstar" / "answer_sheets"
    sheets.mkdir(parents=True)
    for q in range(5):
        (sheets / f"Question {q:04d} - Answer.json").write_text(json.dumps({"gold_answer": "B"}))
        rollouts = [{"rollout_id": 0, "trace": {"0": {"direct_answer": "{'text': 'The answer is B.', 'value': 0.5}"}}}]
        (sheets / f"Question {q:04d} - Rollout Solutions.json").write_text(json.dumps(rollouts))
    return {"probes": ["--data", str(root)], "sc": ["--samples", str(root / "sc.jsonl")],
            "cot": ["--traces", str(root / "t.jsonl")], "prm": ["--beams", str(root / "b.jsonl")],
            "mcts": ["--run", str(root / "rstar")]}  # fmt: skip


def test_calibrate_every_kind_prints_its_choice(tmp_path, capsys):
    """``calibrate probes`` crashed ('Namespace' object has no attribute 'stopping')."""
    for kind, flags in _calibration_inputs(tmp_path).items():
        out = tmp_path / f"{kind}.json"
        assert main(["calibrate", kind, *flags, "--json", str(out)]) == 0, capsys.readouterr().err
        text = capsys.readouterr().out
        report = json.loads(out.read_text())
        assert f"calibrate {kind}: " in text and f"--setting {report['chosen_spec']}" in text
        assert report["chosen_per_fold"] and str(report["chosen_per_fold"]) in text
        assert "stopping" not in report  # calibration leaves out the early-exit section


def test_sim_runs_from_any_folder_with_the_data_in_the_environment(tmp_path, monkeypatch, capsys):
    _write_fake_traces(tmp_path / "data")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv(paths.DATA_ENV, str(tmp_path / "data"))
    argv = ["sim", "--requests", "5", "--instances", "1", "--model", "qwen2.5-7b", "--out", "s.json"]
    assert main(argv) == 0
    assert json.loads((elsewhere / "s.json").read_text())["num_requests"] == 5


def test_the_data_root_is_the_flag_then_the_environment_then_the_checkout(tmp_path, monkeypatch):
    flag, env = tmp_path / "flag", tmp_path / "env"
    flag.mkdir()
    env.mkdir()
    assert paths.data_root(str(flag), {paths.DATA_ENV: str(env)}) == flag
    assert paths.data_root(None, {paths.DATA_ENV: str(env)}) == env
    assert paths.data_root(None, {}) == paths.checkout_data()
    with pytest.raises(InvalidArgumentError, match=r"--data .*missing: no such folder"):
        paths.data_root(str(tmp_path / "missing"), {})
    with pytest.raises(InvalidArgumentError, match=r"\$REASONSERVE_DATA .*: no such folder"):
        paths.data_root(None, {paths.DATA_ENV: str(tmp_path / "missing")})
    monkeypatch.setattr(paths, "checkout_data", lambda: tmp_path / "no-checkout")
    with pytest.raises(InvalidArgumentError) as err:
        paths.data_root(None, {})
    assert all(word in str(err.value) for word in ("--data", paths.DATA_ENV, str(tmp_path / "no-checkout")))


def test_no_data_anywhere_is_one_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(paths, "checkout_data", lambda: tmp_path / "no-checkout")
    monkeypatch.delenv(paths.DATA_ENV, raising=False)
    for argv in (["sim", "--requests", "3"], ["replay", "probes"], ["calibrate", "sc"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "no recorded data found" in err and paths.DATA_ENV in err and "--data" in err


@pytest.mark.parametrize("flag", ["--out", "--png"])
def test_output_paths_are_checked_before_the_work_starts(tmp_path, monkeypatch, capsys, flag):
    import reasonserve.sim.cli as sim_cli

    ran = []
    monkeypatch.setattr(sim_cli, "run_sim", lambda *a: ran.append(a) or 0)
    _write_fake_traces(tmp_path)
    assert main(["sim", "--data", str(tmp_path), flag, str(tmp_path / "missing" / "x")]) == 2
    err = capsys.readouterr().err
    assert f"{flag} {tmp_path / 'missing' / 'x'}: folder" in err and "does not exist" in err
    assert main(["sim", "--data", str(tmp_path), flag, str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    assert ran == []


def test_replay_and_demo_outputs_are_checked_first(tmp_path, capsys):
    missing = str(tmp_path / "missing" / "r.json")
    for argv in (["demo", "--json", missing], ["demo-ops", "--json", missing],
                 ["replay", "sc", "--samples", str(tmp_path / "none.jsonl"), "--json", missing],
                 ["calibrate", "sc", "--samples", str(tmp_path / "none.jsonl"), "--json", missing]):  # fmt: skip
        assert main(argv) == 2
        assert f"--json {missing}: folder" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "says"), [
    (["serve", "--model", "m", "--router", "pow2"], "--router chooses among Ray Serve replicas"),
    (["replay", "probes", "--run", "a", "--runs", "b*"], "--runs (a glob) would be ignored"),
    (["replay", "sc", "--samples", "f.jsonl", "--data", "d"], "--data is not read when --samples"),
    (["calibrate", "probes", "--run", "a", "--data", "d"], "--data is not read when --run"),
    (["calibrate", "mcts", "--run", "a", "--data", "d"], "--data is not read when --run"),
])  # fmt: skip
def test_flags_that_would_do_nothing_are_refused(argv, says, capsys):
    assert main(argv) == 2
    assert says in capsys.readouterr().err


def test_flags_of_another_kind_are_unknown(capsys):
    """calibrate takes each kind's own flags: ``--interval`` belongs to cot only."""
    with pytest.raises(SystemExit):
        main(["calibrate", "probes", "--interval", "32"])
    assert "unrecognized arguments: --interval" in capsys.readouterr().err


def test_progress_bar_draws_only_on_a_terminal_and_only_changes():
    quiet = io.StringIO()
    with ProgressBar("x", stream=quiet) as bar:
        bar(1, 2)
    assert quiet.getvalue() == ""
    term = _Terminal()
    with ProgressBar("load", unit="runs", stream=term) as bar:
        for done in (0, 1, 1, 1, 2):
            bar(done, 2)
    lines = term.getvalue().split("\r")[1:]
    assert len(lines) == 3 and lines[-1].startswith("load [" + "#" * ProgressBar.WIDTH + "] 2/2 runs")
    assert term.getvalue().endswith("\n")


def test_module_entry_point_runs():
    proc = subprocess.run([sys.executable, "-m", "reasonserve", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "demo" in proc.stdout and "REASONSERVE_DATA" in proc.stdout


def test_track_counts_every_item_through():
    term = _Terminal()
    assert list(track(["a", "b", "c"], "bench", stream=term)) == ["a", "b", "c"]
    assert "bench [" + "#" * ProgressBar.WIDTH + "] 3/3" in term.getvalue()
