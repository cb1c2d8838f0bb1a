"""The request/response contract against vLLM's OpenAI-compatible server.

``VLLM_REQUEST_FIELDS`` are the request fields of vLLM's ``CompletionRequest`` and
``ChatCompletionRequest`` (vllm/entrypoints/openai/protocol.py and the vLLM docs'
"Extra parameters" lists), written out here so no vLLM install is needed. Every one of
them must have a row in the conformance table of ``docs/serve.md``; every "supported"
row must be in the published schema; every "rejected" row must get a 400 naming it.
"""

from __future__ import annotations

import pathlib
import re

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from _live_server import TIMEOUT_S, live_server, tiny_engine  # noqa: E402

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "serve.md"
VLLM_REQUEST_FIELDS = {
    "both": ["model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "n", "best_of", "stop",
             "stop_token_ids", "include_stop_str_in_output", "ignore_eos", "stream", "stream_options",
             "logprobs", "prompt_logprobs", "presence_penalty", "frequency_penalty", "repetition_penalty",
             "logit_bias", "use_beam_search", "min_tokens", "skip_special_tokens", "response_format", "user",
             "priority", "request_id", "return_token_ids", "vllm_xargs", "length_penalty",
             "truncate_prompt_tokens", "allowed_token_ids", "bad_words", "spaces_between_special_tokens",
             "add_special_tokens", "guided_json", "logits_processors"],
    "completions": ["prompt", "echo", "suffix"],
    "chat": ["messages", "max_completion_tokens", "top_logprobs", "add_generation_prompt",
             "continue_final_message", "tools", "tool_choice", "chat_template", "parallel_tool_calls"],
}  # fmt: skip
NON_DEFAULT = {  # a value that must be refused for each rejected parameter
    "best_of": 3, "stream_options.continuous_usage_stats": True,
    "prompt_logprobs": 1, "suffix": "x", "presence_penalty": 0.5, "frequency_penalty": 0.5,
    "repetition_penalty": 1.2, "logit_bias": {"1": 1.0}, "use_beam_search": True, "min_tokens": 1,
    "skip_special_tokens": False, "response_format": {"type": "json_object"}, "tools": [{"type": "function"}],
    "tool_choice": "auto", "vllm_xargs": {"k": 1},
}  # fmt: skip
VALID = {
    "completions": {"prompt": "hi", "max_tokens": 2},
    "chat": {"messages": [{"role": "user", "content": "hi"}]},
}
PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


def _table() -> dict[str, tuple[str, str]]:
    rows = re.findall(
        r"^\| `([a-z_.]+)` \| (both|completions|chat) \| (supported|rejected) \|", DOC.read_text(), re.M
    )
    return {name: (where, status) for name, where, status in rows}


def test_every_vllm_request_field_has_a_row_in_the_conformance_table():
    table = _table()
    for where, names in VLLM_REQUEST_FIELDS.items():
        for name in names:
            assert name in table, f"{name} missing from docs/serve.md"
            assert table[name][0] in ("both", where), name


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    with live_server(tiny_engine(tmp_path_factory.mktemp("contract"))) as server:
        yield server


def _endpoints(where: str) -> list[str]:
    return ["completions", "chat"] if where == "both" else [where]


def test_supported_rows_are_in_the_published_schema(live):
    schemas = httpx.get(live.url + "/openapi.json", timeout=TIMEOUT_S).json()["components"]["schemas"]
    props = {"completions": schemas["CompletionRequest"]["properties"],
             "chat": schemas["ChatCompletionRequest"]["properties"]}  # fmt: skip
    for name, (where, status) in _table().items():
        if status == "supported":
            for endpoint in _endpoints(where):
                assert name.split(".")[0] in props[endpoint], (name, endpoint)


def test_rejected_rows_get_a_400_naming_them(live):
    for name, (where, status) in _table().items():
        if status != "rejected":
            continue
        for endpoint in _endpoints(where):
            body = dict(VALID[endpoint])
            if name == "stream_options.continuous_usage_stats":
                body.update(stream=True, stream_options={"continuous_usage_stats": True})
            elif endpoint == "chat" and name == "logprobs":
                body["logprobs"] = True
            else:
                body[name] = NON_DEFAULT.get(name, 1)
            r = httpx.post(live.url + PATHS[endpoint], json=body, timeout=TIMEOUT_S)
            assert r.status_code == 400, (name, endpoint, r.text)
            assert r.json()["error"]["param"].startswith(name), (name, endpoint, r.json())


def _keys(obj: dict, *names: str) -> None:
    assert set(names) <= set(obj), (set(names) - set(obj), obj)


def test_responses_carry_vllms_fields(live):
    out = httpx.post(live.url + "/v1/completions", json=VALID["completions"], timeout=TIMEOUT_S).json()
    _keys(out, "id", "object", "created", "model", "choices", "usage")
    _keys(out["choices"][0], "index", "text", "logprobs", "finish_reason", "stop_reason", "prompt_logprobs")
    _keys(out["usage"], "prompt_tokens", "completion_tokens", "total_tokens")
    assert re.fullmatch(r"cmpl-[0-9a-f]{32}", out["id"]) and isinstance(out["created"], int)
    chat = httpx.post(live.url + "/v1/chat/completions", json=VALID["chat"], timeout=TIMEOUT_S).json()
    assert chat["id"].startswith("chatcmpl-") and chat["object"] == "chat.completion"
    _keys(chat["choices"][0], "index", "message", "logprobs", "finish_reason", "stop_reason")
    _keys(chat["choices"][0]["message"], "role", "content", "tool_calls")
    models = httpx.get(live.url + "/v1/models", timeout=TIMEOUT_S).json()
    assert models["object"] == "list"
    _keys(models["data"][0], "id", "object", "created", "owned_by", "root", "parent", "max_model_len")
    with httpx.stream("POST", live.url + "/v1/chat/completions", json={**VALID["chat"], "stream": True},
                      timeout=TIMEOUT_S) as r:  # fmt: skip
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [x for x in r.iter_lines() if x.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    first = httpx.Response(200, content=lines[0][6:]).json()
    _keys(first, "id", "object", "created", "model", "choices")
    assert first["object"] == "chat.completion.chunk" and first["choices"][0]["delta"]["role"] == "assistant"


def test_every_serve_flag_has_a_row_in_the_flag_table():
    from reasonserve.cli import _parser

    sub = next(a for a in _parser()._actions if a.dest == "command")
    flags = {opt for action in sub.choices["serve"]._actions for opt in action.option_strings} - {"-h", "--help"}
    section = DOC.read_text().split("## Flags", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"`(--[a-z-]+)", section))
    assert flags <= documented, sorted(flags - documented)

