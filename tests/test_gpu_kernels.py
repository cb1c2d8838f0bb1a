"""The CUDA kernels at serving sizes (Qwen2-0.5B and 7B-class shapes). Marked ``gpu``.

What the interpreter cannot show: that a row's bits survive every GEMM M bucket and
both loaders on the real matrix instructions, that paged attention keeps its bits across
prefill / chunked prefill / decode, batch composition and block numbering at real sizes,
that a captured CUDA graph replays the eager bits for new lengths and tables, and that
unchecked bad tables never fault.
"""

import math

import pytest
import torch

from _compare import assert_bitwise_equal, assert_close
from _op_cases import PagedLayout
from _tolerances import tolerance
from reasonserve import ops

pytestmark = pytest.mark.gpu
DEV = "cuda"
SWITCH = "set reasonserve.ops.triton._gemm_config.TILES_PER_M_BUCKET = False (see its docstring)"
# (query heads, KV heads, head dim): Qwen2-0.5B, Qwen2-7B
HEADS = [(14, 2, 64), (28, 4, 128)]
BLOCK = 16


def _randn(gen, *shape, dtype=torch.bfloat16, scale=1.0):
    return (torch.randn(*shape, generator=gen, device=DEV) * scale).to(dtype)


# ---- GEMM -------------------------------------------------------------------------------

def _loaders(dtype):
    """(use_tma, weight layout) pairs to compare; bf16 runs all of them."""
    from reasonserve.ops.triton.matmul import _tma_default

    probe = torch.empty(64, 64, device=DEV, dtype=dtype)
    tma = [False, True] if _tma_default(probe, probe) else [False]
    layouts = ["row-major", "k-major"] if dtype == torch.bfloat16 else ["row-major"]
    return [(t, lay) for t in tma for lay in layouts if t or lay == "row-major"]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize(("k", "n"), [(4096, 4096), (896, 4864), (4864, 896), (896, 151936)])
def test_gemm_rows_same_bits_under_every_bucket(dtype, k, n):
    from reasonserve.ops.triton._gemm_config import bucket_tiles
    from reasonserve.ops.triton.matmul import matmul_triton

    gen = torch.Generator(device=DEV).manual_seed(k + n)
    x = _randn(gen, 64, k, dtype=dtype)
    w = _randn(gen, n, k, dtype=dtype, scale=k**-0.5)
    weights = {"row-major": w.t(), "k-major": w.t().contiguous()}
    first = matmul_triton(x, w.t(), tiles=bucket_tiles(x)[0], use_tma=False)
    for tiles in bucket_tiles(x):
        for use_tma, layout in _loaders(dtype):
            got = matmul_triton(x, weights[layout], tiles=tiles, use_tma=use_tma)
            assert_bitwise_equal(got, first, f"{tiles} tma={use_tma} {layout}: {SWITCH}")
    atol, rtol = tolerance("matmul", dtype)
    assert_close(first.float(), (x.double() @ w.double().t()).float(), atol * math.sqrt(k), rtol, "vs float64")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize(("k", "n"), [(896, 4864), (4864, 896), (896, 151936)])
def test_linear_rows_invariant_across_m_at_qwen_shapes(dtype, k, n):
    gen = torch.Generator(device=DEV).manual_seed(n)
    x = _randn(gen, 1024, k, dtype=dtype)
    w = _randn(gen, n, k, dtype=dtype, scale=k**-0.5)
    full = ops.linear(x, w)
    for m in (1, 15, 16, 17, 64, 65, 256, 257):
        assert_bitwise_equal(ops.linear(x[-m:], w), full[-m:], f"M={m} (buckets): {SWITCH}")


def test_torch_path_linear_rows_invariant_on_cuda():
    """The torch fallback's fixed 64-row cuBLAS calls: a row's bits do not depend on its slot."""
    gen = torch.Generator(device=DEV).manual_seed(5)
    x = _randn(gen, 300, 4096)
    w = _randn(gen, 4096, 4096, scale=1 / 64)
    full = ops.linear(x, w, impl="torch")
    for rows in (slice(0, 1), slice(7, 8), slice(63, 65), slice(100, 300)):
        assert_bitwise_equal(ops.linear(x[rows], w, impl="torch"), full[rows], f"rows {rows}")


# ---- fused RMSNorm ----------------------------------------------------------------------

@pytest.mark.parametrize("n", [896, 4096, 8192])  # 8192: two chunks of 4096
def test_add_rms_norm_bits_and_row_invariance(n):
    gen = torch.Generator(device=DEV).manual_seed(n)
    x, r, w = _randn(gen, 300, n, scale=3.0), _randn(gen, 300, n), _randn(gen, n)
    normed, summed = ops.add_rms_norm(x, r, w)
    assert_bitwise_equal(summed, x + r, "summed")
    assert_bitwise_equal(normed, ops.rms_norm(x + r, w), "add_rms_norm vs rms_norm(x + r)")
    assert_bitwise_equal(ops.add_rms_norm(x[7:8], r[7:8], w)[0], normed[7:8], "row alone")
    ref = ops.rms_norm((x + r).double(), w.double(), impl="torch")
    assert_close(normed, ref, *tolerance("rms_norm", torch.bfloat16), what="vs float64")


# ---- paged attention --------------------------------------------------------------------

def _sequence(gen, length, hq, hkv, d, dtype=torch.bfloat16):
    return (_randn(gen, length, hq, d, dtype=dtype), _randn(gen, length, hkv, d, dtype=dtype),
            _randn(gen, length, hkv, d, dtype=dtype))  # fmt: skip


def _ints(*values):
    return torch.tensor(values, device=DEV)


@pytest.mark.parametrize(("hq", "hkv", "d"), HEADS)
def test_paged_prefill_chunks_decode_and_batches_give_the_same_bits(hq, hkv, d):
    gen = torch.Generator(device=DEV).manual_seed(d)
    seq = _sequence(gen, 1500, hq, hkv, d)  # crosses the 512-key splits
    q, kc, vc, tables, lens, _ = PagedLayout(BLOCK, 1, DEV).pack([seq])
    full = ops.paged_attention(q, kc, vc, tables, lens, lens)
    for begin, end in ((0, 700), (700, 1100), (1100, 1500)):
        chunk = ops.paged_attention(q[begin:end], kc, vc, tables, _ints(end), _ints(end - begin))
        assert_bitwise_equal(chunk, full[begin:end], f"chunk {begin}:{end}")
    for i in (0, 511, 512, 1023, 1499):
        step = ops.paged_attention(q[i : i + 1], kc, vc, tables, _ints(i + 1), _ints(1))
        assert_bitwise_equal(step, full[i : i + 1], f"decode of query {i}")
    # query 1499's decode inside a batch of 63 others, with other block numbers
    others = [_sequence(gen, int(n), hq, hkv, d) for n in torch.randint(1, 4000, (63,))]
    batch = [(o[0][-1:], o[1], o[2]) for o in others[:40]] + [(seq[0][-1:], seq[1], seq[2])] + [
        (o[0][-5:], o[1], o[2]) for o in others[40:]
    ]
    layout = PagedLayout(BLOCK, 2, DEV)
    out = layout.unpack(ops.paged_attention(*layout.pack(batch)), batch)
    assert_bitwise_equal(out[40], full[1499:1500], "decode inside a mixed batch")
    last = ops.paged_attention(q[-10:].double(), kc.double(), vc.double(), tables, lens, _ints(10), impl="torch")
    assert_close(full[-10:], last, *tolerance("attention", torch.bfloat16), what="vs float64 reference")


@pytest.mark.parametrize(("hq", "hkv", "d"), HEADS)
def test_paged_modes_and_capacities_give_the_same_bits(hq, hkv, d):
    import dataclasses

    from reasonserve.ops.triton.paged_attention import invariant_config, paged_attention_triton

    gen = torch.Generator(device=DEV).manual_seed(7)
    seqs = [_sequence(gen, n, hq, hkv, d) for n in (3000, 700, 1)]
    batch = [(s[0][-k:], s[1], s[2]) for s, k in zip(seqs, (1, 3, 1), strict=True)]
    layout = PagedLayout(BLOCK, 4, DEV)
    q, kc, vc, tables, lens, qlens = layout.pack(batch)
    base = invariant_config(q, kc)

    def launch(split, cap):
        config = dataclasses.replace(base, split_kv=split)
        return paged_attention_triton(q, kc, vc, tables, lens, qlens, d**-0.5, cap, config)

    outs = {(split, cap): launch(split, cap) for split in (True, False) for cap in (3000, 8192, 32768)}
    first = outs[(True, 3000)]
    for key, out in outs.items():
        assert_bitwise_equal(out, first, f"split_kv, max_seq_len = {key}")


def _graph_case(gen, hq, hkv, d, batch=8, capacity=2048):
    kc = _randn(gen, batch * capacity // BLOCK + 8, hkv, BLOCK, d)
    vc = _randn(gen, *kc.shape)
    q = _randn(gen, batch, hq, d)
    tables = torch.zeros(batch, capacity // BLOCK, dtype=torch.int32, device=DEV)
    return q, kc, vc, tables, torch.ones(batch, dtype=torch.int32, device=DEV)


def _refill(gen, q, kc, tables, lens, capacity=2048):
    """New queries, block numbers and lengths (within capacity) into the static inputs."""
    q.copy_(_randn(gen, *q.shape))
    tables.copy_(torch.randperm(kc.shape[0], device=DEV, generator=gen)[: tables.numel()].view(tables.shape))
    lens.copy_(torch.randint(1, capacity + 1, lens.shape, device=DEV, generator=gen))


@pytest.mark.parametrize("op", [ops.paged_attention, ops.paged_attention_stock])
@pytest.mark.parametrize(("hq", "hkv", "d"), HEADS)
def test_paged_attention_cuda_graph_replays_the_eager_bits(op, hq, hkv, d):
    """One graph, captured with host capacities, valid for any lengths and tables within them."""
    gen = torch.Generator(device=DEV).manual_seed(11)
    q, kc, vc, tables, lens = _graph_case(gen, hq, hkv, d)
    qlens = torch.ones_like(lens)
    _refill(gen, q, kc, tables, lens)

    def step():
        return op(q, kc, vc, tables, lens, qlens, max_seq_len=2048, max_query_len=1, check=False)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # compile and warm up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = step()
    for trial in range(3):
        _refill(gen, q, kc, tables, lens)
        graph.replay()
        assert_bitwise_equal(static_out, step(), f"replay {trial}")


@pytest.mark.parametrize(("hq", "hkv", "d"), HEADS)
def test_paged_stock_is_close_to_the_invariant_op(hq, hkv, d):
    gen = torch.Generator(device=DEV).manual_seed(13)
    lengths = [1024, 8192, 4096, 17, 2048, 600]
    batch = [(s[0][-k:], s[1], s[2]) for s, k in
             zip((_sequence(gen, n, hq, hkv, d) for n in lengths), (1, 1, 1, 1, 300, 600), strict=True)]  # fmt: skip
    q, kc, vc, tables, lens, qlens = PagedLayout(BLOCK, 5, DEV).pack(batch)
    inv = ops.paged_attention(q, kc, vc, tables, lens, qlens)
    for max_query_len in (600, None):
        stock = ops.paged_attention_stock(q, kc, vc, tables, lens, qlens, max_query_len=max_query_len)
        assert_close(stock.float(), inv.float(), *tolerance("attention", torch.bfloat16), what="stock vs invariant")
    decode = [(s[0][-1:], s[1], s[2]) for s in batch]
    q, kc, vc, tables, lens, qlens = PagedLayout(BLOCK, 6, DEV).pack(decode)
    stock = ops.paged_attention_stock(q, kc, vc, tables, lens, qlens, max_query_len=1)
    inv = ops.paged_attention(q, kc, vc, tables, lens, qlens)
    assert_close(stock.float(), inv.float(), *tolerance("attention", torch.bfloat16), what="stock decode")


@pytest.mark.parametrize("op", [ops.paged_attention, ops.paged_attention_stock])
def test_paged_unchecked_bad_tables_never_fault(op):
    gen = torch.Generator(device=DEV).manual_seed(17)
    q, kc, vc, tables, lens = _graph_case(gen, 28, 4, 128)
    tables.copy_(torch.randint(-(2**31), 2**31 - 1, tables.shape, device=DEV, generator=gen))
    lens.copy_(torch.randint(1, 2048 + 1, lens.shape, device=DEV, generator=gen))
    out = op(q, kc, vc, tables, lens, torch.ones_like(lens), max_seq_len=2048, max_query_len=1, check=False)
    torch.cuda.synchronize()  # an illegal access would surface here
    assert out.shape == q.shape


# (seq_lens, query_lens) of 8 sequences over 8 query rows, each breaking check=False's
# promise: past max_seq_len, negative, int32 extremes, more queries than keys, counts
# summing past / short of the rows, negative counts.
_LYING = [
    ([4096] * 8, [1] * 8), ([2**31 - 64] * 8, [1] * 8), ([-5, 9] * 4, [1] * 8), ([-(2**31)] * 8, [1] * 8),
    ([1] * 8, [4, 4, 0, 0, 0, 0, 0, 0]), ([2048] * 8, [2] * 8), ([2048] * 8, [1, 0, 0, 0, 0, 0, 0, 0]),
    ([2048] * 8, [-3, 11, 0, 0, 0, 0, 0, 0]), ([2048] * 8, [2**30, -(2**31), 1, 1, 1, 1, 1, 1]),
]  # fmt: skip


@pytest.mark.parametrize("op", [ops.paged_attention, ops.paged_attention_stock])
@pytest.mark.parametrize(("seq_lens", "query_lens"), _LYING)
def test_paged_unchecked_lying_lengths_never_fault(op, seq_lens, query_lens):
    """Any broken length, with valid tables: no illegal access and no long walk (a program
    walking 2**31 keys would take minutes; the kernel clamps to max_seq_len)."""
    gen = torch.Generator(device=DEV).manual_seed(19)
    q, kc, vc, tables, lens = _graph_case(gen, 28, 4, 128)
    _refill(gen, q, kc, tables, lens)
    lens.copy_(torch.tensor(seq_lens, dtype=torch.int32))
    qlens = torch.tensor(query_lens, dtype=torch.int32, device=DEV)
    out = op(q, kc, vc, tables, lens, qlens, max_seq_len=2048, max_query_len=4, check=False)
    torch.cuda.synchronize()  # an illegal access would surface here
    assert out.shape == q.shape
