"""Shim for SGLang's native API: ``POST /generate`` and ``POST /abort_request``.

Body: ``input_ids`` (token ids) or ``text``; ``sampling_params`` with
``max_new_tokens``, ``temperature``, ``top_p``, ``stop``, ``sampling_seed`` and
``custom_params`` (from ``GenerateRequest.extra``, read by custom logit processors);
``rid``; ``priority``; ``stream``. SGLang runs larger priorities first unless the server
was started with ``--schedule-low-priority-values-first`` (then pass
``low_priority_values_first=True``). Replies carry ``text``, ``output_ids`` and
``meta_info`` (``finish_reason`` as ``{"type": ...}``, ``prompt_tokens``,
``cached_tokens``); a stream's events carry the text so far (cumulative) and, unless
the server runs with ``--incremental-streaming-output``, all output ids so far.
"""

from __future__ import annotations

from dataclasses import dataclass

from reasonserve.clients._openai_shim import finish_reason
from reasonserve.clients._parse import error_event, field, ids_or_none, opt_int
from reasonserve.clients.errors import MalformedResponseError
from reasonserve.clients.protocol import Capabilities, Chunk, GenerateRequest, GenerateResult
from reasonserve.core.errors import InvalidArgumentError

__all__ = ["SGLangShim"]


@dataclass(frozen=True)
class SGLangShim:
    low_priority_values_first: bool = False
    incremental_streaming_output: bool = False
    name: str = "sglang"

    # request side --------------------------------------------------------------------
    def priority_value(self, priority: int) -> int:
        return -priority if self.low_priority_values_first else priority

    def payload(self, req: GenerateRequest, *, stream: bool) -> tuple[str, dict]:
        if req.messages:
            raise InvalidArgumentError("sglang: /generate takes a prompt, not chat messages")
        sampling: dict = {"max_new_tokens": req.max_tokens}
        sampling.update(temperature=float(req.temperature), top_p=float(req.top_p))
        if req.stop:
            sampling["stop"] = list(req.stop)
        if req.seed is not None:
            sampling["sampling_seed"] = req.seed
        if req.extra:
            sampling["custom_params"] = dict(req.extra)
        body: dict = {"input_ids": list(req.prompt)} if req.token_prompt else {"text": req.prompt}
        body["sampling_params"] = sampling
        if req.request_id is not None:
            body["rid"] = req.request_id
        if req.priority:
            body["priority"] = self.priority_value(req.priority)
        body["stream"] = stream
        return "/generate", body

    def abort_payload(self, request_id: str) -> tuple[str, dict] | None:
        return "/abort_request", {"rid": request_id}

    def tokenize_payload(self, text: str) -> tuple[str, dict] | None:
        return "/tokenize", {"prompt": text, "add_special_tokens": False}

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(token_ids=True, priority=True, seed=True, abort=True, cached_tokens=True)

    # reply side ----------------------------------------------------------------------
    def parse_tokens(self, body: dict) -> tuple[int, ...]:
        return ids_or_none(field(body, "tokens", list, "tokenize"), "tokenize") or ()

    def _meta(self, body: dict, what: str) -> dict:
        meta = body.get("meta_info")
        if not isinstance(meta, dict):
            raise MalformedResponseError(f"{what}: meta_info missing or not an object")
        return meta

    def _finish(self, meta: dict, what: str) -> str | None:
        reason = meta.get("finish_reason")
        if reason is None:
            return None
        kind = reason.get("type") if isinstance(reason, dict) else reason
        return finish_reason(kind, what)

    def parse_result(self, body: dict, request_id: str) -> GenerateResult:
        what = "sglang reply"
        meta = self._meta(body, what)
        reason = self._finish(meta, what)
        if reason is None:
            raise MalformedResponseError(f"{what}: a finished reply needs meta_info.finish_reason")
        return GenerateResult(
            request_id,
            field(body, "text", str, what),
            ids_or_none(body.get("output_ids"), what),
            reason,
            None,
            opt_int(meta, "prompt_tokens", what),
            opt_int(meta, "cached_tokens", what),
        )

    def new_stream_state(self) -> dict:
        return {"chars": 0, "ids": 0}

    def parse_event(self, data: dict, request_id: str, state: dict) -> Chunk | None:
        what = "sglang stream event"
        if "error" in data:
            raise error_event(data, what)
        text = field(data, "text", str, what)
        ids = ids_or_none(data.get("output_ids"), what)
        reason = self._finish(self._meta(data, what), what)
        if len(text) < state["chars"]:
            raise MalformedResponseError(f"{what}: the cumulative text shrank")
        piece, state["chars"] = text[state["chars"] :], len(text)
        if ids is not None and not self.incremental_streaming_output:
            if len(ids) < state["ids"]:
                raise MalformedResponseError(f"{what}: the cumulative output ids shrank")
            ids, state["ids"] = ids[state["ids"] :], len(ids)
        return Chunk(request_id, piece, ids, reason)
