"""Chat messages -> prompt text, through the tokenizer's chat template (vLLM's rules).

The template is the request's ``chat_template`` (only when the server trusts request
templates, vLLM's ``--trust-request-chat-template``), else the server's
``--chat-template``, else the tokenizer's own. ``chat_template_kwargs`` (Qwen3's
``enable_thinking``, ...) reach the template as variables. Messages reach it as vLLM
passes them: text parts joined by newlines, ``name``/``tool_call_id``/``reasoning`` as
given, and each assistant ``tool_calls[].function.arguments`` parsed from JSON. Every
failure — a template error, a missing template, bad arguments — is a 400 naming the
parameter.

A request's own template is untrusted work on the server's one planning thread: the
Jinja sandbox keeps it from reaching Python objects, but not from looping (two nested
``range(100000)`` loops would hold every client's requests for hours). It therefore
renders under a budget of Python trace events, counted, never timed, and linear in the
request (:func:`template_steps`): twice what a Qwen3-style template measures (about 100
events per template character to compile, 400 per message to render; a loop iteration
costs about 3). Past it the request is a 400.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from reasonserve.serve.errors import ApiError
from reasonserve.serve.protocol import ChatMessage

__all__ = ["RESERVED_TEMPLATE_KWARGS", "checked_template_kwargs", "render_chat", "template_steps"]

# Variables the server sets itself: a chat_template_kwargs key may not replace them.
RESERVED_TEMPLATE_KWARGS = frozenset({
    "messages", "tools", "documents", "add_generation_prompt", "continue_final_message", "chat_template",
    "tokenize", "conversation", "return_dict",
})  # fmt: skip


def render_chat(
    tokenizer,
    messages: Sequence[ChatMessage],
    *,
    add_generation_prompt: bool,
    continue_final_message: bool,
    request_template: str | None,
    server_template: str | None,
    trust_request_template: bool,
    template_kwargs: Mapping[str, Any] | None,
) -> str:
    """The prompt text of ``messages``; raises :class:`ApiError` (400) on any failure."""
    if tokenizer is None:
        raise ApiError(400, "this model has no tokenizer: chat needs one; send token ids to /v1/completions")
    if continue_final_message and add_generation_prompt:
        raise ApiError(
            400,
            "continue_final_message and add_generation_prompt cannot both be true",
            param="continue_final_message",
        )
    if continue_final_message and messages[-1].role != "assistant":
        raise ApiError(400, "continue_final_message needs a final assistant message", param="messages")
    if request_template is not None and not trust_request_template:
        raise ApiError(
            400,
            "this server does not accept chat templates in requests (start it with "
            "--trust-request-chat-template to allow them)",
            param="chat_template",
        )
    template = request_template if request_template is not None else server_template
    if template is None and not getattr(tokenizer, "has_chat_template", False):
        raise ApiError(
            400,
            "this model's tokenizer has no chat template; start the server with --chat-template FILE",
            param="messages",
        )
    kwargs = checked_template_kwargs(template_kwargs)
    conversation = [_message(m, i) for i, m in enumerate(messages)]

    def render() -> str:
        return tokenizer.apply_chat_template(
            conversation,
            chat_template=template,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message,
            **kwargs,
        )

    steps = None if request_template is None else template_steps(request_template, len(messages))
    try:
        return render() if steps is None else _within_steps(render, steps)
    except _OverBudget:
        message = f"the chat template did more than {steps} steps of work on these messages"
        raise ApiError(400, message, param="chat_template") from None
    except ApiError:
        raise
    except Exception as err:  # jinja2 TemplateError, ValueError, TypeError from the template
        raise ApiError(
            400,
            f"the chat template failed on these messages: {type(err).__name__}: {str(err)[:300]}",
            param="chat_template" if request_template is not None else "messages",
        ) from None


def checked_template_kwargs(template_kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """A request's ``chat_template_kwargs`` (a copy), the template's variables: a 400 for a
    key that would set what the server sets itself (:data:`RESERVED_TEMPLATE_KWARGS`)."""
    kwargs = dict(template_kwargs or {})
    reserved = sorted(RESERVED_TEMPLATE_KWARGS & set(kwargs))
    if reserved:
        raise ApiError(400, f"chat_template_kwargs may not set {reserved}", param="chat_template_kwargs")
    return kwargs


def _message(m: ChatMessage, i: int) -> dict:
    if m.content is None and m.role != "assistant":
        raise ApiError(400, f"content of a {m.role} message must not be null", param=f"messages[{i}].content")
    if m.tool_calls is not None and m.role != "assistant":
        raise ApiError(400, "only assistant messages carry tool_calls", param=f"messages[{i}].tool_calls")
    if m.tool_call_id is not None and m.role != "tool":
        raise ApiError(400, "only tool messages carry tool_call_id", param=f"messages[{i}].tool_call_id")
    content = (
        m.content if isinstance(m.content, str) or m.content is None else "\n".join(p.text for p in m.content)
    )
    out: dict[str, Any] = {"role": m.role, "content": content}
    for key in ("name", "tool_call_id", "reasoning", "reasoning_content"):
        if getattr(m, key) is not None:
            out[key] = getattr(m, key)
    if m.tool_calls is not None:
        out["tool_calls"] = [
            _tool_call(call, f"messages[{i}].tool_calls[{j}]") for j, call in enumerate(m.tool_calls)
        ]
    return out


def _tool_call(call, where: str) -> dict:
    try:
        arguments = json.loads(call.function.arguments)
    except (ValueError, RecursionError):
        raise ApiError(
            400, "function.arguments must be JSON text", param=f"{where}.function.arguments"
        ) from None
    return {
        "id": call.id,
        "type": call.type,
        "function": {"name": call.function.name, "arguments": arguments},
    }


def template_steps(template: str, num_messages: int) -> int:
    """Trace events a request's own ``template`` may cost on ``num_messages`` messages."""
    return 1_000_000 + 200 * len(template) + 2_000 * num_messages


class _OverBudget(BaseException):
    """A BaseException, so that no ``except Exception`` inside the renderer swallows it."""


def _within_steps(render: Callable[[], str], steps: int) -> str:
    """``render()`` on this thread, raising :class:`_OverBudget` after ``steps`` trace events."""
    left = steps

    def trace(frame, event, arg):
        nonlocal left
        left -= 1
        if left < 0:
            raise _OverBudget  # Python also unsets the trace function here
        return trace

    previous = sys.gettrace()
    sys.settrace(trace)
    try:
        return render()
    finally:
        sys.settrace(previous)
