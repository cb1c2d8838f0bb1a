"""``reasonserve demo-ops``: batch invariance of a transformer block.

The same prompt runs through a small pre-norm transformer block (RMSNorm, causal
multi-head attention, SiLU MLP — written with plain ``torch.nn.functional`` calls)
alone and inside random batches, at random positions, with stock ATen kernels and
inside :func:`reasonserve.deterministic_mode`. The report says which runs gave the
prompt's output bit for bit, and what the mode costs.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass
from typing import TextIO

import torch
import torch.nn.functional as F

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.ops.mode import deterministic_mode

__all__ = ["TinyBlock", "run_demo"]


class TinyBlock(torch.nn.Module):
    """A Llama-style block: ``x + attn(norm(x))`` then ``h + mlp(norm(h))``."""

    def __init__(self, hidden: int = 512, heads: int = 8, mlp: int = 1376, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)

        def weight(*shape: int) -> torch.nn.Parameter:
            return torch.nn.Parameter(torch.randn(*shape, generator=g) / shape[-1] ** 0.5)

        self.heads = heads
        self.qkv, self.out = weight(3 * hidden, hidden), weight(hidden, hidden)
        self.up, self.down = weight(2 * mlp, hidden), weight(hidden, mlp)
        self.norm1 = torch.nn.Parameter(torch.ones(hidden))
        self.norm2 = torch.nn.Parameter(torch.ones(hidden))

    @staticmethod
    def _rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = F.linear(self._rms(x, self.norm1), self.qkv).chunk(3, dim=-1)
        q, k, v = (t.view(b, s, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5
        mask = torch.ones(s, s, dtype=torch.bool).tril()
        attn = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v
        h = x + F.linear(attn.transpose(1, 2).reshape(b, s, d), self.out)
        gate, up = F.linear(self._rms(h, self.norm2), self.up).chunk(2, dim=-1)
        return h + F.linear(F.silu(gate) * up, self.down)


@dataclass(frozen=True)
class _Trial:
    batch_size: int
    position: int
    stock_identical: bool
    deterministic_identical: bool


def _trial(block, prompt, rng, alone) -> _Trial:
    size = int(torch.randint(2, 25, (1,), generator=rng))
    pos = int(torch.randint(0, size, (1,), generator=rng))
    batch = torch.randn(size, *prompt.shape[1:], generator=rng)
    batch[pos] = prompt[0]
    stock = block(batch)[pos : pos + 1]
    with deterministic_mode():
        det = block(batch)[pos : pos + 1]
    return _Trial(size, pos, torch.equal(stock, alone[0]), torch.equal(det, alone[1]))


def _median_s(fn, repeats: int = 5) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _speed(block, x) -> dict:
    stock = _median_s(lambda: block(x))

    def det():
        with deterministic_mode():
            block(x)

    deterministic = _median_s(det)
    return {"batch": list(x.shape), "stock_s": stock, "deterministic_s": deterministic,
            "ratio": deterministic / stock}  # fmt: skip


def run_demo(*, batches: int = 6, seed: int = 0, json_path: str | None = None, out: TextIO) -> int:
    """Run the demonstration, print the report, optionally write it as JSON."""
    if batches < 1:
        raise InvalidArgumentError(f"batches must be >= 1, got {batches}")
    rng = torch.Generator().manual_seed(seed)
    block = TinyBlock(seed=seed).eval()
    prompt = torch.randn(1, 8, 512, generator=rng)
    with torch.no_grad():
        alone_stock = block(prompt)
        with deterministic_mode():
            alone_det = block(prompt)
        trials = [_trial(block, prompt, rng, (alone_stock, alone_det)) for _ in range(batches)]
        speed = _speed(block, torch.randn(16, 8, 512, generator=rng))
    _print(trials, speed, out)
    if json_path:
        with open(json_path, "w", encoding="utf-8") as fh:
            json.dump({"trials": [asdict(t) for t in trials], "speed": speed}, fh, indent=2)
    return 0 if all(t.deterministic_identical for t in trials) else 1


def _print(trials, speed, out: TextIO) -> None:
    out.write("Same prompt (8 tokens x 512 dims) through one transformer block,\n")
    out.write("alone vs inside random batches. 'identical' = bitwise equal to running alone.\n\n")
    out.write(f"{'batch':>5} {'pos':>4}  {'stock ATen':<12} {'deterministic_mode()':<20}\n")
    for t in trials:
        stock = "identical" if t.stock_identical else "DIFFERENT"
        det = "identical" if t.deterministic_identical else "DIFFERENT"
        out.write(f"{t.batch_size:>5} {t.position:>4}  {stock:<12} {det:<20}\n")
    n = len(trials)
    out.write(
        f"\nstock: {sum(t.stock_identical for t in trials)}/{n} identical; "
        f"deterministic_mode(): {sum(t.deterministic_identical for t in trials)}/{n} identical\n"
    )
    out.write(
        f"speed on a {speed['batch']} batch: stock {speed['stock_s'] * 1e3:.1f} ms, "
        f"deterministic {speed['deterministic_s'] * 1e3:.1f} ms "
        f"({speed['ratio']:.2f}x)\n"
    )
