"""Every implemented parameter, through the openai client, against a live loopback server."""

from __future__ import annotations

import pytest

openai = pytest.importorskip("openai", reason="server tests need the openai client (dev extra)")
httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from _live_server import TIMEOUT_S, live_server, tiny_engine, wait_until  # noqa: E402
from reasonserve.engine import EngineConfig  # noqa: E402
from reasonserve.serve.config import ServeConfig  # noqa: E402


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    engine = tiny_engine(tmp_path_factory.mktemp("oa"), EngineConfig(block_size=4, num_blocks=512))
    with live_server(engine, ServeConfig(model_name="tiny", max_tokens_limit=256)) as server:
        yield server


@pytest.fixture(scope="module")
def client(live):
    return openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT_S)


def _dump(obj) -> dict:
    return obj.model_dump()


def test_n_returns_n_distinct_choices(client):
    out = client.completions.create(model="tiny", prompt="hi", max_tokens=8, n=3, seed=5)
    assert [c.index for c in out.choices] == [0, 1, 2]
    assert out.usage.completion_tokens == 24 and out.usage.prompt_tokens == 2
    assert len({c.text for c in out.choices}) > 1  # seed + i per choice


def test_list_prompts_give_prompt_major_choices(client):
    out = client.completions.create(model="tiny", prompt=["ab", "cde"], max_tokens=2, n=2)
    assert [c.index for c in out.choices] == [0, 1, 2, 3] and out.usage.prompt_tokens == 5
    ids = client.completions.create(model="tiny", prompt=[[1, 2], [3]], max_tokens=2)
    assert len(ids.choices) == 2 and ids.usage.prompt_tokens == 3


def test_stop_string_truncates_streamed_and_not(client):
    kwargs = dict(model="tiny", prompt="stop test", max_tokens=32, seed=11, temperature=1.0)
    full = client.completions.create(**kwargs).choices[0].text
    stop = full[4:6]
    expected = full[: full.find(stop)]
    out = client.completions.create(stop=[stop], **kwargs).choices[0]
    assert out.text == expected and out.finish_reason == "stop" and _dump(out)["stop_reason"] == stop
    streamed = "".join(c.choices[0].text for c in client.completions.create(stop=stop, stream=True, **kwargs))
    assert streamed == expected
    kept = client.completions.create(stop=[stop], extra_body={"include_stop_str_in_output": True}, **kwargs)
    assert kept.choices[0].text == expected + stop


def test_stop_token_ids_end_the_request_and_are_not_text(client):
    kwargs = dict(model="tiny", prompt=[1, 2, 3], max_tokens=16, seed=3)
    ids = _dump(client.completions.create(extra_body={"return_token_ids": True}, **kwargs).choices[0])[
        "token_ids"
    ]
    stop_id = ids[5]
    cut = ids.index(stop_id)
    out = client.completions.create(
        extra_body={"stop_token_ids": [stop_id], "return_token_ids": True}, **kwargs
    )
    choice = _dump(out.choices[0])
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == stop_id
    assert choice["token_ids"] == ids[: cut + 1] and out.usage.completion_tokens == cut + 1
    assert len(choice["text"].encode("utf-8", "replace")) <= cut * 3  # the stop token is not decoded


@pytest.mark.parametrize("deterministic", [False, True])
def test_streamed_text_equals_non_streamed_text(client, deterministic):
    non_ascii = 0
    for seed in range(10):
        kwargs = dict(
            model="tiny", prompt="é", max_tokens=48, seed=seed, extra_body={"deterministic": deterministic}
        )
        full = client.completions.create(**kwargs).choices[0].text
        chunks = [c.choices[0].text for c in client.completions.create(stream=True, **kwargs)]
        assert "".join(chunks) == full, seed
        non_ascii += sum(ord(ch) > 127 and ch != "\ufffd" for ch in full)
    assert non_ascii > 0  # multi-byte characters were split across tokens and survived


def test_max_completion_tokens_and_chat_shapes(client):
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                {"role": "assistant", "content": None}, {"role": "user", "content": "again"}]  # fmt: skip
    out = client.chat.completions.create(model="tiny", messages=messages, max_completion_tokens=5)
    assert out.id.startswith("chatcmpl-") and out.object == "chat.completion"
    assert out.usage.completion_tokens == 5 and out.choices[0].message.role == "assistant"
    chunks = list(client.chat.completions.create(model="tiny", messages=messages, max_tokens=4, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].id.startswith("chatcmpl-")
    assert chunks[-1].choices[0].finish_reason == "length"


def test_continue_final_message(client):
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "partial"}]
    extra = {"continue_final_message": True, "add_generation_prompt": False}
    out = client.chat.completions.create(model="tiny", messages=messages, max_tokens=3, extra_body=extra)
    assert out.usage.prompt_tokens == len("<|user|>\nq\n<|assistant|>\npartial")
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="tiny", messages=messages, max_tokens=3,
                                       extra_body={"continue_final_message": True})  # fmt: skip


def test_echo_include_usage_and_token_ids(client):
    out = client.completions.create(model="tiny", prompt="hello", max_tokens=3, echo=True)
    assert out.choices[0].text.startswith("hello") and out.id.startswith("cmpl-")
    chunks = list(client.completions.create(model="tiny", prompt="hello", max_tokens=3, stream=True, echo=True,
                                            stream_options={"include_usage": True}))  # fmt: skip
    assert chunks[0].choices[0].text == "hello"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 3
    choice = _dump(client.completions.create(model="tiny", prompt=[4, 5], max_tokens=3,
                                             extra_body={"return_token_ids": True}).choices[0])  # fmt: skip
    assert choice["prompt_token_ids"] == [4, 5] and len(choice["token_ids"]) == 3


def test_request_id_priority_and_seed(client):
    kwargs = dict(
        model="tiny", prompt="x", max_tokens=6, seed=42, extra_body={"request_id": "abc-1", "priority": 3}
    )
    a, b = client.completions.create(**kwargs), client.completions.create(**kwargs)
    assert a.id == "cmpl-abc-1" and a.choices[0].text == b.choices[0].text


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [(dict(logprobs=2, echo=True), "logprobs"), (dict(extra_body={"suffix": "x"}), "suffix"),
     (dict(presence_penalty=0.5), "presence_penalty"), (dict(best_of=3), "best_of"),
     (dict(extra_body={"use_beam_search": True}), "use_beam_search"),
     (dict(extra_body={"min_tokens": 2}), "min_tokens"), (dict(logit_bias={"1": 2.0}), "logit_bias")],
)  # fmt: skip
def test_unsupported_parameters_are_400s_naming_them(client, kwargs, param):
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="tiny", prompt="x", max_tokens=2, **kwargs)
    assert info.value.body["param"] == param


def test_top_logprobs_without_logprobs_and_unknown_model(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "x"}], top_logprobs=2
        )
    assert info.value.body["param"] == "top_logprobs"
    with pytest.raises(openai.NotFoundError) as missing:
        client.completions.create(model="gpt-4", prompt="x", max_tokens=2)
    assert missing.value.body["type"] == "NotFoundError" and missing.value.body["param"] == "model"


def test_models_and_openapi(client, live):
    card = client.models.list().data[0]
    assert card.id == "tiny" and card.created > 0 and card.owned_by == "reasonserve"
    spec = httpx.get(live.url + "/openapi.json", timeout=TIMEOUT_S).json()
    schemas = spec["components"]["schemas"]
    assert {"CompletionRequest", "ChatCompletionRequest"} <= set(schemas)
    assert schemas["CompletionRequest"]["additionalProperties"] is False
    body = spec["paths"]["/v1/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/CompletionRequest"}


def test_metrics_count_aborted_streams_and_latencies(client, live):
    def metric(name: str) -> float:
        text = httpx.get(live.url + "/metrics", timeout=TIMEOUT_S).text
        return float(
            next(x for x in text.splitlines() if x.startswith("reasonserve:" + name + " ")).split()[-1]
        )

    before_abort, before_ttft = (
        metric('request_success_total{finished_reason="abort"}'),
        metric("time_to_first_token_seconds_count"),
    )
    body = {"model": "tiny", "prompt": [5, 6], "max_tokens": 256, "stream": True}
    with httpx.stream("POST", live.url + "/v1/completions", json=body, timeout=TIMEOUT_S) as r:
        next(line for line in r.iter_lines() if line.startswith("data:"))
    assert wait_until(lambda: metric('request_success_total{finished_reason="abort"}') == before_abort + 1)
    assert metric("time_to_first_token_seconds_count") == before_ttft + 1
    for name in (
        "kv_cache_blocks_total",
        "num_requests_running",
        "num_preemptions_total",
        "dvr_rollbacks_total",
    ):
        metric(name)
    assert metric("kv_cache_blocks_total") == 512
