"""Comparison helpers with reports that say where and how tensors differ."""

import torch


def _report(actual: torch.Tensor, expected: torch.Tensor, bad: torch.Tensor, limit: int = 5) -> str:
    idx = bad.nonzero()[:limit].tolist()
    pairs = ", ".join(f"{tuple(i)}: {actual[tuple(i)].item()!r} vs {expected[tuple(i)].item()!r}" for i in idx)
    nan = f"NaN actual/expected: {int(torch.isnan(actual).sum())}/{int(torch.isnan(expected).sum())}"
    inf = f"inf actual/expected: {int(torch.isinf(actual).sum())}/{int(torch.isinf(expected).sum())}"
    return f"{int(bad.sum())} of {bad.numel()} elements differ; first: {pairs}; {nan}; {inf}"


def assert_bitwise_equal(actual: torch.Tensor, expected: torch.Tensor, what: str = "") -> None:
    """Bit-for-bit equality, NaN matching NaN at the same places."""
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    if actual.is_floating_point():
        a = actual.contiguous().view(torch.uint8 if actual.element_size() == 1 else _int_of(actual))
        e = expected.contiguous().view(a.dtype)
        nan_both = torch.isnan(actual) & torch.isnan(expected)
        bad = (a != e) & ~nan_both
    else:
        bad = actual != expected
    assert not bool(bad.any()), f"{what}: not bitwise equal: {_report(actual.float(), expected.float(), bad)}"


def _int_of(t: torch.Tensor) -> torch.dtype:
    return {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]


def assert_close(actual, expected, atol: float, rtol: float, what: str = "") -> None:
    """``|a - e| <= atol + rtol * |e|`` elementwise, NaN only where expected has NaN."""
    a, e = actual.double(), expected.double()
    assert a.shape == e.shape, f"{what}: shape {tuple(a.shape)} != {tuple(e.shape)}"
    bad = ~((a - e).abs() <= atol + rtol * e.abs()) & ~(torch.isnan(a) & torch.isnan(e))
    bad &= ~((a == e) & torch.isinf(e))
    assert not bool(bad.any()), f"{what}: not close (atol={atol}, rtol={rtol}): {_report(a, e, bad)}"
