"""Persistent batch-invariant matmul: fixed tiles, no split-K, K walked in order.

Each output tile is computed by exactly one program with one fixed ``BLOCK_K`` loop,
so an output row's bits depend only on that row of ``a`` and on ``b``. ``M`` is
marked ``do_not_specialize`` so a batch of one row compiles the same kernel as a
batch of many.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from reasonserve.ops.triton._config import dot_precision, num_programs, on_gpu


@triton.jit(do_not_specialize=["M"])
def _matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    n_programs,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    tiles_per_group = GROUP_M * tiles_n
    for tile in tl.range(pid, tiles_m * tiles_n, n_programs):
        # Grouped order keeps a band of A rows hot in L2 while B tiles stream.
        first_m = (tile // tiles_per_group) * GROUP_M
        group_rows = tl.minimum(tiles_m - first_m, GROUP_M)
        pid_m = first_m + (tile % tiles_per_group) % group_rows
        pid_n = (tile % tiles_per_group) // group_rows
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        rk = tl.arange(0, BLOCK_K)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            kk = k0 + rk
            a = tl.load(
                a_ptr + rm[:, None] * stride_am + kk[None, :] * stride_ak,
                mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0,
            )
            b = tl.load(
                b_ptr + kk[:, None] * stride_bk + rn[None, :] * stride_bn,
                mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0,
            )
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
        tl.store(
            c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn,
            acc.to(c_ptr.dtype.element_ty),
            mask=(rm[:, None] < M) & (rn[None, :] < N),
        )


def _blocks(a: torch.Tensor) -> dict:
    if not on_gpu(a):  # interpreter: small tiles keep it fast
        return {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 4}
    if a.dtype == torch.float32:
        return {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8,
                "num_warps": 4, "num_stages": 3}  # fmt: skip
    return {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8,
            "num_warps": 8, "num_stages": 3}  # fmt: skip


def matmul_triton(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a [M, K] @ b [K, N]`` -> ``[M, N]`` in ``a``'s dtype (fp32 accumulation)."""
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    if m == 0 or n == 0:
        return c
    if k == 0:
        return c.zero_()
    cfg = _blocks(a)
    tiles = triton.cdiv(m, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"])
    grid_size = num_programs(a, tiles)
    _matmul_kernel[(grid_size,)](
        a, b, c, m, n, k,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        grid_size, PRECISION=dot_precision(a.dtype), **cfg,
    )  # fmt: skip
    return c
