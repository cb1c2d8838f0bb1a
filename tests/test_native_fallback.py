"""Without the compiled extension the ops run its torch transcription: the same bits.

Each test runs the public ops twice — on the compiled kernels, then with the extension
reported missing — and compares bit for bit (NaN matching NaN at the same places).
"""

import math
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from _compare import assert_bitwise_equal
from reasonserve import deterministic_mode, ops
from reasonserve.ops import _native, _native_torch

pytestmark = pytest.mark.skipif(not _native.available(), reason="needs the compiled kernels to compare with")

DTYPES = st.sampled_from([torch.float32, torch.bfloat16, torch.float16])


@pytest.fixture
def without_extension(monkeypatch):
    """A switch: ``off()`` makes the process look like one where ``reasonserve._C`` never built."""

    def off():
        monkeypatch.setattr(_native, "available", lambda: False)
        monkeypatch.setitem(_native._STATE, "warned", True)  # the warning has its own test

    return off


def _both(run, without_extension):
    compiled = run()
    without_extension()
    return compiled, run()


def _assert_same_without_extension(run, names, what: str) -> None:
    """``run()``'s tensors on the compiled kernels equal its tensors without them, bit for bit.

    (A context, not the fixture: hypothesis reruns the test body in one fixture scope.)
    """
    with pytest.MonkeyPatch.context() as patch:
        compiled = run()
        patch.setattr(_native, "available", lambda: False)
        patch.setitem(_native._STATE, "warned", True)
        for name, got, want in zip(names, run(), compiled, strict=True):
            assert_bitwise_equal(got, want, f"{name}, {what}")


def _rows(gen, m: int, k: int, dtype) -> torch.Tensor:
    """Rows with a spread of magnitudes, a NaN row, a -inf entry and a row of zeros."""
    x = torch.randn(m, k, generator=gen) * torch.logspace(-3, 3, m)[:, None]
    if m > 3 and k > 0:
        x[1] = math.nan
        x[2, 0] = -math.inf
        x[3] = 0.0
    return x.to(dtype)


@settings(max_examples=30)
@given(m=st.integers(1, 7), k=st.integers(0, 40), n=st.integers(1, 33), dtype=DTYPES, seed=st.integers(0, 2**31 - 1))
def test_products_have_the_compiled_bits(m, k, n, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    x, w = _rows(gen, m, k, dtype), torch.randn(n, k, generator=gen).to(dtype)
    a3, b3 = torch.randn(3, m, k, generator=gen).to(dtype), torch.randn(3, k, n, generator=gen).to(dtype)

    def run():
        return [ops.linear(x, w), ops.linear(x, ops.k_major(w)), ops.matmul(x, w.t()), ops.matmul(a3, b3)]

    names = ("linear", "linear k-major", "matmul", "batched matmul")
    _assert_same_without_extension(run, names, f"M={m} K={k} N={n} {dtype}")


@settings(max_examples=50)
@given(m=st.integers(1, 8), n=st.integers(1, 300), dtype=DTYPES, seed=st.integers(0, 2**31 - 1))
def test_row_ops_have_the_compiled_bits(m, n, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    x, g = _rows(gen, m, n, dtype), torch.randn(n, generator=gen).to(dtype)

    def run():
        return [ops.rms_norm(x, g), ops.softmax(x), ops.log_softmax(x), ops.mean(x, -1)]

    _assert_same_without_extension(run, ("rms_norm", "softmax", "log_softmax", "mean"), f"M={m} N={n} {dtype}")


def test_exp_and_log_over_their_whole_range(without_extension):
    """Every float32 step of softmax's inputs from -100 to 0 (exp_neg's clamp, the polynomial,
    the scaling) and the log of sums from 1 to 10^6."""
    x = torch.cat([torch.linspace(-100.0, 0.0, 200_001), torch.tensor([-0.0, -86.0, -86.00001, -1e-38])])
    sums = torch.logspace(-4, 6, 4096)[:, None] * torch.ones(1, 7)
    compiled, fallback = _both(lambda: [ops.softmax(x[None]), ops.log_softmax(sums)], without_extension)
    for got, want in zip(fallback, compiled, strict=True):
        assert_bitwise_equal(got, want, "softmax / log_softmax")


@settings(max_examples=30)
@given(d=st.sampled_from([1, 7, 16, 24]), block_size=st.sampled_from([1, 3, 8]), dtype=DTYPES,
       seed=st.integers(0, 2**31 - 1))  # fmt: skip
def test_paged_and_contiguous_attention_have_the_compiled_bits(d, block_size, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    kc, vc = (torch.randn(24, 2, block_size, d, generator=gen).to(dtype) for _ in range(2))
    tables = torch.randperm(24, generator=gen)[: 3 * (24 // 3)].reshape(3, -1)
    capacity = tables.shape[1] * block_size
    lens = torch.randint(1, capacity + 1, (3,), generator=gen)
    qlens = torch.minimum(lens, torch.randint(1, 5, (3,), generator=gen))
    q = torch.randn(int(qlens.sum()), 4, d, generator=gen).to(dtype)
    qc, kk, vv = (torch.randn(2, h, 6, d, generator=gen).to(dtype) for h in (4, 2, 2))

    def run():
        return [ops.paged_attention(q, kc, vc, tables, lens, qlens), ops.attention(qc, kk, vv, causal=True),
                ops.attention(qc, kk, vv, causal=False, kv_lens=torch.tensor([6, 3]))]  # fmt: skip

    names = ("paged_attention", "attention causal", "attention kv_lens")
    _assert_same_without_extension(run, names, f"D={d} block {block_size} {dtype}")


def test_deterministic_mode_gives_the_compiled_bits(without_extension):
    """A model run inside deterministic_mode() (F.linear, softmax, mean, silu) on both paths."""
    gen = torch.Generator().manual_seed(11)
    w1, w2, x = torch.randn(24, 16, generator=gen), torch.randn(10, 24, generator=gen), torch.randn(5, 16, generator=gen)

    def run():
        with deterministic_mode():
            h = torch.nn.functional.silu(torch.nn.functional.linear(x, w1))
            return [torch.softmax(torch.nn.functional.linear(h, w2), -1), h.mean(-1)]

    compiled, fallback = _both(run, without_extension)
    for got, want in zip(fallback, compiled, strict=True):
        assert_bitwise_equal(got, want, "deterministic_mode")


def test_a_missing_extension_is_never_built_at_run_time_and_warns_once(monkeypatch):
    """No compiler runs inside an op (it took 139 s): the transcription runs at once, and
    one warning names the command that builds the extension."""
    import importlib

    from torch.utils import cpp_extension

    x, w = torch.randn(3, 8), torch.randn(5, 8)
    want = ops.linear(x, w)

    def refuse(name, *args, **kwargs):
        if name == "reasonserve._C":
            raise ImportError("built against another torch")
        return real_import(name, *args, **kwargs)

    def no_build(*args, **kwargs):
        raise AssertionError("the native kernels were built at run time")

    real_import = importlib.import_module
    monkeypatch.setattr(importlib, "import_module", refuse)
    monkeypatch.setattr(cpp_extension, "load", no_build)
    monkeypatch.setattr(_native, "_STATE", {})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = ops.linear(x, w)
        ops.linear(x, w)
    assert not _native.available() and "another torch" in _native.load_error()
    assert_bitwise_equal(got, want, "linear without the extension")
    messages = [str(c.message) for c in caught if "compiled CPU kernels unavailable" in str(c.message)]
    assert len(messages) == 1 and "--no-build-isolation" in messages[0], messages


def test_the_transcription_ignores_the_instruction_set_and_reports_one():
    x = torch.randn(4, 20)
    assert _native_torch.isas() == [0]
    assert torch.equal(_native_torch.softmax(x, False, 0), _native_torch.softmax(x, False, 2))
