"""Seeded sampling: reproducibility, distribution and filters."""

import math

import pytest
import torch

from reasonserve import ops
from reasonserve.core.errors import InvalidArgumentError, InvalidTypeError
from reasonserve.ops.sampling import BAD_ROW, DEAD_ROW, INACTIVE_ROW


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


# one definition, three implementations ------------------------------------------------
def test_log64_is_within_two_ulp_of_the_true_log():
    import random

    from reasonserve.ops._hash import log64

    rng = random.Random(0)
    values = [2.0**-33, 2.3e-10, 0.7071067811865476, 1 - 2.0**-33, 1.4142135623730951, 1.4142135623730954, 22.9]
    values += [rng.random() for _ in range(5000)] + [math.exp(rng.uniform(-23, 3.2)) for _ in range(5000)]
    values = [v for v in values if v != 1.0]
    got = log64(torch.tensor(values, dtype=torch.float64))
    want = torch.tensor([math.log(v) for v in values], dtype=torch.float64)
    ulps = (got.view(torch.int64) - want.view(torch.int64)).abs()
    assert int(ulps.max()) <= 2


def _battery(dtype, rows=6, vocab=1537, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(rows, vocab, generator=g) * 3).to(dtype)
    logits[1, 11] = float("nan")
    logits[2, :] = float("-inf")
    logits[2, 700] = 0.5  # one finite entry
    logits[3, 5:9] = logits[3].max() + 1  # ties at the top
    kw = {"seeds": [0, 2**64 - 1, 3, 2**32, 77, 5], "positions": [0, 1, 2**32 - 1, 9, 4, 5],
          "temperature": [1.0, 0.7, 1.3, 0.0, 2.5, 1e-3]}  # fmt: skip
    filters = [{}, {"top_k": [0, 3, 1, 5, 40, 2]}, {"top_p": [0.9, 0.5, 1.0, 0.2, 0.99, 0.05]},
               {"min_p": [0.05, 0.0, 0.3, 1.0, 0.01, 0.5]},
               {"top_k": 50, "top_p": 0.8, "min_p": 0.02}]  # fmt: skip
    return logits, kw, filters


def _ready(impl, monkeypatch):
    """Skip an implementation this machine lacks; Triton runs in its interpreter on CPU."""
    if impl == "native" and not _native_built():
        pytest.skip("the native extension is not built here")
    if impl == "triton":
        pytest.importorskip("triton", reason="Triton is not installed")
        monkeypatch.setenv("TRITON_INTERPRET", "1")


def _native_built():
    from reasonserve.ops import sampling

    return sampling._native_ready()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_native_sampler_gives_the_torch_definition_bit_for_bit(dtype):
    if not _native_built():
        pytest.skip("the native extension is not built here")
    logits, kw, filters = _battery(dtype)
    for f in filters:
        want = ops.sample(logits, impl="torch", **kw, **f)
        assert torch.equal(ops.sample(logits, impl="native", **kw, **f), want), f


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_triton_sampler_gives_the_torch_definition_bit_for_bit(dtype, monkeypatch):
    pytest.importorskip("triton", reason="Triton is not installed")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    logits, kw, filters = _battery(dtype, vocab=1100)
    for f in filters[:3]:
        want = ops.sample(logits, impl="torch", **kw, **f)
        assert torch.equal(ops.sample(logits, impl="triton", **kw, **f), want), f


def test_dead_rows_nan_rows_and_ties_follow_the_rules():
    logits, kw, _ = _battery(torch.float32)
    tokens = ops.sample_into(logits, **kw)
    assert tokens[1].item() == 11  # the first NaN
    assert tokens[2].item() == 700  # the only finite entry
    assert tokens[3].item() == 5  # greedy: the first of the tied maxima
    logits[2, 700] = float("-inf")
    assert ops.sample_into(logits, **kw)[2].item() == DEAD_ROW
    with pytest.raises(InvalidArgumentError, match=r"rows \[2\]"):
        ops.sample(logits, **kw)


@pytest.mark.parametrize("impl", ["torch", "native", "triton"])
def test_sample_into_writes_one_hot_rows_in_place_and_skips_the_rest(impl, monkeypatch):
    _ready(impl, monkeypatch)
    logits, kw, _ = _battery(torch.float32)
    logits[1, 11] = 0.0
    before = logits.clone()
    active = torch.tensor([True, True, True, False, True, True])
    rows = [5, 0, 2, 3, 4, 1]  # any order; row 3 inactive
    tokens = ops.sample_into(logits, rows=rows, active=active, one_hot=True, impl=impl, **kw)
    alone = [ops.sample(before[r : r + 1], seeds=kw["seeds"][i], positions=kw["positions"][i],
                        temperature=kw["temperature"][i]).item() for i, r in enumerate(rows)]  # fmt: skip
    for i, r in enumerate(rows):
        if not active[i]:
            assert tokens[i].item() == INACTIVE_ROW and torch.equal(logits[r], before[r])
            continue
        assert tokens[i].item() == alone[i]
        assert torch.isfinite(logits[r]).nonzero().flatten().tolist() == [alone[i]]
        assert logits[r, alone[i]].item() == 0.0


def test_sample_into_never_reads_a_tensor_back(monkeypatch):
    """No host sync: device-agnostic code that never calls item/tolist/bool on a tensor."""
    logits, kw, _ = _battery(torch.float32)
    seeds, positions = torch.tensor(kw["seeds"][:1] * 6), torch.tensor(kw["positions"])
    temperature = torch.tensor(kw["temperature"], dtype=torch.float64)
    top_p = torch.full((6,), 0.9, dtype=torch.float64)
    rows, active = torch.arange(6), torch.ones(6, dtype=torch.bool)

    def refuse(*_a, **_k):
        raise AssertionError("a tensor was read back on the host")

    for name in ("item", "tolist", "__bool__", "__int__", "__float__", "nonzero", "numpy", "__index__"):
        monkeypatch.setattr(torch.Tensor, name, refuse)
    for impl in ("torch", "native") if _native_built() else ("torch",):
        ops.sample_into(logits.clone(), seeds=seeds, positions=positions, temperature=temperature,
                        top_p=top_p, rows=rows, active=active, one_hot=True, impl=impl)  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [256, 1024])
def test_gpu_sampler_gives_cpu_tokens_without_sync_or_extra_memory(rows):
    """On CUDA: the Triton sampler's tokens equal the CPU's, sample_into never syncs, and
    its peak extra memory stays below one logits buffer (152k vocabulary, bf16)."""
    g = torch.Generator().manual_seed(1)
    cpu = (torch.randn(rows, 151936, generator=g) * 3).to(torch.bfloat16)
    seeds, positions = torch.randint(0, 2**62, (rows,), generator=g), torch.randint(0, 2**31, (rows,), generator=g)
    temperature = torch.rand(rows, generator=g, dtype=torch.float64) + 0.3
    want = ops.sample(cpu, seeds=seeds, positions=positions, temperature=temperature)
    logits = cpu.cuda()
    args = {"seeds": seeds.cuda(), "positions": positions.cuda(), "temperature": temperature.cuda()}
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    torch.cuda.set_sync_debug_mode("error")
    try:
        got = ops.sample_into(logits, **args)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.cuda.max_memory_allocated() - start <= logits.numel() * logits.element_size()
    assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("impl", ["torch", "native", "triton"])
def test_sample_into_rows_outside_the_logits_read_and_write_nothing(impl, monkeypatch):
    """A ``rows`` tensor is not read back: an entry outside [0, N) gives BAD_ROW, and no
    implementation reads or writes outside ``logits`` for it (guard rows around a view)."""
    _ready(impl, monkeypatch)
    battery, kw, _ = _battery(torch.float32)
    storage = torch.randn(battery.shape[0] + 2, battery.shape[1], generator=torch.Generator().manual_seed(3))
    storage[1:-1] = battery
    logits, before = storage[1:-1], storage.clone()
    n = logits.shape[0]
    rows = torch.tensor([0, -1, n, 4, n + 10**6, -(2**40)])
    tokens = ops.sample_into(logits, rows=rows, one_hot=True, impl=impl, **kw)
    assert tokens[[1, 2, 4, 5]].tolist() == [BAD_ROW] * 4
    assert torch.equal(storage[0], before[0]) and torch.equal(storage[-1], before[-1]), "a guard row changed"
    for i, r in ((0, 0), (3, 4)):
        alone = ops.sample(before[1 + r : 2 + r], seeds=kw["seeds"][i], positions=kw["positions"][i],
                           temperature=kw["temperature"][i], impl="torch")  # fmt: skip
        assert tokens[i].item() == alone.item()
        assert torch.isfinite(logits[r]).nonzero().flatten().tolist() == [alone.item()]
    untouched = [r for r in range(n) if r not in (0, 4)]
    bits = logits[untouched].view(torch.int32)  # row 1 holds a NaN
    assert torch.equal(bits, before[1:-1][untouched].view(torch.int32)), "a row not sampled changed"


def test_sample_into_checks_the_rows_tensor_on_the_host():
    logits, kw, _ = _battery(torch.float32)
    with pytest.raises(InvalidTypeError, match="rows"):
        ops.sample_into(logits, rows=torch.arange(6.0), **kw)
    with pytest.raises(InvalidTypeError, match="rows"):
        ops.sample_into(logits, rows=torch.ones(6, dtype=torch.bool), **kw)
    with pytest.raises(InvalidArgumentError, match="rows"):
        ops.sample_into(logits, rows=torch.arange(6).reshape(2, 3), **kw)
    with pytest.raises(InvalidArgumentError, match=r"shape \[5\]"):
        ops.sample_into(logits, rows=torch.arange(5), **kw)  # 6 per-row parameters for 5 rows
