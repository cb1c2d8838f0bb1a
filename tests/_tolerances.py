"""Reference-parity tolerances, one table for all op tests: (atol, rtol) per op/dtype.

Parity is against stock torch (or a float64 computation). Invariance is never
checked with tolerances: it is bitwise (``torch.equal``).
"""

import torch

_FP32 = (1e-5, 1.3e-5)
_BF16 = (2e-2, 1.6e-2)
_FP16 = (2e-3, 1e-3)

TOLERANCES: dict[tuple[str, torch.dtype], tuple[float, float]] = {
    **{(op, torch.float32): _FP32 for op in ("rms_norm", "softmax", "log_softmax", "mean", "silu")},
    **{(op, torch.bfloat16): _BF16 for op in ("rms_norm", "softmax", "log_softmax", "mean", "silu")},
    **{(op, torch.float16): _FP16 for op in ("rms_norm", "softmax", "log_softmax", "mean", "silu")},
    # Products accumulate over K: looser absolute bound, scaled by sqrt(K) in tests.
    ("matmul", torch.float32): (2e-5, 1e-4),
    ("matmul", torch.bfloat16): (3e-2, 2e-2),
    ("matmul", torch.float16): (3e-3, 2e-3),
    ("attention", torch.float32): (2e-5, 1e-4),
    ("attention", torch.bfloat16): (3e-2, 2e-2),
    ("attention", torch.float16): (3e-3, 2e-3),
}


def tolerance(op: str, dtype: torch.dtype) -> tuple[float, float]:
    return TOLERANCES[(op, dtype)]
