"""Deterministic ops vs their stock torch ops, same process, serving shapes.

Usage: ``python benchmarks/ops.py [--device cpu|cuda] [--quick]``. Writes
``benchmarks/results/ops-<device>.json`` and ``.png``. Targets (issue #10), CPU
(native fixed-order kernels, fp32): ``linear`` <= 1.0x stock for M >= 16 and <= 1.5x
at M = 1, both weight layouts; rms_norm, softmax, log_softmax, mean <= 1.5x at
[256, 4096] / [256, 32000]; decode attention <= 2x SDPA; ``deterministic_mode()``
over an unmodified transformers Qwen2 decoder layer <= 1.3x.

CUDA (bf16, issue #28, ``_ops_gpu.py``): invariant linear at K = N = 4096 >= 0.8x
``F.linear`` for M >= 256 and >= 0.7x for M <= 64 (ratio <= 1.25 / 1.43), plus the
Qwen2-0.5B projections; rms_norm and add_rms_norm; invariant paged attention >= 0.7x
the stock kernel (<= 1.43) for decode at 1k-32k contexts and batch 1-128 and for
prefill chunks; the stock kernel vs SDPA over gathered blocks and FlexAttention (the
choice of the stock kernel). GPU times are CUDA-graph replays (no launch overhead).
``print_ops_section()`` is the entry point ``benchmarks/gpu.py`` calls.
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _harness import Row, compare, machine, report
from reasonserve import ops

HIDDEN, VOCAB = 4096, 32000


def _row(op, shape, baseline_name, times, target=None) -> Row:
    b, c = times
    return Row(op, shape, baseline_name, b * 1e3, c * 1e3, c / b, target)


def _linear_target(m: int) -> float | None:
    return 1.0 if m >= 16 else (1.5 if m == 1 else None)


def linear_rows(device, dtype, ms, impl) -> list[Row]:
    """CPU: both weight layouts, each against stock F.linear on the same layout."""
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(HIDDEN, HIDDEN, generator=g) / 64).to(device=device, dtype=dtype)
    layouts = [("linear k-major", ops.k_major(w)), ("linear row-major", w)]
    rows = []
    for name, weight in layouts:
        for m in ms:
            x = torch.randn(m, HIDDEN, generator=g).to(device=device, dtype=dtype)
            target = _linear_target(m)
            times = compare(
                lambda: F.linear(x, weight), lambda: ops.linear(x, weight, impl=impl), device=device
            )
            rows.append(_row(name, f"M={m} K=N={HIDDEN}", "F.linear", times, target))
    return rows


def row_op_rows(device, dtype, ms, impl) -> list[Row]:
    g = torch.Generator().manual_seed(1)
    rows = []
    nw = torch.ones(HIDDEN, device=device, dtype=dtype)
    for m in ms:
        h = torch.randn(m, HIDDEN, generator=g).to(device=device, dtype=dtype)
        logits = torch.randn(m, VOCAB, generator=g).to(device=device, dtype=dtype)
        cases = [
            ("rms_norm", h, "F.rms_norm", lambda: F.rms_norm(h, (HIDDEN,), nw, 1e-6),
             lambda: ops.rms_norm(h, nw, impl=impl)),
            ("log_softmax", logits, "torch.log_softmax", lambda: torch.log_softmax(logits, -1),
             lambda: ops.log_softmax(logits, impl=impl)),
            ("softmax", logits, "torch.softmax", lambda: torch.softmax(logits, -1),
             lambda: ops.softmax(logits, impl=impl)),
            ("mean", h, "Tensor.mean", lambda: h.mean(-1), lambda: ops.mean(h, -1, impl=impl)),
        ]  # fmt: skip
        for name, t, base_name, base, ours in cases:
            target = 1.5 if device == "cpu" and m == 256 else None
            rows.append(_row(name, f"{list(t.shape)}", base_name, compare(base, ours, device=device), target))
    return rows


def attention_rows(device, dtype, batches, impl) -> list[Row]:
    g = torch.Generator().manual_seed(2)
    rows = []
    t, hq, hkv, d = 512, 32, 8, 128
    for b in batches:
        q = torch.randn(b, hq, d, generator=g).to(device=device, dtype=dtype)
        k = torch.randn(b, hkv, t, d, generator=g).to(device=device, dtype=dtype)
        v = torch.randn(b, hkv, t, d, generator=g).to(device=device, dtype=dtype)
        lens = torch.full((b,), t, device=device)

        def stock():
            return F.scaled_dot_product_attention(q[:, :, None], k, v, enable_gqa=True)

        def ours():
            return ops.decode_attention(q, k, v, lens, impl=impl)

        times = compare(stock, ours, device=device, repeats=5)
        target = 2.0 if device == "cpu" else None
        shape = f"B={b} H={hq}/{hkv} T={t} D={d}"
        rows.append(_row("decode_attention", shape, "F.sdpa (GQA)", times, target))
    return rows


def qwen2_block_rows(device, tokens) -> list[Row]:
    """An unmodified transformers Qwen2 decoder layer, stock vs inside deterministic_mode()."""
    try:
        from transformers import Qwen2Config
        from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer, Qwen2RotaryEmbedding
    except ImportError:
        print("(transformers missing: no Qwen2 block row)")
        return []
    cfg = Qwen2Config(hidden_size=1024, intermediate_size=2816, num_attention_heads=16, num_key_value_heads=4,
                      attn_implementation="eager")  # fmt: skip
    torch.manual_seed(4)
    layer, rope = Qwen2DecoderLayer(cfg, 0).to(device).eval(), Qwen2RotaryEmbedding(cfg).to(device)
    rows = []
    for n in tokens:
        h = torch.randn(4, n, cfg.hidden_size, device=device)
        pos = torch.arange(n, device=device)[None].expand(4, n)
        emb = rope(h, pos)
        mask = torch.full((n, n), float("-inf"), device=device).triu(1)[None, None].expand(4, 1, n, n)

        def stock():
            with torch.no_grad():
                return layer(h, attention_mask=mask, position_embeddings=emb)

        def ours():
            with torch.no_grad(), ops.deterministic_mode():
                return layer(h, attention_mask=mask, position_embeddings=emb)

        times = compare(stock, ours, device=device, repeats=5)
        rows.append(_row("qwen2 layer (mode)", f"B=4 S={n} H=1024", "stock layer", times, 1.3))
    return rows


def sample_rows(device, ms) -> list[Row]:
    g = torch.Generator().manual_seed(3)
    rows = []
    for m in ms:
        logits = torch.randn(m, VOCAB, generator=g).to(device)
        gen = torch.Generator(device=device).manual_seed(0)

        def stock():
            return torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)

        def ours():
            return ops.sample(logits, seeds=7, positions=torch.arange(m, device=device))

        times = compare(stock, ours, device=device)
        rows.append(_row("sample", f"M={m} V={VOCAB}", "softmax+multinomial", times))
    return rows


def print_ops_section(device: str = "cuda", *, quick: bool = False) -> list[Row]:
    """Measure and print the GPU ops table (machine and versions first); return its rows."""
    from _ops_gpu import gpu_rows

    rows = gpu_rows(quick)
    rows += row_op_rows(device, torch.bfloat16, [1, 256] if quick else [1, 16, 256], "triton")
    rows += sample_rows(device, [64] if quick else [1, 64])
    meta = machine(device) | {"cuda": torch.version.cuda, "dtype": "torch.bfloat16", "timing": "CUDA graphs"}
    report(f"ops-{device.split(':')[0]}", rows, meta)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="fewer shapes (smoke run)")
    args = parser.parse_args()
    device = args.device
    if device.startswith("cuda"):
        print_ops_section(device, quick=args.quick)
        return
    dtype, impl = torch.float32, "auto"  # auto: the native kernels on CPU
    ms = [1, 16] if args.quick else [1, 4, 16, 64, 256, 1024]
    rows = linear_rows(device, dtype, ms, impl)
    rows += row_op_rows(device, dtype, [1, 64] if args.quick else [1, 16, 256], impl)
    rows += attention_rows(device, dtype, [1] if args.quick else [1, 8], impl)
    rows += sample_rows(device, [1] if args.quick else [1, 64])
    rows += qwen2_block_rows(device, [32] if args.quick else [32, 256])
    report(f"ops-{device.split(':')[0]}", rows, machine(device) | {"dtype": str(dtype), "impl": impl})


if __name__ == "__main__":
    main()
