"""Persistent batch-invariant GEMM: ``BLOCK_K`` fixed per weight shape, tiles per M bucket.

Each output tile is computed by exactly one program, which walks ``K`` in ascending
``BLOCK_K`` slices with one ``tl.dot`` each (no split-K): a row's bits depend only on
that row of ``a``, on ``b`` and on ``BLOCK_K`` — see ``_gemm_config`` for why the
M-bucket tiles do not change them. One program per SM loops over the output tiles in
grouped order (a band of ``a`` rows stays hot in L2 while ``b`` tiles stream).
Operands are read through TMA descriptors on Hopper-class GPUs (``USE_TMA``) or through
masked pointer loads; both feed the same ``tl.dot`` with the same zero padding.
``M`` is not specialized, so one row compiles the same kernel as many.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from reasonserve.ops.triton import _gemm_config
from reasonserve.ops.triton._config import dot_precision, num_programs, on_gpu
from reasonserve.ops.triton._gemm_config import GemmTiles, block_k, gemm_tiles

__all__ = ["matmul_triton"]


@triton.jit
def _tile_coords(tile, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    """Grouped order: ``GROUP_M`` row tiles share each run of column tiles."""
    per_group = GROUP_M * tiles_n
    first_m = (tile // per_group) * GROUP_M
    rows = tl.minimum(tiles_m - first_m, GROUP_M)
    return first_m + (tile % per_group) % rows, (tile % per_group) // rows


@triton.jit
def _load_ab(a_src, b_src, off_m, off_n, k0, M, N, K, sam, sak, sbk, sbn,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
             USE_TMA: tl.constexpr, B_KN: tl.constexpr):  # fmt: skip
    """``a [BLOCK_M, BLOCK_K]`` and ``b [BLOCK_K, BLOCK_N]`` at ``k0``, zero outside."""
    if USE_TMA:
        a = a_src.load([off_m, k0])
        if B_KN:  # noqa: SIM108 (a constexpr branch)
            b = b_src.load([k0, off_n])
        else:
            b = b_src.load([off_n, k0]).T
    else:
        rm = (off_m + tl.arange(0, BLOCK_M)).to(tl.int64)
        rn = (off_n + tl.arange(0, BLOCK_N)).to(tl.int64)
        kk = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(a_src + rm[:, None] * sam + kk[None, :] * sak,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)  # fmt: skip
        b = tl.load(b_src + kk[:, None] * sbk + rn[None, :] * sbn,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)  # fmt: skip
    return a, b


@triton.jit(do_not_specialize=["M", "n_programs"])
def _matmul_kernel(
    a_src, b_src, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn, n_programs,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    PRECISION: tl.constexpr, USE_TMA: tl.constexpr, B_KN: tl.constexpr,
):  # fmt: skip
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, n_programs):
        pid_m, pid_n = _tile_coords(tile, tiles_m, tiles_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):  # ascending, one dot per slice: the row's K order
            a, b = _load_ab(a_src, b_src, off_m, off_n, k0, M, N, K, sam, sak, sbk, sbn,
                            BLOCK_M, BLOCK_N, BLOCK_K, USE_TMA, B_KN)  # fmt: skip
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
        rm = (off_m + tl.arange(0, BLOCK_M)).to(tl.int64)
        rn = (off_n + tl.arange(0, BLOCK_N)).to(tl.int64)
        tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(c_ptr.dtype.element_ty),
                 mask=(rm[:, None] < M) & (rn[None, :] < N))  # fmt: skip


def _descriptor_ok(t: torch.Tensor) -> bool:
    """TMA needs a unit inner stride and 16-byte aligned base and outer stride."""
    size = t.element_size()
    return t.stride(1) == 1 and (t.stride(0) * size) % 16 == 0 and t.data_ptr() % 16 == 0


def _tma_default(a: torch.Tensor, b: torch.Tensor) -> bool:
    if not (_gemm_config.USE_TMA and on_gpu(a) and torch.cuda.get_device_capability(a.device)[0] >= 9):
        return False
    return _descriptor_ok(a) and (_descriptor_ok(b) or _descriptor_ok(b.t()))


def _sources(a, b, tiles: GemmTiles, bk: int, use_tma: bool):
    """Kernel operands: the tensors, or TMA descriptors over them; and whether ``b`` is [K, N]."""
    b_kn = b.stride(1) == 1 if use_tma else True
    if not use_tma:
        return a, b, b_kn
    from triton.tools.tensor_descriptor import TensorDescriptor

    a_desc = TensorDescriptor.from_tensor(a, [tiles.block_m, bk])
    if b_kn:
        return a_desc, TensorDescriptor.from_tensor(b, [bk, tiles.block_n]), True
    return a_desc, TensorDescriptor.from_tensor(b.t(), [tiles.block_n, bk]), False


def matmul_triton(
    a: torch.Tensor, b: torch.Tensor, *, tiles: GemmTiles | None = None, use_tma: bool | None = None
) -> torch.Tensor:
    """``a [M, K] @ b [K, N]`` -> ``[M, N]`` in ``a``'s dtype (fp32 accumulation).

    ``tiles`` / ``use_tma`` override the defaults (M bucket, Hopper TMA) for tests and
    benchmarks; neither changes a row's bits.
    """
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    if m == 0 or n == 0:
        return c
    if k == 0:
        return c.zero_()
    tiles = tiles or gemm_tiles(m, a)
    use_tma = _tma_default(a, b) if use_tma is None else use_tma
    bk = block_k(k, a)
    a_src, b_src, b_kn = _sources(a, b, tiles, bk, use_tma)
    grid = num_programs(a, triton.cdiv(m, tiles.block_m) * triton.cdiv(n, tiles.block_n))
    launch = {"num_warps": tiles.num_warps, "num_stages": tiles.num_stages} if on_gpu(a) else {}
    _matmul_kernel[(grid,)](
        a_src, b_src, c, m, n, k, *a.stride(), *b.stride(), *c.stride(), grid,
        BLOCK_M=tiles.block_m, BLOCK_N=tiles.block_n, BLOCK_K=bk, GROUP_M=tiles.group_m,
        PRECISION=dot_precision(a.dtype), USE_TMA=use_tma, B_KN=b_kn, **launch,
    )  # fmt: skip
    return c
