"""The reasoning API as vLLM has it, read by the openai client from a live server.

A tiny Qwen3 checkpoint with a real HF tokenizer (``</think>`` is one token) served with
``--reasoning-parser qwen3``. Random weights never end thinking by themselves, so the
requests set ``thinking_token_budget``: the engine then writes ``</think>`` after N
tokens, which gives every response both a reasoning and a content part.
"""

from __future__ import annotations

import pytest
import torch

openai = pytest.importorskip("openai", reason="server tests need the openai client (dev extra)")
httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")
transformers = pytest.importorskip("transformers", reason="HF tokenizers need transformers (dev extra)")

from _hf_tokenizer import ADDED, tiny_hf_checkpoint  # noqa: E402
from _live_server import TIMEOUT_S, live_server  # noqa: E402
from reasonserve.engine import DecoderModel, Engine, EngineConfig, SequenceBatch  # noqa: E402
from reasonserve.serve import launch  # noqa: E402
from reasonserve.serve.config import ServeConfig  # noqa: E402
from reasonserve.serve.reasoning_parser import get_reasoning_parser  # noqa: E402

END = ADDED["</think>"]
USER = [{"role": "user", "content": "Is 91 prime?"}]
PARSER = get_reasoning_parser("qwen3")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tiny_hf_checkpoint(tmp_path_factory.mktemp("r1"))


def _engine(folder, **overrides) -> Engine:
    tok = launch.load_serving_tokenizer(folder)
    cfg = dict(block_size=4, num_blocks=512, eos_token_ids=launch.serving_eos_ids(folder, tok),
               end_of_thinking_token_id=launch.end_of_thinking_id("qwen3", tok)) | overrides  # fmt: skip
    return Engine.from_pretrained(folder, EngineConfig(**cfg), tokenizer=tok)


@pytest.fixture(scope="module")
def live(folder):
    cfg = ServeConfig(model_name="r1", max_tokens_limit=512, reasoning_parser="qwen3")
    with live_server(_engine(folder), cfg) as server:
        yield server


@pytest.fixture(scope="module")
def client(live):
    return openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT_S)


def _create(client, budget=6, **kwargs):
    extra = {"thinking_token_budget": budget, "return_token_ids": True, "ignore_eos": True}
    extra |= kwargs.pop("extra_body", {})
    return client.chat.completions.create(model="r1", messages=USER, max_tokens=20, seed=7, extra_body=extra,
                                          **kwargs)  # fmt: skip


def test_reasoning_content_usage_and_logprobs_non_streamed(client, folder):
    out = _create(client, logprobs=True, top_logprobs=2)
    choice = out.choices[0]
    ids = choice.model_extra["token_ids"]
    assert ids[6] == END and END not in ids[:6]  # forced after 6 reasoning tokens
    msg = choice.message.model_extra
    hf = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    expected = PARSER.split(hf.decode(ids, skip_special_tokens=True))
    assert (msg["reasoning"], choice.message.content) == expected
    assert msg["reasoning_content"] == msg["reasoning"] and expected[0] and expected[1]
    assert out.usage.completion_tokens_details.reasoning_tokens == 6
    assert out.usage.completion_tokens == len(ids) == 20
    content = choice.logprobs.content
    assert len(content) == len(ids) and all(len(e.top_logprobs) == 2 for e in content)
    assert all(e.logprob <= 0 and e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob for e in content)
    assert content[6].token == "</think>"


def test_streamed_reasoning_equals_the_non_streamed(client):
    whole = _create(client, logprobs=True)
    reasoning, content, logprobs, usage = "", "", [], None
    stream = _create(client, stream=True, logprobs=True, stream_options={"include_usage": True})
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            reasoning += (c.delta.model_extra or {}).get("reasoning") or ""
            content += c.delta.content or ""
            logprobs += c.logprobs.content if c.logprobs is not None else []
    assert reasoning == whole.choices[0].message.model_extra["reasoning"]
    assert content == whole.choices[0].message.content
    assert [e.logprob for e in logprobs] == [e.logprob for e in whole.choices[0].logprobs.content]
    assert usage.completion_tokens_details.reasoning_tokens == 6


def test_thinking_disabled_is_all_content(client):
    out = _create(client, budget=None, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    msg = out.choices[0]
    assert msg.message.model_extra["reasoning"] is None and msg.message.content
    assert out.usage.completion_tokens_details.reasoning_tokens == 0


def test_include_reasoning_false_drops_it(client):
    out = _create(client, extra_body={"include_reasoning": False})
    assert out.choices[0].message.model_extra["reasoning"] is None
    assert out.usage.completion_tokens_details.reasoning_tokens == 6


def test_completions_logprobs(client):
    out = client.completions.create(model="r1", prompt="hi", max_tokens=5, logprobs=2, seed=1,
                                    extra_body={"ignore_eos": True})  # fmt: skip
    lp = out.choices[0].logprobs
    assert (
        len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == out.usage.completion_tokens == 5
    )
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
    # the 2 best, plus the chosen token if not among them (keys are token texts: bytes of one
    # character may share the text "\ufffd", as in vLLM)
    assert all(1 <= len(d) <= 3 for d in lp.top_logprobs)
    for token, value, best in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert token in best and value <= 0


def _model_logprobs(folder, prompt: list[int], output: list[int]) -> torch.Tensor:
    """log_softmax of the model's logits: row i is the distribution output[i] was drawn from."""
    logits, _ = DecoderModel.from_pretrained(folder).forward(
        SequenceBatch([torch.tensor(prompt + output)], [0], [None])
    )
    return torch.log_softmax(logits[0].double(), -1)[len(prompt) - 1 : -1]


def test_served_logprobs_are_the_models_own(client, folder):
    """Both endpoints return each token's own logprob under the model's distribution, and
    chat the top ones (completions key its top ones by text, which bytes may share)."""
    prompt = [104, 105, 33]
    text = client.completions.create(
        model="r1",
        prompt=prompt,
        max_tokens=6,
        logprobs=2,
        temperature=1.5,
        seed=3,
        extra_body={"ignore_eos": True, "return_token_ids": True},
    )
    ids = text.choices[0].model_extra["token_ids"]
    ref = _model_logprobs(folder, prompt, ids)
    assert any(float(ref[i, t]) < float(ref[i].max()) - 0.1 for i, t in enumerate(ids))  # not all argmax
    expected = [float(ref[i, t]) for i, t in enumerate(ids)]
    assert text.choices[0].logprobs.token_logprobs == pytest.approx(expected, abs=1e-4)
    chat = _create(client, logprobs=True, top_logprobs=2, temperature=1.5).choices[0]
    ids, entries = chat.model_extra["token_ids"], chat.logprobs.content
    ref = _model_logprobs(folder, chat.model_extra["prompt_token_ids"], ids)
    assert [e.logprob for e in entries] == pytest.approx(
        [float(ref[i, t]) for i, t in enumerate(ids)], abs=1e-4
    )
    for entry, best in zip(entries, ref.topk(2).values.tolist(), strict=True):
        assert [t.logprob for t in entry.top_logprobs] == pytest.approx(best, abs=1e-4)


def test_thinking_budget_needs_a_reasoning_parser(folder):
    with live_server(_engine(folder), ServeConfig(model_name="r1")) as server:
        r = httpx.post(server.url + "/v1/chat/completions", timeout=TIMEOUT_S,
                       json={"messages": USER, "max_tokens": 4, "thinking_token_budget": 2})  # fmt: skip
    assert r.status_code == 400 and r.json()["error"]["param"] == "thinking_token_budget"
