"""``reasonserve adapter vllm|sglang`` (no engine needed: it only prints)."""

import io
import json
import shlex

import pytest

from reasonserve.adapters.cli import engine_command
from reasonserve.cli import main
from reasonserve.core.errors import InvalidArgumentError


def _json(capsys, *argv):
    assert main(["adapter", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_vllm_phase_aware_flags_carry_the_validated_settings(capsys):
    got = _json(capsys, "vllm", "--model", "m", "--think-end-token-id", "151668", "--quantum", "64")
    argv = got["argv"]
    assert argv[:3] == ["vllm", "serve", "m"]
    assert argv[argv.index("--scheduler-cls") + 1] == "reasonserve.adapters.vllm.scheduler.PhaseAwareScheduler"
    assert argv[argv.index("--scheduling-policy") + 1] == "fcfs"
    settings = json.loads(argv[argv.index("--additional-config") + 1])
    assert settings == {"reasonserve": {"think_end_token_id": 151668, "quantum": 64, "demote_threshold_tokens": 5000}}
    assert got["env"] == {}


def test_vllm_without_a_think_token_adds_no_scheduler(capsys):
    got = _json(capsys, "vllm")
    assert "--scheduler-cls" not in got["argv"]
    assert any("phase-aware scheduling: off" in n for n in got["notes"])


def test_vllm_sync_variant(capsys):
    argv = _json(capsys, "vllm", "--think-end-token-id", "5", "--no-async-scheduling")["argv"]
    assert "reasonserve.adapters.vllm.scheduler.PhaseAwareSyncScheduler" in argv
    assert "--no-async-scheduling" in argv


def test_sglang_custom_processors_only_when_asked_and_with_the_security_note(capsys):
    plain = _json(capsys, "sglang", "--think-end-token-id", "7")
    assert "--enable-custom-logit-processor" not in plain["argv"]
    assert json.loads(plain["env"]["REASONSERVE_SGLANG_PHASE_AWARE"])["think_end_token_id"] == 7
    seeded = _json(capsys, "sglang", "--seeded-sampling")
    assert "--enable-custom-logit-processor" in seeded["argv"]
    assert any(n.startswith("SECURITY") for n in seeded["notes"])
    assert seeded["env"] == {}


def test_the_printed_shell_line_splits_back_into_env_and_argv():
    cmd = engine_command("sglang", model="a model/with space", think_end_token_id=3, seeded_sampling=True)
    words = shlex.split(cmd.shell().replace("\\\n", " "))
    env = [f"{k}={v}" for k, v in cmd.env.items()]
    assert words == env + list(cmd.argv)


def test_text_output_names_the_install_state_and_ends_with_the_command():
    out = io.StringIO()
    from types import SimpleNamespace

    from reasonserve.adapters.cli import run_adapter

    args = SimpleNamespace(engine="vllm", model="m", think_end_token_id=None, quantum=500,
                           demote_threshold_tokens=5000, no_async_scheduling=False, seeded_sampling=False,
                           json=False)  # fmt: skip
    assert run_adapter(args, out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("# vllm")
    assert lines[-1] == "vllm serve m"


@pytest.mark.parametrize("bad", [["--think-end-token-id", "-1"], ["--think-end-token-id", "3", "--quantum", "0"]])
def test_bad_settings_exit_2_with_a_message(capsys, bad):
    assert main(["adapter", "vllm", *bad]) == 2
    assert "reasonserve adapter: error:" in capsys.readouterr().err


def test_unknown_engine_is_a_typed_error():
    with pytest.raises(InvalidArgumentError, match="engine"):
        engine_command("tgi")
