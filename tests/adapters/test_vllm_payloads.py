"""Every HTTP body the vLLM client shim sends, validated by vLLM's own request models:
no field vLLM would silently drop, and ``to_sampling_params()`` keeps seed, extra
arguments (``vllm_xargs``) and the sampling settings; priority and request id ride on
the request."""

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here (make test-adapters builds .venv-vllm)")

from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.entrypoints.openai.completion.protocol import CompletionRequest
from vllm.entrypoints.serve.tokenize.protocol import TokenizeCompletionRequest

from reasonserve.adapters.vllm._params import from_vllm
from reasonserve.clients import GenerateRequest, VLLMShim

FULL = GenerateRequest(
    "Solve 2+2.", max_tokens=33, temperature=0.6, top_p=0.95, seed=1234, stop=("</answer>",), priority=5,
    request_id="rs-1", extra={"reasonserve_seed": 77, "tag": "x"},
)  # fmt: skip
CASES = {
    "text": FULL,
    "token ids": GenerateRequest((1, 2, 3, 4), max_tokens=8, temperature=0.0),
    "greedy, no extras": GenerateRequest("hi", temperature=0.0, priority=-2),
}


def _validated(model, body: dict):
    unknown = sorted(set(body) - set(model.model_fields))
    assert not unknown, f"vLLM would ignore {unknown}"
    return model.model_validate(body)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("name", list(CASES))
def test_completion_bodies_are_valid_completion_requests(name, stream):
    req = CASES[name]
    path, body = VLLMShim(model="m").payload(req, stream=stream)
    assert path == "/v1/completions"
    parsed = _validated(CompletionRequest, body)
    params = parsed.to_sampling_params(max_tokens=req.max_tokens)
    assert (params.max_tokens, params.seed) == (req.max_tokens, req.seed)
    assert params.temperature == pytest.approx(req.temperature)
    assert params.top_p == pytest.approx(req.top_p)
    assert (params.extra_args or {}) == dict(req.extra)
    assert parsed.priority == -req.priority  # vLLM runs lower values first
    assert parsed.stream is stream
    assert parsed.return_token_ids is True
    if req.request_id is not None:
        assert parsed.request_id == req.request_id
    if req.token_prompt:
        assert parsed.prompt == list(req.prompt)


def test_the_seed_extra_reaches_the_logits_processor_through_vllm():
    _, body = VLLMShim(model="m").payload(FULL, stream=False)
    params = _validated(CompletionRequest, body).to_sampling_params(max_tokens=FULL.max_tokens)
    seeded = from_vllm(params)
    assert seeded is not None and seeded.seed == 77
    assert (seeded.temperature, seeded.top_p) == pytest.approx((0.6, 0.95))


def test_chat_continuation_bodies_are_valid_chat_requests():
    req = GenerateRequest("<think>\nLet me", messages=(("user", "2+2?"),), seed=3, priority=1,
                          extra={"reasonserve_seed": 9}, request_id="c-1")  # fmt: skip
    path, body = VLLMShim(model="m", chat=True).payload(req, stream=True)
    assert path == "/v1/chat/completions"
    parsed = _validated(ChatCompletionRequest, body)
    assert parsed.continue_final_message is True and parsed.add_generation_prompt is False
    assert parsed.messages[-1]["role"] == "assistant"
    params = parsed.to_sampling_params(max_tokens=req.max_tokens, default_sampling_params={})
    assert params.seed == 3 and params.extra_args == {"reasonserve_seed": 9}
    assert parsed.priority == -1


def test_tokenize_bodies_are_valid_tokenize_requests():
    path, body = VLLMShim(model="m").tokenize_payload("hello")
    assert path == "/tokenize"
    parsed = _validated(TokenizeCompletionRequest, body)
    assert parsed.add_special_tokens is False
