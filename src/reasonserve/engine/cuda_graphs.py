"""CUDA graphs for the engine's fixed-shape passes: decode steps and DVR verify passes.

A graph runs ``B`` chunks of ``q`` query rows each, for one kernel set:

* a decode step (every chunk one token that needs logits) of ``n`` requests runs at the
  smallest bucket ``B >= n`` of ``1, 2, 4, ..., max_num_seqs`` with ``q = 1``, padded with
  ``B - n`` dummy chunks;
* a verify pass already has its one shape (``dvr_group_size`` chunks of ``dvr_window``
  rows, short and empty slots padded with dummy rows by ``dvr_host``).

A dummy row is token 0 at positions ``0, 1, ...`` writing its K/V to the scratch block,
with a table that is all scratch. The step is packed, copied into the shape's static
input buffers and the graph captured for that shape and kernel set is replayed; the
logits of the rows the step wants are gathered from its static output. Dummy rows never
touch a request's blocks, and with the invariant kernels a real row's bits do not depend
on the other rows, so a replay gives the bits of the eager pass
(``tests/test_engine_device.py`` checks the padding and buffers on CPU,
``tests/test_gpu_engine.py`` the captured graphs).

Graphs are captured lazily, on a shape's first pass, from static buffers holding dummy
rows only (a capture writes nothing to a request's blocks), sharing one memory pool. If
a capture fails (CUDA out of memory, or anything else), one warning says so and every
later pass runs eagerly: no request is lost, and the bits are the eager ones.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import torch

from reasonserve.engine.kernels import Kernels, PagedMeta
from reasonserve.engine.step_inputs import Chunk, DeviceStep

__all__ = ["StepGraphs", "bucket_for", "cuda_capture", "decode_buckets", "graph_shape", "pad_to_shape"]

Forward = Callable[[DeviceStep, Kernels], torch.Tensor]  # the runner's eager forward
Capture = Callable[[Callable[[], torch.Tensor]], Callable[[], torch.Tensor]]  # fn -> replay
Shape = tuple[int, int]  # (chunks, query rows per chunk)


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


def graph_shape(chunks: Sequence[Chunk], buckets: Sequence[int], verify: Shape | None) -> Shape | None:
    """The shape of the graph that runs these chunks, or None: run them eagerly."""
    if all(len(c.tokens) == 1 and c.want == 1 and c.pad_to <= 1 for c in chunks):  # a decode step
        bucket = bucket_for(len(chunks), buckets)
        return None if bucket is None else (bucket, 1)
    if verify is None or len(chunks) != verify[0]:
        return None
    rows = verify[1]  # a verify pass: every slot padded to the window
    return verify if all(c.pad_to == rows and len(c.tokens) <= rows for c in chunks) else None


def pad_to_shape(chunks: Sequence[Chunk], shape: Shape) -> list[Chunk]:
    """``chunks`` plus dummy chunks up to ``shape``'s chunk count."""
    count, rows = shape
    return [*chunks, *[Chunk([], 0, [], want=0, pad_to=rows)] * (count - len(chunks))]


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
    """One shape's static input buffers on the device (the dtypes of :class:`Staging`'s steps)."""

    def __init__(self, shape: Shape, width: int, block_size: int, scratch: int, device) -> None:
        count, rows = shape

        def empty(*size: int, dtype=torch.int64) -> torch.Tensor:
            return torch.empty(size, dtype=dtype, device=device)

        self.shape, self.block_size, self.scratch = shape, block_size, scratch
        self.ids, self.positions, self.offsets, self.blocks = (empty(count * rows) for _ in range(4))
        self.seq_lens, self.query_lens = empty(count, dtype=torch.int32), empty(count, dtype=torch.int32)
        self.tables = empty(count, width, dtype=torch.int32)
        self.reset()

    def reset(self) -> None:
        """Dummy rows only (before a capture, whose runs must not write a request's blocks)."""
        count, rows = self.shape
        self.ids.fill_(0)
        self.positions.copy_(torch.arange(rows).repeat(count))
        self.offsets.copy_(self.positions % self.block_size)
        self.seq_lens.fill_(rows)
        self.query_lens.fill_(rows)
        self.blocks.fill_(self.scratch)
        self.tables.fill_(self.scratch)

    def load(self, step: DeviceStep) -> None:
        """Copy a step packed to this shape (device to device; table columns past the
        step's width keep stale entries, which no row reads)."""
        m = step.meta
        pairs = ((self.ids, step.input_ids), (self.positions, step.positions), (self.seq_lens, m.seq_lens),
                 (self.query_lens, m.query_lens), (self.blocks, m.slot_blocks),
                 (self.offsets, m.slot_offsets))  # fmt: skip
        for dst, src in pairs:
            dst.copy_(src, non_blocking=True)
        self.tables[:, : m.block_tables.shape[1]].copy_(m.block_tables, non_blocking=True)

    def step(self, max_seq_len: int) -> DeviceStep:
        """The buffers as a step: logits of every row; ``max_query_len`` the shape's rows."""
        m = (self.tables, self.seq_lens, self.query_lens, self.blocks, self.offsets)
        return DeviceStep(self.ids, self.positions, PagedMeta(*m, max_seq_len, self.shape[1]), None)


class StepGraphs:
    """Decode steps and verify passes through per-shape static buffers and captured graphs.

    ``capture`` turns a function of the static buffers into a replay function
    (:func:`cuda_capture`; tests pass ``lambda fn: fn`` to run the same buffers and
    padding eagerly on CPU). ``stage(chunks)`` packs and copies a step to the device.
    ``verify``: the verify passes' shape (``dvr_group_size``, ``dvr_window``), or None."""

    def __init__(self, forward: Forward, stage: Callable[[list[Chunk]], DeviceStep], *, max_num_seqs: int,
                 max_model_len: int, block_size: int, scratch: int, device, capture: Capture,
                 verify: Shape | None = None) -> None:  # fmt: skip
        self.forward, self.stage, self.capture = forward, stage, capture
        self.buckets, self.verify = decode_buckets(max_num_seqs), verify
        self.width = -(-max_model_len // block_size)
        self.max_seq_len, self.block_size = self.width * block_size, block_size
        self.scratch, self.device = scratch, device
        self.enabled = True
        self.replays = 0
        self._static: dict[Shape, _Static] = {}
        self._graphs: dict[tuple[str, Shape], Callable[[], torch.Tensor]] = {}

    def run(self, chunks: Sequence[Chunk], kernels: Kernels) -> torch.Tensor | None:
        """Logits ``[sum(want), V]`` of a decode step or verify pass, or None when these
        chunks cannot run from a graph (another shape, graphs disabled): run them eagerly."""
        shape = graph_shape(chunks, self.buckets, self.verify) if self.enabled else None
        if shape is None:
            return None
        step = self.stage(pad_to_shape(chunks, shape))
        if step.meta.block_tables.shape[1] > self.width or step.rows is None:
            return None
        replay = self._graph(kernels, shape)
        if replay is None:
            return None
        self._static[shape].load(step)
        self.replays += 1
        return replay().index_select(0, step.rows)

    def _graph(self, kernels: Kernels, shape: Shape) -> Callable[[], torch.Tensor] | None:
        key = (kernels.name, shape)
        if key not in self._graphs:
            if shape not in self._static:
                self._static[shape] = _Static(shape, self.width, self.block_size, self.scratch, self.device)
            static = self._static[shape]
            static.reset()
            try:
                self._graphs[key] = self.capture(lambda: self.forward(static.step(self.max_seq_len), kernels))
            except Exception as err:  # out of memory or an op that cannot be captured: run eagerly
                self.enabled = False
                warnings.warn(
                    f"capturing the {kernels.name} graph for {shape[0]} x {shape[1]} query rows failed "
                    f"({type(err).__name__}: {err}); passes run eagerly from now on",
                    RuntimeWarning,
                    stacklevel=2,
                )
                return None
        return self._graphs[key]
