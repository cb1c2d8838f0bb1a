"""Triton kernels: the same invariance properties and parity as the torch path.

Without a GPU they run in the Triton interpreter (``TRITON_INTERPRET=1``, set by
``conftest.py``) on small fp32/fp16 shapes — the interpreter computes bf16 ``tl.dot``
wrongly — with a K-ordered ``tl.dot`` (``_ordered_dot``) so that they test the
kernel's reduction order, not the host BLAS, and with every load and store checked
against the launch's tensors (``_interpreter_bounds``). With CUDA the same tests run on the GPU;
``test_gpu.py`` adds real sizes.
"""

import functools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import _interpreter_bounds
import _ordered_dot
from _compare import assert_bitwise_equal, assert_close
from _invariance import check_batch_invariance, junk_rows
from _op_cases import ROW_OPS, PagedLayout, attention_case, paged_case, row_case
from _tolerances import tolerance
from reasonserve import ops
from reasonserve.core.errors import InvalidArgumentError, InvalidTypeError

pytest.importorskip("triton", reason="Triton kernels need the triton package (triton extra)")


@pytest.fixture(autouse=True)
def interpreter_checks(monkeypatch):
    """In the interpreter: a K-ordered ``tl.dot``, and every load and store bounds-checked
    (the checker, or None on a GPU)."""
    if torch.cuda.is_available():
        return None
    _ordered_dot.install(monkeypatch)
    return _interpreter_bounds.install(monkeypatch)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32, torch.float16]
TRITON_ROW_OPS = [op for op in ROW_OPS if op not in ("silu", "linear_k_major")]  # no kernel / same kernel


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", TRITON_ROW_OPS)
@settings(max_examples=3)
@given(k=st.sampled_from([1, 7, 16, 41]), n=st.sampled_from([1, 7, 16, 33]), count=st.integers(1, 20),
       seed=st.integers(0, 2**31 - 1))  # fmt: skip
def test_triton_row_ops_batch_invariant(name, dtype, k, n, count, seed):
    rng = torch.Generator().manual_seed(seed)
    run, make = row_case(name, "triton", dtype, k, n, rng, device=DEVICE)
    items = [make(rng) for _ in range(count)]
    junk = [j.to(DEVICE) for j in junk_rows([k], dtype, rng, 2)]
    check_batch_invariance(run, items, junk, [make(rng) for _ in range(3)], rng)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("s", [1, 5])
def test_triton_attention_batch_invariant(dtype, s):
    rng = torch.Generator().manual_seed(s)
    run, make = attention_case("triton", dtype, 4, 2, 16, s, rng, device=DEVICE)
    items = [make(rng) for _ in range(3)]
    check_batch_invariance(run, items, [], [make(rng) for _ in range(2)], rng)


@pytest.mark.parametrize("dtype", DTYPES)
def test_triton_matches_the_torch_reference(dtype):
    g = torch.Generator().manual_seed(0)

    def r(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(dtype=dtype, device=DEVICE)

    x, w, nw = r(19, 40, scale=2.0), r(23, 40, scale=0.2), r(40)
    checks = {
        "matmul": (ops.linear(x, w, impl="triton"), ops.linear(x.double(), w.double(), impl="torch")),
        "rms_norm": (ops.rms_norm(x, nw, impl="triton"), ops.rms_norm(x.double(), nw.double(), impl="torch")),
        "softmax": (ops.softmax(x, impl="triton"), ops.softmax(x.double(), impl="torch")),
        "log_softmax": (ops.log_softmax(x, impl="triton"), ops.log_softmax(x.double(), impl="torch")),
        "mean": (ops.mean(x, -1, impl="triton"), ops.mean(x.double(), -1, impl="torch")),
    }
    for name, (got, want) in checks.items():
        atol, rtol = tolerance(name, dtype)
        assert_close(got.cpu(), want.cpu(), atol * (7 if name == "matmul" else 1), rtol, name)
    q, k, v = r(2, 4, 5, 16), r(2, 2, 37, 16), r(2, 2, 37, 16)
    lens = torch.tensor([37, 12], device=DEVICE)
    for causal in (True, False):
        got = ops.attention(q, k, v, causal=causal, kv_lens=lens, impl="triton")
        want = ops.attention(q.double(), k.double(), v.double(), causal=causal, kv_lens=lens, impl="torch")
        assert_close(got.cpu(), want.cpu(), *tolerance("attention", dtype), what=f"attention causal={causal}")


def test_auto_never_picks_the_interpreter_on_cpu():
    """``auto`` on CPU is the native kernel (compiled or its transcription), never Triton."""
    from reasonserve.ops._impl import resolve_impl

    x = torch.randn(3, 5)
    assert resolve_impl("auto", x) == "native"
    assert torch.equal(ops.softmax(x, impl="auto"), ops.softmax(x, impl="native"))


@settings(max_examples=5, deadline=None)
@given(vocab=st.sampled_from([1, 7, 1023, 1025, 3001]), batch=st.integers(1, 4), seed=st.integers(0, 2**31 - 1))
def test_noise_kernel_gives_the_torch_hash_bits(vocab, batch, seed):
    from reasonserve.ops._hash import MASK32, finalize, mix_word, uniform_open01
    from reasonserve.ops.triton.noise import uniform_triton

    gen = torch.Generator().manual_seed(seed)
    # Seeds cover both 32-bit words, negative int64 (high bit set) and the extremes.
    seeds = torch.cat([torch.randint(-(2**63), 2**63 - 1, (batch,), generator=gen), torch.tensor([-1, 2**63 - 1])])
    positions = torch.cat([torch.randint(0, 2**32, (batch,), generator=gen), torch.tensor([0, 2**32 - 1])])
    s_lo, s_hi, p_lo = seeds & MASK32, (seeds >> 32) & MASK32, positions & MASK32
    h = mix_word(mix_word(mix_word(torch.zeros_like(s_lo), s_lo), s_hi), p_lo)
    expected = uniform_open01(finalize(mix_word(h[:, None], torch.arange(vocab)[None, :]), 16))
    got = uniform_triton(s_lo.to(DEVICE), s_hi.to(DEVICE), p_lo.to(DEVICE), vocab).cpu()
    assert torch.equal(got, expected)


# ---- paged attention -----------------------------------------------------------------

def _paged_invariant(*args, **kwargs):
    return ops.paged_attention(*args, impl="triton", **kwargs)


def _junk_sequence(g, hq, hkv, d, dtype):
    """A sequence whose queries, keys and values are NaN / inf / huge."""
    length = int(torch.randint(1, 20, (1,), generator=g))
    q = junk_rows([2, hq, d], dtype, g, 1)[0]
    return (q.to(DEVICE), *(junk_rows([length, hkv, d], dtype, g, 1)[0].to(DEVICE) for _ in range(2)))


@pytest.mark.parametrize(("dtype", "hq", "hkv", "d"), [(torch.float32, 6, 2, 16), (torch.float16, 2, 2, 24)])
def test_triton_paged_attention_batch_invariant(dtype, hq, hkv, d):
    """Slice, junk sequences, permutation, composition, run-to-run — with fresh block
    numbers, NaN in unused slots and junk table entries past each sequence on every run."""
    rng = torch.Generator().manual_seed(d)
    run, make = paged_case(_paged_invariant, dtype, hq, hkv, d, 4, rng, device=DEVICE, max_keys=34)
    items = [make(rng) for _ in range(3)]
    junk = [_junk_sequence(rng, hq, hkv, d, dtype)]
    check_batch_invariance(run, items, junk, [make(rng) for _ in range(2)], rng)


def _one_sequence(g, length, hq=4, hkv=2, d=16, dtype=torch.float32):
    layout = PagedLayout(4, 5, DEVICE)
    seq = [(torch.randn(length, hq, d, generator=g).to(dtype),
            torch.randn(length, hkv, d, generator=g).to(dtype), torch.randn(length, hkv, d, generator=g).to(dtype))]
    return layout.pack(seq)  # fmt: skip


def test_triton_paged_prefill_chunked_prefill_and_decode_give_the_same_bits():
    g = torch.Generator().manual_seed(7)
    q, kc, vc, tables, lens, _ = _one_sequence(g, 35)
    full = _paged_invariant(q, kc, vc, tables, lens, lens)
    for begin, end in ((0, 9), (9, 33), (33, 35)):  # chunked prefill, chunks crossing splits
        n = torch.tensor([end], device=DEVICE)
        chunk = _paged_invariant(q[begin:end], kc, vc, tables, n, n - begin)
        assert_bitwise_equal(chunk, full[begin:end], f"chunk {begin}:{end}")
    for i in (0, 31, 32, 34):  # decode steps, at and around split boundaries (32 keys)
        one = torch.tensor([1], device=DEVICE)
        step = _paged_invariant(q[i : i + 1], kc, vc, tables, torch.tensor([i + 1], device=DEVICE), one)
        assert_bitwise_equal(step, full[i : i + 1], f"decode of query {i}")


def test_triton_paged_modes_and_capacities_give_the_same_bits():
    """Single-pass vs split-KV launches and larger host capacities change no bit."""
    import dataclasses

    from reasonserve.ops.triton.paged_attention import invariant_config, paged_attention_triton

    g = torch.Generator().manual_seed(8)
    q, kc, vc, tables, lens, _ = _one_sequence(g, 37)
    qlens = torch.tensor([5], device=DEVICE)
    q = q[-5:]
    base = invariant_config(q, kc)
    outs = [
        paged_attention_triton(q, kc, vc, tables, lens, qlens, 0.25, cap, dataclasses.replace(base, split_kv=split))
        for split in (True, False)
        for cap in (37, 200)
    ]
    for i, out in enumerate(outs[1:], 1):
        assert_bitwise_equal(out, outs[0], f"launch {i}")
    api = _paged_invariant(q, kc, vc, tables, lens, qlens, scale=0.25, max_seq_len=40, max_query_len=5, check=False)
    assert_bitwise_equal(api, outs[0], "public op, check=False")


@pytest.mark.parametrize("dtype", DTYPES)
def test_triton_paged_attention_matches_the_reference(dtype):
    g = torch.Generator().manual_seed(9)
    run_inv, make = paged_case(_paged_invariant, dtype, 6, 2, 16, 4, g, device=DEVICE)
    stock = functools.partial(ops.paged_attention_stock, impl="triton")
    run_stock, _ = paged_case(stock, dtype, 6, 2, 16, 4, g, device=DEVICE)
    run_ref, _ = paged_case(lambda *a: ops.paged_attention_reference(*_double(a)), dtype, 6, 2, 16, 4, g)
    items = [make(g) for _ in range(3)]
    decodes = [(it[0][-1:], it[1], it[2]) for it in items]
    for batch, what in ((items, "mixed"), (decodes, "decode")):
        want = run_ref([tuple(t.cpu() for t in it) for it in batch])
        for name, run in (("invariant", run_inv), ("stock", run_stock)):
            for got, ref in zip(run(batch), want, strict=True):
                assert_close(got.cpu(), ref, *tolerance("attention", dtype), what=f"{name} {what}")


def _double(args):
    return [t.double() if t.is_floating_point() else t for t in args]


def test_triton_paged_attention_unchecked_bad_tables_stay_in_bounds():
    """check=False with out-of-range entries: garbage values for that call, no bad access;
    check=True names the argument."""
    g = torch.Generator().manual_seed(10)
    q, kc, vc, tables, lens, _ = _one_sequence(g, 9)
    bad = tables.clone()
    bad[0, :3] = torch.tensor([10**6, -7, 2**30])
    one = torch.tensor([1], device=DEVICE)
    out = _paged_invariant(q[-1:], kc, vc, bad, lens, one, check=False, max_seq_len=9, max_query_len=1)
    assert out.shape == (1, 4, 16)
    with pytest.raises(InvalidArgumentError, match="block_tables entries"):
        _paged_invariant(q[-1:], kc, vc, bad, lens, one)


# ---- GEMM: BLOCK_K per weight shape, tiles per M bucket --------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_triton_gemm_rows_same_bits_under_every_bucket_and_loader(dtype):
    """Every M bucket's tiles, the single fallback config, TMA and pointer loads and both
    weight layouts walk K identically: a row gets the same bits from each."""
    from reasonserve.ops.triton._gemm_config import bucket_tiles
    from reasonserve.ops.triton.matmul import matmul_triton

    g = torch.Generator().manual_seed(11)
    x = torch.randn(20, 40, generator=g).to(dtype=dtype, device=DEVICE)
    w = (torch.randn(24, 40, generator=g) / 6).to(dtype=dtype, device=DEVICE)
    first = matmul_triton(x, w.t(), tiles=bucket_tiles(x)[0], use_tma=False)
    for tiles in bucket_tiles(x):
        for use_tma in (False, True):
            for name, b in (("row-major weight", w.t()), ("k-major weight", w.t().contiguous())):
                got = matmul_triton(x, b, tiles=tiles, use_tma=use_tma)
                assert_bitwise_equal(got, first, f"{tiles} tma={use_tma} {name}")
    big = torch.cat([x, x.flip(0)])  # 40 rows: the public op crosses every interpreter bucket
    full = ops.linear(big, w, impl="triton")
    for m in (1, 16, 17, 32, 33):
        assert_bitwise_equal(ops.linear(big[-m:], w, impl="triton"), full[-m:], f"M={m} through ops.linear")


def test_triton_gemm_switch_runs_one_config_for_every_m(monkeypatch):
    """The M buckets pick different tiles; TILES_PER_M_BUCKET=False picks ONE_CONFIG for all."""
    from reasonserve.ops.triton import _gemm_config as cfg

    x = torch.empty(1, 1, device=DEVICE, dtype=torch.float16)
    picked = {cfg.gemm_tiles(m, x) for m in (1, 16, 17, 64, 65, 300, 4096)}
    assert len(picked) >= 3
    monkeypatch.setattr(cfg, "TILES_PER_M_BUCKET", False)
    assert {cfg.gemm_tiles(m, x) for m in (1, 16, 17, 64, 65, 300, 4096)} == {cfg.ONE_CONFIG[cfg._kind(x)]}


def test_torch_path_off_cpu_runs_fixed_row_tiles(monkeypatch):
    """The non-CPU torch path calls BLAS with exactly ROW_TILE rows, whatever M (never a
    per-process probe): every row of every batch sees the same call shape."""
    from reasonserve.ops import _fixed_order

    calls = []
    real = _fixed_order._blas_mm
    monkeypatch.setattr(_fixed_order, "_blas_mm", lambda a, b: calls.append((a.shape, b.shape)) or real(a, b))
    g = torch.Generator().manual_seed(12)
    w = torch.randn(24, 40, generator=g)
    for m in (1, 63, 64, 65, 130):
        x = torch.randn(m, 40, generator=g)
        out = _fixed_order.tiled_matmul_2d(x, w.t())
        assert_close(out, x.double() @ w.double().t(), 1e-4, 1e-4, f"M={m}")
    tile = _fixed_order.ROW_TILE
    assert calls and all(tile in (s[0][0], s[1][1]) for s in calls), calls  # the tile is the row count


# ---- fused RMSNorm ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [7, 300])  # one chunk / several chunks (interpreter chunk cap 256)
def test_triton_add_rms_norm_is_add_then_rms_norm_and_batch_invariant(dtype, n):
    g = torch.Generator().manual_seed(n)
    x, r = ((torch.randn(9, n, generator=g) * 3).to(dtype=dtype, device=DEVICE) for _ in range(2))
    w = torch.randn(n, generator=g).to(dtype=dtype, device=DEVICE)
    normed, summed = ops.add_rms_norm(x, r, w, impl="triton")
    assert_bitwise_equal(summed, x + r, "summed")
    assert_bitwise_equal(normed, ops.rms_norm(x + r, w, impl="triton"), "normed")
    alone, _ = ops.add_rms_norm(x[4:5], r[4:5], w, impl="triton")
    assert_bitwise_equal(alone, normed[4:5], "row 4 alone")
    ref = ops.rms_norm((x + r).double(), w.double(), impl="torch")
    assert_close(normed.cpu(), ref.cpu(), *tolerance("rms_norm", dtype), what="vs float64")


# (seq_lens, query_lens) of two sequences over three query rows, each breaking the
# check=False promise: past max_seq_len and the tables / negative, int32 extremes, more
# queries than keys, counts summing past / short of the rows, negative counts, huge ones.
LYING_LENGTHS = [([200, -5], [1, 2]), ([9, 10**6], [2, 1]), ([2**31 - 64, -(2**31)], [1, 2]),
                 ([1, 2], [2, 1]), ([9, 9], [3, 2]), ([9, 9], [1, 1]), ([9, 9], [-3, 6]),
                 ([-(2**31), 9], [2**30, -(2**31)])]  # fmt: skip


def test_triton_paged_attention_unchecked_lying_lengths_stay_in_bounds(interpreter_checks):
    """check=False with lengths that break the promise: garbage for that call, never a load
    or store outside the tensors, nor a walk past the capacity (in the interpreter every
    access is checked and a launch's loads are bounded: a lost clamp fails here), in both
    launch modes and the stock configuration."""
    if interpreter_checks is not None:  # a launch within the capacity issues ~100 loads here
        interpreter_checks.max_loads_per_launch = 1_000
    import dataclasses

    from reasonserve.ops.triton.paged_attention import invariant_config, paged_attention_triton

    g = torch.Generator().manual_seed(14)
    layout = PagedLayout(4, 5, DEVICE)
    seqs = [(torch.randn(n_q, 4, 16, generator=g), torch.randn(n, 2, 16, generator=g),
             torch.randn(n, 2, 16, generator=g)) for n_q, n in ((1, 9), (2, 9))]  # fmt: skip
    q, kc, vc, tables, _, _ = layout.pack(seqs)
    base = invariant_config(q, kc)
    for seq_lens, query_lens in LYING_LENGTHS:
        lens, qlens = (torch.tensor(v, dtype=torch.int32, device=DEVICE) for v in (seq_lens, query_lens))
        for split in (True, False):  # a capacity past the tables' 20 keys: the launch trusts it
            config = dataclasses.replace(base, split_kv=split)
            assert paged_attention_triton(q, kc, vc, tables, lens, qlens, 0.25, 64, config).shape == q.shape
        stock = ops.paged_attention_stock(q, kc, vc, tables, lens, qlens, check=False, max_seq_len=12,
                                          max_query_len=2, impl="triton")  # fmt: skip
        assert stock.shape == q.shape
    empty = tables[:, :0]
    assert torch.equal(_paged_invariant(q, kc, vc, empty, lens, qlens, check=False), torch.zeros_like(q))


@pytest.mark.parametrize("op", [ops.paged_attention, ops.paged_attention_stock])
def test_paged_capacities_and_devices_are_checked_by_name(op):
    g = torch.Generator().manual_seed(15)
    q, kc, vc, tables, lens, _ = _one_sequence(g, 9)
    tables = tables[:, :3]  # 3 columns of 4 keys: capacity 12
    one = torch.tensor([1], device=DEVICE)
    cases = [
        ({"max_seq_len": 13}, InvalidArgumentError, "max_seq_len=13 exceeds"),
        ({"max_seq_len": -1}, InvalidArgumentError, "max_seq_len must be an int"),
        ({"max_seq_len": 8}, InvalidArgumentError, "max_seq_len \\(8"),  # seq_lens 9 > 8
        ({"max_query_len": 1.5}, InvalidArgumentError, "max_query_len must be an int"),
    ]
    for kwargs, error, match in cases:
        with pytest.raises(error, match=match):
            op(q[-1:], kc, vc, tables, lens, one, **kwargs)
    with pytest.raises(InvalidArgumentError, match="max_query_len \\(1"):
        op(q[-2:], kc, vc, tables, lens, torch.tensor([2], device=DEVICE), max_query_len=1)
    with pytest.raises(InvalidTypeError, match="block_tables is on meta"):
        op(q[-1:], kc, vc, tables.to("meta"), lens, one)
