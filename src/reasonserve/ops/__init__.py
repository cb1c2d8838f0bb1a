"""Deterministic (batch-invariant) tensor ops, seeded sampling and ``deterministic_mode``.

Every op has a torch reference path (any device) and, where it pays, a Triton kernel
for CUDA, selected with ``impl="auto" | "torch" | "triton"``. See
``docs/determinism.md`` for what each op guarantees.
"""

from reasonserve.ops.activation import silu
from reasonserve.ops.attention import (
    KV_SPLIT_TOKENS,
    attention,
    attention_reference,
    decode_attention,
)
from reasonserve.ops.matmul import k_major, linear, linear_reference, matmul, matmul_reference
from reasonserve.ops.mean import mean, mean_reference
from reasonserve.ops.mode import OVERRIDDEN_OPS, deterministic_mode, is_deterministic_mode
from reasonserve.ops.paged_attention import paged_attention, paged_attention_reference
from reasonserve.ops.paged_attention_stock import paged_attention_stock
from reasonserve.ops.rms_norm import add_rms_norm, rms_norm, rms_norm_reference
from reasonserve.ops.sampling import greedy, gumbel_noise, sample, sample_into
from reasonserve.ops.softmax import (
    log_softmax,
    log_softmax_reference,
    softmax,
    softmax_reference,
)

__all__ = [
    "KV_SPLIT_TOKENS",
    "OVERRIDDEN_OPS",
    "add_rms_norm",
    "attention",
    "attention_reference",
    "decode_attention",
    "deterministic_mode",
    "greedy",
    "gumbel_noise",
    "is_deterministic_mode",
    "k_major",
    "linear",
    "linear_reference",
    "log_softmax",
    "log_softmax_reference",
    "matmul",
    "matmul_reference",
    "mean",
    "mean_reference",
    "paged_attention",
    "paged_attention_reference",
    "paged_attention_stock",
    "rms_norm",
    "rms_norm_reference",
    "sample",
    "sample_into",
    "silu",
    "softmax",
    "softmax_reference",
]
