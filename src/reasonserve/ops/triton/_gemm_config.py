"""Tiles of the batch-invariant GEMM: ``BLOCK_K`` per weight shape, the rest per M bucket.

A row's bits are set by the order in which its ``K`` products are accumulated: here
one ``tl.dot`` per ``BLOCK_K`` slice, slices in ascending order, no split-K. ``BLOCK_K``
is a function of ``K``, the dtype and the device kind only — never of ``M`` — so every
bucket walks ``K`` identically (the rule vLLM's, SGLang's and Thinking Machines'
batch-invariant GEMMs converged on). The other tile sizes (``BLOCK_M``, ``BLOCK_N``,
warps, stages) follow the number of rows, for speed.

That a row's bits are also the same under every bucket's tiles is a property of the
GPU's matrix instructions (the same per-``k16`` arithmetic whatever the tile): it is
tested on the GPU (``tests/test_gpu_kernels.py::test_gemm_rows_same_bits_under_every_bucket``).
**If that test ever fails on a GPU, set** :data:`TILES_PER_M_BUCKET` **to ``False``**:
every ``M`` then runs :data:`ONE_CONFIG`'s tiles (slower for small batches, invariant by
construction). Tile choices never come from a per-process probe.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from reasonserve.ops.triton._config import on_gpu

__all__ = [
    "ONE_CONFIG", "TILES_PER_M_BUCKET", "USE_TMA", "GemmTiles", "block_k", "bucket_tiles", "gemm_tiles",
]  # fmt: skip

#: The documented switch: ``False`` runs one tile configuration for every M.
TILES_PER_M_BUCKET = True
#: TMA descriptors for the operands on Hopper-class GPUs (same bits as pointer loads,
#: tested on the GPU); ``False`` always loads through pointers.
USE_TMA = True


@dataclass(frozen=True)
class GemmTiles:
    block_m: int
    block_n: int
    group_m: int = 8
    num_warps: int = 4
    num_stages: int = 3


# (largest M of the bucket, tiles); the last bucket has no bound. H100 starting points,
# to be tuned by ``benchmarks/ops.py --device cuda`` (changing them never changes bits
# when the bucket test passes). Every 16-bit bucket has BLOCK_M >= 64, so Triton emits
# Hopper ``wgmma`` for all of them (BLOCK_M = 16 would emit ``mma.sync``, a different
# instruction whose rounding need not match); a small batch is bound by the weight
# read, so the padded rows cost little.
_GPU_16BIT = (
    (16, GemmTiles(64, 32, 1, 4, 6)),
    (64, GemmTiles(64, 64, 8, 4, 4)),
    (256, GemmTiles(128, 128, 8, 8, 3)),
    (None, GemmTiles(128, 256, 8, 8, 3)),
)
_GPU_FP32 = (  # full-precision fp32 dots run on FMA units, one k at a time
    (16, GemmTiles(16, 32, 1, 4, 4)),
    (64, GemmTiles(64, 64, 8, 4, 3)),
    (None, GemmTiles(128, 64, 8, 4, 3)),
)
# Interpreter: small tiles keep tests fast; three buckets so tests cross them.
_INTERPRETER = (
    (16, GemmTiles(16, 16, 1)),
    (32, GemmTiles(32, 16, 2)),
    (None, GemmTiles(16, 32, 4)),
)
#: The single configuration used for every M when ``TILES_PER_M_BUCKET`` is False.
ONE_CONFIG = {
    "gpu16": GemmTiles(64, 128, 8, 4, 3),
    "gpu32": GemmTiles(64, 64, 8, 4, 3),
    "cpu": GemmTiles(16, 16, 1),
}


def _kind(t: torch.Tensor) -> str:
    if not on_gpu(t):
        return "cpu"
    return "gpu32" if t.dtype == torch.float32 else "gpu16"


def _table(t: torch.Tensor):
    return {"gpu16": _GPU_16BIT, "gpu32": _GPU_FP32, "cpu": _INTERPRETER}[_kind(t)]


def block_k(k: int, t: torch.Tensor) -> int:
    """``BLOCK_K`` for a weight with ``K`` inputs: depends on ``K``, dtype and device kind."""
    cap = {"gpu16": 64, "gpu32": 32, "cpu": 16}[_kind(t)]
    return max(16, min(cap, 1 << max(k - 1, 0).bit_length()))


def gemm_tiles(m: int, t: torch.Tensor, *, per_bucket: bool | None = None) -> GemmTiles:
    """The tiles for ``m`` rows (``per_bucket`` defaults to :data:`TILES_PER_M_BUCKET`)."""
    if not (TILES_PER_M_BUCKET if per_bucket is None else per_bucket):
        return ONE_CONFIG[_kind(t)]
    for bound, tiles in _table(t):
        if bound is None or m <= bound:
            return tiles
    raise AssertionError("the last bucket has no bound")


def bucket_tiles(t: torch.Tensor) -> tuple[GemmTiles, ...]:
    """Every configuration :func:`gemm_tiles` may pick for ``t``'s kind (for the tests)."""
    return (*(tiles for _, tiles in _table(t)), ONE_CONFIG[_kind(t)])
