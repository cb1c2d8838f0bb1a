"""deterministic_mode(): swaps ATen ops, nests, survives exceptions, per thread."""

import contextlib
import threading

import pytest
import torch
import torch.nn.functional as F

import reasonserve
from _compare import assert_bitwise_equal
from reasonserve import ops

# Shapes at which stock CPU matmul is batch-variant on MKL (row classes change with M).
K, N = 512, 1024


def _data(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(40, K, generator=g), torch.randn(N, K, generator=g) / K**0.5


def _stock_reference():
    x, w = _data()
    return F.linear(x, w), F.linear(x[3:4], w)


def test_mode_makes_linear_rows_independent_of_the_batch():
    x, w = _data()
    with reasonserve.deterministic_mode():
        full, alone = F.linear(x, w), F.linear(x[3:4], w)
        assert_bitwise_equal(full[3:4], alone)
        assert_bitwise_equal(full, ops.linear(x, w))


def test_every_overridden_op_routes_to_the_invariant_op():
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(5, 33, generator=g), torch.randn(33, 7, generator=g)
    a3, b3 = torch.randn(2, 5, 33, generator=g), torch.randn(2, 33, 7, generator=g)
    bias = torch.randn(7, generator=g)
    with reasonserve.deterministic_mode():
        got = {
            "mm": torch.mm(a, b),
            "bmm": torch.bmm(a3, b3),
            "addmm": torch.addmm(bias, a, b),
            "baddbmm": torch.baddbmm(bias, a3, b3),
            "_softmax": torch.softmax(a, -1),
            "_log_softmax": torch.log_softmax(a, 0),
            "mean.dim": a.mean(dim=1, keepdim=True),
            "silu": F.silu(a),
        }
    want = {
        "mm": ops.matmul(a, b),
        "bmm": ops.matmul(a3, b3),
        "addmm": ops.matmul(a, b) + bias,
        "baddbmm": ops.matmul(a3, b3) + bias,
        "_softmax": ops.softmax(a, -1),
        "_log_softmax": ops.log_softmax(a, 0),
        "mean.dim": ops.mean(a, 1, keepdim=True),
        "silu": ops.silu(a),
    }
    assert set(got) == set(reasonserve.ops.OVERRIDDEN_OPS)
    for name in got:
        assert_bitwise_equal(got[name], want[name], name)


def test_addmm_scalars_follow_aten_semantics():
    g = torch.Generator().manual_seed(2)
    c, a, b = torch.randn(4, 6, generator=g), torch.randn(4, 5, generator=g), torch.randn(5, 6, generator=g)
    expected = torch.addmm(c, a, b, beta=0.5, alpha=2.0)
    with reasonserve.deterministic_mode():
        got = torch.addmm(c, a, b, beta=0.5, alpha=2.0)
        zero_beta = torch.addmm(torch.full((4, 6), float("nan")), a, b, beta=0)
    torch.testing.assert_close(got, expected)
    assert not torch.isnan(zero_beta).any()  # beta=0 ignores the input, NaN included


def _overridden(op: str) -> bool:
    """Whether reasonserve's kernel is the active CPU kernel of an ATen op."""
    dump = torch._C._dispatch_dump(f"aten::{op}")
    return any(line.startswith("CPU:") and "reasonserve" in line for line in dump.splitlines())


def test_kernels_are_registered_only_while_some_context_is_inside():
    assert not any(_overridden(op) for op in ("mm", "addmm", "_softmax"))
    with reasonserve.deterministic_mode():
        assert all(_overridden(op) for op in ("mm", "addmm", "_softmax"))
    assert not any(_overridden(op) for op in ("mm", "addmm", "_softmax"))


def test_leaving_the_mode_restores_stock_bits_exactly():
    before = _stock_reference()
    with reasonserve.deterministic_mode():
        pass
    assert not _overridden("mm")
    after = _stock_reference()
    for b, a in zip(before, after, strict=True):
        assert_bitwise_equal(a, b, "stock after exit")
    assert not reasonserve.is_deterministic_mode()


def test_nesting_keeps_the_mode_until_the_outermost_exit():
    assert not reasonserve.is_deterministic_mode()
    with reasonserve.deterministic_mode():
        with reasonserve.deterministic_mode():
            assert reasonserve.is_deterministic_mode()
        assert reasonserve.is_deterministic_mode()
        x, w = _data()
        assert_bitwise_equal(F.linear(x, w)[3:4], F.linear(x[3:4], w))
    assert not reasonserve.is_deterministic_mode()


def test_an_exception_inside_the_block_leaves_the_mode():
    before = _stock_reference()
    with pytest.raises(RuntimeError, match="boom"), reasonserve.deterministic_mode():
        raise RuntimeError("boom")
    assert not reasonserve.is_deterministic_mode()
    assert not _overridden("mm")
    for b, a in zip(before, _stock_reference(), strict=True):
        assert_bitwise_equal(a, b, "stock after exception")


@contextlib.contextmanager
def _another_thread_inside_the_mode():
    """Hold ``deterministic_mode()`` open in a second thread for the body of the block."""
    inside, release = threading.Event(), threading.Event()

    def worker():
        with reasonserve.deterministic_mode():
            inside.set()
            release.wait(timeout=30)

    thread = threading.Thread(target=worker)
    thread.start()
    assert inside.wait(timeout=30)
    try:
        yield
    finally:
        release.set()
        thread.join(timeout=30)


def test_other_threads_keep_stock_behaviour_while_one_is_inside():
    stock = _stock_reference()
    seen = {}
    with _another_thread_inside_the_mode():
        seen["mode"] = reasonserve.is_deterministic_mode()
        seen["out"] = _stock_reference()
    assert seen["mode"] is False
    for b, a in zip(stock, seen["out"], strict=True):
        assert_bitwise_equal(a, b, "stock in another thread")


def test_a_new_thread_starts_outside_the_mode():
    result = {}
    with reasonserve.deterministic_mode():
        t = threading.Thread(target=lambda: result.setdefault("mode", reasonserve.is_deterministic_mode()))
        t.start()
        t.join()
    assert result["mode"] is False


def test_autograd_still_works_inside_the_mode():
    x = torch.randn(3, 8, requires_grad=True)
    w = torch.randn(4, 8, requires_grad=True)
    with reasonserve.deterministic_mode():
        F.linear(x, w).sum().backward()
    torch.testing.assert_close(x.grad, w.sum(0).expand(3, 8).detach())


def test_every_stock_fallback_matches_stock_bits_in_another_thread():
    """While one thread is inside the mode, every overridden op keeps stock bits elsewhere."""
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(5, 33, generator=g), torch.randn(33, 7, generator=g)
    a3, b3 = torch.randn(2, 5, 33, generator=g), torch.randn(2, 33, 7, generator=g)
    bias = torch.randn(7, generator=g)

    def stock_ops():
        return {
            "mm": torch.mm(a, b), "bmm": torch.bmm(a3, b3), "addmm": torch.addmm(bias, a, b, beta=0.5, alpha=2.0),
            "baddbmm": torch.baddbmm(bias, a3, b3), "softmax": torch.softmax(a, -1),
            "softmax_half": torch.softmax(a.half(), -1, dtype=torch.float32),
            "log_softmax": torch.log_softmax(a, 0), "mean": a.mean(1, keepdim=True), "mean_all": a.mean(dim=(0, 1)),
            "silu": F.silu(a),
        }  # fmt: skip

    before = stock_ops()
    with _another_thread_inside_the_mode():
        assert _overridden("mm")
        during = stock_ops()
    for name, value in during.items():
        assert_bitwise_equal(value, before[name], name)
