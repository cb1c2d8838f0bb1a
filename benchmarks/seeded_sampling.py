"""Seeded sampling (``ops.sample_into``, the pass the vLLM/SGLang adapters run) against a
plain torch sampler, at serving batch sizes over a Qwen-sized vocabulary.

The baseline is vLLM's own random sampler written in torch: ``logits / T``, softmax,
``exponential_()`` noise, ``probs / q``, argmax (and, for top-p, the sort / cumsum /
mask it adds first). The candidate draws the seeded token of every row (noise keyed by
seed and position, bit-identical across devices); ``--one-hot`` also rewrites each row
in place as the adapters do. Alternated runs, medians, ratio target <= 2.

    python benchmarks/seeded_sampling.py                      # CPU, 256 and 1024 rows
    python benchmarks/seeded_sampling.py --device cuda        # the same rows on a GPU

On CUDA it also prints the candidate's extra peak memory (target: at most one logits
buffer) and runs the candidate under ``torch.cuda.set_sync_debug_mode("error")``.
"""

from __future__ import annotations

import argparse

import torch

from _harness import Row, compare, machine, report
from reasonserve import ops

VOCAB = 151936


def plain_sampler(logits: torch.Tensor, temperature: torch.Tensor, top_p: float | None) -> torch.Tensor:
    scaled = logits.to(torch.float32) / temperature[:, None]
    if top_p is not None:
        ordered, order = scaled.sort(dim=-1, descending=True)
        mass = ordered.softmax(dim=-1).cumsum(dim=-1)
        drop = (mass - ordered.softmax(dim=-1)) >= top_p
        ordered.masked_fill_(drop, float("-inf"))
        scaled = torch.empty_like(scaled).scatter_(1, order, ordered)
    probs = scaled.softmax(dim=-1)
    return probs.div_(torch.empty_like(probs).exponential_()).argmax(dim=-1)


def _inputs(rows: int, device: str, dtype: torch.dtype):
    g = torch.Generator().manual_seed(rows)
    logits = (torch.randn(rows, VOCAB, generator=g) * 3).to(dtype).to(device)
    seeds = torch.randint(0, 2**62, (rows,), generator=g).to(device)
    positions = torch.randint(0, 2**20, (rows,), generator=g).to(device)
    temperature = (torch.rand(rows, generator=g, dtype=torch.float64) + 0.5).to(device)
    return logits, seeds, positions, temperature


def _extra_peak_bytes(fn, device: str) -> int | None:
    if not device.startswith("cuda"):
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    torch.cuda.set_sync_debug_mode("error")  # any host sync inside raises
    try:
        fn()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - start


def run(device: str, dtype: torch.dtype, batches: list[int], repeats: int, one_hot: bool, top_ps) -> None:
    rows_out = []
    for rows in batches:
        logits, seeds, positions, temperature = _inputs(rows, device, dtype)
        temp32 = temperature.to(torch.float32)
        for top_p in top_ps:
            work = logits.clone() if one_hot else logits

            def candidate(work=work, top_p=top_p):
                return ops.sample_into(work, seeds=seeds, positions=positions, temperature=temperature,
                                       top_p=top_p, one_hot=one_hot)  # fmt: skip

            def baseline(logits=logits, top_p=top_p):
                return plain_sampler(logits, temp32, top_p)

            base_s, cand_s = compare(baseline, candidate, device=device, repeats=repeats, warmup=1)
            extra = _extra_peak_bytes(candidate, device)
            label = "sample_into" + ("+one_hot" if one_hot else "") + ("" if top_p is None else " top_p")
            shape = f"{rows}x{VOCAB} {str(dtype).removeprefix('torch.')}"
            if extra is not None:
                shape += f" +{extra / 2**20:.0f}MiB/{logits.numel() * logits.element_size() / 2**20:.0f}"
            ratio = cand_s / base_s
            rows_out.append(Row(label, shape, "torch sampler", base_s * 1e3, cand_s * 1e3, ratio, 2.0))
        del logits
    report("seeded_sampling", rows_out, machine(device))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default=None, help="float32 (CPU default) or bfloat16 (CUDA default)")
    p.add_argument("--rows", type=int, nargs="+", default=[256, 1024])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-top-p", action="store_true", help="only the temperature-only rows")
    p.add_argument("--one-hot", action="store_true", help="rewrite rows in place (the adapters' pass)")
    args = p.parse_args()
    dtype = getattr(torch, args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32"))
    run(args.device, dtype, args.rows, args.repeats, args.one_hot, (None,) if args.no_top_p else (None, 0.95))


if __name__ == "__main__":
    main()
