"""Bitwise batch-invariance of every op's torch path (hypothesis-drawn shapes)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from _compare import assert_bitwise_equal
from _invariance import check_batch_invariance, junk_rows
from _op_cases import ROW_OPS, attention_case, bmm_case, row_case, sample_case
from reasonserve import ops

DIMS = st.sampled_from([1, 7, 16, 41, 64, 123])
SEEDS = st.integers(0, 2**31 - 1)


def _items(make, count, rng):
    return [make(rng) for _ in range(count)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", ROW_OPS)
@settings(max_examples=12)
@given(k=DIMS, n=DIMS, count=st.integers(1, 40), seed=SEEDS)
def test_row_ops_batch_invariant(name, dtype, k, n, count, seed):
    rng = torch.Generator().manual_seed(seed)
    run, make = row_case(name, "torch", dtype, k, n, rng)
    items = _items(make, count, rng)
    check_batch_invariance(run, items, junk_rows([k], dtype, rng, 3), _items(make, 5, rng), rng)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@settings(max_examples=10)
@given(
    heads=st.sampled_from([(1, 1), (4, 2), (6, 3), (4, 1)]),
    d=st.sampled_from([1, 8, 16, 24]),
    s=st.sampled_from([1, 3, 9]),
    count=st.integers(1, 5),
    seed=SEEDS,
)
def test_attention_batch_invariant(dtype, heads, d, s, count, seed):
    rng = torch.Generator().manual_seed(seed)
    run, make = attention_case("torch", dtype, heads[0], heads[1], d, s, rng)
    check_batch_invariance(run, _items(make, count, rng), [], _items(make, 3, rng), rng)


def test_attention_invariant_across_kv_split_boundary():
    """Sequences longer than one KV chunk, padded to a much longer cache."""
    from reasonserve.ops import KV_SPLIT_TOKENS

    rng = torch.Generator().manual_seed(7)
    run, _ = attention_case("torch", torch.float32, 2, 1, 8, 1, rng)

    def make(g, length):
        return (torch.randn(2, 1, 8, generator=g), torch.randn(1, length, 8, generator=g),
                torch.randn(1, length, 8, generator=g))  # fmt: skip

    lengths = [1, KV_SPLIT_TOKENS - 1, KV_SPLIT_TOKENS, KV_SPLIT_TOKENS + 1, 3 * KV_SPLIT_TOKENS + 5]
    items = [make(rng, n) for n in lengths]
    check_batch_invariance(run, items, [], [make(rng, 4 * KV_SPLIT_TOKENS)], rng)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@settings(max_examples=8)
@given(
    # K * N below and above the element-wise tree threshold (2**14)
    kn=st.sampled_from([(8, 8), (64, 16), (41, 300), (256, 128), (130, 200)]),
    s=st.sampled_from([1, 5, 17]),
    count=st.integers(1, 6),
    seed=SEEDS,
)
def test_batched_matmul_batch_invariant(dtype, kn, s, count, seed):
    rng = torch.Generator().manual_seed(seed)
    run, make = bmm_case(dtype, s, kn[0], kn[1])
    check_batch_invariance(run, _items(make, count, rng), [], _items(make, 3, rng), rng)


@settings(max_examples=15)
@given(vocab=st.sampled_from([2, 7, 50, 300]), count=st.integers(1, 30), seed=SEEDS)
def test_sample_batch_invariant(vocab, count, seed):
    rng = torch.Generator().manual_seed(seed)
    run, make = sample_case(vocab, rng)
    check_batch_invariance(run, _items(make, count, rng), [], _items(make, 4, rng), rng)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("k", "n"), [(896, 1216), (1000, 1000), (512, 2048), (33, 77)])
def test_linear_invariant_across_tile_sizes(dtype, k, n):
    """Batches that mix the 256-, 64- and 16-row tiles give every row its one-row bits."""
    g = torch.Generator().manual_seed(k + n)
    x = torch.randn(600, k, generator=g).to(dtype)
    w = (torch.randn(n, k, generator=g) / k**0.5).to(dtype)
    alone = {i: ops.linear(x[i : i + 1], w) for i in (0, 15, 16, 63, 64, 255, 256, 299, 599)}
    for m in (1, 17, 64, 65, 256, 257, 300, 600):
        full = ops.linear(x[:m], w)
        for i, row in alone.items():
            if i < m:
                assert_bitwise_equal(full[i : i + 1], row, f"row {i} of a {m}-row batch")
    shifted = ops.linear(x[3:600], w)
    assert_bitwise_equal(shifted[253:254], alone[256], "row moved across a tile boundary")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reference_attention_query_bits_do_not_depend_on_the_window(dtype):
    """Torch path: a query's output is the same computed in a prefill of S queries or
    as a single decode step over its own prefix (what lets verify passes agree)."""
    g = torch.Generator().manual_seed(11)
    q = torch.randn(1, 4, 300, 16, generator=g).to(dtype)
    k, v = (torch.randn(1, 2, 300, 16, generator=g).to(dtype) for _ in range(2))
    prefill = ops.attention(q, k, v, impl="torch")
    for i in (0, 1, 77, 255, 256, 299):
        step = ops.decode_attention(q[:, :, i], k, v, torch.tensor([i + 1]), impl="torch")
        assert_bitwise_equal(step, prefill[:, :, i], f"query {i}")
