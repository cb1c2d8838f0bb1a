"""Builders of invariance cases, one per op, shared by the torch, Triton-interpreter
and GPU suites. Each returns ``(run, make_item)``: ``run(items)`` batches items and
runs the op once; ``make_item(rng)`` draws one random item."""

from __future__ import annotations

import torch

from reasonserve import ops

ROW_OPS = ("linear", "linear_k_major", "matmul", "rms_norm", "softmax", "log_softmax", "mean", "silu")


def _randn(rng, *shape, dtype, scale=1.0, device="cpu"):
    return (torch.randn(*shape, generator=rng) * scale).to(dtype=dtype, device=device)


def row_case(name: str, impl: str, dtype, k: int, n: int, rng, device="cpu"):
    """Row-wise ops: items are rows ``[k]`` (``linear``/``matmul`` map them to ``[n]``)."""
    w = _randn(rng, n, k, dtype=dtype, scale=k**-0.5, device=device)
    bias = _randn(rng, n, dtype=dtype, device=device)
    norm_w = _randn(rng, k, dtype=dtype, device=device)
    fns = {
        "linear": lambda x: ops.linear(x, w, bias, impl=impl),
        "linear_k_major": lambda x: ops.linear(x, ops.k_major(w), bias, impl=impl),
        "matmul": lambda x: ops.matmul(x, w.t(), impl=impl),
        "rms_norm": lambda x: ops.rms_norm(x, norm_w, 1e-6, impl=impl),
        "softmax": lambda x: ops.softmax(x, -1, impl=impl),
        "log_softmax": lambda x: ops.log_softmax(x, -1, impl=impl),
        "mean": lambda x: ops.mean(x, -1, impl=impl),
        "silu": ops.silu,
    }
    op = fns[name]
    return (lambda items: list(op(torch.stack(items)).unbind(0))), (
        lambda g: _randn(g, k, dtype=dtype, scale=3.0, device=device)
    )


def attention_case(impl: str, dtype, hq: int, hkv: int, d: int, s: int, rng, device="cpu"):
    """Items are sequences ``(q [Hq, S, D], k [Hkv, L, D], v [Hkv, L, D])`` with ``L >= S``.

    The batch pads keys/values to the longest sequence with NaN, which must never leak.
    """

    def make(g):
        length = s + int(torch.randint(0, 40, (1,), generator=g))
        return (
            _randn(g, hq, s, d, dtype=dtype, device=device),
            _randn(g, hkv, length, d, dtype=dtype, device=device),
            _randn(g, hkv, length, d, dtype=dtype, device=device),
        )

    def run(items):
        t = max(it[1].shape[1] for it in items)
        lens = torch.tensor([it[1].shape[1] for it in items], device=device)
        q = torch.stack([it[0] for it in items])
        k = torch.full((len(items), hkv, t, d), float("nan"), dtype=dtype, device=device)
        v = torch.full_like(k, float("nan"))
        for i, (_, ki, vi) in enumerate(items):
            k[i, :, : ki.shape[1]] = ki
            v[i, :, : vi.shape[1]] = vi
        if s == 1:
            out = ops.decode_attention(q[:, :, 0], k, v, lens, impl=impl)
            return list(out.unbind(0))
        return list(ops.attention(q, k, v, kv_lens=lens, impl=impl).unbind(0))

    return run, make


def sample_case(vocab: int, rng):
    """Items are ``(logits [V], seed, position, temperature, top_k, top_p, min_p)``."""

    def make(g):
        logits = torch.randn(vocab, generator=g) * 3
        seed = int(torch.randint(0, 2**62, (1,), generator=g)) * 3
        pos = int(torch.randint(0, 2**31, (1,), generator=g))
        temp = float(torch.rand(1, generator=g)) * 2 if bool(torch.rand(1, generator=g) < 0.8) else 0.0
        top_k = int(torch.randint(0, vocab + 2, (1,), generator=g))
        top_p = float(torch.rand(1, generator=g)) * 0.9 + 0.1
        min_p = float(torch.rand(1, generator=g)) * 0.3
        return (logits, seed, pos, temp, top_k, top_p, min_p)

    def run(items):
        cols = list(zip(*items, strict=True))
        out = ops.sample(
            torch.stack(cols[0]),
            seeds=torch.tensor([s - 2**64 if s >= 2**63 else s for s in cols[1]]),
            positions=list(cols[2]),
            temperature=torch.tensor(cols[3]),
            top_k=torch.tensor(cols[4]),
            top_p=torch.tensor(cols[5]),
            min_p=torch.tensor(cols[6]),
        )
        return list(out.unbind(0))

    return run, make


def bmm_case(dtype, s: int, k: int, n: int, device="cpu"):
    """Items are batch entries ``(a [S, K], b [K, N])`` of a batched ``matmul``."""

    def make(g):
        return (_randn(g, s, k, dtype=dtype, device=device), _randn(g, k, n, dtype=dtype, device=device))

    def run(items):
        a = torch.stack([it[0] for it in items])
        b = torch.stack([it[1] for it in items])
        return list(ops.matmul(a, b).unbind(0))

    return run, make


class PagedLayout:
    """Packs sequences ``(q [nq, Hq, D], k [L, Hkv, D], v [L, Hkv, D])`` into a paged cache.

    Every call places the blocks at fresh random block numbers (block renumbering), fills
    unused cache slots and spare blocks with NaN, and fills table entries past each
    sequence's blocks with out-of-range junk: none of it may change a result.
    """

    def __init__(self, block_size: int, seed: int, device="cpu"):
        self.block_size, self.device = block_size, device
        self.rng = torch.Generator().manual_seed(seed)

    def pack(self, items):
        bs, dev = self.block_size, self.device
        counts = [-(-it[1].shape[0] // bs) for it in items]
        total = sum(counts) + 3
        ids = torch.randperm(total, generator=self.rng)
        hkv, d = items[0][1].shape[1:]
        kc = torch.full((total, hkv, bs, d), float("nan"), dtype=items[0][1].dtype)
        vc = kc.clone()
        width = max(counts) + 2
        tables = torch.randint(-(10**6), 10**6, (len(items), width), generator=self.rng)
        start = 0
        for i, ((_, k, v), n) in enumerate(zip(items, counts, strict=True)):
            tables[i, :n] = ids[start : start + n]
            for j in range(n):
                part = slice(j * bs, min((j + 1) * bs, k.shape[0]))
                kc[ids[start + j], :, : part.stop - part.start] = k[part].transpose(0, 1).cpu()
                vc[ids[start + j], :, : part.stop - part.start] = v[part].transpose(0, 1).cpu()
            start += n
        lens = torch.tensor([it[1].shape[0] for it in items])
        qlens = torch.tensor([it[0].shape[0] for it in items])
        q = torch.cat([it[0].cpu() for it in items])
        return [t.to(dev) for t in (q, kc, vc, tables.to(torch.int32), lens, qlens)]

    @staticmethod
    def unpack(out, items):
        return list(out.split([it[0].shape[0] for it in items]))


def paged_case(op, dtype, hq: int, hkv: int, d: int, block_size: int, rng, device="cpu", max_keys=40):
    """Items are sequences ``(q [nq, Hq, D], k [L, Hkv, D], v)`` with ``1 <= nq <= L``;
    ``op(q, k_cache, v_cache, tables, seq_lens, query_lens)`` runs them packed."""
    layout = PagedLayout(block_size, int(torch.randint(0, 2**31, (1,), generator=rng)), device)

    def make(g):
        length = int(torch.randint(1, max_keys + 1, (1,), generator=g))
        nq = int(torch.randint(1, min(length, 6) + 1, (1,), generator=g))
        return (
            _randn(g, nq, hq, d, dtype=dtype, device=device),
            _randn(g, length, hkv, d, dtype=dtype, device=device),
            _randn(g, length, hkv, d, dtype=dtype, device=device),
        )

    def run(items):
        return layout.unpack(op(*layout.pack(items)), items)

    return run, make
