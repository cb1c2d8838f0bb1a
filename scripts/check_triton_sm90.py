"""Compile the CUDA kernels for an H100 (sm_90) on a machine without a GPU.

Usage: ``python scripts/check_triton_sm90.py [--dtype bf16|fp16|fp32]`` (Triton's bundled
``ptxas``; no driver needed). Compiles the configurations the library picks — every
GEMM M bucket (pointer and TMA loads), the invariant and stock paged-attention tiles,
the split-KV combine and the fused RMSNorm — and prints which matrix instructions each
uses. Exits non-zero if one fails to compile, or if a 16-bit GEMM bucket does not use
``wgmma`` (``_gemm_config`` relies on every bucket running the same instruction).
Run it after changing a kernel; the interpreter tests do not lower to PTX.
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

from reasonserve.ops.triton import _gemm_config, matmul, paged_attention, rms_norm

TARGET = GPUTarget("cuda", 90, 32)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _fake(shape, dtype):
    """Stands in for a CUDA tensor where only device, dtype and shape are read."""
    return types.SimpleNamespace(device=torch.device("cuda"), dtype=dtype, shape=shape)


def compile_one(fn, types_by_arg: dict, constexprs: dict, warps: int, stages: int) -> str:
    """PTX of ``fn`` for sm_90; arguments not named in ``types_by_arg`` are ``i32``."""
    signature = {a: "constexpr" if a in constexprs else types_by_arg.get(a, "i32") for a in fn.arg_names}
    kernel = triton.compile(
        ASTSource(fn, signature, constexprs=constexprs), target=TARGET,
        options={"num_warps": warps, "num_stages": stages},
    )  # fmt: skip
    return kernel.asm["ptx"]


def _report(name: str, ptx: str) -> dict:
    uses = {op: op in ptx for op in ("wgmma", "mma.sync", "cp.async.bulk.tensor")}
    print(f"ok   {name}: " + ", ".join(k for k, v in uses.items() if v))
    return uses


def gemm_checks(dt: str, dtype: torch.dtype) -> list[str]:
    failures = []
    x = _fake((1, 4096), dtype)
    bk = _gemm_config.block_k(4096, x)
    precision = "ieee" if dtype == torch.float32 else "tf32"
    for tiles in _gemm_config.bucket_tiles(x):
        for tma in (False, True):
            types_by_arg = {"c_ptr": f"*{dt}"}
            if tma:
                types_by_arg |= {"a_src": f"tensordesc<{dt}[{tiles.block_m}, {bk}]>",
                                 "b_src": f"tensordesc<{dt}[{tiles.block_n}, {bk}]>"}  # fmt: skip
            else:
                types_by_arg |= {"a_src": f"*{dt}", "b_src": f"*{dt}"}
            consts = dict(BLOCK_M=tiles.block_m, BLOCK_N=tiles.block_n, BLOCK_K=bk, GROUP_M=tiles.group_m,
                          PRECISION=precision, USE_TMA=tma, B_KN=False)  # fmt: skip
            ptx = compile_one(matmul._matmul_kernel, types_by_arg, consts, tiles.num_warps, tiles.num_stages)
            uses = _report(f"gemm {tiles} tma={tma}", ptx)
            if dtype != torch.float32 and not uses["wgmma"]:
                failures.append(f"gemm {tiles}: no wgmma")
    return failures


def paged_checks(dt: str, dtype: torch.dtype) -> None:
    ints = {a: "*i32" for a in ("tables_ptr", "lens_ptr", "qlens_ptr", "cu_q_ptr", "cu_tiles_ptr")}
    floats = {"ws_acc_ptr": "*fp32", "ws_ml_ptr": "*fp32", "scale": "fp32"}
    for hq, hkv, d in ((14, 2, 64), (28, 4, 128), (32, 8, 128)):
        cfg = paged_attention.invariant_config(_fake((1, hq, d), dtype), _fake((1, hkv, 16, d), dtype))
        types_by_arg = {a: f"*{dt}" for a in ("q_ptr", "k_ptr", "v_ptr", "o_ptr")} | ints | floats
        consts = dict(GROUP=hq // hkv, QUERIES=cfg.block_m // (hq // hkv), BLOCK_SIZE=16, BLOCK_M=cfg.block_m,
                      BLOCK_N=cfg.block_n, BLOCK_D=d,
                      HEAD_DIM=d, PRECISION="ieee" if dtype == torch.float32 else "tf32")  # fmt: skip
        ptx = compile_one(paged_attention._paged_kernel, types_by_arg, consts, cfg.num_warps, cfg.num_stages)
        _report(f"paged invariant Hq/Hkv={hq}/{hkv} D={d} {cfg}", ptx)
        combine = {"o_ptr": f"*{dt}"} | ints | floats
        consts = dict(GROUP=hq // hkv, GROUP_PAD=triton.next_power_of_2(hq // hkv), BLOCK_D=d, HEAD_DIM=d)
        _report("paged combine", compile_one(paged_attention._combine_kernel, combine, consts, 4, 1))


def rms_checks(dt: str) -> None:
    types_by_arg = {a: f"*{dt}" for a in ("x_ptr", "r_ptr", "w_ptr", "y_ptr", "h_ptr")} | {"eps": "fp32"}
    for residual in (False, True):
        for block, one in ((1024, True), (4096, False)):
            consts = dict(HAS_RESIDUAL=residual, BLOCK=block, ONE_CHUNK=one)
            _report(f"rms_norm residual={residual} one_chunk={one}",
                    compile_one(rms_norm._rms_norm_kernel, types_by_arg, consts, 8, 1))  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    dt = parser.parse_args().dtype
    print(f"triton {triton.__version__}, target sm_90, dtype {dt}")
    try:
        failures = gemm_checks(dt, DTYPES[dt])
        paged_checks(dt, DTYPES[dt])
        rms_checks(dt)
    except Exception as err:  # a compile error: print it whole
        print(f"FAILED to compile: {type(err).__name__}: {err}")
        return 1
    for failure in failures:
        print(f"FAILED: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
