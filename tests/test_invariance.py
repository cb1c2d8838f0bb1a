"""Bitwise batch-invariance of every op's torch path (hypothesis-drawn shapes)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from _invariance import check_batch_invariance, junk_rows
from _op_cases import ROW_OPS, attention_case, row_case, sample_case

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


@settings(max_examples=15)
@given(vocab=st.sampled_from([2, 7, 50, 300]), count=st.integers(1, 30), seed=SEEDS)
def test_sample_batch_invariant(vocab, count, seed):
    rng = torch.Generator().manual_seed(seed)
    run, make = sample_case(vocab, rng)
    check_batch_invariance(run, _items(make, count, rng), [], _items(make, 4, rng), rng)
