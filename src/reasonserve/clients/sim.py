"""An :class:`EngineClient` on the simulator: virtual time, synthetic tokens.

For costing programs without a model (ARCHITECTURE "What runs where": programs on the
simulator get cost-model tokens). The requests run on one simulated instance
(:class:`~reasonserve.sim.cluster.instance.SimInstance`: the simulator's continuous batching,
under the host contract every host follows, with FCFS admission and room for every
request), stepped one engine step at a time: each step, every request not yet prefilled
computes its uncached prompt tokens and every other one decodes a token, and the step takes
``RooflineCostModel.step_s`` of *virtual* time (``now_s``). Requests that arrive while a step
is under way join the next one, so a probe started beside a chunk overlaps it in virtual
time as it would on a host.

Tokens are synthetic: the token at position ``p`` is drawn from (client seed, request
seed, ``p``); an eos (``eos_token_id``) is drawn with ``eos_probability`` per token (a
scripted generation's tokens, below, are one stream seeded by both seeds).
Text is the tokens' bytes (ids < 256). Probes answer ``probe_answer(position) + "}"``
when ``probe_answer`` is given (a scripted answer curve, e.g. "settles on 42 after 900
tokens"), else synthetic text. ``outputs(request)`` (optional) scripts each generation
instead: ``(tokens, text)``, its length (capped at ``max_tokens``; shorter ends with
"stop") and the text it returns when it finishes (e.g. a recorded sample's length and
answer); an aborted one returns no text. A prefix cache of full ``block_size`` blocks (chained
hashes, as the engine's) decides how many prompt tokens a request computes; finished
requests leave their blocks in it. Results report ``elapsed_s`` in virtual seconds.

**On a cluster** (``SimClient(cluster=SimCluster(config, policy_factory, router))``) the
requests run on the cluster simulator instead (:class:`~reasonserve.sim.cluster.ClusterLoop`:
``config``'s instances under ``policy_factory()``'s policy, placed by ``router``, as
:func:`~reasonserve.sim.simulate` runs a workload), and the programs run with
``client.run(main())``: virtual time moves only while every coroutine waits, so every
program has reacted to the requests that finished before any instance decides again
(see :mod:`reasonserve.clients._sim_cluster`). A request submitted arrives at the
current virtual time (same-time arrivals in request id order); its tokens are reasoning
tokens to the policies (one chain of thought ending with its answer); a request id
``{program_id}/...`` makes it one of that program's requests (what
``SelfConsistency(program_id=...)`` names its samples), and a program may report its
progress (:meth:`report_progress`), which the policies see as ``SchedulerView.programs``
(Dynasor reads it). ``await client.sleep_until(t)`` waits until virtual time ``t`` (a
program arriving then); ``client.result()`` is the run's
:class:`~reasonserve.sim.cluster.SimResult`. The cluster has no prefix cache of its own
(``num_cached_tokens`` is 0); prompts share prefix-block hashes, which LPM reads.
"""

from __future__ import annotations

import asyncio
import math
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from reasonserve.clients._sim_cluster import SimCluster, _Cluster, program_of, run_on
from reasonserve.clients.errors import UnsupportedError
from reasonserve.clients.protocol import (
    Capabilities,
    Chunk,
    GenerateRequest,
    GenerateResult,
    ProbeResult,
    ProgramProgress,
)
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.cost.roofline import RooflineCostModel
from reasonserve.policies.fcfs import FCFSPolicy
from reasonserve.sim.cluster.config import SimConfig
from reasonserve.sim.cluster.instance import SimInstance
from reasonserve.sim.cluster.result import SimResult
from reasonserve.sim.cluster.sequence import SimSequence
from reasonserve.sim.workloads.requests import SimRequest

__all__ = ["SimClient", "SimCluster"]

T = TypeVar("T")

_UNBOUNDED = 2**40  # seats, KV tokens and tokens a step: the client's instance never refuses work


@dataclass(eq=False)
class _Req:
    prompt: list[int]
    output: list[int]  # every token it will generate (drawn at submission)
    finish_reason: str  # "stop" (an eos) or "length"
    cached: int
    start_s: float
    done: asyncio.Future
    text: str | None = None  # scripted: a probe's answer, or ``outputs``' text


class SimClient:
    def __init__(self, cost_model: RooflineCostModel | None = None, *, block_size: int | None = None,
                 vocab_size: int = 256, eos_token_id: int | None = None, eos_probability: float = 0.0,
                 probe_answer: Callable[[int], str] | None = None, seed: int = 0,
                 outputs: Callable[[GenerateRequest], tuple[int, str]] | None = None,
                 cluster: SimCluster | None = None) -> None:  # fmt: skip
        if cluster is not None:
            if not isinstance(cluster, SimCluster):
                raise InvalidArgumentError(f"cluster must be a SimCluster or None, got {cluster!r}")
            if cost_model is not None or block_size not in (None, cluster.config.block_size):
                raise InvalidArgumentError("on a cluster the cost model and block size are the config's")
            block_size = cluster.config.block_size
        elif not isinstance(cost_model, RooflineCostModel):
            raise InvalidArgumentError("cost_model must be a RooflineCostModel")
        block_size = 16 if block_size is None else block_size
        _check_config(block_size, vocab_size, eos_token_id, eos_probability, seed)
        self.cost_model, self.block_size, self.vocab_size = cost_model, block_size, vocab_size
        self.eos_token_id, self.eos_probability = eos_token_id, eos_probability
        self.probe_answer, self.seed, self.outputs = probe_answer, seed, outputs
        if outputs is not None and not callable(outputs):
            raise InvalidArgumentError(f"outputs must be callable or None, got {outputs!r}")
        self._now_s = 0.0
        self._num_steps = 0
        self._cache: set[int] = set()
        self._live: dict[str, _Req] = {}
        self._cluster = None if cluster is None else _Cluster(cluster)
        self._instance = None  # without a cluster: one instance with room for every request
        if cost_model is not None:
            config = SimConfig(num_instances=1, block_size=block_size, max_num_seqs=_UNBOUNDED,
                               max_num_batched_tokens=_UNBOUNDED, kv_capacity_tokens=_UNBOUNDED,
                               skip_quiet_steps=False)  # fmt: skip
            self._instance = SimInstance("sim-client", config, cost_model, FCFSPolicy())
        self._reported = 0  # the instance's finished requests already looked at
        self._driver: asyncio.Task | None = None

    @property
    def now_s(self) -> float:
        """Virtual seconds since the client started."""
        return self._now_s if self._cluster is None else self._cluster.loop.now

    @property
    def num_steps(self) -> int:
        """Engine steps run (on a cluster: over every instance)."""
        if self._cluster is None:
            return self._num_steps
        return sum(inst.steps for inst in self._cluster.loop.instances)

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(token_ids=True, priority=False, seed=True, abort=True, cached_tokens=True,
                            progress=self._cluster is not None)  # fmt: skip

    # requests ------------------------------------------------------------------------
    async def generate(self, req: GenerateRequest) -> GenerateResult:
        return await self._submit(req, None)

    async def _submit(self, req: GenerateRequest, text: str | None) -> GenerateResult:
        prompt = list(req.prompt.encode()) if isinstance(req.prompt, str) else list(req.prompt)
        rid = req.request_id or f"sim-{uuid.uuid4().hex}"
        if rid in self._live:
            raise InvalidArgumentError(f"request id {rid!r} is already live on this client")
        seed = req.seed if req.seed is not None else random.Random(rid).getrandbits(63)
        if text is None and self.outputs is not None:  # a generation the caller scripts
            length, text = self._scripted(req)
            if self._cluster is not None:
                self._cluster.check_fits(rid, len(prompt), length)
            output = self._stream(seed, length)
            reason = "length" if length == req.max_tokens else "stop"
        else:
            if self._cluster is not None:
                self._cluster.check_fits(rid, len(prompt), req.max_tokens)
            output, reason = self._tokens(len(prompt), seed, req.max_tokens)
        if self._cluster is not None:
            return await self._on_cluster(rid, prompt, output, reason, text)
        cached = self._cached_prefix(prompt)
        live = _Req(prompt, output, reason, cached, self.now_s, asyncio.get_running_loop().create_future(),
                    text)  # fmt: skip
        self._live[rid] = live
        inst = self._instance
        assert inst is not None  # the client runs one instance where it runs no cluster
        inst.add(SimRequest(rid, self.now_s, len(prompt), 0, len(output), cached_tokens=cached), self.now_s)
        if self._driver is None or self._driver.done():
            self._driver = asyncio.ensure_future(self._drive())
        try:
            return await live.done
        finally:  # answered, or cancelled by its caller: then it stops running
            self._live.pop(rid, None)
            if rid in inst.by_id:
                inst.stop(rid, "abort", self.now_s)

    async def _on_cluster(self, rid: str, prompt: list[int], output: list[int], reason: str,
                          text: str | None) -> GenerateResult:  # fmt: skip
        cluster = self._cluster
        assert cluster is not None
        if asyncio.get_running_loop() is not cluster.aio:
            raise InvalidArgumentError("a SimClient on a cluster runs its programs with client.run(main())")
        now = self.now_s
        live = _Req(prompt, output, reason, 0, now, asyncio.get_running_loop().create_future(), text)
        req = SimRequest(rid, now, len(prompt), len(output), 0, program_of(rid),
                         tuple(self._hashes(prompt, len(prompt) // self.block_size)))  # fmt: skip
        cluster.submit(req, lambda seq: self._finished(rid, live, seq))
        self._live[rid] = live
        try:
            return await live.done
        finally:  # answered, or cancelled by its caller: then it stops running
            self._live.pop(rid, None)
            if live.done.cancelled() or not live.done.done():  # cancelling the task cancels its future
                cluster.stop(rid)

    def _finished(self, rid: str, live: _Req, seq: SimSequence) -> None:
        """A request on the cluster finished (all its tokens, or a policy ended it)."""
        if not live.done.done():
            complete = seq.finish_reason == "length"  # else a policy ended it: an abort to the caller
            reason = live.finish_reason if complete else "abort"
            live.done.set_result(self._result(rid, live, seq.num_output, reason, complete))

    def _scripted(self, req: GenerateRequest) -> tuple[int, str]:
        """``outputs(req)``, checked: (tokens, capped at ``max_tokens``; text)."""
        got = self.outputs(req)  # type: ignore[misc]
        ok = isinstance(got, tuple) and len(got) == 2 and isinstance(got[1], str)
        if not ok or isinstance(got[0], bool) or not isinstance(got[0], int) or got[0] < 1:
            raise InvalidArgumentError(f"outputs(request) must return (tokens >= 1, text), got {got!r}")
        return min(got[0], req.max_tokens), got[1]

    def _stream(self, seed: int, length: int) -> list[int]:
        """A scripted generation's ``length`` tokens: one stream seeded by (client seed,
        request seed), no eos (its length is the script's)."""
        return random.Random(hash((self.seed, seed))).choices(range(self.vocab_size), k=length)

    def _tokens(self, prompt_len: int, seed: int, max_tokens: int) -> tuple[list[int], str]:
        """The request's tokens, up to and including an eos or ``max_tokens`` of them."""
        out: list[int] = []
        while len(out) < max_tokens:
            rng = random.Random(hash((self.seed, seed, prompt_len + len(out))))
            if self.eos_token_id is not None and rng.random() < self.eos_probability:
                out.append(self.eos_token_id)
                return out, "stop"
            out.append(rng.randrange(self.vocab_size))
        return out, "length"

    async def stream(self, req: GenerateRequest) -> AsyncIterator[Chunk]:
        out = await self.generate(req)
        yield Chunk(out.request_id, out.text, out.token_ids, out.finish_reason)

    async def probe(self, prefix: str | Sequence[int], suffix: str, max_tokens: int, *,
                    request_id: str | None = None) -> ProbeResult:  # fmt: skip
        prompt = prefix + suffix if isinstance(prefix, str) else (*prefix, *suffix.encode())
        position = len(prefix)
        text = None if self.probe_answer is None else f"{self.probe_answer(position)}}}"
        req = GenerateRequest(prompt, max_tokens=max_tokens, temperature=0.0, request_id=request_id)
        out = await self._submit(req, text)
        n = out.num_prompt_tokens or 0
        return ProbeResult(out.text, out.token_ids, out.finish_reason, n, n - (out.num_cached_tokens or 0),
                           out.elapsed_s)  # fmt: skip

    async def abort(self, request_id: str) -> None:
        live = self._live.get(request_id)
        if live is None or live.done.done():
            return
        if self._cluster is not None:
            num_output = self._cluster.stop(request_id)
        else:
            assert self._instance is not None
            seq = self._instance.by_id.get(request_id)
            if seq is None:
                return
            self._instance.stop(request_id, "abort", self.now_s)
            num_output = seq.num_output
        live.done.set_result(self._result(request_id, live, num_output, "abort", False))

    def report_progress(self, program_id: str, progress: ProgramProgress) -> None:
        """A program's progress (on a cluster: the policies see it in ``SchedulerView.programs``)."""
        if self._cluster is None:
            raise UnsupportedError("only a SimClient on a cluster schedules by programs' progress")
        self._cluster.report(program_id, progress)

    async def sleep_until(self, when: float) -> None:
        """On a cluster: wait until virtual time ``when`` (at once when it has passed)."""
        if self._cluster is None:
            raise UnsupportedError("sleep_until needs a SimClient on a cluster")
        number = isinstance(when, (int, float)) and not isinstance(when, bool)
        if not number or not math.isfinite(when):
            raise InvalidArgumentError(f"when must be a finite number of seconds, got {when!r}")
        if when > self.now_s:
            await self._cluster.sleep_until(float(when))

    def run(self, main: Awaitable[T]) -> T:
        """On a cluster: run ``main`` (a coroutine running programs on this client) to its
        end, the simulation advancing whenever every coroutine waits."""
        if self._cluster is None:
            raise UnsupportedError("SimClient.run needs a cluster; without one use asyncio.run")
        return run_on(self._cluster, main)  # type: ignore[return-value]

    def result(self) -> SimResult:
        """On a cluster: every request's timeline, placements, migrations (the run goes
        on to its end first: requests no one waits for any more finish)."""
        if self._cluster is None:
            raise UnsupportedError("SimClient.result needs a cluster")
        if self._cluster.aio is not None:
            raise InvalidArgumentError("the programs are still running (call result() after run())")
        return self._cluster.result()

    async def score(self, prompt: str, responses: Sequence[str]) -> list[float]:
        raise UnsupportedError("the simulator has no reward model: pass scorer= to the program")

    # the batch: the simulator's instance, one engine step at a time --------------------
    async def _drive(self) -> None:
        inst = self._instance
        assert inst is not None
        while True:
            for _ in range(4):  # requests started from the last step's results join this one
                await asyncio.sleep(0)
            if not inst.has_work:
                return
            due = inst.step(self.now_s)
            if due is None:  # cannot happen with the unbounded instance; a guard against a hang
                raise RuntimeError("the simulated instance made no progress")
            self._now_s = due
            inst.finish_run(due)
            self._num_steps += 1
            self._answer_finished(inst.finished)

    def _answer_finished(self, finished: list[SimSequence]) -> None:
        for seq in finished[self._reported :]:
            live = self._live.get(seq.request_id)
            if live is not None and not live.done.done():
                assert seq.finish_reason is not None  # set when it finished
                self._register(live.prompt + live.output[:-1])
                ran_out = seq.finish_reason == "length"  # else a policy ended it
                reason = live.finish_reason if ran_out else seq.finish_reason
                live.done.set_result(self._result(seq.request_id, live, seq.num_output, reason, ran_out))
        self._reported = len(finished)

    def _result(self, rid: str, r: _Req, num_output: int, reason: str, complete: bool) -> GenerateResult:
        """``complete``: it generated all its tokens (a scripted text is returned only then)."""
        tokens = r.output[:num_output]
        if r.text is not None:
            text = r.text if complete else ""
        else:
            text = bytes(t for t in tokens if t < 256).decode("utf-8", "replace")
        return GenerateResult(rid, text, tuple(tokens), reason, tuple(r.prompt), len(r.prompt), r.cached,
                              self.now_s - r.start_s)  # fmt: skip

    # prefix cache ----------------------------------------------------------------------
    def _hashes(self, tokens: list[int], count: int) -> list[int]:
        out, parent, bs = [], 0, self.block_size
        for b in range(count):
            parent = hash((parent, tuple(tokens[b * bs : (b + 1) * bs])))
            out.append(parent)
        return out

    def _cached_prefix(self, prompt: list[int]) -> int:
        hits = 0
        for h in self._hashes(prompt, (len(prompt) - 1) // self.block_size):
            if h not in self._cache:
                break
            hits += 1
        return hits * self.block_size

    def _register(self, tokens: list[int]) -> None:
        if len(self._cache) > 1_000_000:
            self._cache.clear()  # bounded: a full cache starts over
        self._cache.update(self._hashes(tokens, len(tokens) // self.block_size))


def _check_config(block_size, vocab_size, eos_token_id, eos_probability, seed) -> None:
    def is_int(v) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if not (is_int(block_size) and block_size >= 1 and is_int(vocab_size) and 2 <= vocab_size <= 2**31):
        raise InvalidArgumentError(f"need int block_size >= 1 and vocab_size in [2, 2**31], got "
                                   f"{block_size!r}, {vocab_size!r}")  # fmt: skip
    number = isinstance(eos_probability, (int, float)) and not isinstance(eos_probability, bool)
    if not number or not 0 <= eos_probability <= 1:
        raise InvalidArgumentError(f"eos_probability must be a number in [0, 1], got {eos_probability!r}")
    if eos_token_id is not None and not (is_int(eos_token_id) and 0 <= eos_token_id < vocab_size):
        raise InvalidArgumentError(f"eos_token_id must be None or in [0, vocab_size), got {eos_token_id!r}")
    if not is_int(seed):
        raise InvalidArgumentError(f"seed must be an int, got {seed!r}")
