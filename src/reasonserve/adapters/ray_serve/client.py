"""Drives one engine request across the replicas: placement, the phase transition with
migration, and recovery from a dead replica. Runs where the deployment handle lives
(the ingress, a benchmark driver); the handle's router is :class:`PascalRequestRouter`
or Ray Serve's default.

1. ``generate`` is placed by the router (Algorithm 1) and streams committed tokens.
2. When the end-of-thinking token is committed, ``continue_answering`` is placed with
   the tokens committed so far (Algorithm 2 + adaptive migration). If it lands on the
   replica that holds the request, that replica answers "stay" and the first stream goes
   on. Anywhere else the target re-prefills the committed tokens and streams from
   there; only once it has accepted the request is the first stream closed (which
   aborts the request there). If placing or starting it fails, the first stream simply
   goes on: a failed migration leaves the request running where it was.
3. A replica that dies mid-request (the stream raises Ray's actor error) is replaced:
   the request is resumed from its committed tokens, placed anew (``kind="resume"``),
   at most ``max_retries`` times; then :class:`ReplicaFailedError`. Tokens are only
   ever appended from a stream's new tokens, so nothing is sent twice or lost; with the
   seed fixed in the job, a deterministic request's output is the same bits as without
   the failure or the migration.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ray.exceptions import ActorUnavailableError, RayActorError

from reasonserve.adapters.ray_serve.job import Job, ReplicaFailedError
from reasonserve.core.errors import ReasonserveError
from reasonserve.engine.logprobs import TokenLogprobs

__all__ = ["Outcome", "PhaseAwareClient", "RequestFailedError"]

_log = logging.getLogger("reasonserve.ray_serve")
OnTokens = Callable[[list[int], list[TokenLogprobs]], None]
_REPLICA_GONE = (RayActorError, ActorUnavailableError)


class RequestFailedError(ReasonserveError, RuntimeError):
    """The engine rejected or failed the request (``status``: the HTTP status it maps to)."""

    def __init__(self, message: str, status: int = 500) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Outcome:
    """One request's committed tokens (and their logprobs, when asked for) and where and
    when they came (ingress clock)."""

    request_id: str
    arrival_s: float
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprobs] = field(default_factory=list)
    token_times: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    replicas: list[str] = field(default_factory=list)  # every replica that served it, in order
    migrations: int = 0
    failed_migrations: int = 0
    resumes: int = 0
    eot_index: int | None = None
    handoff_s: list[float] = field(default_factory=list)  # per migration: asked -> target accepted

    def take(self, event: dict) -> tuple[list[int], list[TokenLogprobs]]:
        """The event's new tokens and their logprobs (empty when not asked for)."""
        if not self.replicas or self.replicas[-1] != event["replica"]:
            self.replicas.append(event["replica"])
        new, logprobs = list(event.get("tokens", ())), list(event.get("logprobs", ()))
        now = time.monotonic()
        self.token_ids += new
        self.logprobs += logprobs
        self.token_times += [now] * len(new)
        self.finish_reason = event.get("finish_reason", self.finish_reason)
        return new, logprobs


class PhaseAwareClient:
    def __init__(
        self, handle, end_of_thinking_token_id: int | None, max_retries: int = 2, migrate: bool = True
    ) -> None:
        """``handle``: a DeploymentHandle to the :class:`EngineReplica` deployment.
        ``migrate=False``: never ask for the answering phase's placement (Ray Serve's
        default router has no Algorithm 2)."""
        self.handle, self.eot = handle, end_of_thinking_token_id
        self.max_retries, self.migrate = max_retries, migrate

    async def run(self, job: Job, on_tokens: OnTokens | None = None) -> Outcome:
        """Serve ``job``; ``on_tokens(tokens, logprobs)`` gets each batch of newly committed
        tokens but the last ones (they come with the :class:`Outcome`); ``logprobs`` is
        empty unless the job asked for them."""
        out = Outcome(job.request_id, time.monotonic())
        current = [self._call("generate", job)]
        try:
            return await self._follow(job, out, current, on_tokens)
        finally:
            if out.finish_reason is None:  # failed or cancelled (client gone): stop the replica's work
                current[0].cancel()

    async def _follow(self, job: Job, out: Outcome, current: list, on_tokens) -> Outcome:
        asked = self.eot is None or not self.migrate
        while True:
            try:
                switched = None
                async for event in current[0]:
                    if "error" in event:
                        raise RequestFailedError(event["error"], event.get("status", 500))
                    self._take(out, event, on_tokens)
                    if out.finish_reason is not None:
                        return out
                    if not asked and out.eot_index is not None:
                        asked = True
                        switched = await self._transition(job, out)
                        if switched is not None:
                            break
                if switched is None:
                    raise ReplicaFailedError(f"{out.replicas[-1:]} ended request {job.request_id} early")
                current[0].cancel()
                current[0] = switched
            except _REPLICA_GONE as err:
                current[0] = self._resume(job, out, err)

    def _take(self, out: Outcome, event: dict, on_tokens) -> None:
        new, logprobs = out.take(event)
        if out.eot_index is None and self.eot is not None and self.eot in new:
            out.eot_index = len(out.token_ids) - len(new) + new.index(self.eot)
        if new and on_tokens is not None and out.finish_reason is None:  # the last ones come with the outcome
            on_tokens(new, logprobs)

    async def _transition(self, job: Job, out: Outcome):
        """The answering phase's stream if it moved, else None (it stays, or moving failed)."""
        moved = job.moved(out.token_ids, out.replicas[-1], "answer")
        asked_s = time.monotonic()
        candidate = self._call("continue_answering", moved)
        try:
            first = await candidate.__anext__()
        except Exception as err:  # placement or the target failed: stay where it is
            out.failed_migrations += 1
            _log.warning("migration of %s failed, it stays on %s: %r", job.request_id, out.replicas[-1], err)
            return None
        if first.get("stay"):
            return None
        if "error" in first:
            out.failed_migrations += 1
            _log.warning(
                "migration of %s refused by %s: %s", job.request_id, first["replica"], first["error"]
            )
            return None
        out.migrations += 1
        out.handoff_s.append(time.monotonic() - asked_s)
        out.take(first)
        return candidate

    def _resume(self, job: Job, out: Outcome, err: BaseException):
        out.resumes += 1
        if out.resumes > self.max_retries:
            raise ReplicaFailedError(
                f"request {job.request_id}: its replica failed {out.resumes} times "
                f"({len(out.token_ids)} tokens committed); last error: {type(err).__name__}: {err}"
            ) from err
        _log.warning("replica %s failed under %s; resuming it from %d committed tokens",
                     out.replicas[-1:], job.request_id, len(out.token_ids))  # fmt: skip
        last = out.replicas[-1] if out.replicas else None
        return self._call("generate", job.moved(out.token_ids, last, "resume"))

    def _call(self, method: str, job: Job):
        return self.handle.options(method_name=method, stream=True).remote(job)
