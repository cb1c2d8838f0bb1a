"""A tokenizer whose vocabulary has no ``</think>`` token (issue 30): its BPE merges write
the tag as three tokens, ``</`` ``think`` ``>``. The served model writes
``REASONING``, those three tokens, ``ANSWER`` (the chain checkpoint of ``_gateway.py``).
Reasoning, content, ``reasoning_tokens`` and the thinking budget must come out as with a
one-token tag, streamed and not."""

from __future__ import annotations

import json

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")
pytest.importorskip("transformers", reason="the chain checkpoint is written with transformers")

from _gateway import ANSWER, REASONING, SPLIT_THINK_END, token_id, write_chain_checkpoint  # noqa: E402
from _live_server import TIMEOUT_S, live_server  # noqa: E402
from reasonserve.engine import Engine, EngineConfig  # noqa: E402
from reasonserve.serve import launch  # noqa: E402
from reasonserve.serve.config import ServeConfig  # noqa: E402

CHAT = [{"role": "user", "content": "What is 6 x 7?"}]
TAG_TOKENS = len(SPLIT_THINK_END)
ANSWER_TOKENS = len(ANSWER) + 1  # one token per character, then <eos>


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_chain_checkpoint(tmp_path_factory.mktemp("split"), split_think_end=True)


@pytest.fixture(scope="module")
def live(folder):
    tok = launch.load_serving_tokenizer(folder)
    eot = launch.end_of_thinking_config(None, "deepseek_r1", tok)  # as `reasonserve serve` resolves it
    assert eot == {"end_of_thinking_token_ids": tuple(token_id(t, True) for t in SPLIT_THINK_END)}
    config = EngineConfig(block_size=16, num_blocks=256, eos_token_id=token_id("<eos>", True), **eot)
    engine = Engine.from_pretrained(folder, config, tokenizer=tok)
    with live_server(engine, ServeConfig(model_name="split", reasoning_parser="deepseek_r1")) as server:
        yield server


def chat(live, **body) -> dict:
    r = httpx.post(live.url + "/v1/chat/completions", json={"messages": CHAT, "max_tokens": 60, **body},
                   timeout=TIMEOUT_S)  # fmt: skip
    assert r.status_code == 200, r.text
    return r.json()


def streamed(live, **body) -> tuple[str, str, dict]:
    """(reasoning, content, usage) of a streamed chat."""
    body = {
        "messages": CHAT,
        "max_tokens": 60,
        "stream": True,
        "stream_options": {"include_usage": True},
        **body,
    }
    with httpx.stream("POST", live.url + "/v1/chat/completions", json=body, timeout=TIMEOUT_S) as r:
        assert r.status_code == 200, r.read()
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
    reasoning = "".join(d.get("reasoning") or "" for d in deltas)
    return reasoning, "".join(d.get("content") or "" for d in deltas), events[-1]["usage"]


@pytest.mark.parametrize(("budget", "thought"), [(None, REASONING), (10, REASONING[:10]), (0, "")])
def test_reasoning_tokens_and_the_budget_with_a_three_token_end_tag(live, budget, thought):
    extra = {} if budget is None else {"thinking_token_budget": budget}
    out = chat(live, **extra)
    msg, usage = out["choices"][0]["message"], out["usage"]
    assert (msg["reasoning"], msg["content"]) == (thought or None, ANSWER)
    assert usage["completion_tokens_details"]["reasoning_tokens"] == len(thought)
    assert usage["completion_tokens"] == len(thought) + TAG_TOKENS + ANSWER_TOKENS
    reasoning, content, stream_usage = streamed(live, **extra)
    assert (reasoning, content) == (thought, ANSWER)
    cached = "prompt_tokens_details"  # the second request's prompt is in the prefix cache
    assert {k: v for k, v in stream_usage.items() if k != cached} == {
        k: v for k, v in usage.items() if k != cached
    }


def test_a_budget_larger_than_the_reasoning_changes_nothing(live):
    assert chat(live, thinking_token_budget=26)["choices"][0]["message"]["reasoning"] == REASONING
    out = chat(live, thinking_token_budget=25)
    assert out["choices"][0]["message"]["reasoning"] == REASONING[:25]
    assert out["usage"]["completion_tokens_details"]["reasoning_tokens"] == 25
