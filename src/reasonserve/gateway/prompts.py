"""The prompt a program continues: token ids where the upstream takes them, else text.

* ``/v1/completions``: the prompt as sent (text is tokenized by the upstream's
  ``/tokenize`` with its special tokens, as its own completions endpoint would).
* ``/v1/chat/completions``: the messages rendered by a chat template -- the gateway's
  own tokenizer's (``--tokenizer``), else the upstream's (vLLM's ``/tokenize`` takes
  ``messages``); an upstream that takes text only needs ``--tokenizer``.

Each is a :class:`Prompt`: what the upstream gets, and its text where the gateway has it
(the reasoning parser reads it: a prompt that closed the thinking block starts in the
answer).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from reasonserve.clients.errors import ClientError
from reasonserve.clients.http import HTTPClient
from reasonserve.serve.chat import checked_template_kwargs
from reasonserve.serve.errors import ApiError

__all__ = ["ChatTemplate", "Prompt", "chat_prompt", "completion_prompt", "message_dicts"]


@dataclass(frozen=True)
class Prompt:
    payload: str | tuple[int, ...]  # what the program continues
    text: str | None  # the prompt's text (None: rendered to ids by the upstream, or sent as ids)


class ChatTemplate:
    """A local tokenizer's chat template (``transformers.AutoTokenizer``, local files first)."""

    def __init__(self, name_or_path: str) -> None:
        from transformers import AutoTokenizer

        self._tok = AutoTokenizer.from_pretrained(name_or_path)
        if not getattr(self._tok, "chat_template", None):
            raise ApiError(500, f"the tokenizer {name_or_path!r} has no chat template")

    def render(
        self,
        messages: list[dict],
        *,
        add_generation_prompt: bool,
        continue_final: bool,
        kwargs: Mapping[str, object],
    ) -> str:
        # tokenize=False: the rendered text (transformers' return type has no overload for it);
        # kwargs are template variables (chat_prompt refused those that would replace the
        # template or a parameter set here), which transformers takes in **kwargs
        return self._tok.apply_chat_template(  # type: ignore[return-value]
            messages,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final,
            **kwargs,  # type: ignore[arg-type]
        )


def message_dicts(body) -> list[dict]:
    """The messages as a chat template takes them (no tool calling through the gateway)."""
    out = []
    for i, m in enumerate(body.messages):
        if m.role == "tool" or m.tool_calls:
            param = f"messages[{i}].{'role' if m.role == 'tool' else 'tool_calls'}"
            raise ApiError(400, "tool calling is not supported by the gateway", param=param)
        if m.content is None and m.role != "assistant":
            raise ApiError(
                400, f"content of a {m.role} message must not be null", param=f"messages[{i}].content"
            )
        message = {"role": m.role, "content": m.content if isinstance(m.content, str) else
                   "".join(p.text for p in m.content or [])}  # fmt: skip
        if m.name is not None:
            message["name"] = m.name
        if (m.reasoning or m.reasoning_content) is not None:
            message["reasoning_content"] = m.reasoning or m.reasoning_content
        out.append(message)
    return out


async def chat_prompt(body, client: HTTPClient, template: ChatTemplate | None, model: str | None) -> Prompt:
    """The rendered conversation: ids when the upstream takes ids, else text."""
    if body.continue_final_message and body.add_generation_prompt:
        raise ApiError(
            400,
            "continue_final_message and add_generation_prompt cannot both be true",
            param="continue_final_message",
        )
    messages = message_dicts(body)
    kwargs = checked_template_kwargs(body.chat_template_kwargs)
    if template is not None:
        try:
            text = await asyncio.to_thread(
                template.render,
                messages,
                add_generation_prompt=body.add_generation_prompt,
                continue_final=body.continue_final_message,
                kwargs=kwargs,
            )
        except Exception as err:  # a template raising on a conversation it rejects
            raise ApiError(
                400, f"the chat template rejected the messages: {str(err)[:300]}", param="messages"
            ) from None
        return await completion_prompt(text, client, model, special_tokens=body.add_special_tokens)
    if not client.capabilities.token_ids:
        raise ApiError(
            400, "chat requests need the gateway's --tokenizer with this upstream kind", param="messages"
        )
    call: dict = {
        "messages": messages,
        "add_generation_prompt": body.add_generation_prompt,
        "continue_final_message": body.continue_final_message,
        "add_special_tokens": body.add_special_tokens,
    }
    if kwargs:
        call["chat_template_kwargs"] = kwargs
    return Prompt(await _tokenize(client, call, model), None)


async def completion_prompt(
    prompt, client: HTTPClient, model: str | None, *, special_tokens: bool = True
) -> Prompt:
    """One prompt (text or ids) as the upstream should get it."""
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
        if len(prompt) != 1:
            raise ApiError(400, "the gateway serves one prompt per request", param="prompt")
        prompt = prompt[0]
    if not isinstance(prompt, str):
        if not client.capabilities.token_ids:
            raise ApiError(400, "token-id prompts need an upstream that takes token ids", param="prompt")
        return Prompt(tuple(prompt), None)
    if not client.capabilities.token_ids:
        return Prompt(prompt, prompt)
    call = {"prompt": prompt, "add_special_tokens": special_tokens}
    return Prompt(await _tokenize(client, call, model), prompt)


async def _tokenize(client: HTTPClient, call: dict, model: str | None) -> tuple[int, ...]:
    if model is not None:
        call = {**call, "model": model}
    try:
        reply = await client.post("/tokenize", call)
        ids = client.shim.parse_tokens(reply)
    except ClientError as err:
        raise ApiError(502, f"the upstream could not tokenize the prompt: {str(err)[:300]}") from None
    if not ids:
        raise ApiError(400, "the prompt is empty once tokenized", param="prompt")
    return ids
