"""``reasonserve adapter sglang`` prints flags SGLang's own argument parser accepts, and
the environment its plugin reads."""

import argparse

import pytest

pytest.importorskip("sglang", reason="SGLang is not installed here (make test-adapters builds .venv-sglang)")

from sglang.srt.server_args import ServerArgs

from reasonserve.adapters.cli import engine_command
from reasonserve.adapters.sglang import plugin


@pytest.mark.parametrize("seeded", [False, True])
def test_printed_flags_parse_with_sglangs_parser(seeded):
    cmd = engine_command("sglang", model="some/model", think_end_token_id=7, seeded_sampling=seeded)
    assert cmd.argv[:3] == ("python", "-m", "sglang.launch_server")
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    ns = parser.parse_args(list(cmd.argv[3:]))
    assert ns.model_path == "some/model"
    assert ns.enable_custom_logit_processor is seeded


def test_the_printed_environment_is_what_the_plugin_reads():
    cmd = engine_command("sglang", think_end_token_id=7, demote_threshold_tokens=300)
    assert set(cmd.env) == {plugin.ENV_SETTINGS}
    config = plugin._settings(cmd.env[plugin.ENV_SETTINGS])
    assert (config.think_end_token_ids, config.demote_threshold_tokens) == ((7,), 300)


def test_sglang_takes_no_quantum():
    """The hook orders admission only; a quantum would have no effect, so it is refused."""
    from reasonserve.core.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="vLLM only"):
        engine_command("sglang", think_end_token_id=7, quantum=32)
    with pytest.raises(InvalidArgumentError, match="no effect"):
        plugin._settings('{"think_end_token_id": 7, "quantum": 32}')
