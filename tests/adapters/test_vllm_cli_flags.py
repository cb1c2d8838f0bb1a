"""``reasonserve adapter vllm`` prints flags that vLLM's own argument parser accepts and
that resolve, through ``create_engine_config()``, to the phase-aware scheduler."""

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here (make test-adapters builds .venv-vllm)")

from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.utils.argparse_utils import FlexibleArgumentParser

from reasonserve.adapters.cli import engine_command
from reasonserve.adapters.vllm import PhaseAwareScheduler, PhaseAwareSyncScheduler


@pytest.mark.parametrize(("async_scheduling", "cls"), [(True, PhaseAwareScheduler), (False, PhaseAwareSyncScheduler)])
def test_printed_flags_parse_and_resolve_to_our_scheduler(tiny_model_dir, async_scheduling, cls):
    cmd = engine_command("vllm", model=tiny_model_dir, think_end_token_id=99, quantum=64,
                         async_scheduling=async_scheduling)  # fmt: skip
    assert cmd.argv[:3] == ("vllm", "serve", tiny_model_dir)
    parser = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())
    ns = parser.parse_args(["--model", tiny_model_dir, *cmd.argv[3:], "--skip-tokenizer-init", "--max-model-len", "256"])
    config = AsyncEngineArgs.from_cli_args(ns).create_engine_config()
    assert config.scheduler_config.get_scheduler_cls() is cls
    assert config.scheduler_config.policy == "fcfs"
    assert config.additional_config["reasonserve"] == {"think_end_token_id": 99, "quantum": 64,
                                                       "demote_threshold_tokens": 5000}  # fmt: skip
