"""An :class:`EngineClient` for OpenAI-compatible servers (and SGLang's native API) on httpx.

* ``generate`` posts one non-streamed request; ``stream`` reads SSE. Closing a stream
  early, cancelling a ``generate``, or ``abort(request_id)`` closes the connection
  (the host aborts on disconnect) and, for hosts with an abort endpoint (SGLang),
  also calls it.
* Retries with exponential backoff only when the host cannot have started the work:
  connection refused/failed, 429, 503. Idempotent calls (``/tokenize``, abort) also
  retry timeouts and 500/502/504.
* Errors are typed (:mod:`reasonserve.clients.errors`): 4xx -> HostRejectedError,
  5xx -> HostError, no reply in time (or a reply body still arriving ``timeout_s``
  after its headers) -> RequestTimeoutError, a stream that ends
  without its final event -> StreamDroppedError, bad JSON/SSE -> MalformedResponseError.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace

import httpx

from reasonserve.clients._parse import MAX_BODY_BYTES, load_json
from reasonserve.clients._sse import sse_data
from reasonserve.clients.errors import (
    HostError,
    HostRejectedError,
    MalformedResponseError,
    RequestTimeoutError,
    StreamDroppedError,
    TransportError,
    UnsupportedError,
)
from reasonserve.clients.protocol import Capabilities, Chunk, GenerateRequest, GenerateResult, ProbeResult
from reasonserve.clients.shims import OpenAIShim, Shim
from reasonserve.core.errors import InvalidArgumentError

__all__ = ["HTTPClient"]

_NOT_STARTED = (429, 503)
_IDEMPOTENT_RETRY = (500, 502, 503, 504, 429)
_ERROR_BODY_BYTES = 64 * 2**10  # an error reply is read this far (its message is kept, not all of it)


class HTTPClient:
    """``HTTPClient(base_url, shim)``; use ``async with`` (or ``await aclose()``).

    ``tokenizer``: ``encode(text) -> ids`` for probe suffixes after token-id prefixes
    (default: the host's ``/tokenize``). ``scorer``: ``async (prompt, responses) ->
    scores`` for ``score`` (a reward model served elsewhere); absent: UnsupportedError.
    """

    def __init__(
        self,
        base_url: str,
        shim: Shim | None = None,
        *,
        timeout_s: float = 600.0,
        connect_timeout_s: float = 5.0,
        max_retries: int = 3,
        backoff_s: float = 0.1,
        tokenizer=None,
        scorer: Callable | None = None,
        headers: dict[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise InvalidArgumentError(f"base_url must be an http(s) URL, got {base_url!r}")
        for name, value, low in (("timeout_s", timeout_s, ">"), ("connect_timeout_s", connect_timeout_s, ">"),
                                 ("backoff_s", backoff_s, ">=")):  # fmt: skip
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not number or not math.isfinite(value) or value < 0 or (value == 0 and low == ">"):
                raise InvalidArgumentError(f"{name} must be a finite number {low} 0, got {value!r}")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or not 0 <= max_retries <= 100:
            raise InvalidArgumentError(f"max_retries must be an int in [0, 100], got {max_retries!r}")
        self.shim = shim if shim is not None else OpenAIShim()
        self.max_retries, self.backoff_s = max_retries, backoff_s
        self._tokenizer, self._scorer = tokenizer, scorer
        timeout = httpx.Timeout(timeout_s, connect=connect_timeout_s)
        self._timeout_s = float(timeout_s)
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), timeout=timeout, headers=headers, transport=transport
        )
        self._inflight: dict[str, asyncio.Task] = {}
        self._streams: dict[str, httpx.Response] = {}
        self._aborted: set[str] = set()
        self._background: set[asyncio.Task] = set()
        self._suffix_ids: dict[str, tuple[int, ...]] = {}

    @property
    def capabilities(self) -> Capabilities:
        return replace(self.shim.capabilities, score=self._scorer is not None)

    async def __aenter__(self) -> HTTPClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for task in list(self._inflight.values()):
            task.cancel()
        if self._background:
            await asyncio.wait(self._background, timeout=5.0)
        await self._http.aclose()

    # generation ------------------------------------------------------------------------
    async def generate(self, req: GenerateRequest) -> GenerateResult:
        req = _with_id(req)
        rid = req.request_id
        assert rid is not None
        path, body = self.shim.payload(req, stream=False)
        start = time.perf_counter()
        task = asyncio.ensure_future(self._post(path, body, idempotent=False))
        self._inflight[rid] = task
        try:
            reply = await task
        except asyncio.CancelledError:
            task.cancel()
            if rid in self._aborted and not _cancelling():
                return GenerateResult(rid, "", (), "abort", elapsed_s=time.perf_counter() - start)
            self._host_abort(rid)
            raise
        finally:
            self._inflight.pop(rid, None)
            self._aborted.discard(rid)
        out = self.shim.parse_result(reply, rid)
        return replace(out, elapsed_s=time.perf_counter() - start)

    async def stream(self, req: GenerateRequest) -> AsyncIterator[Chunk]:
        req = _with_id(req)
        rid = req.request_id
        assert rid is not None
        path, body = self.shim.payload(req, stream=True)
        state, finished = self.shim.new_stream_state(), False
        try:
            async with self._http.stream("POST", path, json=body) as resp:
                if resp.status_code >= 400:
                    raise _status_error(resp.status_code, await _read_text(resp, _ERROR_BODY_BYTES))
                self._streams[rid] = resp
                async for data in sse_data(resp.aiter_raw(), idle_s=self._timeout_s):
                    if data.strip() == "[DONE]":
                        break
                    chunk = self.shim.parse_event(load_json(data, "stream event"), rid, state)
                    if chunk is not None:
                        finished = chunk.finish_reason is not None
                        yield chunk
        except (httpx.StreamClosed, httpx.ReadError, httpx.RemoteProtocolError) as err:
            if rid in self._aborted:
                yield Chunk(rid, "", (), "abort")
                finished = True
                return
            raise StreamDroppedError(f"the stream of {rid} broke: {type(err).__name__}") from None
        except httpx.TimeoutException:
            raise RequestTimeoutError(f"no progress on the stream of {rid} within the timeout") from None
        except httpx.TransportError as err:
            raise TransportError(f"stream of {rid}: {type(err).__name__}: {err}") from None
        finally:
            self._streams.pop(rid, None)
            self._aborted.discard(rid)
            if not finished:
                self._host_abort(rid)
        if not finished:
            raise StreamDroppedError(f"the stream of {rid} ended without a finish_reason")

    async def probe(
        self,
        prefix: str | Sequence[int],
        suffix: str,
        max_tokens: int,
        *,
        request_id: str | None = None,
        priority: int = 0,
    ) -> ProbeResult:
        """Greedy continuation of ``prefix + suffix`` (token-id prefixes get the suffix's ids)."""
        ids = None if isinstance(prefix, str) else await self.encode(suffix)
        prompt = prefix + suffix if isinstance(prefix, str) else (*prefix, *(ids or ()))
        req = GenerateRequest(prompt, max_tokens=max_tokens, temperature=0.0, request_id=request_id,
                              priority=priority)  # fmt: skip
        out = await self.generate(req)
        computed = None
        if out.num_prompt_tokens is not None and out.num_cached_tokens is not None:
            computed = out.num_prompt_tokens - out.num_cached_tokens
        return ProbeResult(out.text, out.token_ids, out.finish_reason, out.num_prompt_tokens, computed,
                           out.elapsed_s)  # fmt: skip

    async def encode(self, text: str) -> tuple[int, ...]:
        """Token ids of ``text`` (no special tokens), cached per text."""
        if text in self._suffix_ids:
            return self._suffix_ids[text]
        if self._tokenizer is not None:
            ids = tuple(self._tokenizer.encode(text))
        else:
            call = self.shim.tokenize_payload(text)
            if call is None:
                raise UnsupportedError(f"{self.shim.name}: no tokenizer; pass HTTPClient(tokenizer=...)")
            ids = self.shim.parse_tokens(await self._post(*call, idempotent=True))
        if len(self._suffix_ids) < 64:
            self._suffix_ids[text] = ids
        return ids

    async def post(self, path: str, body: dict) -> dict:
        """POST ``body`` to the host's ``path`` (e.g. ``/tokenize``); its JSON reply, read
        within the same bounds and retried as an idempotent call."""
        return await self._post(path, body, idempotent=True)

    async def abort(self, request_id: str) -> None:
        """Stop a started request: close its connection; call the host's abort endpoint.
        Only a request in flight here is marked aborted (an unknown id leaves no mark that
        a later request reusing it would inherit)."""
        if request_id in self._inflight or request_id in self._streams:
            self._aborted.add(request_id)
        task = self._inflight.get(request_id)
        if task is not None:
            task.cancel()
        resp = self._streams.get(request_id)
        if resp is not None:
            await resp.aclose()
        call = self.shim.abort_payload(request_id)
        if call is not None:
            await self._post(*call, idempotent=True)

    async def score(self, prompt: str, responses: Sequence[str]) -> list[float]:
        if self._scorer is None:
            raise UnsupportedError("this client has no reward model (pass HTTPClient(scorer=...))")
        return list(await self._scorer(prompt, list(responses)))

    # transport ---------------------------------------------------------------------------
    def _host_abort(self, rid: str) -> None:
        call = self.shim.abort_payload(rid)
        if call is None:
            return  # closing the connection was the abort
        task = asyncio.ensure_future(self._quiet_post(*call))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _quiet_post(self, path: str, body: dict) -> None:
        try:
            await self._post(path, body, idempotent=True)
        except Exception:  # best effort: the connection is already closed
            return

    async def _post(self, path: str, body: dict, *, idempotent: bool) -> dict:
        retry_status = _IDEMPOTENT_RETRY if idempotent else _NOT_STARTED
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                status, raw = await self._post_once(path, body)
            except (httpx.ConnectError, httpx.ConnectTimeout) as err:
                if last:
                    raise TransportError(f"POST {path}: cannot connect: {err}") from None
            except httpx.TimeoutException:
                if last or not idempotent:
                    raise RequestTimeoutError(f"POST {path}: no reply within the timeout") from None
            except httpx.TransportError as err:
                if last or not idempotent:
                    raise TransportError(f"POST {path}: {type(err).__name__}: {err}") from None
            else:
                if status < 400:
                    return load_json(raw, f"POST {path}")
                if last or status not in retry_status:
                    raise _status_error(status, raw[:_ERROR_BODY_BYTES].decode("utf-8", "replace"))
            await asyncio.sleep(self.backoff_s * 2**attempt)
        raise AssertionError("unreachable")

    async def _post_once(self, path: str, body: dict) -> tuple[int, bytes]:
        """One POST; the reply is read up to ``MAX_BODY_BYTES`` (decoded), never all of it,
        and a body still arriving ``timeout_s`` after its headers is cut off at its next
        read (at most about twice ``timeout_s``): a host that trickles bytes just inside the
        per-read timeout gets ``httpx.ReadTimeout``, handled by ``_post`` like any other."""
        async with self._http.stream("POST", path, json=body) as resp:
            limit = MAX_BODY_BYTES if resp.status_code < 400 else _ERROR_BODY_BYTES
            deadline = time.monotonic() + self._timeout_s
            raw = bytearray()
            async for piece in resp.aiter_bytes():
                if time.monotonic() > deadline:
                    raise httpx.ReadTimeout(f"POST {path}: reply body incomplete after {self._timeout_s} s")
                raw += piece
                if len(raw) > limit:
                    if resp.status_code < 400:
                        raise MalformedResponseError(f"POST {path}: reply larger than {limit} bytes")
                    break  # an error page: its start is enough
            return resp.status_code, bytes(raw)


def _with_id(req: GenerateRequest) -> GenerateRequest:
    return req if req.request_id is not None else replace(req, request_id=f"rs-{uuid.uuid4().hex}")


def _cancelling() -> bool:
    """Whether the current task itself is being cancelled (Python 3.11+; on 3.10 an
    abort() and an outer cancellation of the same call cannot be told apart)."""
    cancelling = getattr(asyncio.current_task(), "cancelling", None)
    return cancelling is not None and cancelling() > 0


async def _read_text(resp: httpx.Response, limit: int) -> str:
    raw = bytearray()
    async for piece in resp.aiter_bytes():
        raw += piece
        if len(raw) > limit:
            break
    return raw[:limit].decode("utf-8", "replace")


def _status_error(status: int, text: str) -> HostError:
    kind = HostRejectedError if 400 <= status < 500 else HostError
    return kind(f"the host answered {status}: {text[:500]}", status=status, body=text)
