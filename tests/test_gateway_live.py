"""The gateway in front of a live ``reasonserve serve``, real HTTP on both sides.

The upstream serves the chain checkpoint of ``_gateway.py`` (written with transformers'
classes), whose outputs are known exactly: ``REASONING``, the fixed end-of-thinking token,
``ANSWER``; endless reasoning after ``~``; ``42`` from every probe. So the tests can say
exactly what the gateway must return, and check on the upstream (its own metrics and
request table) what the gateway asked of it.
"""

from __future__ import annotations

import json
import re
import socket

import pytest

openai = pytest.importorskip("openai", reason="gateway tests need the openai client (dev extra)")
httpx = pytest.importorskip("httpx", reason="gateway tests need httpx (client extra)")
pytest.importorskip("transformers", reason="the chain checkpoint is written with transformers")

from _gateway import ANSWER, REASONING, chain_upstream, live_gateway  # noqa: E402
from _live_server import TIMEOUT_S, wait_until  # noqa: E402
from reasonserve.gateway import GatewayConfig  # noqa: E402
from reasonserve.serve.config import ServeConfig  # noqa: E402

CHAT = [{"role": "user", "content": "What is 6 x 7?"}]
ENDLESS = "Think forever ~"  # ends in "~": the model then reasons without end
QUICK_EXIT = {"probe_interval_tokens": 4, "agreement": 2}


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    with chain_upstream(tmp_path_factory.mktemp("chain")) as live:
        yield live


def gateway_config(upstream, **kwargs) -> GatewayConfig:
    kwargs.setdefault("served_model_name", "gw")
    kwargs.setdefault("limits", ServeConfig(max_tokens_limit=4000))
    kwargs.setdefault("tokenizer", str(upstream.folder))
    return GatewayConfig(upstream.url, upstream_kind="reasonserve", **kwargs)


@pytest.fixture(scope="module")
def gateway(upstream):
    with live_gateway(gateway_config(upstream)) as (url, gw):
        yield url, gw


def post(url: str, path: str, body: dict) -> dict:
    r = httpx.post(url + path, json=body, timeout=TIMEOUT_S)
    assert r.status_code == 200, r.text
    return r.json()


def metric(url: str, name: str) -> float:
    """A sample's value on ``url``'s /metrics (0 when absent)."""
    text = httpx.get(url + "/metrics", timeout=TIMEOUT_S).text
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def stream_events(url: str, path: str, body: dict) -> list[dict]:
    events = []
    with httpx.stream("POST", url + path, json={**body, "stream": True}, timeout=TIMEOUT_S) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[6:]))
    return events


def test_a_plain_openai_client_gets_reasoning_and_answer_apart(gateway):
    url, _ = gateway
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT_S)
    out = client.chat.completions.create(model="gw", messages=CHAT, max_tokens=200)
    msg = out.choices[0].message
    assert msg.model_extra["reasoning"] == REASONING and msg.content == ANSWER
    assert out.choices[0].finish_reason == "stop"
    info = out.model_extra["reasonserve"]
    # the default (certified) program ran; the reasoning ended inside its first chunk: no probe
    assert (info["program"], info["early_exit"], info["exit"], info["answer"]) == (
        "cot",
        "certified",
        "finished",
        "42",
    )
    usage = out.usage
    assert usage.completion_tokens_details.reasoning_tokens == len(REASONING)
    assert usage.completion_tokens == len(REASONING) + 1 + len(ANSWER) + 1  # + the tag, + eos
    assert usage.prompt_tokens == len("<|user|>What is 6 x 7?\n<|assistant|>") + 1


def test_early_exit_stops_the_reasoning_and_answers_the_agreed_answer(gateway):
    url, _ = gateway
    out = post(url, "/v1/chat/completions", {"messages": CHAT, "early_exit": QUICK_EXIT, "max_tokens": 300})
    msg, info, usage = out["choices"][0]["message"], out["reasonserve"], out["usage"]
    assert msg["reasoning"] == REASONING[:8] + "\n"  # two 4-token chunks, both probes said 42
    assert msg["content"].endswith("**Final Answer**\n\\boxed{42}")
    assert (info["exit"], info["answer"], info["num_probes"], info["certainty"]) == ("early", "42", 2, 1.0)
    assert usage["completion_tokens_details"]["reasoning_tokens"] == 8
    assert usage["probe_tokens"] > 0 and usage["program_tokens"] == 8 + usage["probe_tokens"]
    assert usage["tokens_saved"] == 300 - 8


def test_thinking_budget_closes_the_thinking_and_the_model_answers(gateway):
    url, _ = gateway
    body = {"messages": CHAT, "early_exit": "off", "thinking_token_budget": 10, "max_tokens": 300}
    out = post(url, "/v1/chat/completions", body)
    msg = out["choices"][0]["message"]
    assert (msg["reasoning"], msg["content"]) == (REASONING[:10], ANSWER)
    assert (
        out["reasonserve"]["exit"] == "budget"
        and out["usage"]["completion_tokens_details"]["reasoning_tokens"] == 10
    )


def test_max_tokens_caps_reasoning_and_answer_together(gateway):
    url, _ = gateway
    out = post(url, "/v1/completions", {"prompt": "Q:", "early_exit": "off", "max_tokens": 30})
    choice = out["choices"][0]
    # 27 thinking tokens (the tag included), 3 left for the answer
    assert (
        choice["reasoning"] == REASONING
        and choice["text"] == ANSWER[:3]
        and choice["finish_reason"] == "length"
    )


def test_self_consistency_reports_every_sample_and_stops_on_agreement(gateway):
    url, _ = gateway
    sc = {"n": 6, "stop": "agreement", "min_samples": 2, "samples_per_step": 2}
    out = post(url, "/v1/chat/completions", {"messages": CHAT, "self_consistency": sc, "max_tokens": 200})
    info = out["reasonserve"]
    assert info["program"] == "sc" and info["exit"] == "early" and info["answer"] == "42"
    assert [s["answer"] for s in info["samples"]] == ["42", "42"] and info["certainty"] == 1.0
    sample_tokens = len(REASONING) + 1 + len(ANSWER) + 1
    assert (
        out["usage"]["program_tokens"] == 2 * sample_tokens
        and out["usage"]["tokens_saved"] == 4 * sample_tokens
    )
    assert out["choices"][0]["message"]["content"] == ANSWER
    every = post(
        url, "/v1/chat/completions", {"messages": CHAT, "self_consistency": {"n": 3, "stop": "none"}}
    )
    assert len(every["reasonserve"]["samples"]) == 3 and every["reasonserve"]["exit"] == "budget"


@pytest.mark.parametrize("early_exit", ["off", QUICK_EXIT])
def test_streams_reasoning_first_then_the_answer_as_the_unstreamed_reply(gateway, early_exit):
    url, _ = gateway
    body = {"messages": CHAT, "early_exit": early_exit, "max_tokens": 200}
    events = stream_events(url, "/v1/chat/completions", {**body, "stream_options": {"include_usage": True}})
    deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    kinds = [k for d in deltas[1:] for k in ("reasoning", "content") if d.get(k)]
    assert (
        kinds == sorted(kinds, key=lambda k: k == "content") and "reasoning" in kinds and "content" in kinds
    )
    full = post(url, "/v1/chat/completions", body)
    msg = full["choices"][0]["message"]
    assert "".join(d.get("reasoning", "") for d in deltas) == msg["reasoning"]
    assert "".join(d.get("content", "") for d in deltas) == msg["content"]
    closing = [e for e in events if e["choices"] and e["choices"][0]["finish_reason"]]
    assert len(closing) == 1 and closing[0]["reasonserve"] == full["reasonserve"]
    assert events[-1]["choices"] == [] and events[-1]["usage"] == full["usage"]


def test_probes_ride_the_upstream_prefix_cache(gateway):
    url, _ = gateway
    prompt = "Consider this long problem statement. " * 8  # ends in a space: the model reasons
    body = {"prompt": prompt, "early_exit": {"probe_interval_tokens": 4, "agreement": 3}, "max_tokens": 100}
    out = post(url, "/v1/completions", body)
    probes, computed = out["reasonserve"]["num_probes"], out["usage"]["probe_prompt_tokens_computed"]
    probe_prompt = (
        len(prompt)
        + 8
        + len("... Oh, I suddenly got the answer to the whole problem, **Final Answer**\n\n\\[ \\boxed{")
    )
    assert probes == 3 and computed is not None
    # the prompt's cached blocks serve each probe: far less than its whole prompt is computed
    assert computed < probes * probe_prompt / 2


def metric_sum(url: str, pattern: str) -> float:
    text = httpx.get(url + "/metrics", timeout=TIMEOUT_S).text
    return sum(float(v) for v in re.findall(rf"^{pattern} (\S+)$", text, re.MULTILINE))


@pytest.mark.parametrize(
    "body",
    [
        {"prompt": ENDLESS, "early_exit": "off", "max_tokens": 3000},
        # 512-token chunks: after the first has streamed, the second runs upstream for seconds
        {
            "prompt": ENDLESS,
            "early_exit": {"probe_interval_tokens": 512, "agreement": 1000},
            "max_tokens": 3000,
        },
    ],
    ids=["think", "cot"],
)
def test_a_client_leaving_a_stream_aborts_its_upstream_requests(upstream, gateway, body):
    url, _ = gateway
    program = "think" if body["early_exit"] == "off" else "cot"
    aborted, capped = (
        f'reasonserve:request_success_total{{finished_reason="{r}"}}' for r in ("abort", "length")
    )
    cancelled = f'reasonserve:gateway_exits_total{{program="{program}",reason="cancelled"}}'
    before = (metric(upstream.url, aborted), metric(url, cancelled))
    with httpx.stream("POST", url + "/v1/completions", json={**body, "stream": True}, timeout=TIMEOUT_S) as r:
        lines = r.iter_lines()
        next(line for line in lines if '"reasoning"' in line)
        assert wait_until(lambda: upstream.runner.num_live >= 1)  # a long request is running upstream
        finished = metric(upstream.url, capped)
    # the client has left: the program ends and its upstream requests are aborted, not run to their cap
    assert wait_until(lambda: metric(url, "reasonserve:gateway_programs_running") == 0)
    assert metric(url, cancelled) == before[1] + 1
    assert wait_until(lambda: upstream.runner.num_live == 0)
    assert metric(upstream.url, aborted) >= before[0] + 1 and metric(upstream.url, capped) == finished


def test_a_client_leaving_a_self_consistency_request_aborts_every_sample(upstream, gateway):
    url, _ = gateway
    aborted = 'reasonserve:request_success_total{finished_reason="abort"}'
    before = metric(upstream.url, aborted)
    body = json.dumps({"prompt": ENDLESS, "max_tokens": 3000,
                       "self_consistency": {"n": 3, "samples_per_step": 3, "stop": "none"}}).encode()  # fmt: skip
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as sock:
        head = f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        sock.sendall(head.encode() + body)
        assert wait_until(lambda: upstream.runner.num_live == 3)  # every sample runs upstream
    assert wait_until(lambda: upstream.runner.num_live == 0)  # the client left: all three aborted
    assert metric(upstream.url, aborted) == before + 3


def test_admission_limit_gives_429_while_a_program_runs(upstream):
    with live_gateway(gateway_config(upstream, max_programs=1)) as (url, _):
        with httpx.stream("POST", url + "/v1/completions", timeout=TIMEOUT_S,
                          json={"prompt": ENDLESS, "early_exit": "off", "max_tokens": 3000, "stream": True}) as r:  # fmt: skip
            lines = r.iter_lines()  # held: dropping it would close the stream
            next(line for line in lines if '"reasoning"' in line)
            second = httpx.post(
                url + "/v1/completions", json={"prompt": "Q:", "max_tokens": 50}, timeout=TIMEOUT_S
            )
            assert second.status_code == 429 and second.headers["retry-after"] == "1"
            assert second.json()["error"]["type"] == "RateLimitError"
            health = httpx.get(url + "/health", timeout=TIMEOUT_S).json()
            assert health == {"status": "ok", "programs_running": 1}
        assert wait_until(lambda: metric(url, "reasonserve:gateway_programs_running") == 0)
        assert (
            httpx.post(
                url + "/v1/completions", json={"prompt": "Q:", "max_tokens": 50}, timeout=TIMEOUT_S
            ).status_code
            == 200
        )


def test_metrics_count_exits_probes_and_savings(gateway):
    url, _ = gateway
    names = ['reasonserve:gateway_exits_total{program="cot",reason="early"}', "reasonserve:gateway_probes_total",
             "reasonserve:gateway_tokens_saved_total", "reasonserve:gateway_upstream_request_seconds_count",
             'reasonserve:gateway_requests_total{endpoint="chat",status="2xx"}']  # fmt: skip
    before = {n: metric(url, n) for n in names}
    out = post(url, "/v1/chat/completions", {"messages": CHAT, "early_exit": QUICK_EXIT, "max_tokens": 300})
    after = {n: metric(url, n) for n in names}
    assert after[names[0]] == before[names[0]] + 1
    assert after[names[1]] == before[names[1]] + out["reasonserve"]["num_probes"]
    assert after[names[2]] == before[names[2]] + out["usage"]["tokens_saved"]
    assert after[names[3]] >= before[names[3]] + 2 + 2  # two chunks and two probes at least
    assert after[names[4]] == before[names[4]] + 1


def test_models_and_bad_requests(gateway):
    url, _ = gateway
    assert httpx.get(url + "/v1/models", timeout=TIMEOUT_S).json()["data"][0]["id"] == "gw"
    r = httpx.post(
        url + "/v1/chat/completions", json={"messages": CHAT, "early_exit": "maybe"}, timeout=TIMEOUT_S
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "early_exit"
    r = httpx.post(url + "/v1/completions", json={"prompt": ["a", "b"]}, timeout=TIMEOUT_S)
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"


def test_a_prompt_that_closes_the_thinking_is_all_answer(upstream):
    # Qwen3's switch: enable_thinking false starts the output in the answer: no thinking phase
    with live_gateway(gateway_config(upstream, reasoning_parser="qwen3")) as (url, _):
        body = {"messages": CHAT, "max_tokens": 200, "chat_template_kwargs": {"enable_thinking": False}}
        out = post(url, "/v1/chat/completions", body)
    msg, usage = out["choices"][0]["message"], out["usage"]
    assert msg["reasoning"] is None and msg["content"] == REASONING + "</think>" + ANSWER
    assert (
        usage["completion_tokens_details"]["reasoning_tokens"] == 0 and out["reasonserve"]["num_probes"] == 0
    )


def test_self_consistency_streams_the_chosen_sample_and_its_samples(gateway):
    url, _ = gateway
    body = {"messages": CHAT, "self_consistency": {"n": 2, "stop": "none"}, "max_tokens": 200}
    events = stream_events(url, "/v1/chat/completions", body)
    deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
    assert "".join(d.get("reasoning", "") for d in deltas) == REASONING
    assert "".join(d.get("content", "") for d in deltas) == ANSWER
    assert [s["answer"] for s in events[-1]["reasonserve"]["samples"]] == ["42", "42"]


def test_a_text_prompt_that_closed_its_thinking_is_answered_directly(gateway):
    url, _ = gateway
    out = post(url, "/v1/completions", {"prompt": "Q?<think>short</think>", "max_tokens": 50})
    choice, info = out["choices"][0], out["reasonserve"]
    assert choice["reasoning"] is None and choice["text"] == ANSWER and info["num_probes"] == 0


def test_the_gateway_command_serves_until_sigterm(upstream):
    import signal
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, "-m", "reasonserve", "gateway", "--upstream", upstream.url, "--upstream-kind",
            "reasonserve", "--tokenizer", str(upstream.folder), "--port", str(port), "--early-exit", "off",
            "--max-tokens-limit", "4000"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_until(lambda: _healthy(url), timeout_s=60), proc.stderr
        out = post(url, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 100})
        assert out["choices"][0]["message"]["content"] == ANSWER and out["reasonserve"]["program"] == "think"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=TIMEOUT_S) == 0
    finally:
        proc.kill()


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_zero_thinking_budget_answers_at_once_and_reasoning_can_be_left_out(gateway):
    url, _ = gateway
    out = post(url, "/v1/chat/completions", {"messages": CHAT, "thinking_token_budget": 0, "max_tokens": 50})
    msg = out["choices"][0]["message"]
    assert (msg["reasoning"], msg["content"], out["reasonserve"]["num_probes"]) == (None, ANSWER, 0)
    body = {"messages": CHAT, "early_exit": "off", "max_tokens": 100, "include_reasoning": False}
    assert post(url, "/v1/chat/completions", body)["choices"][0]["message"]["reasoning"] is None
    deltas = [
        e["choices"][0]["delta"] for e in stream_events(url, "/v1/chat/completions", body) if e["choices"]
    ]
    assert (
        not any("reasoning" in d for d in deltas) and "".join(d.get("content", "") for d in deltas) == ANSWER
    )


def test_without_a_tokenizer_the_upstream_renders_the_chat(upstream):
    with live_gateway(gateway_config(upstream, tokenizer=None)) as (url, _):
        out = post(url, "/v1/chat/completions", {"messages": CHAT, "early_exit": "off", "max_tokens": 100})
    msg = out["choices"][0]["message"]
    assert (msg["reasoning"], msg["content"]) == (REASONING, ANSWER)
    assert out["usage"]["prompt_tokens"] == len("<|user|>What is 6 x 7?\n<|assistant|>") + 1
