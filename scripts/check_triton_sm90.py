"""Compile the CUDA kernels for an H100 (sm_90) on a machine without a GPU.

Usage: ``python scripts/check_triton_sm90.py [--dtype bf16|fp16|fp32]`` (Triton's bundled
``ptxas``; no driver needed). Compiles the configurations the library picks — every
GEMM M bucket (pointer loads, TMA loads of ``[N, K]`` and of K-major ``[K, N]`` weights,
the engine's layout), the invariant and stock (decode and prefill) paged-attention
tiles, the split-KV combine, the fused RMSNorm, the row kernels, dense attention, the
sampler and the noise kernel — and prints which matrix instructions each uses. Exits
non-zero if one fails to compile, or if a 16-bit GEMM bucket does not use ``wgmma``
(``_gemm_config`` relies on every bucket running the same instruction). Run it after
changing a kernel, and under the Triton of the GPU image (3.6 for issue 28:
docs/gpu_first_run.md); the interpreter tests do not lower to PTX.
"""

from __future__ import annotations

import argparse
import os
import sys
import types

os.environ.pop("TRITON_INTERPRET", None)

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from reasonserve.ops._hash import ATANH_COEFFS, LN2, SQRT2
from reasonserve.ops.triton import (
    _gemm_config,
    attention,
    matmul,
    noise,
    paged_attention,
    rms_norm,
    rowwise,
    sampling,
)

TARGET = GPUTarget("cuda", 90, 32)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _fake(shape, dtype):
    """Stands in for a CUDA tensor where only device, dtype and shape are read."""
    return types.SimpleNamespace(device=torch.device("cuda"), dtype=dtype, shape=shape)


#: Compile as a launch at Qwen2 shapes specializes (the default): 16-byte aligned pointers
#: (fresh allocations), unit strides as the constant 1 and strides and sizes that are
#: multiples of 16 marked so, which is what lets Triton vectorize and pipeline pointer
#: loads. ``--unaligned`` compiles without any of it (offset views, odd sizes).
ALIGNED = {"on": True}
#: Per kernel: (arguments that are 1, arguments that are multiples of 16) at those shapes.
LAUNCH_SHAPES = {
    "_matmul_kernel": (("sak", "scn"), ("sam", "scm", "N", "K")),  # + sbn or sbk: see gemm_checks
    "_paged_kernel": (("sq2", "sk3", "sv3", "so2"),
                      ("sq0", "sq1", "sk0", "sk1", "sk2", "sv0", "sv1", "sv2", "so0", "so1", "swa0", "swa1",
                       "swa2")),
    "_combine_kernel": (("so2",), ("so0", "so1", "swa0", "swa1", "swa2")),
    "_rms_norm_kernel": ((), ("N", "stride_x", "stride_r", "stride_y", "stride_h")),
    "_mean_kernel": ((), ("N", "stride_x")),
    "_softmax_kernel": ((), ("N", "stride_x", "stride_y")),
    "_attention_kernel": (("sqd", "skd", "svd", "sod"), ("D", "sqb", "sqh", "skb", "skh", "svb", "svh", "sob",
                                                         "soh")),
}  # fmt: skip


def compile_one(fn, types_by_arg: dict, constexprs: dict, warps: int, stages: int, *, unit=(), **options):
    """``fn`` compiled for sm_90; arguments not named in ``types_by_arg`` are ``i32``."""
    attrs = {}
    if ALIGNED["on"]:
        ones, sixteens = LAUNCH_SHAPES.get(fn.__name__, ((), ()))
        constexprs = constexprs | {name: 1 for name in (*ones, *unit)}
    signature = {a: "constexpr" if a in constexprs else types_by_arg.get(a, "i32") for a in fn.arg_names}
    if ALIGNED["on"]:
        hinted = [i for i, a in enumerate(fn.arg_names) if signature[a].startswith("*") or a in sixteens]
        attrs = {(i,): [["tt.divisibility", 16]] for i in hinted}
    kernel = triton.compile(
        ASTSource(fn, signature, constexprs=constexprs, attrs=attrs), target=TARGET,
        options={"num_warps": warps, "num_stages": stages, **options},
    )  # fmt: skip
    return kernel


#: H100: at most 227 KiB of shared memory per block; more fails only when the GPU loads it.
MAX_SHARED = 232448
#: What only a GPU launch would reveal: too much shared memory, or a global scratch
#: buffer (a launch would need ``triton.set_allocator``, which the library never sets).
PROBLEMS: list[str] = []


def _report(name: str, compiled) -> dict:
    ptx, md = compiled.asm["ptx"], compiled.metadata
    uses = {op: op in ptx for op in ("wgmma", "mma.sync", "cp.async.bulk.tensor")}
    ops = ", ".join(k for k, v in uses.items() if v)
    print(f"ok   {name}: {ops} [{md.shared / 1024:.0f} KiB shared]")
    if md.shared > MAX_SHARED:
        PROBLEMS.append(f"{name}: {md.shared} bytes of shared memory > {MAX_SHARED}")
    if getattr(md, "global_scratch_size", 0):
        scratch = md.global_scratch_size
        PROBLEMS.append(f"{name}: needs {scratch} bytes of global scratch (triton.set_allocator)")
    return uses


def gemm_checks(dt: str, dtype: torch.dtype) -> list[str]:
    failures = []
    x = _fake((1, 4096), dtype)
    bk = _gemm_config.block_k(4096, x)
    precision = "ieee" if dtype == torch.float32 else "tf32"
    # (TMA, B_KN): pointer loads (matmul_triton passes B_KN=True there); TMA over an
    # [N, K] weight; TMA over a K-major [K, N] weight (the engine's, ops.k_major)
    for tiles in _gemm_config.bucket_tiles(x):
        for tma, b_kn in ((False, True), (True, False), (True, True)):
            types_by_arg = {"c_ptr": f"*{dt}"}
            if tma:
                b_block = f"[{bk}, {tiles.block_n}]" if b_kn else f"[{tiles.block_n}, {bk}]"
                types_by_arg |= {"a_src": f"tensordesc<{dt}[{tiles.block_m}, {bk}]>",
                                 "b_src": f"tensordesc<{dt}{b_block}>"}  # fmt: skip
            else:
                types_by_arg |= {"a_src": f"*{dt}", "b_src": f"*{dt}"}
            consts = dict(BLOCK_M=tiles.block_m, BLOCK_N=tiles.block_n, BLOCK_K=bk, GROUP_M=tiles.group_m,
                          PRECISION=precision, USE_TMA=tma, B_KN=b_kn)  # fmt: skip
            warps, stages = tiles.num_warps, tiles.num_stages
            unit = ("sbn",) if b_kn else ("sbk",)  # the weight's contiguous dimension
            compiled = compile_one(matmul._matmul_kernel, types_by_arg, consts, warps, stages, unit=unit)
            uses = _report(f"gemm {tiles} tma={tma} b_kn={b_kn}", compiled)
            if dtype != torch.float32 and not uses["wgmma"]:
                failures.append(f"gemm {tiles} tma={tma} b_kn={b_kn}: no wgmma")
    return failures


def paged_checks(dt: str, dtype: torch.dtype) -> None:
    ints = {a: "*i32" for a in ("tables_ptr", "lens_ptr", "qlens_ptr", "cu_q_ptr", "cu_tiles_ptr")}
    floats = {"ws_acc_ptr": "*fp32", "ws_ml_ptr": "*fp32", "scale": "fp32"}
    for hq, hkv, d in ((14, 2, 64), (28, 4, 128), (32, 8, 128), (8, 2, 32)):  # 8/2/32: test_gpu_engine
        q, cache = _fake((1, hq, d), dtype), _fake((1, hkv, 16, d), dtype)
        configs = {"invariant": paged_attention.invariant_config(q, cache)}
        for label, query_len in (("stock decode", 1), ("stock prefill", 2048)):
            configs[label] = _stock_config(q, cache, query_len)
        types_by_arg = {a: f"*{dt}" for a in ("q_ptr", "k_ptr", "v_ptr", "o_ptr")} | ints | floats
        for label, cfg in configs.items():
            consts = dict(GROUP=hq // hkv, QUERIES=cfg.block_m // (hq // hkv), BLOCK_SIZE=16,
                          BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_D=d,
                          HEAD_DIM=d, PRECISION="ieee" if dtype == torch.float32 else "tf32")  # fmt: skip
            kernel = paged_attention._paged_kernel
            compiled = compile_one(kernel, types_by_arg, consts, cfg.num_warps, cfg.num_stages)
            _report(f"paged {label} Hq/Hkv={hq}/{hkv} D={d} {cfg}", compiled)
        combine = {"o_ptr": f"*{dt}"} | ints | floats
        consts = dict(GROUP=hq // hkv, GROUP_PAD=triton.next_power_of_2(hq // hkv), BLOCK_D=d, HEAD_DIM=d)
        _report("paged combine", compile_one(paged_attention._combine_kernel, combine, consts, 4, 1))


def _stock_config(q, cache, query_len: int):
    """The stock tiles for ``query_len`` (the SM count is the interpreter's stand-in: it
    sets the split count, a run-time argument, never the compiled code)."""
    from reasonserve.ops.triton import _paged_config

    real = _paged_config.sm_count
    _paged_config.sm_count = lambda t: 132
    try:
        return paged_attention.stock_config(q, cache, 32, 4096, query_len)
    finally:
        _paged_config.sm_count = real


def rms_checks(dt: str) -> None:
    types_by_arg = {a: f"*{dt}" for a in ("x_ptr", "r_ptr", "w_ptr", "y_ptr", "h_ptr")} | {"eps": "fp32"}
    for residual in (False, True):
        for block, one in ((1024, True), (4096, False)):
            consts = dict(HAS_RESIDUAL=residual, BLOCK=block, ONE_CHUNK=one)
            _report(f"rms_norm residual={residual} one_chunk={one}",
                    compile_one(rms_norm._rms_norm_kernel, types_by_arg, consts, 8, 1))  # fmt: skip


def row_checks(dt: str) -> None:
    for block in (1024, 4096):
        types_by_arg = {"x_ptr": f"*{dt}", "y_ptr": "*fp32"}
        compiled = compile_one(rowwise._mean_kernel, types_by_arg, {"BLOCK": block}, 4, 1)
        _report(f"mean BLOCK={block}", compiled)
        for log in (False, True):
            types_by_arg = {"x_ptr": f"*{dt}", "y_ptr": f"*{dt}"}
            compiled = compile_one(rowwise._softmax_kernel, types_by_arg, {"LOG": log, "BLOCK": block}, 4, 1)
            _report(f"softmax log={log} BLOCK={block}", compiled)


def attention_checks(dt: str, dtype: torch.dtype) -> None:
    types_by_arg = {a: f"*{dt}" for a in ("q_ptr", "k_ptr", "v_ptr", "o_ptr")}
    types_by_arg |= {"lens_ptr": "*i32", "scale": "fp32"}
    precision = "ieee" if dtype == torch.float32 else "tf32"
    for d in (64, 128):
        for causal in (False, True):
            consts = dict(CAUSAL=causal, BLOCK_M=64, BLOCK_N=64, BLOCK_D=d, PRECISION=precision)
            _report(f"attention D={d} causal={causal}", compile_one(attention._attention_kernel, types_by_arg,
                                                                    consts, 4, 2))  # fmt: skip


def sampling_checks(dt: str) -> None:
    """The sampler (float64 hash-to-Gumbel, no FMA contraction) and the noise kernel."""
    types_by_arg = {"x_ptr": f"*{dt}", "rows_ptr": "*i64", "active_ptr": "*i8", "state_ptr": "*i64",
                    "temp_ptr": "*fp64", "thr_ptr": "*fp64", "out_ptr": "*i64"}  # fmt: skip
    for one_hot in (False, True):
        consts = dict(ONE_HOT=one_hot, LN2_=LN2, SQRT2_=SQRT2, C=tuple(ATANH_COEFFS), BLOCK=sampling._BLOCK)
        compiled = compile_one(sampling._sample_kernel, types_by_arg, consts, 4, 3, enable_fp_fusion=False)
        _report(f"sample one_hot={one_hot}", compiled)
    types_by_arg = {"s_lo_ptr": "*i64", "s_hi_ptr": "*i64", "p_lo_ptr": "*i64", "u_ptr": "*fp64"}
    _report("uniform noise", compile_one(noise._uniform_kernel, types_by_arg, {"BLOCK": 1024}, 4, 3))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--unaligned", action="store_true", help="no 16-byte alignment hint on pointers")
    args = parser.parse_args()
    dt, ALIGNED["on"] = args.dtype, not args.unaligned
    print(f"triton {triton.__version__}, target sm_90, dtype {dt}, aligned pointers: {ALIGNED['on']}")
    try:
        failures = gemm_checks(dt, DTYPES[dt])
        paged_checks(dt, DTYPES[dt])
        rms_checks(dt)
        row_checks(dt)
        attention_checks(dt, DTYPES[dt])
        sampling_checks(dt)
    except Exception as err:  # a compile error: print it whole
        print(f"FAILED to compile: {type(err).__name__}: {err}")
        return 1
    failures += PROBLEMS
    for failure in failures:
        print(f"FAILED: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
