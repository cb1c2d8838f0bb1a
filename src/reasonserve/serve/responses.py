"""Response bodies and SSE chunks in the OpenAI / vLLM shapes.

Completions: ``object`` ``text_completion``, ids ``cmpl-``; chat: ``chat.completion`` /
``chat.completion.chunk``, ids ``chatcmpl-``, the first chunk of each chat choice carries
``delta.role``. Every choice has ``logprobs: null``, ``finish_reason`` and vLLM's
``stop_reason`` (the stop string or stop token id, else null); ``return_token_ids``
adds ``prompt_token_ids`` / ``token_ids``.
"""

from __future__ import annotations

import json

from reasonserve.serve.generation import ChoiceState, Generation

__all__ = ["final_body", "sse", "stream_chunk", "usage"]


def usage(gen: Generation) -> dict:
    prompts = {id(c.prompt_ids): len(c.prompt_ids) for c in gen.choices.values()}  # a prompt counts once
    prompt = sum(prompts.values())
    completion = sum(len(c.token_ids) for c in gen.choices.values())
    cached = sum(c.num_cached_tokens for c in gen.choices.values())
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def final_body(gen: Generation, model: str, echo_texts: dict[int, str]) -> dict:
    plan = gen.plan
    choices = []
    for c in sorted(gen.choices.values(), key=lambda c: c.index):
        choice: dict = {"index": c.index}
        if plan.chat:
            choice["message"] = {"role": "assistant", "content": c.text.text, "tool_calls": []}
        else:
            choice.update(text=echo_texts.get(c.index, "") + c.text.text, prompt_logprobs=None)
        choice.update(logprobs=None, finish_reason=c.finish_reason, stop_reason=c.stop_reason)
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


def stream_chunk(
    gen: Generation,
    model: str,
    choice: ChoiceState | None,
    text: str,
    *,
    first: bool = False,
    new_ids: list[int] | None = None,
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
        entry: dict = {"index": choice.index}
        if plan.chat:
            entry["delta"] = (
                {"role": "assistant", "content": text} if first else ({"content": text} if text else {})
            )
        else:
            entry["text"] = text
        entry.update(logprobs=None, finish_reason=choice.finish_reason, stop_reason=choice.stop_reason)
        if plan.return_token_ids:
            entry["token_ids"] = new_ids or []
            if first:
                entry["prompt_token_ids"] = choice.prompt_ids
        body["choices"].append(entry)
    if plan.include_usage:
        body["usage"] = usage(gen) if choice is None else None
    return body


def sse(payload: dict | str) -> str:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n"
