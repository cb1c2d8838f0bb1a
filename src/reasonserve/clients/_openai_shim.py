"""Shims for OpenAI-compatible servers: plain OpenAI, reasonserve, vLLM.

A shim is pure: it turns a :class:`GenerateRequest` into ``(URL path, JSON body)`` and a
host's reply (or one SSE event) back into results. It never does I/O, so the bodies
can be validated against a host's own request models (vLLM's ``CompletionRequest``).

* :class:`OpenAIShim` — ``/v1/completions`` (``/v1/chat/completions`` with
  ``chat=True``). ``extensions=True`` (the default, for ``reasonserve serve``) adds
  ``priority`` (sent lower-first, as vLLM and ``reasonserve serve`` read it),
  ``request_id``, ``return_token_ids`` and ``vllm_xargs``;
  ``extensions=False`` sends only OpenAI fields (text prompts and results).
* :class:`VLLMShim` — the same fields in vLLM's conventions: ``priority`` is lower
  first, so it is negated; ``extra`` goes to ``vllm_xargs``; chat continuation uses
  ``continue_final_message=True, add_generation_prompt=False``.
"""

from __future__ import annotations

from dataclasses import dataclass

from reasonserve.clients._parse import error_event, field, ids_or_none, opt_int
from reasonserve.clients.errors import MalformedResponseError
from reasonserve.clients.protocol import Capabilities, Chunk, GenerateRequest, GenerateResult
from reasonserve.core.errors import InvalidArgumentError

__all__ = ["OpenAIShim", "VLLMShim"]

_FINISH = {"stop": "stop", "length": "length", "abort": "abort", "error": "error", "eos": "stop"}


def finish_reason(value, what: str) -> str:
    if value is None:
        raise MalformedResponseError(f"{what}: no finish_reason on the final choice")
    if not isinstance(value, str):
        raise MalformedResponseError(f"{what}: finish_reason must be a string, got {str(value)[:40]}")
    return _FINISH.get(value, "stop")  # e.g. "tool_calls", "content_filter": the host stopped it


@dataclass(frozen=True)
class OpenAIShim:
    """See the module docstring. ``model``: the ``model`` field (None: left out)."""

    model: str | None = None
    extensions: bool = True
    chat: bool = False
    name: str = "openai"

    # request side --------------------------------------------------------------------
    def priority_value(self, priority: int) -> int:
        """reasonserve priority (larger first) -> the host's value (lower first)."""
        return -priority

    def payload(self, req: GenerateRequest, *, stream: bool) -> tuple[str, dict]:
        body: dict = {} if self.model is None else {"model": self.model}
        if self.chat:
            path = "/v1/chat/completions"
            turns = [{"role": role, "content": text} for role, text in req.messages]
            body["messages"] = [*turns, {"role": "assistant", "content": self._text_prompt(req)}]
            body.update(continue_final_message=True, add_generation_prompt=False)
        else:
            path = "/v1/completions"
            if req.messages:
                raise InvalidArgumentError(f"{self.name}: messages need a chat shim (chat=True)")
            if req.token_prompt and not self.extensions:
                raise InvalidArgumentError(f"{self.name}: token-id prompts need a host with extensions")
            body["prompt"] = list(req.prompt) if req.token_prompt else req.prompt
        body.update(max_tokens=req.max_tokens, temperature=float(req.temperature), top_p=float(req.top_p))
        if req.seed is not None:
            body["seed"] = req.seed
        if req.stop:
            body["stop"] = list(req.stop)
        if stream:
            body.update(stream=True, stream_options={"include_usage": True})
        if self.extensions:
            self._extensions(req, body)
        return path, body

    def _text_prompt(self, req: GenerateRequest) -> str:
        if req.token_prompt:
            raise InvalidArgumentError(f"{self.name}: chat continuation takes a text prompt, not token ids")
        return req.prompt  # type: ignore[return-value]

    def _extensions(self, req: GenerateRequest, body: dict) -> None:
        if req.priority:
            body["priority"] = self.priority_value(req.priority)
        if req.request_id is not None:
            body["request_id"] = req.request_id
        body["return_token_ids"] = True
        if req.extra:
            body["vllm_xargs"] = dict(req.extra)

    def abort_payload(self, request_id: str) -> tuple[str, dict] | None:
        """OpenAI-compatible hosts abort a request when its connection closes: no call."""
        return None

    def tokenize_payload(self, text: str) -> tuple[str, dict] | None:
        if not self.extensions:
            return None
        body: dict = {"prompt": text, "add_special_tokens": False}
        if self.model is not None:
            body["model"] = self.model
        return "/tokenize", body

    @property
    def capabilities(self) -> Capabilities:
        ext = self.extensions
        return Capabilities(token_ids=ext, priority=ext, seed=True, abort=True, cached_tokens=True)

    # reply side ----------------------------------------------------------------------
    def parse_tokens(self, body: dict) -> tuple[int, ...]:
        ids = ids_or_none(field(body, "tokens", list, "tokenize"), "tokenize")
        return ids or ()

    def parse_result(self, body: dict, request_id: str) -> GenerateResult:
        what = f"{self.name} reply"
        choices = field(body, "choices", list, what)
        if len(choices) != 1 or not isinstance(choices[0], dict):
            raise MalformedResponseError(f"{what}: expected exactly one choice, got {len(choices)}")
        choice = choices[0]
        text = self._choice_text(choice, what, final=True)
        usage: dict = body["usage"] if isinstance(body.get("usage"), dict) else {}
        details = usage.get("prompt_tokens_details")
        cached = opt_int(details, "cached_tokens", what) if isinstance(details, dict) else None
        return GenerateResult(
            request_id,
            text,
            ids_or_none(choice.get("token_ids"), what),
            finish_reason(choice.get("finish_reason"), what),
            ids_or_none(choice.get("prompt_token_ids"), what),
            opt_int(usage, "prompt_tokens", what),
            cached,
        )

    def _choice_text(self, choice: dict, what: str, *, final: bool) -> str:
        if not self.chat:
            return field(choice, "text", str, what)
        holder = choice.get("message" if final else "delta")
        if not isinstance(holder, dict):
            raise MalformedResponseError(f"{what}: chat choice without a message/delta object")
        content = holder.get("content")
        if content is not None and not isinstance(content, str):
            raise MalformedResponseError(f"{what}: content must be a string")
        return content or ""

    def new_stream_state(self) -> dict:
        return {}

    def parse_event(self, data: dict, request_id: str, state: dict) -> Chunk | None:
        """One SSE event's JSON -> a chunk (None for a usage-only event)."""
        what = f"{self.name} stream event"
        if "error" in data:
            raise error_event(data, what)
        choices = field(data, "choices", list, what)
        if not choices:
            return None
        choice = choices[0]
        if not isinstance(choice, dict):
            raise MalformedResponseError(f"{what}: a choice must be an object")
        reason = choice.get("finish_reason")
        return Chunk(
            request_id,
            self._choice_text(choice, what, final=False),
            ids_or_none(choice.get("token_ids"), what),
            None if reason is None else finish_reason(reason, what),
        )


@dataclass(frozen=True)
class VLLMShim(OpenAIShim):
    """vLLM's OpenAI server: ``priority`` lower first (needs ``--scheduling-policy
    priority``), ``vllm_xargs`` for ``extra``, ``request_id``, ``return_token_ids``."""

    name: str = "vllm"
