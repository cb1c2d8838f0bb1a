"""Runs one packed batch through the model over the paged KV cache, and samples.

The runner knows nothing about queues or policies: it gets chunks (token ids, the
position of the first, the request's block table) and a kernel set, packs and checks
the inputs on the host and copies them to the device once per call
(``step_inputs``), runs ``DecoderModel.forward_paged`` (which writes the new K/V with
one indexed copy per layer and attends through the block tables) — a decode step on
CUDA from a captured graph (``cuda_graphs``), as is a verify pass — and returns the
logits rows asked for.
Sampling reads the tokens back in one copy, together with a per-row flag for
non-finite logits, which fail their own request only.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from reasonserve import ops
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.engine.cuda_graphs import Capture, StepGraphs, cuda_capture
from reasonserve.engine.kernels import INVARIANT, Kernels
from reasonserve.engine.kv_cache import PagedKVCache
from reasonserve.engine.model import DecoderModel
from reasonserve.engine.sampling_params import SamplingParams
from reasonserve.engine.step_inputs import Chunk, DeviceStep, Staging, pack

__all__ = ["Chunk", "ModelRunner"]


class ModelRunner:
    def __init__(
        self,
        model: DecoderModel,
        num_blocks: int,
        block_size: int,
        *,
        max_num_seqs: int = 32,
        max_model_len: int | None = None,
        cuda_graphs: bool = True,
        verify: tuple[int, int] | None = None,
        capture: Capture | None = None,
    ) -> None:
        """Decode steps and verify passes (``verify``: their shape, ``(dvr_group_size,
        dvr_window)``) run from CUDA graphs when the model is on CUDA and ``cuda_graphs`` is
        set; ``capture`` overrides how a graph is made (tests: ``lambda fn: fn`` runs the
        graphs' static buffers and padding eagerly, on any device)."""
        self.model = model
        self.cache = PagedKVCache(model.cfg, num_blocks, block_size, dtype=model.dtype, device=model.device)
        self.block_size = block_size
        self.staging = Staging(model.device)
        if capture is None and cuda_graphs and model.device.type == "cuda":
            capture = cuda_capture()
        self.graphs = None if capture is None else StepGraphs(
            self.forward, self.stage, max_num_seqs=max_num_seqs,
            max_model_len=max_model_len or model.cfg.default_max_model_len, block_size=block_size,
            scratch=self.cache.scratch, device=model.device, capture=capture, verify=verify,
        )  # fmt: skip

    def stage(self, chunks: Sequence[Chunk]) -> DeviceStep:
        """Pack and check ``chunks`` on the host and copy them to the device."""
        cfg = self.model.cfg
        host = pack(chunks, self.block_size, self.cache.scratch, cfg.vocab_size, cfg.max_context_len)
        return self.staging.to_device(host)

    def forward(self, step: DeviceStep, kernels: Kernels) -> torch.Tensor:
        return self.model.forward_paged(
            step.input_ids, step.positions, step.meta, self.cache.k, self.cache.v, kernels=kernels,
            logit_rows=step.rows,
        )  # fmt: skip

    def run(self, chunks: Sequence[Chunk], kernels: Kernels = INVARIANT) -> torch.Tensor:
        """Logits ``[sum(want), V]`` in chunk order."""
        if self.graphs is not None:
            logits = self.graphs.run(chunks, kernels)
            if logits is not None:
                return logits
        return self.forward(self.stage(chunks), kernels)

    # sampling -----------------------------------------------------------------------
    @staticmethod
    def sample(
        logits: torch.Tensor, params: Sequence[SamplingParams], seeds: Sequence[int], positions: Sequence[int]
    ) -> list[int | Exception]:
        """One token per row; a row whose sampling fails gets its exception instead, so one
        bad request cannot fail the others."""
        try:
            return _sample(logits, params, seeds, positions)
        except Exception:
            out: list[int | Exception] = []
            for i in range(len(params)):
                try:
                    out += _sample(
                        logits[i : i + 1], params[i : i + 1], seeds[i : i + 1], positions[i : i + 1]
                    )
                except Exception as err:
                    out.append(err)
            return out

    # swapping ------------------------------------------------------------------------
    def swap_out(self, table: Sequence[int], num_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        k, v = self.cache.gather(table, num_tokens)  # type: ignore[misc]
        return k.to("cpu", copy=True), v.to("cpu", copy=True)

    def swap_in(self, table: Sequence[int], kv: tuple[torch.Tensor, torch.Tensor]) -> None:
        self.cache.write(table, 0, *(t.to(self.model.device) for t in kv))


def _sample(logits, params, seeds, positions) -> list[int | Exception]:
    """Greedy rows take the argmax (first index on ties: the bits ``ops.sample`` gives
    them, without drawing noise for the whole vocabulary); the others one ``ops.sample``
    call. Tokens and the non-finite-row flags come back in one copy."""
    bad = ~torch.isfinite(logits).all(dim=-1)
    tokens = logits.argmax(dim=-1)
    drawn = [i for i, p in enumerate(params) if p.temperature != 0]
    if drawn:
        rows = torch.tensor(drawn, device=logits.device)
        clean = torch.where(bad[rows, None], 0.0, logits[rows])  # nothing non-finite reaches the sampler
        ps = [params[i] for i in drawn]
        tokens[rows] = ops.sample(
            clean,
            seeds=[seeds[i] for i in drawn],
            positions=[positions[i] for i in drawn],
            temperature=[p.temperature for p in ps],
            top_k=[p.effective_top_k for p in ps],
            top_p=[p.top_p for p in ps],
            min_p=[p.min_p for p in ps],
        )
    values, flags = torch.stack([tokens, bad.long()]).tolist()
    return [_non_finite(p) if bad else t for p, t, bad in zip(positions, values, flags, strict=True)]


def _non_finite(position: int) -> Exception:
    return InvalidArgumentError(
        f"logits at position {position} are not finite (NaN or inf): nothing can be sampled from them"
    )
