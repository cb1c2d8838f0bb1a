"""CUDA graphs for decode steps: one graph per (kernel set, batch-size bucket).

A decode step (every chunk one token that needs logits) of ``n`` requests runs at the
smallest bucket ``B >= n`` of ``1, 2, 4, ..., max_num_seqs``: the step is packed with
``B - n`` dummy rows (token 0 at position 0, K/V written to the scratch block, table
all scratch), copied into the bucket's static input buffers, and the graph captured
for that bucket and kernel set is replayed; the first ``n`` rows of its static logits
are the step's. Dummy rows never touch a request's blocks, and with the invariant
kernels a real row's bits do not depend on the other rows, so a replay gives the bits
of the eager step (``tests/test_engine_device.py`` checks the padding and buffers on
CPU; ``tests/test_gpu_engine.py`` the captured graphs).

Graphs are captured lazily, on a bucket's first decode step, from the static buffers
filled with dummy rows only (capture writes nothing to a request's blocks), sharing
one memory pool. If a capture fails (CUDA out of memory, or anything else), one warning
says so and every later step runs eagerly: no request is lost, and the bits are the
eager ones.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import torch

from reasonserve.engine.kernels import Kernels, PagedMeta
from reasonserve.engine.step_inputs import Chunk, DeviceStep

__all__ = ["DecodeGraphs", "bucket_for", "cuda_capture", "decode_buckets", "is_decode", "pad_decode"]

Forward = Callable[[DeviceStep, Kernels], torch.Tensor]  # the runner's eager forward
Capture = Callable[[Callable[[], torch.Tensor]], Callable[[], torch.Tensor]]  # fn -> replay


def decode_buckets(max_num_seqs: int) -> tuple[int, ...]:
    """``1, 2, 4, ...`` below ``max_num_seqs``, then ``max_num_seqs``."""
    out, b = [], 1
    while b < max_num_seqs:
        out.append(b)
        b *= 2
    return (*out, max_num_seqs)


def bucket_for(n: int, buckets: Sequence[int]) -> int | None:
    """The smallest bucket that holds ``n`` rows (None when none does)."""
    return next((b for b in buckets if b >= n), None)


def is_decode(chunks: Sequence[Chunk]) -> bool:
    """Every chunk is one token whose logits are needed, with no padding."""
    return all(len(c.tokens) == 1 and c.want == 1 and c.pad_to <= 1 for c in chunks)


def pad_decode(chunks: Sequence[Chunk], bucket: int) -> list[Chunk]:
    """``chunks`` plus dummy rows up to ``bucket`` (a dummy row: one padding query at position 0)."""
    return [*chunks, *[Chunk([], 0, [], want=0, pad_to=1)] * (bucket - len(chunks))]


def cuda_capture(pool=None) -> Capture:
    """Capture with ``torch.cuda.graph`` (after one warm-up run on a side stream, which
    compiles Triton kernels and sets up cuBLAS), all graphs sharing ``pool``."""
    pool = torch.cuda.graph_pool_handle() if pool is None else pool

    def capture(fn: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # thread_local: another thread's CUDA work (a second engine) does not break the capture
        with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
            out = fn()

        def replay() -> torch.Tensor:
            graph.replay()
            return out

        return replay

    return capture


class _Static:
    """One bucket's static input buffers (int32, on the device), filled with dummy rows."""

    def __init__(self, bucket: int, width: int, scratch: int, device) -> None:
        def empty(*shape: int) -> torch.Tensor:
            return torch.empty(shape, dtype=torch.int32, device=device)

        self.ids, self.positions, self.offsets = empty(bucket), empty(bucket), empty(bucket)
        self.seq_lens, self.query_lens, self.blocks = empty(bucket), empty(bucket), empty(bucket)
        self.tables = empty(bucket, width)
        self.scratch = scratch
        self.reset()

    def reset(self) -> None:
        """Dummy rows only (before a capture, whose runs must not write a request's blocks)."""
        for t in (self.ids, self.positions, self.offsets):
            t.fill_(0)
        self.seq_lens.fill_(1)
        self.query_lens.fill_(1)
        self.blocks.fill_(self.scratch)
        self.tables.fill_(self.scratch)

    def load(self, step: DeviceStep) -> None:
        """Copy a step packed to this bucket (device to device; table columns past the
        step's width keep stale entries, which no row reads)."""
        m = step.meta
        pairs = ((self.ids, step.input_ids), (self.positions, step.positions), (self.seq_lens, m.seq_lens),
                 (self.blocks, m.slot_blocks), (self.offsets, m.slot_offsets))  # fmt: skip
        for dst, src in pairs:
            dst.copy_(src, non_blocking=True)
        self.tables[:, : m.block_tables.shape[1]].copy_(m.block_tables, non_blocking=True)

    def step(self, max_seq_len: int) -> DeviceStep:
        """The buffers as a step: every row's logits; max_query_len 1 (decode tiles)."""
        m = (self.tables, self.seq_lens, self.query_lens, self.blocks, self.offsets)
        return DeviceStep(self.ids, self.positions, PagedMeta(*m, max_seq_len, 1), None)


class DecodeGraphs:
    """Decode steps through per-bucket static buffers and captured graphs.

    ``capture`` turns a function of the static buffers into a replay function
    (:func:`cuda_capture`; tests pass ``lambda fn: fn`` to run the same buffers and
    padding eagerly on CPU). ``stage(chunks)`` packs and copies a step to the device."""

    def __init__(self, forward: Forward, stage: Callable[[list[Chunk]], DeviceStep], *,
                 max_num_seqs: int, max_model_len: int, block_size: int, scratch: int, device,
                 capture: Capture) -> None:  # fmt: skip
        self.forward, self.stage, self.capture = forward, stage, capture
        self.buckets = decode_buckets(max_num_seqs)
        self.width = -(-max_model_len // block_size)
        self.max_seq_len = self.width * block_size
        self.scratch, self.device = scratch, device
        self.enabled = True
        self.replays = 0
        self._static: dict[int, _Static] = {}
        self._graphs: dict[tuple[str, int], Callable[[], torch.Tensor]] = {}

    def run(self, chunks: Sequence[Chunk], kernels: Kernels) -> torch.Tensor | None:
        """Logits ``[len(chunks), V]`` of a decode step, or None when this step cannot run
        from a graph (not a decode step, too many rows, graphs disabled): run it eagerly."""
        bucket = bucket_for(len(chunks), self.buckets)
        if not self.enabled or bucket is None or not is_decode(chunks):
            return None
        step = self.stage(pad_decode(chunks, bucket))
        if step.meta.block_tables.shape[1] > self.width:
            return None
        replay = self._graph(kernels, bucket)
        if replay is None:
            return None
        self._static[bucket].load(step)
        self.replays += 1
        return replay()[: len(chunks)]

    def _graph(self, kernels: Kernels, bucket: int) -> Callable[[], torch.Tensor] | None:
        key = (kernels.name, bucket)
        if key not in self._graphs:
            static = self._static.setdefault(bucket, _Static(bucket, self.width, self.scratch, self.device))
            static.reset()
            try:
                self._graphs[key] = self.capture(lambda: self.forward(static.step(self.max_seq_len), kernels))
            except Exception as err:  # out of memory or an op that cannot be captured: run eagerly
                self.enabled = False
                warnings.warn(
                    f"capturing the {kernels.name} decode graph for batch {bucket} failed "
                    f"({type(err).__name__}: {err}); decode steps run eagerly from now on",
                    RuntimeWarning,
                    stacklevel=2,
                )
                return None
        return self._graphs[key]
