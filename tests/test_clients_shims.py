"""The pure pieces of the engine clients: request validation, the per-host payloads and
reply parsers, and the bounded SSE reader."""

from __future__ import annotations

import asyncio

import pytest

from reasonserve.clients import (
    GenerateRequest,
    MalformedResponseError,
    OpenAIShim,
    SGLangShim,
    VLLMShim,
)
from reasonserve.clients._sse import sse_data
from reasonserve.core.errors import InvalidArgumentError, InvalidTypeError

REQ = GenerateRequest((5, 6, 7), max_tokens=9, temperature=0.0, seed=11, priority=3, request_id="r-1",
                      stop=("\n\n",), extra={"k": 2})  # fmt: skip


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"prompt": ""}, InvalidArgumentError),
        ({"prompt": []}, InvalidArgumentError),
        ({"prompt": [1, -1]}, InvalidArgumentError),
        ({"prompt": [1, True]}, InvalidArgumentError),
        ({"prompt": b"ab"}, InvalidTypeError),
        ({"prompt": "a", "max_tokens": 0}, InvalidArgumentError),
        ({"prompt": "a", "temperature": float("nan")}, InvalidArgumentError),
        ({"prompt": "a", "top_p": 0.0}, InvalidArgumentError),
        ({"prompt": "a", "seed": -1}, InvalidArgumentError),
        ({"prompt": "a", "stop": ("",)}, InvalidArgumentError),
        ({"prompt": "a", "request_id": ""}, InvalidArgumentError),
        ({"prompt": "a", "extra": {"k": [1]}}, InvalidTypeError),
        ({"prompt": "a", "messages": [("robot", "x")]}, InvalidArgumentError),
        ({"prompt": "a", "stop": 5}, InvalidTypeError),
        ({"prompt": "a", "stop": None}, InvalidTypeError),
        ({"prompt": "a", "messages": None}, InvalidTypeError),
        ({"prompt": "a", "messages": [5]}, InvalidTypeError),
        ({"prompt": "a", "extra": {"k": float("nan")}}, InvalidArgumentError),  # JSON has no NaN
        ({"prompt": "a", "extra": {"k": float("-inf")}}, InvalidArgumentError),
        ({"prompt": "a\ud800"}, InvalidArgumentError),  # a lone surrogate cannot be sent as UTF-8
        ({"prompt": "a", "stop": ("\udfff",)}, InvalidArgumentError),
        ({"prompt": "a", "request_id": "r\ud800"}, InvalidArgumentError),
        ({"prompt": "a", "extra": {"k": "\ud800"}}, InvalidArgumentError),
        ({"prompt": "a", "messages": [("user", "\ud800")], "request_id": "r"}, InvalidArgumentError),
    ],
)
def test_bad_requests_raise_typed_errors(kwargs, error):
    with pytest.raises(error):
        GenerateRequest(**kwargs)


def test_priority_direction_per_host():
    """reasonserve serve and vLLM: lower first (negated); SGLang: larger first unless the
    server runs --schedule-low-priority-values-first."""
    assert OpenAIShim().payload(REQ, stream=False)[1]["priority"] == -3
    assert VLLMShim().payload(REQ, stream=False)[1]["priority"] == -3
    assert SGLangShim().payload(REQ, stream=False)[1]["priority"] == 3
    assert SGLangShim(low_priority_values_first=True).payload(REQ, stream=False)[1]["priority"] == -3
    urgent, lazy = (VLLMShim().payload(GenerateRequest("a", priority=p), stream=False)[1]["priority"] for p in (5, -5))
    assert urgent < lazy  # vLLM serves the smaller value first


def test_vllm_completion_payload_carries_every_extension():
    path, body = VLLMShim(model="m").payload(REQ, stream=True)
    assert path == "/v1/completions"
    assert body == {
        "model": "m", "prompt": [5, 6, 7], "max_tokens": 9, "temperature": 0.0, "top_p": 1.0, "seed": 11,
        "stop": ["\n\n"], "stream": True, "stream_options": {"include_usage": True}, "priority": -3,
        "request_id": "r-1", "return_token_ids": True, "vllm_xargs": {"k": 2},
    }  # fmt: skip


def test_vllm_chat_continuation():
    req = GenerateRequest("Let me think", messages=[("user", "2+2?")])
    path, body = VLLMShim(chat=True).payload(req, stream=False)
    assert path == "/v1/chat/completions"
    assert body["messages"] == [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "Let me think"}]
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    with pytest.raises(InvalidArgumentError, match="chat"):
        VLLMShim().payload(req, stream=False)  # messages need a chat shim


def test_plain_openai_sends_only_openai_fields():
    _, body = OpenAIShim(extensions=False).payload(GenerateRequest("hi", priority=4, request_id="x"), stream=False)
    assert not {"priority", "request_id", "return_token_ids", "vllm_xargs"} & set(body)
    with pytest.raises(InvalidArgumentError, match="token-id"):
        OpenAIShim(extensions=False).payload(REQ, stream=False)


def test_sglang_native_payload():
    path, body = SGLangShim().payload(REQ, stream=True)
    assert path == "/generate"
    assert body == {
        "input_ids": [5, 6, 7], "rid": "r-1", "priority": 3, "stream": True,
        "sampling_params": {"max_new_tokens": 9, "temperature": 0.0, "top_p": 1.0, "stop": ["\n\n"],
                            "sampling_seed": 11, "custom_params": {"k": 2}},
    }  # fmt: skip
    assert SGLangShim().payload(GenerateRequest("hi"), stream=False)[1]["text"] == "hi"
    assert SGLangShim().abort_payload("r-1") == ("/abort_request", {"rid": "r-1"})


def test_openai_reply_parsing():
    body = {"choices": [{"text": "ab", "token_ids": [1, 2], "prompt_token_ids": [9], "finish_reason": "length"}],
            "usage": {"prompt_tokens": 1, "prompt_tokens_details": {"cached_tokens": 0}}}  # fmt: skip
    out = OpenAIShim().parse_result(body, "r")
    assert (out.text, out.token_ids, out.finish_reason, out.num_cached_tokens) == ("ab", (1, 2), "length", 0)
    state = OpenAIShim().new_stream_state()
    chunk = OpenAIShim().parse_event({"choices": [{"text": "c", "token_ids": [3], "finish_reason": None}]}, "r", state)
    assert (chunk.text, chunk.token_ids, chunk.finish_reason) == ("c", (3,), None)
    assert OpenAIShim().parse_event({"choices": [], "usage": {}}, "r", state) is None


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"choices": "x"},
        {"choices": []},
        {"choices": [{"text": 5, "finish_reason": "stop"}]},
        {"choices": [{"text": "a", "finish_reason": None}]},
        {"choices": [{"text": "a", "finish_reason": "stop", "token_ids": ["1"]}]},
        {"choices": [{"text": "a", "finish_reason": "stop"}], "usage": {"prompt_tokens": -1}},
    ],
)
def test_malformed_openai_replies_raise(body):
    with pytest.raises(MalformedResponseError):
        OpenAIShim().parse_result(body, "r")


def test_sglang_reply_and_cumulative_stream():
    shim = SGLangShim()
    out = shim.parse_result({"text": "ab", "output_ids": [1, 2],
                             "meta_info": {"finish_reason": {"type": "length", "length": 2}, "prompt_tokens": 3,
                                           "cached_tokens": 2}}, "r")  # fmt: skip
    assert (out.text, out.token_ids, out.finish_reason, out.num_cached_tokens) == ("ab", (1, 2), "length", 2)
    state = shim.new_stream_state()
    first = shim.parse_event({"text": "a", "output_ids": [1], "meta_info": {"finish_reason": None}}, "r", state)
    last = shim.parse_event({"text": "abc", "output_ids": [1, 2, 3],
                             "meta_info": {"finish_reason": {"type": "stop"}}}, "r", state)  # fmt: skip
    assert (first.text, first.token_ids) == ("a", (1,))
    assert (last.text, last.token_ids, last.finish_reason) == ("bc", (2, 3), "stop")
    with pytest.raises(MalformedResponseError, match="shrank"):
        shim.parse_event({"text": "", "meta_info": {}}, "r", state)
    with pytest.raises(MalformedResponseError, match="meta_info"):
        shim.parse_result({"text": "a"}, "r")


async def _collect(parts: list[bytes]) -> list[str]:
    async def gen():
        for p in parts:
            yield p

    return [d async for d in sse_data(gen())]


def test_sse_events_across_arbitrary_splits():
    raw = b': comment\r\nevent: x\ndata: {"a":1}\n\ndata: line1\ndata: line2\n\ndata: [DONE]\n\n'
    expected = ['{"a":1}', "line1\nline2", "[DONE]"]
    for cut in range(1, len(raw)):
        assert asyncio.run(_collect([raw[:cut], raw[cut:]])) == expected


def test_malformed_sse_is_typed():
    with pytest.raises(MalformedResponseError, match="server-sent"):
        asyncio.run(_collect([b"<html>oops</html>\n\n"]))
    with pytest.raises(MalformedResponseError, match="server-sent"):  # a field SSE does not define
        asyncio.run(_collect([b"Content-Type: text/html\n\n"]))
    with pytest.raises(MalformedResponseError, match="UTF-8"):
        asyncio.run(_collect([b"data: \xff\xfe\n\n"]))
    assert asyncio.run(_collect([b'data: {"a":1}'])) == []  # a cut-off event is not delivered
