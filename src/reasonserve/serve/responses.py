"""Response bodies and SSE chunks in the OpenAI / vLLM shapes.

Completions: ``object`` ``text_completion``, ids ``cmpl-``; chat: ``chat.completion`` /
``chat.completion.chunk``, ids ``chatcmpl-``, the first chunk of each chat choice carries
``delta.role``. Every choice has ``logprobs`` (null unless asked for), ``finish_reason``
and vLLM's ``stop_reason`` (the stop string or stop token id, else null);
``return_token_ids`` adds ``prompt_token_ids`` / ``token_ids``. With a reasoning parser
a chat message (or delta) carries ``reasoning`` and, for older clients, the same text
as ``reasoning_content``; usage then has ``completion_tokens_details.reasoning_tokens``.
Logprobs: chat ``{"content": [{"token", "logprob", "bytes", "top_logprobs"}]}``,
completions ``{"tokens", "token_logprobs", "top_logprobs", "text_offset"}``; values
below -9999 are reported as -9999 (vLLM's floor; JSON has no -inf).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from reasonserve.engine.logprobs import TokenLogprobs
from reasonserve.serve.generation import ChoiceDelta, ChoiceState, Generation

__all__ = ["final_body", "sse", "stream_chunk", "usage"]

_FLOOR = -9999.0


def usage(gen: Generation) -> dict:
    prompts = {id(c.prompt_ids): len(c.prompt_ids) for c in gen.choices.values()}  # a prompt counts once
    prompt = sum(prompts.values())
    completion = sum(len(c.token_ids) for c in gen.choices.values())
    cached: dict[int, int] = {}  # per prompt, as prompt_tokens: at most the prompt itself
    for c in gen.choices.values():
        cached[id(c.prompt_ids)] = min(
            max(cached.get(id(c.prompt_ids), 0), c.num_cached_tokens), len(c.prompt_ids)
        )
    out = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": sum(cached.values())},
    }
    if gen.plan.reasoning is not None:
        reasoning = sum(c.reasoning_tokens for c in gen.choices.values())
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return out


def final_body(gen: Generation, model: str, echo_texts: dict[int, str], tokenizer) -> dict:
    plan = gen.plan
    choices = []
    for c in sorted(gen.choices.values(), key=lambda c: c.index):
        choice: dict = {"index": c.index}
        if plan.chat:
            choice["message"] = {"role": "assistant", **_message_text(gen, c), "tool_calls": []}
        else:
            choice.update(text=echo_texts.get(c.index, "") + c.text.text, prompt_logprobs=None)
        logprobs = (
            None if plan.logprobs is None else _logprobs(plan.chat, c.logprobs, tokenizer, plan.logprobs)
        )
        choice.update(logprobs=logprobs, finish_reason=c.finish_reason, stop_reason=c.stop_reason)
        if plan.return_token_ids:
            choice.update(prompt_token_ids=c.prompt_ids, token_ids=c.token_ids)
        choices.append(choice)
    return {
        "id": plan.response_id,
        "object": "chat.completion" if plan.chat else "text_completion",
        "created": gen.created,
        "model": model,
        "choices": choices,
        "usage": usage(gen),
    }


def _message_text(gen: Generation, c: ChoiceState) -> dict:
    setup = gen.plan.reasoning
    if setup is None:
        return {"content": c.text.text}
    reasoning = ("".join(c.reasoning_parts) or None) if setup.include else None
    return {
        "content": "".join(c.content_parts) or None,
        "reasoning": reasoning,
        "reasoning_content": reasoning,
    }


def stream_chunk(
    gen: Generation,
    model: str,
    choice: ChoiceState | None,
    delta: ChoiceDelta | None = None,
    *,
    first: bool = False,
    tokenizer=None,
) -> dict:
    """One chunk for ``choice`` (or the usage-only chunk when ``choice`` is None)."""
    plan = gen.plan
    body: dict = {
        "id": plan.response_id,
        "object": "chat.completion.chunk" if plan.chat else "text_completion",
        "created": gen.created,
        "model": model,
        "choices": [],
    }
    if choice is not None:
        delta = delta or ChoiceDelta()
        entry: dict = {"index": choice.index}
        if plan.chat:
            entry["delta"] = _chat_delta(gen, delta, first)
        else:
            entry["text"] = delta.text
        logprobs = None
        if plan.logprobs is not None and delta.logprobs:
            logprobs = _logprobs(plan.chat, delta.logprobs, tokenizer, plan.logprobs)
        entry.update(logprobs=logprobs, finish_reason=choice.finish_reason, stop_reason=choice.stop_reason)
        if plan.return_token_ids:
            entry["token_ids"] = delta.token_ids
            if first:
                entry["prompt_token_ids"] = choice.prompt_ids
        body["choices"].append(entry)
    if plan.include_usage:
        body["usage"] = usage(gen) if choice is None else None
    return body


def _chat_delta(gen: Generation, delta: ChoiceDelta, first: bool) -> dict:
    out: dict = {"role": "assistant", "content": delta.content} if first else {}
    setup = gen.plan.reasoning
    if delta.reasoning and setup is not None and setup.include:
        out.update(reasoning=delta.reasoning, reasoning_content=delta.reasoning)
    if delta.content and not first:
        out["content"] = delta.content
    return out


def _logprobs(chat: bool, entries: Sequence[TokenLogprobs], tokenizer, k: int) -> dict:
    def text(token_id: int) -> str:
        return tokenizer.decode([token_id]) if tokenizer is not None else f"token_id:{token_id}"

    if chat:
        return {"content": [_chat_entry(e, text, k) for e in entries]}
    tokens = [text(e.token_id) for e in entries]
    offsets, at = [], 0
    for t in tokens:
        offsets.append(at)
        at += len(t)
    top = []
    for e in entries:
        best = {text(i): max(lp, _FLOOR) for i, lp in e.top[:k]}
        best.setdefault(text(e.token_id), max(e.logprob, _FLOOR))  # the chosen token, as vLLM adds it
        top.append(best)
    return {
        "tokens": tokens,
        "token_logprobs": [max(e.logprob, _FLOOR) for e in entries],
        "top_logprobs": top,
        "text_offset": offsets,
    }


def _chat_entry(e: TokenLogprobs, text, k: int) -> dict:
    def one(token_id: int, logprob: float) -> dict:
        token = text(token_id)
        return {"token": token, "logprob": max(logprob, _FLOOR), "bytes": list(token.encode("utf-8"))}

    return {**one(e.token_id, e.logprob), "top_logprobs": [one(i, lp) for i, lp in e.top[:k]]}


def sse(payload: dict | str) -> str:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n"
