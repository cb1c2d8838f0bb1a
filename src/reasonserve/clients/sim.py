"""An :class:`EngineClient` on the simulator's cost model: virtual time, synthetic tokens.

For costing programs without a model (ARCHITECTURE "What runs where": programs on the
simulator get cost-model tokens). Live requests form one continuous batch: each step,
every request not yet prefilled computes its uncached prompt tokens and every other one
decodes a token; the step takes ``RooflineCostModel.step_s`` of *virtual* time
(``now_s``). Requests that arrive while a step is under way join the next one, so a
probe started beside a chunk overlaps it in virtual time as it would on a host.

Tokens are synthetic: the token at position ``p`` is drawn from (client seed, request
seed, ``p``); an eos (``eos_token_id``) is drawn with ``eos_probability`` per token.
Text is the tokens' bytes (ids < 256). Probes answer ``probe_answer(position) + "}"``
when ``probe_answer`` is given (a scripted answer curve, e.g. "settles on 42 after 900
tokens"), else synthetic text. A prefix cache of full ``block_size`` blocks (chained
hashes, as the engine's) decides how many prompt tokens a request computes; finished
requests leave their blocks in it. Results report ``elapsed_s`` in virtual seconds.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

from reasonserve.clients.errors import UnsupportedError
from reasonserve.clients.protocol import Capabilities, Chunk, GenerateRequest, GenerateResult, ProbeResult
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.cost.roofline import RooflineCostModel

__all__ = ["SimClient"]


@dataclass(eq=False)
class _Req:
    rid: str
    prompt: list[int]
    req: GenerateRequest
    seed: int
    start_s: float
    done: asyncio.Future
    output: list[int] = field(default_factory=list)
    computed: int = 0  # prompt tokens with KV
    cached: int = 0
    prefilled: bool = False
    probe_text: str | None = None


class SimClient:
    def __init__(self, cost_model: RooflineCostModel, *, block_size: int = 16, vocab_size: int = 256,
                 eos_token_id: int | None = None, eos_probability: float = 0.0,
                 probe_answer: Callable[[int], str] | None = None, seed: int = 0) -> None:  # fmt: skip
        if not isinstance(cost_model, RooflineCostModel):
            raise InvalidArgumentError("cost_model must be a RooflineCostModel")
        _check_config(block_size, vocab_size, eos_token_id, eos_probability, seed)
        self.cost_model, self.block_size, self.vocab_size = cost_model, block_size, vocab_size
        self.eos_token_id, self.eos_probability = eos_token_id, eos_probability
        self.probe_answer, self.seed = probe_answer, seed
        self.now_s = 0.0
        self.num_steps = 0
        self._cache: set[int] = set()
        self._live: dict[str, _Req] = {}
        self._driver: asyncio.Task | None = None

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(token_ids=True, priority=False, seed=True, abort=True, cached_tokens=True)

    # requests ------------------------------------------------------------------------
    async def generate(self, req: GenerateRequest) -> GenerateResult:
        return await self._submit(req, None)

    async def _submit(self, req: GenerateRequest, probe_text: str | None) -> GenerateResult:
        prompt = list(req.prompt.encode()) if isinstance(req.prompt, str) else list(req.prompt)
        rid = req.request_id or f"sim-{uuid.uuid4().hex}"
        seed = req.seed if req.seed is not None else random.Random(rid).getrandbits(63)
        live = _Req(rid, prompt, req, seed, self.now_s, asyncio.get_running_loop().create_future())
        live.probe_text = probe_text
        self._live[rid] = live
        if self._driver is None or self._driver.done():
            self._driver = asyncio.ensure_future(self._drive())
        try:
            return await live.done
        finally:
            self._live.pop(rid, None)

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
        if live is not None and not live.done.done():
            live.done.set_result(self._result(live, "abort"))

    async def score(self, prompt: str, responses: Sequence[str]) -> list[float]:
        raise UnsupportedError("the simulator has no reward model: pass scorer= to the program")

    # the batch -------------------------------------------------------------------------
    async def _drive(self) -> None:
        while True:
            for _ in range(4):  # requests started from the last step's results join this one
                await asyncio.sleep(0)
            batch = [r for r in self._live.values() if not r.done.done()]
            if not batch:
                return
            chunks = [self._plan(r) for r in batch]
            self.now_s += self.cost_model.step_s(chunks)
            self.num_steps += 1
            for r in batch:
                self._advance(r)

    def _plan(self, r: _Req) -> tuple[int, int]:
        if r.prefilled:
            return 1, len(r.prompt) + len(r.output) - 1
        r.cached = self._cached_prefix(r.prompt)
        return len(r.prompt) - r.cached, r.cached

    def _advance(self, r: _Req) -> None:
        r.prefilled = True
        position = len(r.prompt) + len(r.output)
        rng = random.Random(hash((self.seed, r.seed, position)))
        eos = self.eos_token_id is not None and rng.random() < self.eos_probability
        r.output.append(self.eos_token_id if eos else rng.randrange(self.vocab_size))  # type: ignore[arg-type]
        if eos or len(r.output) >= r.req.max_tokens:
            self._register(r.prompt + r.output[:-1])
            r.done.set_result(self._result(r, "stop" if eos else "length"))

    def _result(self, r: _Req, reason: str) -> GenerateResult:
        text = r.probe_text if r.probe_text is not None else bytes(t for t in r.output if t < 256).decode(
            "utf-8", "replace")  # fmt: skip
        return GenerateResult(r.rid, text, tuple(r.output), reason, tuple(r.prompt), len(r.prompt), r.cached,
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
