"""The invariance harness must catch a batch-dependent op (else it proves nothing)."""

import pytest
import torch

from _invariance import check_batch_invariance, rows_run


def _batch_dependent(x: torch.Tensor) -> torch.Tensor:
    return x + x.mean(dim=0, keepdim=True) * 1e-3  # leaks the batch into every row


def _position_dependent(x: torch.Tensor) -> torch.Tensor:
    return x + torch.arange(x.shape[0], dtype=x.dtype)[:, None]


@pytest.mark.parametrize("op", [_batch_dependent, _position_dependent])
def test_harness_detects_batch_dependence(op):
    rng = torch.Generator().manual_seed(0)
    items = [torch.randn(5, generator=rng) for _ in range(4)]
    others = [torch.randn(5, generator=rng) for _ in range(3)]
    with pytest.raises(AssertionError, match="not bitwise equal"):
        check_batch_invariance(rows_run(op), items, [], others, rng)


def test_harness_accepts_row_wise_op():
    rng = torch.Generator().manual_seed(0)
    items = [torch.randn(5, generator=rng) for _ in range(4)]
    others = [torch.randn(5, generator=rng) for _ in range(3)]
    check_batch_invariance(rows_run(lambda x: x * 2 + 1), items, [], others, rng)
