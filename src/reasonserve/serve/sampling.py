"""A validated request body -> the engine requests that serve it (a :class:`Plan`).

Runs off the event loop (tokenization is here). Parameters in the schema that the
server does not implement are rejected with a 400 naming them; ``max_tokens`` past the
context or past the whole KV cache is a 400 up front, never a request that cannot fit.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.engine import SamplingParams
from reasonserve.serve.chat import render_chat
from reasonserve.serve.config import ServeConfig
from reasonserve.serve.errors import ApiError
from reasonserve.serve.protocol import MAX_SEED, ChatCompletionRequest, CompletionRequest
from reasonserve.serve.reasoning_parser import ReasoningParser, get_reasoning_parser, tag_token_ids

__all__ = ["Capacity", "Job", "Plan", "ReasoningSetup", "chat_text", "plan_chat", "plan_completion"]


@dataclass(frozen=True)
class Capacity:
    """What the engine can hold: context length, KV cache tokens, and its tokenizer."""

    tokenizer: object | None
    max_model_len: int
    kv_capacity_tokens: int
    eos_token_ids: frozenset[int]
    end_of_thinking_ids: tuple[int, ...] = ()  # the tokens a thinking budget forces (none: no budget)
    vocab_size: int | None = None  # token ids at or above it are refused by /detokenize


@dataclass(frozen=True)
class ReasoningSetup:
    """How a chat response separates reasoning (``--reasoning-parser``): the parser,
    whether the output starts in the answer, the tags' token ids (for counting), and
    whether the reasoning is returned (``include_reasoning``)."""

    parser: ReasoningParser
    in_answer: bool
    tag_ids: tuple[tuple[int, ...], tuple[int, ...]] | None
    include: bool


@dataclass(frozen=True)
class Job:
    """One engine request: choice ``index`` of the response."""

    index: int
    prompt_ids: list[int]
    params: SamplingParams


@dataclass(frozen=True)
class Plan:
    response_id: str
    chat: bool
    jobs: list[Job]
    stream: bool
    include_usage: bool
    echo: bool
    stop: tuple[str, ...]
    include_stop: bool
    return_token_ids: bool
    hidden_ids: frozenset[int]  # a final eos / stop token id is not part of the text
    logprobs: int | None = None  # top logprobs per token (0: only the token's own); None: none
    reasoning: ReasoningSetup | None = None


def plan_completion(body: CompletionRequest, cap: Capacity, cfg: ServeConfig) -> Plan:
    _reject_unsupported(body, cfg)
    if body.suffix is not None:
        raise ApiError(400, "suffix is not supported", param="suffix")
    if body.echo and body.logprobs is not None:
        raise ApiError(400, "echo with logprobs needs prompt logprobs (not supported)", param="logprobs")
    prompts = [_encode(p, cap, "prompt", body.add_special_tokens) for p in _prompt_list(body.prompt)]
    budget = _thinking_budget(body, cap, cfg, _prompt_list(body.prompt))
    return _plan(
        body,
        prompts,
        cap,
        cfg,
        chat=False,
        requested=body.max_tokens,
        default=16,
        param="max_tokens",
        logprobs=body.logprobs,
        budgets=budget,
    )


def plan_chat(body: ChatCompletionRequest, cap: Capacity, cfg: ServeConfig) -> Plan:
    _reject_unsupported(body, cfg)
    if body.top_logprobs is not None and not body.logprobs:
        raise ApiError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
    for name, bad in (
        ("tools", bool(body.tools)),
        ("tool_choice", body.tool_choice not in (None, "none")),
    ):
        if bad:
            raise ApiError(400, f"{name} is not supported", param=name)
    if body.max_completion_tokens is not None and body.max_tokens not in (None, body.max_completion_tokens):
        raise ApiError(400, "max_tokens and max_completion_tokens disagree", param="max_completion_tokens")
    requested = body.max_completion_tokens or body.max_tokens
    param = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    text = chat_text(body, cap, cfg)
    prompt = _encode(text, cap, "messages", body.add_special_tokens)
    if not prompt:  # the engine refuses an empty prompt: say which input produced it
        raise ApiError(
            400,
            f"the chat template rendered these messages to no tokens (text {text[:80]!r}); "
            "a prompt needs at least one",
            param="chat_template" if body.chat_template is not None else "messages",
        )
    return _plan(
        body,
        [prompt],
        cap,
        cfg,
        chat=True,
        requested=requested,
        default=None,
        param=param,
        logprobs=(body.top_logprobs or 0) if body.logprobs else None,
        budgets=_thinking_budget(body, cap, cfg, [text]),
        reasoning=_reasoning(body, cap, cfg, text),
    )


def _reasoning(
    body: ChatCompletionRequest, cap: Capacity, cfg: ServeConfig, prompt: str
) -> ReasoningSetup | None:
    if cfg.reasoning_parser is None:
        return None
    parser = get_reasoning_parser(cfg.reasoning_parser)
    tok = cap.tokenizer
    tags = None if tok is None else (tag_token_ids(tok, parser.start_tag), tag_token_ids(tok, parser.end_tag))
    in_answer = parser.starts_in_answer(prompt, body.chat_template_kwargs)
    return ReasoningSetup(parser, in_answer, tags, body.include_reasoning)


def _thinking_budget(body, cap: Capacity, cfg: ServeConfig, prompts: list) -> list[int | None]:
    """Each prompt's ``thinking_token_budget`` for the engine (None where the prompt —
    text, or token ids decoded here, only when a budget is asked for — already closed
    the thinking block: its output is all answer)."""
    budget = body.thinking_token_budget
    if budget is None:
        return [None] * len(prompts)
    if cfg.reasoning_parser is None or not cap.end_of_thinking_ids:
        raise ApiError(
            400,
            "thinking_token_budget needs a server started with --reasoning-parser (or "
            "--end-of-thinking-token-id) and a tokenizer",
            param="thinking_token_budget",
        )
    parser = get_reasoning_parser(cfg.reasoning_parser)
    kwargs = getattr(body, "chat_template_kwargs", None)
    texts = [_prompt_text(p, cap) for p in prompts]
    return [None if parser.starts_in_answer(t, kwargs) else budget for t in texts]


def _prompt_text(prompt: str | list[int], cap: Capacity) -> str | None:
    if isinstance(prompt, str) or cap.tokenizer is None:
        return prompt if isinstance(prompt, str) else None
    return cap.tokenizer.decode(prompt)  # type: ignore[attr-defined]


def chat_text(body, cap: Capacity, cfg: ServeConfig) -> str:
    """The prompt text of a chat request (or of ``/tokenize`` with ``messages``)."""
    return render_chat(
        cap.tokenizer,
        body.messages,
        add_generation_prompt=body.add_generation_prompt,
        continue_final_message=body.continue_final_message,
        request_template=body.chat_template,
        server_template=cfg.chat_template,
        trust_request_template=cfg.trust_request_chat_template,
        template_kwargs=body.chat_template_kwargs,
    )


def _reject_unsupported(body, cfg: ServeConfig) -> None:
    checks = (
        ("best_of", body.best_of not in (None, body.n)),
        ("use_beam_search", body.use_beam_search),
        ("min_tokens", body.min_tokens > 0),
        ("presence_penalty", body.presence_penalty != 0),
        ("frequency_penalty", body.frequency_penalty != 0),
        ("repetition_penalty", body.repetition_penalty not in (None, 1.0)),
        ("logit_bias", bool(body.logit_bias)),
        ("prompt_logprobs", body.prompt_logprobs is not None),
        ("skip_special_tokens", not body.skip_special_tokens),
        ("response_format", body.response_format not in (None, {"type": "text"})),
        ("stream_options", body.stream_options is not None and not body.stream),
        (
            "stream_options.continuous_usage_stats",
            body.stream_options is not None and body.stream_options.continuous_usage_stats,
        ),
    )
    for name, bad in checks:
        if bad:
            raise ApiError(400, f"{name} is not supported with this value", param=name)
    for key in body.vllm_xargs or {}:
        raise ApiError(400, f"unknown vllm_xargs key {key[:64]!r}", param=f"vllm_xargs.{key[:64]}")
    if body.model is not None and body.model != cfg.model_name:
        raise ApiError(404, f"The model `{body.model[:200]}` does not exist.", param="model")


def _prompt_list(prompt) -> list:
    if isinstance(prompt, str) or isinstance(prompt[0], int):
        return [prompt]
    return list(prompt)


def _encode(prompt: str | list[int], cap: Capacity, param: str, add_special_tokens: bool) -> list[int]:
    if not isinstance(prompt, str):
        vocab, top = cap.vocab_size, max(prompt)
        if vocab is not None and top >= vocab:
            raise ApiError(400, f"prompt token id {top} is outside the vocabulary [0, {vocab})", param=param)
        return list(prompt)
    if cap.tokenizer is None:
        raise ApiError(400, "text prompts need a tokenizer; send token ids", param=param)
    try:
        return cap.tokenizer.encode(prompt, add_special_tokens=add_special_tokens)  # type: ignore[attr-defined]
    except InvalidArgumentError as err:
        raise ApiError(400, str(err), param=param) from None


def _plan(
    body,
    prompts: list[list[int]],
    cap: Capacity,
    cfg: ServeConfig,
    *,
    chat: bool,
    requested: int | None,
    default: int | None,
    param: str,
    logprobs: int | None,
    budgets: list[int | None],
    reasoning: ReasoningSetup | None = None,
) -> Plan:
    if len(prompts) * body.n > cfg.max_choices_per_request:
        raise ApiError(400, f"prompts x n must be <= {cfg.max_choices_per_request}", param="n")
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    jobs = []
    for p, ids in enumerate(prompts):
        max_tokens = _max_tokens(len(ids), requested, default, cap, cfg, param)
        for i in range(body.n):
            jobs.append(Job(p * body.n + i, ids, _params(body, max_tokens, i, logprobs, budgets[p])))
    rid = body.request_id or uuid.uuid4().hex
    hidden = {*(body.stop_token_ids or ()), *cap.eos_token_ids}
    return Plan(
        ("chatcmpl-" if chat else "cmpl-") + rid,
        chat,
        jobs,
        body.stream,
        bool(body.stream_options and body.stream_options.include_usage),
        getattr(body, "echo", False),
        stop,
        body.include_stop_str_in_output,
        body.return_token_ids,
        frozenset(() if body.include_stop_str_in_output else hidden),
        logprobs,
        reasoning,
    )


def _max_tokens(
    prompt_len: int, requested: int | None, default: int | None, cap: Capacity, cfg: ServeConfig, param: str
) -> int:
    room = min(cap.max_model_len, cap.kv_capacity_tokens) - prompt_len
    if room < 1:
        raise ApiError(
            400,
            f"This model's maximum context length is {min(cap.max_model_len, cap.kv_capacity_tokens)}"
            f" tokens. However, your prompt has {prompt_len} tokens.",
            param="prompt",
        )
    if requested is None:
        return min(default or cfg.max_tokens_limit, room, cfg.max_tokens_limit)
    if requested > cfg.max_tokens_limit:
        raise ApiError(400, f"{param} must be <= {cfg.max_tokens_limit}, got {requested}", param=param)
    if prompt_len + requested > cap.max_model_len:
        raise ApiError(
            400,
            f"This model's maximum context length is {cap.max_model_len} tokens. However, you "
            f"requested {prompt_len + requested} tokens ({prompt_len} in the prompt, {requested} "
            "in the completion). Please reduce the length of the prompt or completion.",
            param=param,
        )
    if prompt_len + requested > cap.kv_capacity_tokens:
        raise ApiError(
            400,
            f"prompt ({prompt_len}) + {param} ({requested}) tokens exceed the KV cache "
            f"({cap.kv_capacity_tokens} tokens); this request could never finish",
            param=param,
        )
    return requested


def _params(
    body, max_tokens: int, i: int, logprobs: int | None = None, budget: int | None = None
) -> SamplingParams:
    seed = None if body.seed is None else (body.seed + i) % (MAX_SEED + 1)
    try:
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=1.0 if body.temperature is None else body.temperature,
            top_p=1.0 if body.top_p is None else body.top_p,
            top_k=max(body.top_k or 0, 0),
            min_p=body.min_p or 0.0,
            seed=seed,
            deterministic=body.deterministic,
            stop_token_ids=tuple(body.stop_token_ids or ()),
            ignore_eos=body.ignore_eos,
            priority=-body.priority,  # HTTP: vLLM's lower-first; engine: larger is more urgent
            logprobs=logprobs,
            thinking_token_budget=budget,
        )
    except InvalidArgumentError as err:
        raise ApiError(400, str(err)) from None
