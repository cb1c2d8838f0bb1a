"""Engine configuration, validated at construction."""

from __future__ import annotations

from dataclasses import dataclass

from reasonserve.core.checks import check_int
from reasonserve.core.errors import InvalidArgumentError

__all__ = ["MODES", "EngineConfig"]

MODES = ("dvr", "batch_invariant")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Sizes of the paged KV cache and of a step, and the token ids the engine watches.

    ``max_num_batched_tokens`` bounds the tokens of one forward pass: decodes take one
    each, prompts are prefilled in chunks that fit (chunked prefill).
    ``end_of_thinking_token_id`` moves a request from REASONING to ANSWERING.
    ``end_of_thinking_token_ids``: the same when the tokenizer writes the end of thinking
    as several tokens (a vocabulary without ``</think>`` as one token): the request moves
    once its output ends with the whole sequence, and a thinking budget forces the whole
    sequence. Set one of the two; :attr:`thinking_end_ids` is the sequence either way.
    ``eos_token_id`` and ``eos_token_ids`` (a checkpoint may declare several) all end a
    request (unless it sets ``ignore_eos``); :attr:`all_eos_token_ids` is their union.

    ``mode="dvr"``: deterministic requests' prompts are prefilled with the
    batch-invariant kernels, all other passes use stock kernels, and requests with
    ``deterministic=True`` are verified every ``dvr_window`` tokens in fixed-shape passes
    of ``dvr_group_size`` x ``dvr_window`` tokens (decode-verify-rollback).
    ``mode="batch_invariant"``: every pass uses the batch-invariant kernels, so every
    request is deterministic and none is verified.

    ``cuda_graphs``: on CUDA, decode steps of up to ``max_num_seqs`` requests replay CUDA
    graphs captured per batch-size bucket (1, 2, 4, ..., ``max_num_seqs``), for both
    kernel sets, and verify passes one graph of their fixed shape; ignored on CPU.
    """

    block_size: int = 16
    num_blocks: int = 512
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 512
    max_model_len: int | None = None  # default: the model's max_position_embeddings
    eos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    end_of_thinking_token_id: int | None = None
    end_of_thinking_token_ids: tuple[int, ...] = ()
    policy: str = "fcfs"
    seed: int = 0  # seeds for requests that bring none
    mode: str = "dvr"  # "dvr": stock-kernel decode + verify; "batch_invariant": every pass invariant
    dvr_window: int = 8
    dvr_group_size: int = 4
    preemption: str = "recompute"  # or "swap": copy the KV to host memory and back
    cuda_graphs: bool = True  # on CUDA, decode steps and verify passes replay captured graphs

    def __post_init__(self) -> None:
        if self.preemption not in ("recompute", "swap"):
            raise InvalidArgumentError(f"preemption must be 'recompute' or 'swap', got {self.preemption!r}")
        if self.mode not in MODES:
            raise InvalidArgumentError(f"mode must be one of {MODES}, got {self.mode!r}")
        for name in ("block_size", "num_blocks", "max_num_seqs", "max_num_batched_tokens", "dvr_window",
                     "dvr_group_size"):  # fmt: skip
            check_int(name, getattr(self, name), 1)
        if not isinstance(self.cuda_graphs, bool):
            raise InvalidArgumentError(f"cuda_graphs must be a bool, got {self.cuda_graphs!r}")
        ids = ((self.eos_token_id,) if self.eos_token_id is not None else ()) + tuple(self.eos_token_ids)
        if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
            raise InvalidArgumentError(f"eos token ids must be ints >= 0, got {ids!r}")
        object.__setattr__(self, "eos_token_ids", tuple(self.eos_token_ids))
        eot = tuple(self.end_of_thinking_token_ids)
        if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in eot):
            raise InvalidArgumentError(f"end_of_thinking_token_ids must be ints >= 0, got {eot!r}")
        if eot and self.end_of_thinking_token_id is not None:
            raise InvalidArgumentError("set end_of_thinking_token_id or end_of_thinking_token_ids, not both")
        object.__setattr__(self, "end_of_thinking_token_ids", eot)
        if self.max_model_len is not None and self.max_model_len < 2:
            raise InvalidArgumentError(f"max_model_len must be >= 2, got {self.max_model_len}")

    @property
    def thinking_end_ids(self) -> tuple[int, ...]:
        """The token ids that end thinking, in order (empty: the engine tracks no phases)."""
        one = self.end_of_thinking_token_id
        return (one,) if one is not None else self.end_of_thinking_token_ids

    @property
    def all_eos_token_ids(self) -> frozenset[int]:
        return frozenset(self.eos_token_ids) | (
            {self.eos_token_id} if self.eos_token_id is not None else set()
        )
