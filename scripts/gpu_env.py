"""What a GPU run ran on: the first stage of ``scripts/gpu_check.sh`` (its ``env.log``).

Prints Python, torch (CUDA build), Triton, transformers, safetensors, numpy, pytest and
hypothesis (and where each was imported from: the image or ``build/gpu_deps``), the GPU
(name, compute capability, SMs, memory), where ``reasonserve`` was imported from and the
GEMM switches of ``reasonserve.ops.triton._gemm_config``. Informational: exits 0, except 4
when torch does not import and, with ``--require-cuda``, 3 when torch sees no CUDA device.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys


def _module(name: str) -> str:
    try:
        mod = importlib.import_module(name)
    except Exception as err:  # a broken install is worth a line, not a crash
        return f"{name}: NOT importable ({type(err).__name__}: {err})"
    where = os.path.dirname(getattr(mod, "__file__", "") or "?")
    return f"{name} {getattr(mod, '__version__', '?')} ({where})"


def _gpu_lines(torch) -> list[str]:
    if not torch.cuda.is_available():
        return ["cuda available: False"]
    lines = [f"cuda available: True, {torch.cuda.device_count()} device(s)"]
    props = torch.cuda.get_device_properties(0)
    free, total = torch.cuda.mem_get_info(0)
    lines.append(
        f"device 0: {props.name}, sm_{props.major}{props.minor}, {props.multi_processor_count} SMs, "
        f"{total / 2**30:.1f} GiB total, {free / 2**30:.1f} GiB free"
    )
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--require-cuda", action="store_true", help="exit 3 when torch sees no CUDA device")
    args = parser.parse_args(argv)
    print(f"python {platform.python_version()} ({sys.executable}), {platform.platform()}")
    try:
        import torch
    except ImportError as err:
        print(f"torch: NOT importable ({err})")
        return 4

    print(f"torch {torch.__version__}, built for CUDA {torch.version.cuda}")
    for name in ("triton", "transformers", "safetensors", "numpy", "pytest", "hypothesis", "reasonserve"):
        print(_module(name))
    try:
        from reasonserve.ops.triton import _gemm_config as gemm

        print(f"_gemm_config: TILES_PER_M_BUCKET={gemm.TILES_PER_M_BUCKET}, USE_TMA={gemm.USE_TMA}")
    except Exception as err:
        print(f"_gemm_config: NOT importable ({type(err).__name__}: {err})")
    print(f"TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET')!r}, "
          f"TRITON_CACHE_DIR={os.environ.get('TRITON_CACHE_DIR')!r}")  # fmt: skip
    lines = _gpu_lines(torch)
    print("\n".join(lines))
    return 3 if args.require_cuda and not torch.cuda.is_available() else 0


if __name__ == "__main__":
    sys.exit(main())
