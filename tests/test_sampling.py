"""Seeded sampling: reproducibility, distribution and filters."""

import math

import pytest
import torch

from reasonserve import ops


def _chi2_critical(df: int, z: float) -> float:
    """Wilson-Hilferty upper quantile of chi-square(df) for a normal quantile z."""
    c = 2.0 / (9.0 * df)
    return df * (1.0 - c + z * math.sqrt(c)) ** 3


def _frequencies(logits_row, draws, temperature=1.0, **filters):
    logits = logits_row.expand(draws, -1)
    tokens = ops.sample(logits, seeds=12345, positions=torch.arange(draws),
                        temperature=temperature, **filters)  # fmt: skip
    return torch.bincount(tokens, minlength=logits_row.shape[0]).double()


@pytest.mark.parametrize("temperature", [1.0, 0.7, 2.0])
def test_empirical_frequencies_match_softmax(temperature):
    """Chi-square goodness of fit at significance 1e-6 (z = 4.753), 40,000 draws."""
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -0.5, -1.0, -3.0, 1.5])
    draws = 40_000
    counts = _frequencies(logits, draws, temperature)
    expected = torch.softmax(logits.double() / temperature, -1) * draws
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < _chi2_critical(len(logits) - 1, 4.753), (chi2, counts.tolist())
    cosine = torch.nn.functional.cosine_similarity(counts, expected, dim=0)
    assert cosine > 0.999


def test_noise_is_uniform_and_position_dependent():
    noise = ops.gumbel_noise([7] * 4, [0, 1, 2, 3], 10_000)
    u = torch.exp(-torch.exp(-noise))  # back to the uniform
    assert abs(float(u.mean()) - 0.5) < 0.01
    assert not torch.equal(noise[0], noise[1])
    assert torch.equal(ops.gumbel_noise(7, 2, 10_000)[0], noise[2])


def test_same_seed_and_position_same_token_anywhere_in_batch():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(32, 1000, generator=g)
    seeds = torch.randint(0, 2**62, (32,), generator=g)
    positions = torch.randint(0, 2**31, (32,), generator=g)
    full = ops.sample(logits, seeds=seeds, positions=positions)
    perm = torch.randperm(32, generator=g)
    shuffled = ops.sample(logits[perm], seeds=seeds[perm], positions=positions[perm])
    assert torch.equal(shuffled, full[perm])
    for i in range(0, 32, 5):
        alone = ops.sample(logits[i : i + 1], seeds=seeds[i : i + 1], positions=positions[i : i + 1])
        assert alone.item() == full[i].item()


def test_large_python_seeds_use_all_64_bits():
    logits = torch.zeros(1, 5000)
    a = ops.sample(logits, seeds=2**64 - 1, positions=0)
    b = ops.sample(logits, seeds=2**32 - 1, positions=0)
    # the high word changes the stream: two seeds differing only there rarely agree
    noise_a = ops.gumbel_noise(2**64 - 1, 0, 5000)
    noise_b = ops.gumbel_noise(2**32 - 1, 0, 5000)
    assert not torch.equal(noise_a, noise_b)
    assert a.shape == b.shape == (1,)
    # int64 tensors carry the same bit pattern as the unsigned Python int
    assert torch.equal(ops.gumbel_noise(torch.tensor([-1]), 0, 5000), noise_a)


def _allowed_set(logits, temperature, top_k, top_p, min_p):
    """An independent, slow implementation of the filter rules."""
    probs = torch.softmax(logits.double() / temperature, -1).tolist()
    vals = logits.tolist()
    order = sorted(range(len(vals)), key=lambda i: (-probs[i], i))
    allowed = set(range(len(vals)))
    if top_k:
        kth = sorted(vals, reverse=True)[min(top_k, len(vals)) - 1]
        allowed &= {i for i, v in enumerate(vals) if v >= kth}
    if top_p < 1:
        kept, mass = set(), 0.0
        for i in order:
            if mass >= top_p:
                break
            kept.add(i)
            mass += probs[i]
        allowed &= kept
    if min_p:
        allowed &= {i for i, p in enumerate(probs) if p >= min_p * max(probs)}
    return allowed


@pytest.mark.parametrize(
    ("top_k", "top_p", "min_p"),
    [(3, 1.0, 0.0), (0, 0.5, 0.0), (0, 1.0, 0.2), (5, 0.8, 0.05), (1, 1.0, 0.0), (0, 0.01, 0.0)],
)
def test_filters_never_sample_outside_the_allowed_set(top_k, top_p, min_p):
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(40, generator=g) * 2
    draws = 4000
    tokens = ops.sample(logits.expand(draws, -1), seeds=99, positions=torch.arange(draws),
                        temperature=1.3, top_k=top_k, top_p=top_p, min_p=min_p)  # fmt: skip
    allowed = _allowed_set(logits, 1.3, top_k, top_p, min_p)
    seen = set(tokens.tolist())
    assert seen <= allowed, sorted(seen - allowed)
    assert len(seen) == len(allowed) or len(allowed) > 10  # small sets are all reached


def test_per_row_parameters_apply_to_their_rows():
    logits = torch.tensor([[0.0, 0.1, 5.0, 0.2]] * 3)
    out = ops.sample(logits, seeds=[1, 2, 3], positions=[0, 0, 0],
                     temperature=[0.0, 50.0, 50.0], top_k=[0, 1, 0])  # fmt: skip
    assert out[0].item() == 2 and out[1].item() == 2


def test_nan_rows_are_deterministic_and_do_not_crash():
    logits = torch.randn(4, 10)
    logits[1, 3] = float("nan")
    logits[1, 7] = float("nan")
    out = ops.sample(logits, seeds=[1, 2, 3, 4], positions=[0, 1, 2, 3])
    assert out[1].item() == 3
    assert ops.sample(logits[1:2], seeds=[2], positions=[1]).item() == 3
