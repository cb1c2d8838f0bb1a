"""The sampler's filter rules at their exact boundaries, derived by hand from their
definitions (vLLM's semantics): top-p keeps the fewest highest tokens whose mass reaches
``top_p``; min-p keeps ``p >= min_p * max p``; top-k keeps the tokens at or above the k-th
largest logit; every filter reads ``logits / temperature``; ties at a cut are kept.

The logits are float64 ``[0, -ln 2, -ln 2]``: probabilities 1/2, 1/4, 1/4, and every
mass, ratio and logarithm on the way is exact in binary, so a rule off by one comparison
(``<`` for ``<=``) or by one position shows."""

import math
import struct

import pytest
import torch

from reasonserve import ops
from reasonserve.core.errors import InvalidArgumentError

LN2 = math.log(2)
HALVES = torch.tensor([0.0, -LN2, -LN2], dtype=torch.float64)  # p = 1/2, 1/4, 1/4
DRAWS = 600


def _seen(logits, impl="auto", **params) -> set[int]:
    """The tokens drawn over many positions (each allowed token of p >= 1/4 shows up)."""
    rows = logits.expand(DRAWS, -1).contiguous()
    return set(ops.sample(rows, seeds=11, positions=torch.arange(DRAWS), impl=impl, **params).tolist())


IMPLS = ["torch", "auto"]  # the definition, and the one a CPU host runs (native when built)


@pytest.mark.parametrize("impl", IMPLS)
def test_top_p_stops_at_the_first_token_whose_mass_reaches_it(impl):
    assert _seen(HALVES, impl, top_p=0.5) == {0}  # p(0) = 1/2 reaches 0.5 by itself
    assert _seen(HALVES, impl, top_p=0.5000001) == {0, 1, 2}  # needs token 1; token 2 ties it
    assert _seen(HALVES, impl, top_p=0.25) == {0}
    assert _seen(HALVES, impl, top_p=1.0) == {0, 1, 2}


@pytest.mark.parametrize("impl", IMPLS)
def test_top_p_mass_is_relative_to_the_whole_row(impl):
    """Logits shifted by a constant give the same probabilities, so the same cut, however
    far the shift (``exp`` of the raw logits would overflow or vanish here)."""
    for shift in (40.0, 1000.0, -1000.0):  # (inexact sums away from 0: cuts off the boundary)
        assert _seen(HALVES + shift, impl, top_p=0.45) == {0}
        assert _seen(HALVES + shift, impl, top_p=0.55) == {0, 1, 2}


@pytest.mark.parametrize("impl", IMPLS)
def test_min_p_keeps_tokens_at_exactly_min_p_times_the_top_probability(impl):
    assert _seen(HALVES, impl, min_p=0.5) == {0, 1, 2}  # 1/4 = 0.5 * 1/2: kept
    assert _seen(HALVES, impl, min_p=0.5000001) == {0}
    assert _seen(HALVES, impl, min_p=1.0) == {0}


@pytest.mark.parametrize("impl", IMPLS)
def test_filters_read_the_temperature_scaled_distribution(impl):
    """At temperature 2 the ratio p(1) / p(0) is 2**-0.5 ~ 0.707 (1/2 at temperature 1):
    min-p 0.6 keeps token 1 there and drops it at temperature 1; top-p 0.55 needs token 1
    once p(0) = 1 / (1 + 2**0.5) ~ 0.41."""
    assert _seen(HALVES, impl, min_p=0.6, temperature=2.0) == {0, 1, 2}
    assert _seen(HALVES, impl, min_p=0.6, temperature=1.0) == {0}
    assert _seen(HALVES, impl, top_p=0.45, temperature=2.0) == {0, 1, 2}
    assert _seen(HALVES, impl, top_p=0.45, temperature=0.5) == {0}  # p(0) = 2/3 at temperature 1/2


@pytest.mark.parametrize("impl", IMPLS)
def test_top_k_keeps_the_k_largest_and_their_ties(impl):
    distinct = torch.tensor([0.0, -1.0, -2.0], dtype=torch.float64)
    assert _seen(distinct, impl, top_k=1) == {0}
    assert _seen(distinct, impl, top_k=2) == {0, 1}
    assert _seen(distinct, impl, top_k=3) == {0, 1, 2}
    assert _seen(distinct, impl, top_k=7) == {0, 1, 2}  # more than the vocabulary: all of it
    assert _seen(HALVES, impl, top_k=2) == {0, 1, 2}  # token 2 ties the second largest
    assert _seen(distinct, impl, top_k=0) == {0, 1, 2}  # 0: off


@pytest.mark.parametrize("impl", IMPLS)
def test_filters_combine_as_the_strictest_cut(impl):
    distinct = torch.tensor([0.0, -0.1, -0.2, -5.0], dtype=torch.float64)
    assert _seen(distinct, impl, top_k=3, min_p=0.01) == {0, 1, 2}
    assert _seen(distinct, impl, top_k=3, min_p=0.85) == {0, 1}  # e^-0.2 ~ 0.82 < 0.85 < e^-0.1
    assert _seen(distinct, impl, top_k=1, top_p=1.0, min_p=0.0) == {0}


@pytest.mark.parametrize("impl", IMPLS)
def test_per_row_filters_apply_to_their_own_rows(impl):
    """A row with every filter off beside rows with one on: each row gets its own cut, and
    an off filter (top-k 0, top-p 1, min-p 0) cuts nothing in its row."""
    n = 4
    logits = HALVES.expand(n * DRAWS, -1).contiguous()
    per = {"top_k": [0, 1, 0, 0], "top_p": [1.0, 1.0, 0.5, 1.0], "min_p": [0.0, 0.0, 0.0, 0.6]}
    rows = {k: [v[i // DRAWS] for i in range(n * DRAWS)] for k, v in per.items()}
    tokens = ops.sample(logits, seeds=3, positions=torch.arange(n * DRAWS), impl=impl, **rows)
    seen = [set(tokens[i * DRAWS : (i + 1) * DRAWS].tolist()) for i in range(n)]
    assert seen == [{0, 1, 2}, {0}, {0}, {0}]


@pytest.mark.parametrize(
    ("name", "value"), [("top_p", 0.0), ("top_p", 1.5), ("min_p", -0.1), ("min_p", 1.01), ("top_k", -1),
                        ("temperature", -0.5), ("temperature", math.inf)],
)  # fmt: skip
def test_parameters_outside_their_range_are_refused(name, value):
    with pytest.raises(InvalidArgumentError, match=name):
        ops.sample(HALVES[None], seeds=1, positions=0, **{name: value})
    with pytest.raises(InvalidArgumentError, match=name):
        ops.sample(HALVES[None], seeds=1, positions=0, **{name: [value]})


# the noise: murmur3 (x86, 32-bit, seed 0) over the words (seed lo, seed hi, position, index)
def _murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3_x86_32 as published (Appleby, SMHasher), written out independently."""
    c1, c2, mask = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & mask

    h = seed
    whole = len(data) // 4 * 4
    for (k,) in struct.iter_unpack("<I", data[:whole]):
        h = rotl(h ^ (rotl(k * c1 & mask, 15) * c2 & mask), 13)
        h = (h * 5 + 0xE6546B64) & mask
    k = int.from_bytes(data[whole:], "little")
    if len(data) % 4:
        h ^= rotl(k * c1 & mask, 15) * c2 & mask
    h ^= len(data)
    h = ((h ^ (h >> 16)) * 0x85EBCA6B) & mask
    h = ((h ^ (h >> 13)) * 0xC2B2AE35) & mask
    return h ^ (h >> 16)


def test_the_reference_murmur3_matches_published_vectors():
    assert _murmur3_32(b"", 0) == 0
    assert _murmur3_32(b"", 1) == 0x514E28B7
    assert _murmur3_32(b"test", 0) == 0xBA6BD213
    assert _murmur3_32(b"Hello, world!", 0x9747B28C) == 0x24884CBA
    assert _murmur3_32(b"The quick brown fox jumps over the lazy dog", 0x9747B28C) == 0x2FA826CD


@pytest.mark.parametrize("seed", [0, 7, 2**32 + 5, 2**64 - 1])
@pytest.mark.parametrize("position", [0, 1, 123_456, 2**32 - 1])
def test_noise_is_minus_log_minus_log_of_the_centred_murmur3_uniform(seed, position):
    """``g = -log(-log(u))`` with ``u = (h + 0.5) / 2**32``, ``h`` the murmur3 hash of the
    four little-endian words; within a few ulp of the libm value (``log64`` is not libm's)."""
    vocab = [0, 1, 2, 1000, 50_000]
    noise = ops.gumbel_noise(seed, position, max(vocab) + 1)[0]
    for i in vocab:
        words = struct.pack("<4I", seed & 0xFFFFFFFF, seed >> 32, position, i)
        u = (_murmur3_32(words) + 0.5) / 2**32
        assert float(noise[i]) == pytest.approx(-math.log(-math.log(u)), rel=1e-13, abs=1e-13)
