"""The fixed-order native CPU kernels: slot invariance, identical bits across
instruction sets and thread counts, parity with the reference, bad input (the fallback
without the extension: tests/test_native_fallback.py)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from _compare import assert_bitwise_equal, assert_close
from reasonserve import ops
from reasonserve.core.errors import ImplementationUnavailableError
from reasonserve.ops import _native, check

pytestmark = pytest.mark.skipif(not _native.available(), reason="native kernels not built here")

# Widths where BLAS kernels have been seen to sum a row by its slot, plus a spread.
DIMS = st.one_of(st.sampled_from([1, 5, 6, 7, 9, 10, 11, 16, 17, 33]), st.integers(1, 300))
SLOTS = 16


def _row_ops(k: int, n: int, dtype, gen):
    w = (torch.randn(n, k, generator=gen) / k**0.5).to(dtype)
    wk, b = ops.k_major(w), (torch.randn(k, n, generator=gen) / k**0.5).to(dtype)
    g = torch.randn(k, generator=gen).to(dtype)
    return {
        "linear": lambda x: ops.linear(x, w),
        "linear_k_major": lambda x: ops.linear(x, wk),
        "matmul": lambda x: ops.matmul(x, b),
        "rms_norm": lambda x: ops.rms_norm(x, g),
        "softmax": lambda x: ops.softmax(x),
        "log_softmax": lambda x: ops.log_softmax(x),
        "mean": lambda x: ops.mean(x, -1),
    }


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@settings(max_examples=25)
@given(k=DIMS, n=DIMS, seed=st.integers(0, 2**31 - 1))
def test_a_row_in_every_slot_gets_its_one_row_bits(dtype, k, n, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(1, k, generator=gen).to(dtype)
    batch = torch.randn(SLOTS, k, generator=gen).to(dtype)
    batch[(seed % SLOTS)] = float("nan")  # a junk row somewhere
    for name, op in _row_ops(k, n, dtype, gen).items():
        alone = op(x)
        for slot in range(SLOTS):
            filled = batch.clone()
            filled[slot] = x[0]
            assert_bitwise_equal(op(filled)[slot : slot + 1], alone, f"{name} K={k} N={n} slot {slot}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@settings(max_examples=10)
@given(d=st.sampled_from([1, 7, 16, 64, 80]), length=st.integers(1, 300), seed=st.integers(0, 2**31 - 1))
def test_decode_attention_in_every_slot(dtype, d, length, seed):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(SLOTS, 4, d, generator=gen).to(dtype)
    k, v = (torch.randn(SLOTS, 2, length + 5, d, generator=gen).to(dtype) for _ in range(2))
    lens = torch.randint(1, length + 1, (SLOTS,), generator=gen)
    batched = ops.decode_attention(q, k, v, lens)
    for slot in range(SLOTS):
        n = int(lens[slot])
        alone = ops.decode_attention(q[slot : slot + 1], k[slot : slot + 1, :, :n], v[slot : slot + 1, :, :n],
                                     lens[slot : slot + 1])  # fmt: skip
        assert_bitwise_equal(batched[slot : slot + 1], alone, f"slot {slot} of {SLOTS}, {n} keys")


def _paged_setup(gen, dtype=torch.float32, block_size=4, d=16):
    cache = [torch.randn(40, 2, block_size, d, generator=gen).to(dtype) for _ in range(2)]
    tables = torch.randperm(40, generator=gen)[:24].reshape(3, 8).to(torch.int32)
    return cache, tables


def test_paged_prefill_chunks_and_decode_give_the_same_bits():
    gen = torch.Generator().manual_seed(3)
    (kc, vc), tables = _paged_setup(gen)
    q = torch.randn(30, 4, 16, generator=gen)
    full = ops.paged_attention(q[:30], kc, vc, tables[:1], torch.tensor([30]), torch.tensor([30]))
    chunk = ops.paged_attention(q[10:20], kc, vc, tables[:1], torch.tensor([20]), torch.tensor([10]))
    assert_bitwise_equal(chunk, full[10:20], "prefill chunk")
    for i in (0, 13, 29):
        step = ops.paged_attention(q[i : i + 1], kc, vc, tables[:1], torch.tensor([i + 1]), torch.tensor([1]))
        assert_bitwise_equal(step, full[i : i + 1], f"decode of query {i}")
    # The same queries inside a batch with other sequences, their tables and lengths.
    mixed_q = torch.cat([torch.randn(3, 4, 16, generator=gen), q[10:20], torch.randn(1, 4, 16, generator=gen)])
    mixed = ops.paged_attention(mixed_q, kc, vc, torch.cat([tables[1:2], tables[:1], tables[2:]]),
                                torch.tensor([9, 20, 32]), torch.tensor([3, 10, 1]))  # fmt: skip
    assert_bitwise_equal(mixed[3:13], full[10:20], "batched with other sequences")


def test_paged_matches_contiguous_attention_and_reference():
    gen = torch.Generator().manual_seed(4)
    (kc, vc), tables = _paged_setup(gen)
    lens, qlens = torch.tensor([7, 30, 1]), torch.tensor([2, 5, 1])
    q = torch.randn(8, 4, 16, generator=gen)
    native = ops.paged_attention(q, kc, vc, tables, lens, qlens)
    reference = ops.paged_attention(q, kc, vc, tables, lens, qlens, impl="torch")
    assert_close(native, reference, rtol=1e-5, atol=1e-6)


def _all_ops_on(gen):
    """Every native op on odd shapes, with a NaN row and tails of every kind."""
    x = torch.randn(37, 45, generator=gen)
    x[5] = float("nan")
    w = torch.randn(29, 45, generator=gen)
    (kc, vc), tables = _paged_setup(gen, torch.bfloat16, d=24)
    q = torch.randn(3, 4, 24, generator=gen).to(torch.bfloat16)
    return [
        ops.linear(x, w), ops.linear(x, ops.k_major(w)), ops.matmul(x, w.t().contiguous()),
        ops.rms_norm(x, w[0]), ops.softmax(x), ops.log_softmax(x), ops.mean(x, -1),
        ops.paged_attention(q, kc, vc, tables, torch.tensor([5, 17, 32]), torch.tensor([1, 1, 1])),
    ]  # fmt: skip


def test_every_instruction_set_variant_gives_identical_bits(monkeypatch):
    isas = _native.available_isas()
    results = {}
    for isa in isas:
        monkeypatch.setenv(_native.ISA_ENV, isa)
        results[isa] = _all_ops_on(torch.Generator().manual_seed(5))
    for isa in isas[1:]:
        for i, (a, b) in enumerate(zip(results[isas[0]], results[isa], strict=True)):
            assert_bitwise_equal(b, a, f"op {i}: {isa} vs {isas[0]}")
    assert "generic" in isas


def test_thread_count_never_changes_bits():
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = _all_ops_on(torch.Generator().manual_seed(6))
        torch.set_num_threads(max(2, threads))
        many = _all_ops_on(torch.Generator().manual_seed(6))
    finally:
        torch.set_num_threads(threads)
    for i, (a, b) in enumerate(zip(one, many, strict=True)):
        assert_bitwise_equal(b, a, f"op {i}")


def test_an_unknown_or_unsupported_isa_is_a_typed_error(monkeypatch):
    monkeypatch.setenv(_native.ISA_ENV, "sse9")
    with pytest.raises(ImplementationUnavailableError, match="sse9"):
        ops.linear(torch.randn(2, 3), torch.randn(4, 3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_native_matches_the_reference(dtype):
    gen = torch.Generator().manual_seed(8)
    x, w = torch.randn(19, 130, generator=gen).to(dtype), torch.randn(70, 130, generator=gen).to(dtype)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    assert_close(ops.linear(x, w), ops.linear(x, w, impl="torch"), **tol)
    assert_close(ops.softmax(x), torch.softmax(x.float(), -1).to(dtype), **tol)
    assert_close(ops.log_softmax(x), torch.log_softmax(x.float(), -1).to(dtype), **tol)
    assert_close(ops.rms_norm(x, w[0]), ops.rms_norm(x, w[0], impl="torch"), **tol)
    assert_close(ops.mean(x, -1), x.float().mean(-1).to(dtype), **tol)


def test_exp_and_log_edges_follow_ieee():
    x = torch.tensor([[0.0, -math.inf, 88.0, -103.0, 1e-30, -1e-30]])
    assert_close(ops.softmax(x), torch.softmax(x, -1), rtol=1e-6, atol=1e-30)
    assert torch.isnan(ops.softmax(torch.tensor([[-math.inf, -math.inf]]))).all()
    assert torch.isnan(ops.softmax(torch.tensor([[1.0, math.nan]]))).all()
    assert_close(ops.log_softmax(x), torch.log_softmax(x, -1), rtol=1e-6, atol=1e-6)


def test_packed_weights_follow_in_place_updates():
    w = torch.randn(20, 8)
    x = torch.randn(3, 8)
    before = ops.linear(x, w)
    with torch.no_grad():
        w.mul_(2)
    assert_bitwise_equal(ops.linear(x, w), ops.linear(x, w.clone()), "after an in-place update")
    assert not torch.equal(before, ops.linear(x, w))


def test_empty_and_zero_k_inputs():
    assert ops.linear(torch.randn(0, 5), torch.randn(3, 5)).shape == (0, 3)
    assert torch.equal(ops.linear(torch.randn(4, 0), torch.randn(3, 0)), torch.zeros(4, 3))
    assert ops.matmul(torch.randn(4, 5), torch.randn(5, 0)).shape == (4, 0)
    assert torch.isnan(ops.mean(torch.randn(3, 0), -1)).all()


def test_malformed_calls_into_native_code_raise_not_crash():
    native = torch.ops.reasonserve
    x, panels = torch.randn(2, 8), torch.randn(1, 8, 16)
    with pytest.raises(RuntimeError, match="float32"):
        native.linear_packed(x.double(), panels, 16, 0)
    with pytest.raises(RuntimeError, match="panels"):
        native.linear_packed(x, torch.randn(1, 9, 16), 16, 0)
    with pytest.raises(RuntimeError, match="instruction set"):
        native.rms_norm(x, 1e-6, 7)
    q, cache = torch.randn(1, 2, 8), torch.randn(4, 1, 4, 8)
    good = (torch.tensor([[0, 1]]), torch.tensor([0]), torch.tensor([5]))
    assert native.paged_attention(q, cache, cache, *good, 1.0, 0).shape == q.shape
    with pytest.raises(RuntimeError, match="not a block"):
        native.paged_attention(q, cache, cache, torch.tensor([[0, 99]]), good[1], good[2], 1.0, 0)
    with pytest.raises(RuntimeError, match="row_keys"):
        native.paged_attention(q, cache, cache, good[0], good[1], torch.tensor([9]), 1.0, 0)
    with pytest.raises(RuntimeError, match="row_seq"):
        native.paged_attention(q, cache, cache, good[0], torch.tensor([3]), good[2], 1.0, 0)


def test_fake_kernels_let_tracers_see_shapes():
    torch.library.opcheck(torch.ops.reasonserve.linear_packed, (torch.randn(3, 8), torch.randn(2, 8, 16), 20, 0),
                          test_utils=("test_schema", "test_faketensor"))  # fmt: skip
    torch.library.opcheck(torch.ops.reasonserve.softmax, (torch.randn(3, 8), True, 0),
                          test_utils=("test_schema", "test_faketensor"))  # fmt: skip


def test_the_sweep_passes_here_and_catches_a_batch_dependent_op(monkeypatch):
    assert check.run_sweep(cases=20, seed=3).ok
    monkeypatch.setitem(check.OPS, "leaky", check._row_op(lambda x: x - x.nan_to_num().mean(0)))
    report = check.run_sweep(cases=5, seed=3, ops=("leaky",))
    assert report.failures["leaky"] > 0 and not report.ok


@pytest.mark.parametrize("n", [1, 7, 16, 45])
def test_batched_products_give_each_entry_its_own_bits(n):
    gen = torch.Generator().manual_seed(n)
    a, b = torch.randn(6, 9, 33, generator=gen), torch.randn(6, 33, n, generator=gen)
    batched = ops.matmul(a, b)
    transposed = ops.matmul(a, b.transpose(1, 2).contiguous().transpose(1, 2))  # column-major entries
    for i in range(6):
        alone = ops.matmul(a[i : i + 1, 2:3], b[i : i + 1])
        assert_bitwise_equal(batched[i : i + 1, 2:3], alone, f"entry {i}")
        assert_bitwise_equal(transposed[i], batched[i], f"entry {i}, column-major b")
        assert_bitwise_equal(batched[i], ops.matmul(a[i], b[i]), f"entry {i} as a 2-d product")
