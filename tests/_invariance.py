"""Batch-invariance properties shared by every op test.

An op under test is ``run(items) -> list[Tensor]``: it packs a list of per-row items
into one batch, runs the op once, and unpacks one output per item. The properties
(all bitwise):

* slice: each item's output equals the output of a batch holding only that item;
* junk padding: adding junk items (NaN, inf, huge values) changes no output;
* permutation: permuting the items permutes the outputs;
* composition: an item's output is the same whatever items surround it;
* run-to-run: running the same batch twice gives the same outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from _compare import assert_bitwise_equal

Run = Callable[[list], list]


def check_batch_invariance(
    run: Run, items: Sequence, junk: Sequence, others: Sequence, rng: torch.Generator
) -> None:
    items = list(items)
    batched = run(items)
    assert len(batched) == len(items)
    again = run(items)
    for i, (a, b) in enumerate(zip(batched, again, strict=True)):
        assert_bitwise_equal(a, b, f"run-to-run item {i}")
    for i, item in enumerate(items):
        assert_bitwise_equal(batched[i], run([item])[0], f"slice item {i} of {len(items)}")
    padded = run([*items, *junk])
    for i in range(len(items)):
        assert_bitwise_equal(padded[i], batched[i], f"junk padding item {i}")
    perm = torch.randperm(len(items), generator=rng).tolist()
    permuted = run([items[p] for p in perm])
    for j, p in enumerate(perm):
        assert_bitwise_equal(permuted[j], batched[p], f"permutation item {p}")
    cut = int(torch.randint(0, len(others) + 1, (1,), generator=rng))
    mixed = run([*others[:cut], items[0], *others[cut:]])
    assert_bitwise_equal(mixed[cut], batched[0], "composition")


def junk_rows(shape: Sequence[int], dtype: torch.dtype, rng: torch.Generator, count: int) -> list:
    """Rows full of values that break naive code: NaN, +-inf, huge and tiny numbers."""
    rows = []
    specials = torch.tensor([float("nan"), float("inf"), -float("inf"), 3e38, -3e38, 1e-38, 0.0])
    for _ in range(count):
        r = torch.randn(*shape, generator=rng) * 1e4
        pick = torch.randint(0, len(specials), tuple(shape), generator=rng)
        use = torch.rand(*shape, generator=rng) < 0.3
        rows.append(torch.where(use, specials[pick], r).to(dtype))
    return rows


def rows_run(op: Callable[[torch.Tensor], torch.Tensor]) -> Run:
    """Adapt a row-wise op ``[M, ...] -> [M, ...]`` to the harness."""

    def run(items: list) -> list:
        out = op(torch.stack(items))
        return list(out.unbind(0))

    return run
