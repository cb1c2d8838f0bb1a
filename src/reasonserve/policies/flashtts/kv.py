"""Roofline-guided KV allocation between the generator (decode) and the verifier (prefill)
(FlashTTS §4.3), with the offloading variant (§4.3.2).

For ``N`` beams, verifier sequences of ``S`` tokens and a decode horizon of ``S_dec`` tokens:

    T_tot = ceil(N / B_pre) * T_pre(B_pre, S) + ceil(N / B_dec) * S_dec * T_dec(B_dec, S_dec / 2)
    subject to B_pre * KV_ver(S) + B_dec * KV_gen(S_dec) <= M

``T_pre`` and ``T_dec`` are the simulator's roofline step times
(:meth:`reasonserve.cost.roofline.RooflineCostModel.step_s`), one cost model per model.
The search is the paper's linear search over ``B_pre`` with ``B_dec`` on the memory
boundary, ties to the larger ``B_dec``. Three exact shortcuts keep it fast: only the smallest
batch with a given number of waves ``ceil(N / B)`` can be optimal (time per wave grows
with the batch), so only ``B = ceil(N / q)`` are evaluated; and a decode budget of ``B_dec``
sequences runs the best such batch that fits in it, so more memory is never slower (which
makes the paper's boundary argument hold even where ``ceil`` breaks monotonicity); and a
batch's step time is read off the cost model once per stage (compute and memory terms are
linear in the batch size).

Prefix-cached verifier (:class:`PrefixCachedVerifier`, an extension of the paper): the formula
above plans a verifier that prefills every beam whole (``S`` tokens) and holds ``S`` tokens of
KV per sequence. A verifier with prefix caching (vLLM's automatic prefix caching, SGLang's
radix cache) keeps the beams' prefixes between iterations, and the copies of a kept beam
share its path. With ``s`` new tokens per verification (the new step) and each cached prefix
token shared by ``h`` beams, a sequence's KV share is ``f = s + (S - s) / h`` tokens; when
the whole iteration fits in one wave (``B_pre >= N``) the tree stays cached and a
verification prefills only ``s`` tokens beside ``S - s`` cached ones; in several waves each
wave evicts the previous one's prefixes (LRU over a cyclic scan keeps nothing), so a
sequence re-prefills its share ``f`` beside ``S - f`` cached. ``s = S`` and ``h = 1`` give the
paper's formula back exactly.

Generator context (``generator_prefix_share``, also an extension): the paper's generator holds
and attends to only its ``S_dec`` decoded tokens. A beam-search generator decodes a step on
its beam's context (``S - S_dec`` tokens, its prompt and path), which it holds in its prefix
cache shared ``h``-fold: it holds ``S_dec + (S - S_dec) / h`` tokens per sequence, decodes at
context ``S - S_dec + S_dec / 2``, and, when an iteration takes several waves, each wave
re-prefills its share of the context (as the verifier's waves do).

Offloading: each model gets all of ``M`` while it runs and the other's KV waits in host
memory; each generation/verification switch moves both models' KV out and back in over
the host link (:meth:`~reasonserve.cost.roofline.RooflineCostModel.swap_s`). The faster
plan wins.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, replace
from operator import attrgetter

from reasonserve.core.checks import check_int
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.cost.roofline import RooflineCostModel

__all__ = ["KVPlan", "PrefixCachedVerifier", "RooflineKVAllocator"]


@dataclass(frozen=True, slots=True)
class KVPlan:
    """``prefill_batch``/``decode_batch``: the batches run; ``verifier_kv_bytes`` and
    ``generator_kv_bytes``: the split of ``M`` (each is all of ``M`` when ``offload``)."""

    offload: bool
    prefill_batch: int
    decode_batch: int
    verifier_kv_bytes: float
    generator_kv_bytes: float
    total_s: float
    shared_s: float  # best T_tot under the shared constraint (inf if infeasible)
    offload_s: float  # T_tot + overhead of the offloading plan (inf if not allowed or infeasible)


@dataclass(frozen=True, slots=True)
class PrefixCachedVerifier:
    """How the verifier's prefix cache changes its work and KV (see the module docstring).

    ``new_tokens``: tokens a verification prefills when its beam's prefix is cached (the new
    step: a host passes its workload's mean step length). ``prefix_share``: beams that share
    each cached prefix token on average, >= 1 (the copies of a kept beam share its whole
    path, so beam search with branching factor ``B`` shares at least ``B``-fold; the prompt
    and common ancestors are shared more widely, which this lower bound leaves out)."""

    new_tokens: int
    prefix_share: float = 1.0

    def __post_init__(self) -> None:
        check_int("new_tokens", self.new_tokens, 1)
        h = self.prefix_share
        if isinstance(h, bool) or not isinstance(h, (int, float)) or not 1 <= h < math.inf:
            raise InvalidArgumentError(f"prefix_share must be a finite number >= 1, got {h!r}")

    def footprint_tokens(self, verify_tokens: int) -> float:
        """KV tokens one sequence of ``verify_tokens`` holds: its new tokens and its share
        of the cached prefix."""
        if self.new_tokens > verify_tokens:
            raise InvalidArgumentError(
                f"new_tokens ({self.new_tokens}) must be <= verify_tokens ({verify_tokens})"
            )
        return self.new_tokens + (verify_tokens - self.new_tokens) / self.prefix_share


# one wave of a stage: (chunk = (tokens computed, context before them) per sequence, steps)
_Wave = tuple[tuple[tuple[float, float], int], ...]


def _roofline_terms(cost: RooflineCostModel, chunk: tuple[float, float]) -> tuple[float, float, float]:
    """(compute s per sequence, memory s fixed, memory s per sequence) of a batch of equal
    ``chunk``s, read off ``cost.step_s`` with one roof removed at a time (both terms are
    linear in the batch), so a batch of any size costs O(1)."""
    hw, o = cost.hardware, cost.step_overhead_s
    no_memory = replace(cost, hardware=replace(hw, memory_bandwidth_bytes_s=math.inf))
    no_compute = replace(cost, hardware=replace(hw, peak_flops=math.inf))
    per_seq = no_memory.step_s([chunk]) - o
    one, two = no_compute.step_s([chunk]) - o, no_compute.step_s([chunk, chunk]) - o
    return per_seq, one - (two - one), two - one


def _times(batches: list[int], n: int, terms: list, o: float) -> dict[int, float]:
    """``ceil(n / b)`` waves of the steps ``terms`` for each batch ``b`` (one step kind, the
    common case, in one comprehension: the search evaluates O(sqrt N) batches)."""
    if len(terms) == 1:
        ((c, m0, m1), k), = terms
        return {b: -(-n // b) * k * (max(b * c, m0 + b * m1) + o) for b in batches}
    return {b: -(-n // b) * sum(k * (max(b * c, m0 + b * m1) + o) for (c, m0, m1), k in terms)
            for b in batches}  # fmt: skip


class _Stage:
    """Time of ``ceil(N / B)`` waves of one stage, over the batches worth trying: a batch of
    all ``N`` runs ``one_wave`` (with prefix caching its tree stays cached), smaller
    batches ``waves`` (each wave recomputes what the previous one evicted)."""

    def __init__(self, cost: RooflineCostModel, n: int, waves: _Wave, one_wave: _Wave) -> None:
        self.n = n
        root = math.isqrt(n)  # every ceil(N / q), plus small batches that are merely dominated
        self.batches = sorted({-(-n // q) for q in range(1, root + 1)} | set(range(1, min(n, root + 1) + 1)))
        o = cost.step_overhead_s
        terms = {w: [(_roofline_terms(cost, chunk), steps) for chunk, steps in w] for w in {waves, one_wave}}
        self.time = _times([b for b in self.batches if b < n], n, terms[waves], o)
        self.time.update(_times([b for b in self.batches if b >= n], n, terms[one_wave], o))
        self.best: list[tuple[int, float]] = []  # fastest batch <= batches[i] (ties: larger)
        for b in self.batches:
            if not self.best or self.time[b] <= self.best[-1][1]:
                self.best.append((b, self.time[b]))
            else:
                self.best.append(self.best[-1])

    def best_within(self, cap: int) -> tuple[int, float]:
        """The fastest batch <= ``cap`` (ties: the larger batch), or (0, inf)."""
        i = bisect.bisect_right(self.batches, cap)
        return self.best[i - 1] if i else (0, math.inf)


def _verifier_stage(cost: RooflineCostModel, n: int, s: int, cache: PrefixCachedVerifier | None):
    """(stage, KV tokens per sequence) of the verifier: whole sequences (the paper) or
    prefix-cached ones."""
    if cache is None:
        return _Stage(cost, n, (((s, 0), 1),), (((s, 0), 1),)), s
    if not isinstance(cache, PrefixCachedVerifier):
        raise InvalidArgumentError(
            f"verifier_cache must be a PrefixCachedVerifier or None, got {type(cache).__name__}"
        )
    f, new = cache.footprint_tokens(s), cache.new_tokens
    return _Stage(cost, n, (((f, s - f), 1),), (((new, s - new), 1),)), f


def _generator_stage(cost: RooflineCostModel, n: int, s: int, s_dec: int, share: float | None):
    """(stage, KV tokens per sequence) of the generator: ``s_dec`` decode steps at context
    ``s_dec / 2`` holding ``s_dec`` tokens (the paper), or, with a ``share``, also attending to
    and holding its share of the beam's cached context of ``s - s_dec`` tokens, which a wave
    re-prefills when the iteration takes several."""
    if share is None:
        wave = (((1, max(1, s_dec // 2)), s_dec),)
        return _Stage(cost, n, wave, wave), s_dec
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 1 <= share < math.inf:
        raise InvalidArgumentError(f"generator_prefix_share must be a finite number >= 1, got {share!r}")
    if s_dec > s:
        raise InvalidArgumentError(f"decode_tokens ({s_dec}) must be <= verify_tokens ({s}) with a context")
    context = s - s_dec
    part = context / share
    decode = ((1, context + max(1, s_dec // 2)), s_dec)
    refill = (((part, context - part), 1),) if part else ()
    return _Stage(cost, n, (*refill, decode), (decode,)), s_dec + part


@dataclass(frozen=True, slots=True)
class RooflineKVAllocator:
    generator: RooflineCostModel
    verifier: RooflineCostModel
    allow_offload: bool = True
    name: str = "flashtts_roofline_kv"

    def __post_init__(self) -> None:
        for fname in ("generator", "verifier"):
            if not isinstance(getattr(self, fname), RooflineCostModel):
                raise InvalidArgumentError(f"{fname} must be a RooflineCostModel")
        if not isinstance(self.allow_offload, bool):
            raise InvalidArgumentError(f"allow_offload must be a bool, got {self.allow_offload!r}")

    def plan(
        self,
        *,
        memory_bytes: float,
        num_beams: int,
        verify_tokens: int,
        decode_tokens: int,
        num_switches: int = 1,
        verifier_cache: PrefixCachedVerifier | None = None,
        generator_prefix_share: float | None = None,
    ) -> KVPlan:
        """The faster of the shared-memory plan and (if allowed) the offloading plan;
        :class:`InvalidArgumentError` if neither fits one sequence of each model.
        ``verifier_cache``: plan for a prefix-cached verifier (None: the paper's verifier,
        which prefills and holds whole sequences of ``verify_tokens``). ``generator_prefix_share``:
        plan for a generator that also holds and attends to its beam's context (``verify_tokens
        - decode_tokens`` tokens, each shared by that many beams; None: the paper's generator,
        which holds only its ``decode_tokens``)."""
        if (
            isinstance(memory_bytes, bool)
            or not isinstance(memory_bytes, (int, float))
            or not 0 < memory_bytes < math.inf
        ):
            raise InvalidArgumentError(f"memory_bytes must be a finite number > 0, got {memory_bytes!r}")
        check_int("num_beams", num_beams, 1)
        check_int("verify_tokens", verify_tokens, 1)
        check_int("decode_tokens", decode_tokens, 1)
        check_int("num_switches", num_switches, 0)
        pre, ver_tokens = _verifier_stage(self.verifier, num_beams, verify_tokens, verifier_cache)
        dec, gen_tokens = _generator_stage(self.generator, num_beams, verify_tokens, decode_tokens,
                                           generator_prefix_share)  # fmt: skip
        kv_pre = ver_tokens * self.verifier.model.kv_bytes_per_token
        kv_dec = gen_tokens * self.generator.model.kv_bytes_per_token
        shared = self._shared(pre, dec, memory_bytes, kv_pre, kv_dec)
        offload = self._offload(pre, dec, memory_bytes, kv_pre, kv_dec, ver_tokens, gen_tokens, num_switches)
        if shared is None and offload is None:
            raise InvalidArgumentError(
                f"memory_bytes={memory_bytes:.3g} fits no verifier sequence of {verify_tokens} tokens "
                f"({kv_pre:.0f} B) beside a generator sequence of {decode_tokens} tokens ({kv_dec:.0f} B)"
            )
        shared_s = shared.total_s if shared else math.inf
        offload_s = offload.total_s if offload else math.inf
        best = min((p for p in (shared, offload) if p is not None), key=attrgetter("total_s"))  # tie: shared
        return KVPlan(best.offload, best.prefill_batch, best.decode_batch, best.verifier_kv_bytes,
                      best.generator_kv_bytes, best.total_s, shared_s, offload_s)  # fmt: skip

    @staticmethod
    def _shared(pre: _Stage, dec: _Stage, memory: float, kv_pre: float, kv_dec: float) -> KVPlan | None:
        best: KVPlan | None = None
        for b_pre in pre.batches:  # ascending: an equal time keeps the earlier, larger B_dec
            cap = int((memory - b_pre * kv_pre) // kv_dec)
            b_dec, t_dec = dec.best_within(min(cap, dec.n))
            if b_dec == 0:
                break
            total = pre.time[b_pre] + t_dec
            if best is None or total < best.total_s:
                best = KVPlan(
                    False, b_pre, b_dec, b_pre * kv_pre, memory - b_pre * kv_pre, total, total, math.inf
                )
        return best

    def _offload(
        self,
        pre: _Stage,
        dec: _Stage,
        memory: float,
        kv_pre: float,
        kv_dec: float,
        s: float,
        s_dec: float,
        switches: int,
    ) -> KVPlan | None:
        if not self.allow_offload:
            return None
        b_pre, t_pre = pre.best_within(int(memory // kv_pre))
        b_dec, t_dec = dec.best_within(int(memory // kv_dec))
        if b_pre == 0 or b_dec == 0:
            return None
        moved = self.verifier.swap_s(b_pre * s) + self.generator.swap_s(b_dec * s_dec)
        total = t_pre + t_dec + 2 * switches * moved  # out and back in, at every switch
        return KVPlan(True, b_pre, b_dec, memory, memory, total, math.inf, total)
