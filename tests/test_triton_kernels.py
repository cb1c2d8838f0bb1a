"""Triton kernels: the same invariance properties and parity as the torch path.

Without a GPU they run in the Triton interpreter (``TRITON_INTERPRET=1``, set by
``conftest.py``) on small fp32/fp16 shapes — the interpreter computes bf16 ``tl.dot``
wrongly — with a K-ordered ``tl.dot`` (``_ordered_dot``) so that they test the
kernel's reduction order, not the host BLAS. With CUDA the same tests run on the GPU;
``test_gpu.py`` adds real sizes.
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import _ordered_dot
from _compare import assert_close
from _invariance import check_batch_invariance, junk_rows
from _op_cases import ROW_OPS, attention_case, row_case
from _tolerances import tolerance
from reasonserve import ops

pytest.importorskip("triton", reason="Triton kernels need the triton package (triton extra)")


@pytest.fixture(autouse=True)
def _ordered_interpreter_dot(monkeypatch):
    if not torch.cuda.is_available():
        _ordered_dot.install(monkeypatch)

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
