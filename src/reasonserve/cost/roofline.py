"""Roofline cost of one engine step: max(compute time, memory time) + a fixed overhead.

A step runs some prefill chunks and some decodes together. FLOPs: ``2 * params`` per
token computed plus attention ``4 * layers * hidden * context`` per token (QK^T and AV).
Bytes: the weights once per step, the KV read by every token's attention (each sequence
reads its context once per step) and the KV written. Efficiencies and the overhead are
fixed constants (below), not fitted to any paper: ``compute_efficiency=0.6`` and
``bandwidth_efficiency=0.8`` are typical achieved fractions of peak for large GEMMs and
streaming reads, ``step_overhead_s=0.002`` covers scheduling and launches.

Migrating a request's KV to another instance costs ``migration_s_per_2048_tokens=0.040``
seconds per 2048 tokens, linear in the tokens moved: the figure PASCAL §IV-B quotes from
Splitwise (Patel et al.) for one KV transfer; contention between concurrent transfers is
not modelled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.cost.hardware import HardwareSpec
from reasonserve.cost.model_spec import ModelSpec

__all__ = ["RooflineCostModel"]

_VECTOR_FROM = 64  # decode_iterations_s: from this many iterations numpy's fixed cost pays


@dataclass(frozen=True, slots=True)
class RooflineCostModel:
    hardware: HardwareSpec
    model: ModelSpec
    compute_efficiency: float = 0.6
    bandwidth_efficiency: float = 0.8
    step_overhead_s: float = 0.002
    migration_s_per_2048_tokens: float = 0.040

    def __post_init__(self) -> None:
        for fname in ("compute_efficiency", "bandwidth_efficiency"):
            value = getattr(self, fname)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise InvalidArgumentError(f"{fname} must be in (0, 1], got {value!r}")
        if not isinstance(self.step_overhead_s, (int, float)) or self.step_overhead_s < 0:
            raise InvalidArgumentError(f"step_overhead_s must be >= 0, got {self.step_overhead_s!r}")
        m = self.migration_s_per_2048_tokens
        if isinstance(m, bool) or not isinstance(m, (int, float)) or m < 0:
            raise InvalidArgumentError(f"migration_s_per_2048_tokens must be >= 0, got {m!r}")

    def step_s(self, chunks: Sequence[tuple[float, float]]) -> float:
        """Seconds for one step; ``chunks``: (tokens computed, context before them) per sequence
        (a decode is ``(1, context)``; expected counts may be fractional, as FlashTTS's KV
        planner's are). An empty step costs nothing."""
        if not chunks:
            return 0.0
        m = self.model
        attn = 4 * m.num_layers * m.hidden_size
        kv = m.kv_bytes_per_token
        flops = bytes_ = 0.0
        for tokens, context in chunks:
            flops += 2 * m.num_params * tokens + attn * tokens * (context + tokens / 2)
            bytes_ += kv * (context + tokens)
        bytes_ += m.weight_bytes
        compute = flops / (self.hardware.peak_flops * self.compute_efficiency)
        memory = bytes_ / (self.hardware.memory_bandwidth_bytes_s * self.bandwidth_efficiency)
        return max(compute, memory) + self.step_overhead_s

    def decode_iterations_s(self, batch: int, context_sum: int, iterations: int) -> list[float]:
        """Seconds of ``iterations`` consecutive decode steps of ``batch`` sequences whose
        contexts sum to ``context_sum`` at the first (each step adds ``batch``); the same as
        :meth:`step_s` on ``[(1, c) for c in contexts]`` step after step."""
        m = self.model
        attn = 4 * m.num_layers * m.hidden_size
        peak = self.hardware.peak_flops * self.compute_efficiency
        bandwidth = self.hardware.memory_bandwidth_bytes_s * self.bandwidth_efficiency
        weights, kv, overhead = m.weight_bytes, m.kv_bytes_per_token, self.step_overhead_s
        params, half = 2 * m.num_params * batch, batch / 2  # the same float operations as step_s
        last = context_sum + iterations * batch  # no int64 overflow below: float64 ops round as Python's
        if iterations >= _VECTOR_FROM and kv * (last + batch) + weights < 2**62:
            context_np = context_sum + np.arange(iterations, dtype=np.int64) * batch
            compute_np = (params + attn * (context_np + half)) / peak
            memory_np = (kv * (context_np + batch) + weights) / bandwidth
            return (np.where(compute_np >= memory_np, compute_np, memory_np) + overhead).tolist()
        out = []
        context = context_sum
        for _ in range(iterations):  # kv * (...) each time: a running sum of a float kv rounds differently
            compute = (params + attn * (context + half)) / peak
            memory = (kv * (context + batch) + weights) / bandwidth
            out.append((compute if compute >= memory else memory) + overhead)
            context += batch
        return out

    def decode_iterations_exact(self, batch: int, context_sum: int, iterations: int) -> bool:
        """True when :meth:`decode_iterations_s` equals :meth:`step_s` step after step bit
        for bit: every per-sequence term and partial sum is an integer below 2**53, so the
        float sums are exact in any order (the presets' parameter counts and KV bytes per token
        are integers; a fractional ``bytes_per_param`` can make them floats)."""
        m = self.model
        context = context_sum + iterations * batch
        flops = 2 * m.num_params * batch + 4 * m.num_layers * m.hidden_size * (context + batch)
        kv, attn = m.kv_bytes_per_token, 4 * m.num_layers * m.hidden_size  # floats for a fractional byte
        if not (float(2 * m.num_params).is_integer() and float(kv).is_integer() and float(attn).is_integer()):
            return False
        return flops < 2**53 and kv * (context + batch) < 2**53

    def swap_s(self, num_tokens: float) -> float:
        """Copying ``num_tokens`` tokens of KV over the host link (one direction)."""
        return num_tokens * self.model.kv_bytes_per_token / self.hardware.host_link_bytes_s

    def migrate_s(self, num_tokens: int) -> float:
        """Moving ``num_tokens`` tokens of KV to another instance (PASCAL's ~40 ms / 2048)."""
        return num_tokens * self.migration_s_per_2048_tokens / 2048

    def kv_capacity_tokens(self, gpu_memory_utilization: float = 0.9) -> int:
        """Tokens of KV that fit beside the weights (vLLM's default utilization 0.9)."""
        free = self.hardware.memory_bytes * gpu_memory_utilization - self.model.weight_bytes
        if free <= 0:
            raise InvalidArgumentError(
                f"model {self.model.name} ({self.model.weight_bytes / 1e9:.1f} GB) does not fit on "
                f"{self.hardware.name} at utilization {gpu_memory_utilization}"
            )
        return int(free // self.model.kv_bytes_per_token)
