"""The embedded engine: a thin loop over a :class:`Scheduler` and a :class:`ModelRunner`.

``step()``: the scheduler asks the policy object and hands out this step's tokens;
in ``mode="dvr"`` deterministic requests' prefill chunks run on the batch-invariant
kernels and everything else on the stock kernels (everything invariant in
``mode="batch_invariant"``); requests whose
pending tokens are all computed sample one token; deterministic requests due for
verification go through fixed-shape verify passes (``dvr_host``); finished requests
are returned and forgotten. See ``docs/engine.md``.
"""

from __future__ import annotations

import itertools
import pathlib
import random
import time
from collections.abc import Callable, Sequence

from reasonserve.core.errors import InvalidArgumentError, UnknownRequestError
from reasonserve.dvr.controller import DVRCounters
from reasonserve.engine.dvr_host import verify_due
from reasonserve.engine.engine_config import EngineConfig
from reasonserve.engine.kernels import INVARIANT, STOCK, Kernels
from reasonserve.engine.logprobs import TokenLogprobs, token_logprobs
from reasonserve.engine.metrics import EngineMetrics
from reasonserve.engine.model import DecoderModel
from reasonserve.engine.model_runner import Chunk, ModelRunner
from reasonserve.engine.outputs import RequestOutput
from reasonserve.engine.probe import probe
from reasonserve.engine.requests import check_committed, check_prompt, prefix_hashes
from reasonserve.engine.sampling_params import SamplingParams
from reasonserve.engine.scheduler import Scheduler
from reasonserve.engine.sequence import Sequence as Seq
from reasonserve.engine.tokenizer import Tokenizer, load_tokenizer

__all__ = ["Engine"]


class Engine:
    def __init__(
        self,
        model: DecoderModel,
        config: EngineConfig | None = None,
        *,
        policy: object | None = None,
        clock: Callable[[], float] = time.monotonic,
        fast_path_fault: Callable[[str, int, int], int] | None = None,
        tokenizer: Tokenizer | None = None,
    ) -> None:
        """``policy``: any object with ``decide(view)`` (default: ``config.policy`` looked up
        by name). ``fast_path_fault(request_id, position, token) -> token`` may replace
        tokens sampled on the stock-kernel decode path: a fault-injection seam for testing
        decode-verify-rollback (None in production)."""
        self.model, self.config, self.clock = model, config or EngineConfig(), clock
        self.fast_path_fault, self.tokenizer = fast_path_fault, tokenizer
        self.max_model_len = self.config.max_model_len or model.cfg.default_max_model_len
        model.cfg.check_context(self.max_model_len)
        self._eos = self.config.all_eos_token_ids
        cfg = self.config
        verify = (cfg.dvr_group_size, cfg.dvr_window) if cfg.mode == "dvr" else None
        self.runner = ModelRunner(model, cfg.num_blocks, cfg.block_size, max_num_seqs=cfg.max_num_seqs,
                                  max_model_len=self.max_model_len, cuda_graphs=cfg.cuda_graphs,
                                  verify=verify)  # fmt: skip
        self.scheduler = Scheduler(
            self.config, policy if policy is not None else _named(self.config.policy), self.runner, clock
        )
        self.dvr = DVRCounters()
        self.num_aborted = self.num_finished = 0
        self._ids = itertools.count()
        self._seeds = random.Random(self.config.seed)

    @classmethod
    def from_pretrained(
        cls, path: str | pathlib.Path, config: EngineConfig | None = None, *, device="cpu", dtype=None, **kw
    ) -> Engine:
        """``device``/``dtype`` as for :class:`DecoderModel` ("cuda", "bfloat16", ...; dtype
        None: float32 on CPU, bfloat16 on CUDA)."""
        model = DecoderModel.from_pretrained(path, device=device, dtype=dtype)
        kw.setdefault("tokenizer", load_tokenizer(path, model.cfg.vocab_size))
        return cls(model, config, **kw)

    # state, read only ------------------------------------------------------------------
    policy = property(lambda self: self.scheduler.policy)
    blocks = property(lambda self: self.scheduler.blocks)
    cache = property(lambda self: self.runner.cache)
    running = property(lambda self: self.scheduler.running)
    waiting = property(lambda self: self.scheduler.waiting)

    # requests --------------------------------------------------------------------------
    def add_request(
        self,
        prompt: Sequence[int] | str,
        params: SamplingParams | None = None,
        request_id: str | None = None,
        *,
        program_id: str | None = None,
        committed_output: Sequence[int] = (),
    ) -> str:
        """Queue a prompt (token ids, or text when the engine has a tokenizer). Raises
        InvalidArgumentError for bad input, a duplicate live id, or a request that can never
        fit (prompt + max_tokens over ``max_model_len`` or over the whole KV cache).

        ``committed_output``: output tokens this request already committed elsewhere (a
        migration): they count as final output and are re-prefilled here (their KV is
        recomputed, not copied); sampling goes on at the next position with the same seed.
        With ``params.logprobs`` their logprobs entries are None (they were sampled, and
        their logprobs reported, where they were committed)."""
        params = params if params is not None else SamplingParams()
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise InvalidArgumentError("text prompts need a tokenizer; pass token ids")
            prompt = self.tokenizer.encode(prompt)
        tokens = check_prompt(
            prompt,
            params,
            self.model.cfg.vocab_size,
            self.max_model_len,
            self.config.num_blocks * self.config.block_size,
        )
        rid = request_id if request_id is not None else f"req-{next(self._ids)}"
        if not isinstance(rid, str) or not rid:
            raise InvalidArgumentError(f"request_id must be a non-empty str, got {rid!r}")
        if rid in self.scheduler.by_id:
            raise InvalidArgumentError(f"request id {rid!r} is already in use")
        if program_id is not None and not isinstance(program_id, str):
            raise InvalidArgumentError(f"program_id must be a str or None, got {program_id!r}")
        if params.thinking_token_budget is not None and not self.config.thinking_end_ids:
            raise InvalidArgumentError(
                "thinking_token_budget needs the engine's end_of_thinking_token_id(s) (the tokens it forces)"
            )
        seed = params.seed if params.seed is not None else self._seeds.getrandbits(63)
        seq = Seq(
            rid,
            tokens,
            params,
            seed,
            self.clock(),
            self.config.thinking_end_ids,
            program_id,
            prefix_hashes(tokens, self.config.block_size),
        )
        if self.config.mode == "dvr" and not params.deterministic:
            seq.kv_salt = "stock"  # its prompt runs on the fast path: keep its blocks apart
        if committed_output:
            seq.restore(check_committed(committed_output, params, self.model.cfg.vocab_size), seq.arrival_s)
        self.scheduler.add(seq)
        return rid

    def _live(self, request_id: str) -> Seq:
        seq = self.scheduler.by_id.get(request_id) if isinstance(request_id, str) else None
        if seq is None:
            raise UnknownRequestError(f"unknown or finished request id {request_id!r}")
        return seq

    def abort(self, request_id: str) -> RequestOutput:
        """Finish a waiting or running request now ("abort"); its KV blocks are freed."""
        seq = self._live(request_id)
        return self._finish(seq, "abort")

    def has_unfinished(self) -> bool:
        return bool(self.scheduler.by_id)

    def verified_tokens(self, request_id: str) -> list[int]:
        """The output tokens of a live request that are final (what a stream may send)."""
        return list(self._live(request_id).verified_output)

    def verified_logprobs(self, request_id: str, start: int = 0) -> list[TokenLogprobs | None]:
        """Logprobs of the final output tokens from index ``start`` (empty unless the
        request asked for logprobs; None for ``committed_output`` tokens)."""
        seq = self._live(request_id)
        return seq.logprobs[start : seq.dvr.verified]

    def metrics(self) -> EngineMetrics:
        s, d = self.scheduler, self.dvr
        return EngineMetrics(
            len(s.running),
            len(s.waiting),
            s.blocks.num_blocks - s.blocks.num_free,
            s.blocks.num_blocks,
            s.num_preemptions,
            self.num_aborted,
            self.num_finished,
            d.verify_passes,
            d.rollbacks,
            d.tokens_rolled_back,
            d.verify_tokens,
            d.verify_s,
            0 if self.runner.graphs is None else self.runner.graphs.replays,
        )

    # the loop ----------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """One scheduling + forward step; returns the requests that finished in it."""
        plan, stopped = self.scheduler.schedule()
        outs = [self._output(seq, stop_reason=reason) for seq, reason in stopped]
        for seq, _ in stopped:
            self._count(seq.finish_reason)
        if self.config.mode == "batch_invariant":
            parts = [(INVARIANT, plan)]
        else:
            # Deterministic requests' prefills run invariant; everything else on the fast path.
            trusted = [(s, n) for s, n in plan if _invariant_prefill(s, n)]
            fast = [(s, n) for s, n in plan if not _invariant_prefill(s, n)]
            parts = [(INVARIANT, trusted), (STOCK, fast)]
        for kernels, part in parts:
            if part:
                outs += self._run(part, kernels)
        if self.config.mode == "dvr":
            start = time.perf_counter()  # verify passes end by reading tokens back: wall time is device time
            for seq, err in verify_due(
                self.running, self.runner, self.config, self.dvr, self._stopped, self.clock
            ):
                outs += self._settle(seq, err)
            self.dvr.verify_s += time.perf_counter() - start
        return outs

    def _run(self, part: list[tuple[Seq, int]], kernels: Kernels) -> list[RequestOutput]:
        chunks = [
            Chunk(s.pending(n), s.num_computed, s.block_table, int(n == s.num_pending)) for s, n in part
        ]
        try:
            logits = self.runner.run(chunks, kernels)
        except Exception as err:
            if len(part) == 1:
                return [self._finish(part[0][0], "error", error=err)]
            # Which request failed the pass? Each runs alone: only the one that fails again fails.
            return [out for item in part for out in self._run([item], kernels)]
        for seq, n in part:
            if seq.num_computed < len(seq.prompt):  # prompt blocks enter the prefix cache
                self.blocks.register_full_blocks(
                    seq.block_table, seq.prompt, min(seq.num_computed + n, len(seq.prompt)), seq.kv_salt
                )
            seq.num_computed += n
            seq.quantum_used += n
        ready = [s for (s, _), c in zip(part, chunks, strict=True) if c.want]
        tokens = self.runner.sample(
            logits, [s.params for s in ready], [s.seed for s in ready], [s.num_tokens for s in ready]
        )
        outs = []
        for row, (seq, token) in enumerate(zip(ready, tokens, strict=True)):
            try:
                outs += self._take(seq, token, logits, row, trusted=kernels is INVARIANT)
            except Exception as err:
                outs.append(self._finish(seq, "error", error=err))
        return outs

    def _take(
        self, seq: Seq, token: int | Exception, logits, row: int, *, trusted: bool
    ) -> list[RequestOutput]:
        if isinstance(token, Exception):
            raise token
        forced = seq.forced_token(len(seq.output))
        if forced is not None:
            token = forced
        elif not trusted and self.fast_path_fault is not None:
            token = self.fast_path_fault(seq.request_id, seq.num_tokens, token)
        k = seq.params.logprobs
        seq.append(token, self.clock(), None if k is None else token_logprobs(logits[row], token, k))
        seq.dvr.on_sampled(len(seq.output), trusted, seq.params.deterministic and self.config.mode == "dvr")
        return self._settle(seq, None)

    def _settle(self, seq: Seq, err: Exception | None) -> list[RequestOutput]:
        """Finish ``seq`` if it failed, or stopped with every token verified."""
        if err is not None:
            return [self._finish(seq, "error", error=err)]
        reason = self._finish_reason(seq)
        if reason is not None and seq.dvr.verified == len(seq.output):
            return [self._finish(seq, reason)]
        return []

    def _finish_reason(self, seq: Seq) -> str | None:
        token, p = seq.output[-1], seq.params
        if (token in self._eos and not p.ignore_eos) or token in p.stop_token_ids:
            return "stop"
        if len(seq.output) >= p.max_tokens or seq.num_tokens >= self.max_model_len:
            return "length"
        return None

    def _stopped(self, seq: Seq) -> bool:
        return self._finish_reason(seq) is not None

    def _finish(self, seq: Seq, reason: str, *, error: Exception | None = None) -> RequestOutput:
        self.scheduler.finish(seq, reason)
        self._count(reason)
        message = None if error is None else f"{type(error).__name__}: {error}"
        return self._output(seq, error=message)

    def _count(self, reason: str | None) -> None:
        self.num_finished += 1
        self.num_aborted += reason == "abort"

    def _output(self, seq: Seq, *, error: str | None = None, stop_reason: str | None = None) -> RequestOutput:
        text = self.tokenizer.decode(seq.output) if self.tokenizer is not None else None
        return RequestOutput(
            seq.request_id,
            list(seq.prompt),
            list(seq.output),
            seq.finish_reason,
            seq.phase,
            seq.metrics(),
            text,
            error,
            stop_reason,
            list(seq.logprobs) if seq.params.logprobs is not None else None,
        )

    # convenience ---------------------------------------------------------------------------
    def probe(
        self,
        request_id: str,
        suffix_tokens: Sequence[int],
        max_tokens: int = 20,
        params: SamplingParams | None = None,
    ) -> list[int]:
        """Run a fork of the request's current prefix plus ``suffix_tokens`` (greedy unless
        ``params`` says otherwise); the request is unchanged (Dynasor's probe, host side)."""
        return probe(self, self._live(request_id), suffix_tokens, max_tokens, params)

    def generate(
        self,
        prompts: Sequence[Sequence[int] | str],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[RequestOutput]:
        """Run prompts to completion; outputs in prompt order."""
        per: list = list(params) if isinstance(params, (list, tuple)) else [params] * len(prompts)
        if len(per) != len(prompts):
            raise InvalidArgumentError(f"got {len(per)} SamplingParams for {len(prompts)} prompts")
        ids = [self.add_request(p, sp) for p, sp in zip(prompts, per, strict=True)]
        wanted, done = set(ids), dict[str, RequestOutput]()
        while wanted - done.keys():
            done |= {o.request_id: o for o in self.step() if o.request_id in wanted}
        return [done[i] for i in ids]

    def check_blocks(self) -> None:
        """Block accounting: every block is either free or held by a live request."""
        self.blocks.check([s.block_table for s in self.running])


def _invariant_prefill(seq: Seq, n: int) -> bool:
    return seq.params.deterministic and (n > 1 or seq.num_computed < len(seq.prompt))


def _named(name: str) -> object:
    from reasonserve.policies import REGISTRY  # names are for the CLI and configs only

    if name not in REGISTRY:
        raise InvalidArgumentError(f"policy must be one of {sorted(REGISTRY)}, got {name!r}")
    return REGISTRY[name]()
