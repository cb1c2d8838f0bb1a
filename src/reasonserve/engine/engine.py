"""The embedded engine: continuous batching over a paged KV cache.

``step()`` is the whole loop: ask the policy (admission, preemption), pick this step's
tokens (one per decoding request, prefill chunks within the token budget), run the
model once, store the new KV, sample where a request's prompt is fully computed, and
retire finished requests. Everything the model computes goes through
``reasonserve.ops``, so a request's tokens do not depend on the batch it lands in.
"""

from __future__ import annotations

import itertools
import pathlib
import random
import time
from collections.abc import Callable, Sequence

import torch

from reasonserve import ops
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.core.phase import Phase
from reasonserve.dvr.controller import accept, plan_groups, verify_inputs
from reasonserve.engine.block_manager import BlockManager, OutOfBlocks
from reasonserve.engine.engine_config import EngineConfig
from reasonserve.engine.kernels import INVARIANT, STOCK, Kernels
from reasonserve.engine.kv_cache import PagedKVCache
from reasonserve.engine.model import DecoderModel, SequenceBatch
from reasonserve.engine.outputs import RequestOutput
from reasonserve.engine.sampling_params import SamplingParams
from reasonserve.engine.sequence import RequestMetrics
from reasonserve.engine.sequence import Sequence as Seq
from reasonserve.engine.tokenizer import Tokenizer, load_tokenizer
from reasonserve.policies import REGISTRY, Admit, Preempt, RequestView, SchedulerView

__all__ = ["Engine"]


class Engine:
    def __init__(self, model: DecoderModel, config: EngineConfig | None = None, *,
                 clock: Callable[[], float] = time.monotonic,
                 fast_path_fault: Callable[[str, int, int], int] | None = None,
                 tokenizer: Tokenizer | None = None) -> None:  # fmt: skip
        """``fast_path_fault(request_id, position, token) -> token`` may replace tokens
        sampled on the stock-kernel decode path: a fault-injection seam for testing
        decode-verify-rollback (None in production)."""
        self.model, self.config, self.clock = model, config or EngineConfig(), clock
        self.fast_path_fault = fast_path_fault
        self.tokenizer = tokenizer
        self.stats = {"verify_passes": 0, "verify_tokens": 0, "rollbacks": 0, "tokens_rolled_back": 0}
        if self.config.policy not in REGISTRY:
            raise InvalidArgumentError(
                f"policy must be one of {sorted(REGISTRY)}, got {self.config.policy!r}"
            )
        self.policy = REGISTRY[self.config.policy]()
        self.max_model_len = self.config.max_model_len or model.cfg.max_position_embeddings
        self.blocks = BlockManager(self.config.num_blocks, self.config.block_size)
        self.cache = PagedKVCache(model.cfg, self.config.num_blocks, self.config.block_size,
                                  dtype=model.dtype, device=model.device)  # fmt: skip
        self.waiting: list[Seq] = []
        self.running: list[Seq] = []
        self.finished: dict[str, Seq] = {}
        self._ids = itertools.count()
        self._seeds = random.Random(self.config.seed)

    @classmethod
    def from_pretrained(
        cls, path: str | pathlib.Path, config: EngineConfig | None = None, **kwargs
    ) -> Engine:
        model = DecoderModel.from_pretrained(path)
        kwargs.setdefault("tokenizer", load_tokenizer(path, model.cfg.vocab_size))
        return cls(model, config, **kwargs)

    # requests -------------------------------------------------------------------
    def add_request(self, prompt: Sequence[int] | str, params: SamplingParams | None = None,
                    request_id: str | None = None) -> str:  # fmt: skip
        """Queue a prompt (token ids, or text when the engine has a tokenizer)."""
        params = params or SamplingParams()
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise InvalidArgumentError("text prompts need a tokenizer; pass token ids")
            prompt = self.tokenizer.encode(prompt)
        tokens = self._check_prompt(prompt, params)
        rid = request_id if request_id is not None else f"req-{next(self._ids)}"
        if rid in self._live_ids() or rid in self.finished:
            raise InvalidArgumentError(f"request id {rid!r} is already in use")
        seed = params.seed if params.seed is not None else self._seeds.getrandbits(63)
        self.waiting.append(Seq(rid, tokens, params, seed, RequestMetrics(self.clock())))
        return rid

    def _check_prompt(self, prompt: Sequence[int], params: SamplingParams) -> list[int]:
        if not isinstance(params, SamplingParams):
            raise InvalidArgumentError("params must be a SamplingParams")
        tokens = list(prompt) if not isinstance(prompt, (str, bytes)) else None
        if not tokens:
            raise InvalidArgumentError("prompt must be a non-empty list of token ids")
        vocab = self.model.cfg.vocab_size
        if any(not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab for t in tokens):
            raise InvalidArgumentError(f"prompt token ids must be ints in [0, {vocab})")
        if len(tokens) >= self.max_model_len:
            raise InvalidArgumentError(f"prompt of {len(tokens)} tokens leaves no room in max_model_len="
                                       f"{self.max_model_len}")  # fmt: skip
        if self.blocks.blocks_for(len(tokens) + 1) > self.config.num_blocks:
            raise InvalidArgumentError("prompt does not fit in the KV cache even alone")
        return tokens

    def abort(self, request_id: str) -> RequestOutput:
        seq = self._find(request_id)
        self._retire(seq, "abort")
        return self._output(seq)

    def _find(self, request_id: str) -> Seq:
        for seq in itertools.chain(self.waiting, self.running):
            if seq.request_id == request_id:
                return seq
        raise InvalidArgumentError(f"unknown or finished request id {request_id!r}")

    def _live_ids(self) -> set[str]:
        return {s.request_id for s in itertools.chain(self.waiting, self.running)}

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    # the loop --------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """One scheduling + forward step; returns the requests that finished in it."""
        self._apply(self.policy.decide(self._view()))
        plan = self._schedule()
        if not plan:
            return []
        done = []
        for kernels, part in self._split(plan):
            done += self._sample_and_retire(part, self._run(part, kernels), kernels)
        return done + self._verify()

    def _view(self) -> SchedulerView:
        def view(s: Seq) -> RequestView:
            return RequestView(s.request_id, s.metrics.arrival_s, s.phase, len(s.prompt), s.num_computed,
                               len(s.output), s.params.priority)  # fmt: skip

        return SchedulerView(
            self.clock(),
            tuple(map(view, self.waiting)),
            tuple(map(view, self.running)),
            self.blocks.num_free,
            self.config.block_size,
            self.config.max_num_seqs,
        )

    def _apply(self, decisions) -> None:
        for d in decisions:
            if isinstance(d, Preempt):
                self._preempt(self._running(d.request_id))
        for d in decisions:
            if isinstance(d, Admit) and len(self.running) < self.config.max_num_seqs:
                seq = next((s for s in self.waiting if s.request_id == d.request_id), None)
                if seq is not None and not self._admit(seq):
                    break  # no blocks: keep the policy's order, try again next step

    def _running(self, request_id: str) -> Seq:
        for seq in self.running:
            if seq.request_id == request_id:
                return seq
        raise InvalidArgumentError(f"policy preempted {request_id!r}, which is not running")

    def _admit(self, seq: Seq) -> bool:
        try:
            if seq.swapped is not None:
                seq.block_table = self.blocks.allocate(self.blocks.blocks_for(seq.num_computed))
                self.cache.write(seq.block_table, 0, *(t.to(self.model.device) for t in seq.swapped))
                seq.swapped = None
            else:
                seq.block_table, seq.num_computed = self.blocks.allocate_prompt(seq.tokens)
                seq.metrics.num_cached_tokens += seq.num_computed
        except OutOfBlocks:
            return False
        self.waiting.remove(seq)
        self.running.append(seq)
        return True

    def _preempt(self, seq: Seq) -> None:
        """Take a request out, back to the front of the queue. ``recompute`` drops its KV;
        ``swap`` keeps a host-memory copy and restores it on re-admission."""
        if self.config.preemption == "swap" and seq.num_computed:
            k, v = self.cache.gather(seq.block_table, seq.num_computed)  # type: ignore[misc]
            seq.swapped = (k.to("cpu", copy=True), v.to("cpu", copy=True))
            seq.metrics.num_swaps += 1
        else:
            seq.num_computed = 0
        self.blocks.free(seq.block_table)
        seq.block_table = []
        seq.metrics.num_preemptions += 1
        self.running.remove(seq)
        self.waiting.insert(0, seq)

    def _schedule(self) -> list[tuple[Seq, int]]:
        """(sequence, tokens to run) for this step: decodes first, then prefill chunks."""
        budget = self.config.max_num_batched_tokens
        plan: list[tuple[Seq, int]] = []
        for seq in sorted(self.running, key=lambda s: len(s.pending) > 1):
            n = min(len(seq.pending), budget)
            if n == 0 or seq not in self.running:  # preempted earlier in this loop
                continue
            while True:
                try:
                    for src, dst in self.blocks.ensure_capacity(seq.block_table, seq.num_computed + n):
                        self.cache.copy_block(src, dst)
                    break
                except OutOfBlocks:
                    victim = self.running[-1]
                    self._preempt(victim)
                    if victim is seq:
                        break
            if seq in self.running:
                plan.append((seq, n))
                budget -= n
        return [(s, n) for s, n in plan if s in self.running]

    def _split(self, plan: list[tuple[Seq, int]]) -> list[tuple[Kernels, list[tuple[Seq, int]]]]:
        """Prefill chunks run on the invariant kernels; decode steps on stock kernels in DVR mode."""
        fast = STOCK if self.config.mode == "dvr" else INVARIANT
        prefill = [(s, n) for s, n in plan if s.num_computed < len(s.prompt) or n > 1]
        decode = [(s, n) for s, n in plan if not (s.num_computed < len(s.prompt) or n > 1)]
        return [(k, part) for k, part in ((INVARIANT, prefill), (fast, decode)) if part]

    def _run(self, plan: list[tuple[Seq, int]], kernels: Kernels = INVARIANT) -> list[torch.Tensor]:
        batch = SequenceBatch(
            [torch.tensor(s.pending[:n]) for s, n in plan],
            [s.num_computed for s, _ in plan],
            [self.cache.gather(s.block_table, s.num_computed) for s, _ in plan],
        )
        logits, new_kv = self.model.forward(batch, kernels=kernels)
        for (seq, n), (k, v) in zip(plan, new_kv, strict=True):
            self.cache.write(seq.block_table, seq.num_computed, k, v)
            seq.num_computed += n
            # Only prompt blocks enter the prefix cache: they are always computed by the
            # invariant kernels, and never rolled back.
            self.blocks.register_full_blocks(
                seq.block_table, seq.prompt, min(seq.num_computed, len(seq.prompt))
            )
        return logits

    def _sample(self, seqs: list[Seq], rows: list[torch.Tensor], positions: list[int]) -> list[int]:
        p = [s.params for s in seqs]
        tokens = ops.sample(torch.stack(rows), seeds=[s.seed for s in seqs], positions=positions,
                            temperature=[x.temperature for x in p], top_k=[x.top_k for x in p],
                            top_p=[x.top_p for x in p], min_p=[x.min_p for x in p])  # fmt: skip
        return tokens.tolist()

    def _sample_and_retire(self, plan, logits, kernels: Kernels) -> list[RequestOutput]:
        ready = [(s, lg[-1]) for (s, _), lg in zip(plan, logits, strict=True) if not s.pending]
        if not ready:
            return []
        seqs = [s for s, _ in ready]
        tokens = self._sample(seqs, [row for _, row in ready], [len(s.tokens) for s in seqs])
        done = []
        for seq, token in zip(seqs, tokens, strict=True):
            trusted = kernels is INVARIANT
            if not trusted and self.fast_path_fault is not None:
                token = self.fast_path_fault(seq.request_id, len(seq.tokens), token)
            self._append(seq, token)
            if trusted and seq.dvr.verified == len(seq.output) - 1:
                seq.dvr.verified += 1  # sampled from invariant logits on a verified prefix
            if not seq.params.deterministic or self.config.mode != "dvr":
                seq.dvr.verified = len(seq.output)
            reason = self._finish_reason(seq, seq.output[-1])
            if reason and seq.dvr.verified == len(seq.output):
                self._retire(seq, reason)
                done.append(self._output(seq))
        return done

    # decode-verify-rollback ----------------------------------------------------------
    def _verify(self) -> list[RequestOutput]:
        window = self.config.dvr_window
        due = [s for s in self.running if s.params.deterministic and s.output
               and s.dvr.needs_verify(len(s.output), window, self._stopped(s))]  # fmt: skip
        done: list[RequestOutput] = []
        by_id = {s.request_id: s for s in due}
        for group in plan_groups([s.request_id for s in due], self.config.dvr_group_size):
            done += self._verify_group([by_id[r] if r is not None else None for r in group])
        return done

    def _stopped(self, seq: Seq) -> bool:
        return self._finish_reason(seq, seq.output[-1]) is not None

    def _verify_group(self, group: list[Seq | None]) -> list[RequestOutput]:
        """One fixed-shape pass: group_size slots x window tokens, dummies padding."""
        window = self.config.dvr_window
        inputs, starts, caches = [], [], []
        for seq in group:
            if seq is None:
                tokens, start = [0] * window, 0
            else:
                tokens, start = verify_inputs(seq.tokens, len(seq.prompt), seq.dvr)
                tokens = tokens + [0] * (window - len(tokens))  # padding after: causal, discarded
            inputs.append(torch.tensor(tokens))
            starts.append(start)
            caches.append(self.cache.gather(seq.block_table, start) if seq is not None else None)
        logits, new_kv = self.model.forward(SequenceBatch(inputs, starts, caches), kernels=INVARIANT)
        self.stats["verify_passes"] += 1
        self.stats["verify_tokens"] += window * len(group)
        done = []
        for seq, lg, kv, start in zip(group, logits, new_kv, starts, strict=True):
            if seq is not None and self._commit(seq, lg, kv, start):
                done.append(self._output(seq))
        return done

    def _commit(self, seq: Seq, logits: torch.Tensor, kv, start: int) -> bool:
        """Accept the agreeing prefix (+ the verifier's token); returns True if finished."""
        state, first = seq.dvr, len(seq.prompt) + seq.dvr.verified
        decoded = seq.output[state.verified :]
        checked = self._sample([seq] * len(decoded), list(logits[: len(decoded)]),
                               list(range(first, first + len(decoded))))  # fmt: skip
        result = accept(decoded, checked)
        n_kv = min(result.keep + 1, len(decoded))  # inputs whose KV is now trusted
        self.cache.write(seq.block_table, start, kv[0][:, :, :n_kv], kv[1][:, :, :n_kv])
        seq.num_computed = start + n_kv
        state.verify_passes += 1
        state.verify_tokens += self.config.dvr_window
        if result.replacement is not None:
            rolled = len(decoded) - result.keep
            state.rollbacks += 1
            state.tokens_rolled_back += rolled
            self.stats["rollbacks"] += 1
            self.stats["tokens_rolled_back"] += rolled
            del seq.output[state.verified + result.keep :]
            seq.output.append(result.replacement)
        state.verified += result.committed
        reason = self._finish_reason(seq, seq.output[-1])
        if reason is not None and state.verified == len(seq.output):
            self._retire(seq, reason)
            return True
        return False

    def _append(self, seq: Seq, token: int) -> None:
        now = self.clock()
        if seq.metrics.first_token_s is None:
            seq.metrics.first_token_s = now
            thinking = self.config.end_of_thinking_token_id is not None
            seq.phase = Phase.REASONING if thinking else Phase.ANSWERING
            if not thinking:
                seq.metrics.first_answer_token_s = now
        elif seq.phase is Phase.ANSWERING and seq.metrics.first_answer_token_s is None:
            seq.metrics.first_answer_token_s = now
        seq.output.append(token)
        if token == self.config.end_of_thinking_token_id and seq.phase is Phase.REASONING:
            seq.phase = Phase.ANSWERING

    def _finish_reason(self, seq: Seq, token: int) -> str | None:
        stop = (
            token == self.config.eos_token_id and not seq.params.ignore_eos
        ) or token in seq.params.stop_token_ids
        if stop:
            return "stop"
        if len(seq.output) >= seq.params.max_tokens or len(seq.tokens) >= self.max_model_len:
            return "length"
        return None

    def _retire(self, seq: Seq, reason: str) -> None:
        if seq in self.running:
            self.blocks.free(seq.block_table)
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        seq.block_table, seq.swapped = [], None
        seq.finish_reason, seq.phase = reason, Phase.FINISHED
        seq.metrics.finished_s = self.clock()
        self.finished[seq.request_id] = seq

    def _output(self, seq: Seq) -> RequestOutput:
        text = self.tokenizer.decode(seq.output) if self.tokenizer is not None else None
        return RequestOutput(seq.request_id, list(seq.prompt), list(seq.output), seq.finish_reason,
                             seq.phase, seq.metrics, text)  # fmt: skip

    # probing -----------------------------------------------------------------------
    def probe(self, request_id: str, suffix_tokens: Sequence[int], max_tokens: int = 20,
              params: SamplingParams | None = None) -> list[int]:  # fmt: skip
        """Run a fork of the request's current prefix plus ``suffix_tokens``; return the
        probe's tokens (greedy unless ``params`` says otherwise). The request is not
        changed: the fork shares its KV blocks and copies a block before writing into it
        (Dynasor's probe-in-the-middle, host side)."""
        seq = self._find(request_id)
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise InvalidArgumentError(f"max_tokens must be an int >= 1, got {max_tokens!r}")
        params = params or SamplingParams(max_tokens=max_tokens, temperature=0.0)
        suffix = self._check_prompt(list(suffix_tokens), params)
        cached = seq.num_computed if seq in self.running else 0
        fork = self.blocks.fork(seq.block_table) if cached else []
        try:
            return self._probe_decode(seq, fork, cached, seq.tokens[cached:] + suffix, max_tokens, params)
        finally:
            self.blocks.free(fork)

    def _probe_decode(self, seq: Seq, table: list[int], cached: int, feed: list[int], max_tokens: int,
                      params: SamplingParams) -> list[int]:  # fmt: skip
        out: list[int] = []
        while len(out) < max_tokens and cached + len(feed) < self.max_model_len:
            for src, dst in self.blocks.ensure_capacity(table, cached + len(feed)):
                self.cache.copy_block(src, dst)
            batch = SequenceBatch([torch.tensor(feed)], [cached], [self.cache.gather(table, cached)])
            logits, kv = self.model.forward(batch, kernels=INVARIANT)
            self.cache.write(table, cached, *kv[0])
            cached += len(feed)
            seed = params.seed if params.seed is not None else seq.seed
            token = ops.sample(logits[0][-1:], seeds=[seed], positions=[cached],
                               temperature=params.temperature, top_k=params.top_k, top_p=params.top_p,
                               min_p=params.min_p).item()  # fmt: skip
            out.append(int(token))
            if token == self.config.eos_token_id:
                break
            feed = [int(token)]
        return out

    # convenience -------------------------------------------------------------------
    def generate(
        self,
        prompts: Sequence[Sequence[int] | str],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[RequestOutput]:
        """Run prompts to completion; outputs in prompt order."""
        per: list[SamplingParams | None] = (
            list(params) if isinstance(params, (list, tuple)) else [params] * len(prompts)  # type: ignore[list-item]
        )
        if len(per) != len(prompts):
            raise InvalidArgumentError(f"got {len(per)} SamplingParams for {len(prompts)} prompts")
        ids = [self.add_request(p, sp) for p, sp in zip(prompts, per, strict=True)]
        while any(i not in self.finished for i in ids):
            self.step()
        return [self._output(self.finished[i]) for i in ids]

    def check_blocks(self) -> None:
        """Block accounting: every block is either free or held by a live request."""
        self.blocks.check([s.block_table for s in self.running])
