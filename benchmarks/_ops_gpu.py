"""GPU rows of ``benchmarks/ops.py``: invariant kernels vs stock at serving shapes.

Every candidate and baseline is captured into a CUDA graph of ``_REPS`` calls and the
graphs are replayed alternately (``_harness.compare``): the table reports GPU time per
call, without Python launch overhead, as the engine's captured decode steps see it.
Ratios are candidate / baseline (below 1: the candidate is faster). Targets (issue #28):
invariant linear >= 0.8x ``F.linear`` at M >= 256 and >= 0.7x at M <= 64 (K = N = 4096),
i.e. ratio <= 1.25 / 1.43; invariant paged attention >= 0.7x the stock kernel (<= 1.43).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from _harness import Row, compare
from reasonserve import ops

_REPS = 20
DEVICE = "cuda"
BLOCK = 16
# (name, query heads, KV heads, head dim)
QWEN_05B = ("0.5B", 14, 2, 64)
QWEN_7B = ("7B", 28, 4, 128)
# Qwen2-0.5B projections (K, N): hidden 896, 14/2 heads of 64, intermediate 4864, vocab 151936
QWEN_LINEARS = (("qkv", 896, 1152), ("o_proj", 896, 896), ("gate_up", 896, 9728), ("down", 4864, 896),
                ("lm_head", 896, 151936))  # fmt: skip


def graphed(fn: Callable[[], object], reps: int = _REPS) -> Callable[[], None]:
    """``fn`` x ``reps`` as one CUDA graph replay (eager calls if capture fails)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # compile / autotune outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(reps):
                fn()
    except RuntimeError as err:
        print(f"(not capturable, timed eagerly: {str(err)[:80]})")
        return lambda: [fn() for _ in range(reps)]
    return graph.replay


def _row(op: str, shape: str, base: str, base_fn, cand_fn, target=None, repeats=15) -> Row:
    b, c = compare(graphed(base_fn), graphed(cand_fn), device=DEVICE, repeats=repeats)
    return Row(op, shape, base, b * 1e3 / _REPS, c * 1e3 / _REPS, c / b, target)


def linear_rows(ms, dtype) -> list[Row]:
    """K = N = 4096 and the Qwen2-0.5B projections, invariant ops.linear vs F.linear."""
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    rows = []
    shapes = [("linear", 4096, 4096)] + [(f"linear {name}", k, n) for name, k, n in QWEN_LINEARS]
    for name, k, n in shapes:
        w = (torch.randn(n, k, device=DEVICE, generator=gen) * k**-0.5).to(dtype)
        for m in ms:
            x = torch.randn(m, k, device=DEVICE, generator=gen).to(dtype)
            target = (1.25 if m >= 256 else 1.43 if m <= 64 else None) if k == n == 4096 else None
            rows.append(_row(name, f"M={m} K={k} N={n}", "F.linear", lambda x=x, w=w: F.linear(x, w),
                             lambda x=x, w=w: ops.linear(x, w), target))  # fmt: skip
    return rows


def norm_rows(ms, dtype) -> list[Row]:
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    rows = []
    for hidden in (896, 4096):
        w = torch.randn(hidden, device=DEVICE, generator=gen).to(dtype)
        for m in ms:
            x, r = (torch.randn(m, hidden, device=DEVICE, generator=gen).to(dtype) for _ in range(2))
            rows.append(_row("rms_norm", f"[{m}, {hidden}]", "F.rms_norm",
                             lambda x=x, w=w: F.rms_norm(x, (x.shape[-1],), w, 1e-6),
                             lambda x=x, w=w: ops.rms_norm(x, w)))  # fmt: skip
            rows.append(_row("add_rms_norm", f"[{m}, {hidden}]", "add + F.rms_norm",
                             lambda x=x, r=r, w=w: F.rms_norm(x + r, (x.shape[-1],), w, 1e-6),
                             lambda x=x, r=r, w=w: ops.add_rms_norm(x, r, w)))  # fmt: skip
    return rows


def paged_batch(batch: int, context: int, query_len: int, heads, dtype, seed: int = 2):
    """Uniform batch on a shuffled paged cache: ``(args, kwargs)`` of the paged ops."""
    _, hq, hkv, d = heads
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    per_seq = math.ceil(context / BLOCK)
    kc = torch.randn(batch * per_seq, hkv, BLOCK, d, device=DEVICE, generator=gen).to(dtype)
    vc = torch.randn(kc.shape, device=DEVICE, generator=gen).to(dtype)
    tables = torch.randperm(batch * per_seq, device=DEVICE, generator=gen).view(batch, per_seq).int()
    lens = torch.full((batch,), context, dtype=torch.int32, device=DEVICE)
    qlens = torch.full((batch,), query_len, dtype=torch.int32, device=DEVICE)
    q = torch.randn(batch * query_len, hq, d, device=DEVICE, generator=gen).to(dtype)
    kwargs = {"max_seq_len": per_seq * BLOCK, "max_query_len": query_len, "check": False}
    return (q, kc, vc, tables, lens, qlens), kwargs


def _invariant_vs_stock(label: str, shape: str, args, kwargs) -> Row:
    return _row(label, shape, "stock kernel", lambda: ops.paged_attention_stock(*args, **kwargs),
                lambda: ops.paged_attention(*args, **kwargs), 1.43)  # fmt: skip


def paged_decode_rows(contexts, batches, heads, dtype) -> list[Row]:
    rows = []
    for context in contexts:
        for batch in batches:
            args, kwargs = paged_batch(batch, context, 1, heads, dtype)
            shape = f"{heads[0]} B={batch} ctx={context}"
            rows.append(_invariant_vs_stock("paged decode", shape, args, kwargs))
            del args
    return rows


def paged_prefill_rows(heads, dtype) -> list[Row]:
    """A whole 2048-token prompt, a 512-token chunk at 4096, and a mixed step."""
    rows = []
    for query_len, context in ((2048, 2048), (512, 4096)):
        args, kwargs = paged_batch(1, context, query_len, heads, dtype)
        shape = f"{heads[0]} q={query_len} ctx={context}"
        rows.append(_invariant_vs_stock("paged prefill", shape, args, kwargs))
    return rows


def _gathered(args):
    """``q [B, Hq, S, D]``, and a gather of a cache's blocks into ``[B, Hkv, ctx, D]``."""
    q, tables = args[0], args[3]
    b = tables.shape[0]

    def gather(cache):
        return cache[tables.long()].permute(0, 2, 1, 3, 4).reshape(b, cache.shape[1], -1, cache.shape[3])

    return q.view(b, -1, *q.shape[1:]).transpose(1, 2), gather


def stock_choice_rows(heads, dtype, flex: bool) -> list[Row]:
    """The stock Triton kernel vs SDPA over gathered blocks (and FlexAttention): the pick."""
    rows = []
    for label, (batch, context, query_len) in (("decode", (32, 4096, 1)), ("prefill", (1, 2048, 2048))):
        args, kwargs = paged_batch(batch, context, query_len, heads, dtype)
        q4, gather = _gathered(args)
        causal = query_len > 1

        def stock(args=args, kwargs=kwargs):
            return ops.paged_attention_stock(*args, **kwargs)

        def sdpa(q4=q4, gather=gather, causal=causal, kc=args[1], vc=args[2]):
            k, v = gather(kc), gather(vc)
            return F.scaled_dot_product_attention(q4, k, v, is_causal=causal, enable_gqa=True)

        shape = f"{heads[0]} B={batch} q={query_len} ctx={context}"
        rows.append(_row(f"stock vs sdpa {label}", shape, "stock kernel", stock, sdpa))
        if flex:
            try:  # torch.compile needs a working inductor toolchain: without it, no flex row
                flex_fn = _flex(q4, gather, args, causal)
                rows.append(_row(f"stock vs flex {label}", shape, "stock kernel", stock, flex_fn))
            except Exception as err:
                print(f"(no FlexAttention row for {label}: {type(err).__name__}: {str(err)[:200]})")
    return rows


def _flex(q4, gather, args, causal: bool):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    compiled = torch.compile(flex_attention, dynamic=False)
    s, n = q4.shape[2], gather(args[1]).shape[2]
    mask = None
    if causal:
        mask = create_block_mask(lambda b, h, qi, ki: ki <= qi + (n - s), None, None, s, n)
    return lambda: compiled(q4, gather(args[1]), gather(args[2]), block_mask=mask, enable_gqa=True)


def gpu_rows(quick: bool, dtype=torch.bfloat16) -> list[Row]:
    """All GPU rows; ``quick`` keeps the section to about a minute on an H100."""
    ms = [1, 64, 256, 1024] if quick else [1, 4, 16, 64, 128, 256, 512, 1024]
    rows = linear_rows(ms, dtype)
    rows += norm_rows([1, 256] if quick else [1, 32, 256, 1024], dtype)
    contexts = [1024, 32768] if quick else [1024, 4096, 16384, 32768]
    batches = [1, 32, 128] if quick else [1, 8, 32, 128]
    rows += paged_decode_rows(contexts, batches, QWEN_7B, dtype)
    rows += paged_decode_rows([1024, 4096], [32], QWEN_05B, dtype)
    rows += paged_prefill_rows(QWEN_7B, dtype)
    rows += stock_choice_rows(QWEN_7B, dtype, flex=not quick)
    return rows
