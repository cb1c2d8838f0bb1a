"""Reference parity: each op against stock torch, odd shapes, tolerances from one table."""

import math

import pytest
import torch
import torch.nn.functional as F

from _compare import assert_close
from _tolerances import tolerance
from reasonserve import ops

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
ODD = [1, 7, 41, 123]


def _rand(*shape, dtype, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", ODD)
@pytest.mark.parametrize("k", [7, 123, 1023])
def test_linear_matches_float64(dtype, m, k):
    x, w, b = _rand(m, k, dtype=dtype), _rand(41, k, dtype=dtype, seed=1), _rand(41, dtype=dtype, seed=2)
    expected = F.linear(x.double(), w.double(), b.double())
    atol, rtol = tolerance("matmul", dtype)
    assert_close(ops.linear(x, w, b), expected, atol * math.sqrt(k), rtol, "linear")
    assert_close(ops.matmul(x, w.t()), expected - b.double(), atol * math.sqrt(k), rtol, "matmul")


@pytest.mark.parametrize("dtype", DTYPES)
def test_batched_matmul_broadcasts_like_torch(dtype):
    a, b = _rand(3, 1, 7, 41, dtype=dtype), _rand(4, 41, 5, dtype=dtype, seed=1)
    atol, rtol = tolerance("matmul", dtype)
    assert_close(ops.matmul(a, b), torch.matmul(a.double(), b.double()), atol * 7, rtol, "bmm")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [*ODD, 4096])
def test_row_ops_match_torch(dtype, n):
    x = _rand(7, n, dtype=dtype, scale=4.0)
    w = _rand(n, dtype=dtype, seed=3)
    xd = x.double()
    cases = {
        "rms_norm": (ops.rms_norm(x, w, 1e-6), F.rms_norm(xd, (n,), w.double(), 1e-6)),
        "softmax": (ops.softmax(x, -1), torch.softmax(xd, -1)),
        "log_softmax": (ops.log_softmax(x, -1), torch.log_softmax(xd, -1)),
        "mean": (ops.mean(x, -1), xd.mean(-1)),
        "silu": (ops.silu(x), F.silu(xd)),
    }
    for name, (actual, expected) in cases.items():
        assert actual.dtype == dtype, name
        assert_close(actual, expected, *tolerance(name, dtype), what=name)


def test_mean_over_several_dims_and_keepdim():
    x = _rand(3, 5, 7, dtype=torch.float32)
    for dim in [0, 1, -1, (0, 2), [1, 2], None]:
        for keepdim in (False, True):
            expected = x.double().mean(dim=dim, keepdim=keepdim) if dim is not None else x.double().mean()
            if dim is None and keepdim:
                expected = x.double().mean(dim=(0, 1, 2), keepdim=True)
            assert_close(ops.mean(x, dim, keepdim), expected, 1e-6, 1e-6, f"mean dim={dim}")


def test_softmax_along_inner_dim():
    x = _rand(4, 9, 3, dtype=torch.float32)
    assert_close(ops.softmax(x, dim=1), torch.softmax(x.double(), 1), 1e-6, 1e-6)
    assert_close(ops.log_softmax(x, dim=0), torch.log_softmax(x.double(), 0), 1e-6, 1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", [(2, 4, 2, 7, 9, 16), (1, 3, 3, 1, 41, 8), (3, 2, 1, 5, 5, 123)])
def test_attention_matches_sdpa(dtype, causal, shape):
    b, hq, hkv, s, t, d = shape
    q, k, v = (_rand(b, h, n, d, dtype=dtype, seed=i) for i, (h, n) in enumerate([(hq, s), (hkv, t), (hkv, t)]))
    rep = hq // hkv
    mask = torch.ones(s, t, dtype=torch.bool).tril(t - s) if causal else None
    expected = F.scaled_dot_product_attention(
        q.double(), k.double().repeat_interleave(rep, 1), v.double().repeat_interleave(rep, 1), attn_mask=mask
    )
    assert_close(ops.attention(q, k, v, causal=causal), expected, *tolerance("attention", dtype))


def test_decode_attention_matches_per_sequence_sdpa():
    g = torch.Generator().manual_seed(0)
    lens = torch.tensor([1, 5, 300])
    q = torch.randn(3, 4, 16, generator=g)
    k, v = torch.randn(3, 2, 300, 16, generator=g), torch.randn(3, 2, 300, 16, generator=g)
    out = ops.decode_attention(q, k, v, lens)
    for i, n in enumerate(lens.tolist()):
        ki, vi = (t[i : i + 1, :, :n].double().repeat_interleave(2, 1) for t in (k, v))
        expected = F.scaled_dot_product_attention(q[i : i + 1, :, None].double(), ki, vi)[:, :, 0]
        assert_close(out[i : i + 1], expected, *tolerance("attention", torch.float32))


def test_sample_temperature_zero_is_greedy_with_first_index_ties():
    logits = torch.tensor([[1.0, 3.0, 3.0, 0.0], [5.0, 5.0, -1.0, 5.0]])
    assert ops.sample(logits, seeds=[1, 2], positions=[0, 0], temperature=0.0).tolist() == [1, 0]
    assert ops.greedy(logits).tolist() == [1, 0]
