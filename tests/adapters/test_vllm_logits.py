"""Seeded-sampling logits processors against vLLM's real interfaces (V1 and Model Runner
V2): the token the engine's sampler is left with is ``reasonserve.ops.sample``'s."""

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here (make test-adapters builds .venv-vllm)")

import torch
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import (
    BatchUpdate,
    LogitsProcessors,
    MoveDirectionality,
)
from vllm.v1.sample.logits_processor import LogitsProcessor as V1Base
from vllm.v1.sample.metadata import SamplingMetadata
from vllm.v1.sample.sampler import Sampler
from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext, LogitsProcRequestState
from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor as V2Base

from reasonserve import ops
from reasonserve.adapters.vllm import (
    SeededSamplingLogitsProcessor,
    SeededSamplingLogitsProcessorV1,
)

VOCAB = 97


def _logits(rows: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, VOCAB, generator=torch.Generator().manual_seed(seed)) * 3


def _params(seed=None, **kw) -> SamplingParams:
    return SamplingParams(extra_args=None if seed is None else {"reasonserve_seed": seed}, **kw)


def _expected(logits_row, seed, position, sp: SamplingParams) -> int:
    top_k = sp.top_k if sp.top_k > 0 else None
    return int(ops.sample(logits_row[None], seeds=seed, positions=position, temperature=sp.temperature,
                          top_k=top_k, top_p=sp.top_p, min_p=sp.min_p)[0])  # fmt: skip


def _one_hot_at(row: torch.Tensor) -> int:
    finite = torch.isfinite(row).nonzero().flatten().tolist()
    assert len(finite) == 1, f"expected exactly one finite logit, got {len(finite)}"
    return finite[0]


# V1 -----------------------------------------------------------------------------------
def test_v1_is_a_real_v1_processor_and_not_argmax_invariant():
    proc = SeededSamplingLogitsProcessorV1(None, torch.device("cpu"), False)
    assert isinstance(proc, V1Base)
    assert proc.is_argmax_invariant() is False  # it must run for greedy requests too


def test_v1_draws_ops_sample_tokens_through_the_real_sampler_stage():
    proc = SeededSamplingLogitsProcessorV1(None, torch.device("cpu"), False)
    sps = [_params(11, temperature=0.8, top_p=0.9), _params(None, temperature=0.8),
           _params(2**64 - 1, temperature=1.3, top_k=5, min_p=0.05)]  # fmt: skip
    prompts, outputs = [[1, 2], [3, 4, 5], [6]], [[7], [], [8, 9]]
    added = [(i, sps[i], prompts[i], outputs[i]) for i in range(3)]
    proc.update_state(BatchUpdate(batch_size=3, removed=[], added=added, moved=[]))
    logits = _logits(3)
    metadata = SamplingMetadata(
        temperature=torch.tensor([0.8, 0.8, 1.3]), all_greedy=False, all_random=True,
        top_p=None, top_k=None, generators={}, max_num_logprobs=None, no_penalties=True,
        prompt_token_ids=None, frequency_penalties=torch.zeros(3), presence_penalties=torch.zeros(3),
        repetition_penalties=torch.ones(3), output_token_ids=outputs, allowed_token_ids_mask=None,
        bad_words_token_ids={}, logitsprocs=LogitsProcessors([proc]),
    )  # fmt: skip
    out = Sampler().apply_logits_processors(logits.clone(), metadata, predict_bonus_token=False)
    assert _one_hot_at(out[0]) == _expected(logits[0], 11, 3, sps[0])
    assert _one_hot_at(out[2]) == _expected(logits[2], 2**64 - 1, 3, sps[2])
    assert torch.equal(out[1], logits[1])  # not seeded: untouched, bit for bit


def test_v1_position_follows_the_live_output_list_and_batch_moves():
    proc = SeededSamplingLogitsProcessorV1(None, torch.device("cpu"), False)
    sp_a, sp_b = _params(5, temperature=1.0), _params(6, temperature=0.5)
    out_a, out_b = [], [9]
    proc.update_state(BatchUpdate(2, [], [(0, sp_a, [1, 2, 3], out_a), (1, sp_b, [4], out_b)], []))
    out_a.append(42)  # vLLM appends generated tokens to the list it handed over
    logits = _logits(2, seed=1)
    got = proc.apply(logits.clone())
    assert _one_hot_at(got[0]) == _expected(logits[0], 5, 4, sp_a)
    assert _one_hot_at(got[1]) == _expected(logits[1], 6, 2, sp_b)
    proc.update_state(BatchUpdate(2, [], [], [(0, 1, MoveDirectionality.SWAP)]))
    swapped = proc.apply(logits.clone())
    assert _one_hot_at(swapped[1]) == _expected(logits[1], 5, 4, sp_a)
    assert _one_hot_at(swapped[0]) == _expected(logits[0], 6, 2, sp_b)
    proc.update_state(BatchUpdate(1, [1], [], [(0, 1, MoveDirectionality.UNIDIRECTIONAL)]))
    moved = proc.apply(logits.clone())
    assert _one_hot_at(moved[1]) == _expected(logits[1], 6, 2, sp_b)
    assert torch.equal(moved[0], logits[0])  # the request that sat there left
    proc.update_state(BatchUpdate(1, [1], [], []))
    assert torch.equal(proc.apply(logits.clone()), logits)


def test_v1_greedy_requests_get_the_argmax():
    proc = SeededSamplingLogitsProcessorV1(None, torch.device("cpu"), False)
    proc.update_state(BatchUpdate(1, [], [(0, _params(3, temperature=0.0), [1], [])], []))
    logits = _logits(1, seed=2)
    assert _one_hot_at(proc.apply(logits.clone())[0]) == int(logits[0].argmax())


# V2 -----------------------------------------------------------------------------------
def _request_state(num_slots: int) -> LogitsProcRequestState:
    # On a real runner these are UVA/pinned buffers, which need an accelerator; the
    # processor never reads them, so CPU tensors stand in.
    zeros = torch.zeros(num_slots, dtype=torch.int32)
    return LogitsProcRequestState(device=torch.device("cpu"), max_num_reqs=num_slots, vocab_size=VOCAB,
                                  all_token_ids=torch.zeros(num_slots, 64, dtype=torch.int32),
                                  prompt_len=zeros, prefill_len=zeros, total_len=zeros)  # fmt: skip


def _context(slots: list[int], positions: list[int]) -> LogitsContext:
    mapping = torch.tensor(slots, dtype=torch.int32)
    return LogitsContext(expanded_idx_mapping=mapping, idx_mapping=mapping, idx_mapping_np=mapping.numpy(),
                         expanded_local_pos=torch.zeros(len(slots), dtype=torch.int32),
                         input_ids=torch.zeros(len(slots), dtype=torch.int32),
                         pos=torch.tensor(positions, dtype=torch.int64),
                         seq_lens_upper_bound_np=(torch.tensor(positions) + 1).numpy())  # fmt: skip


def test_v2_rows_map_to_slots_and_draw_at_pos_plus_one(make_vllm_config):
    proc = SeededSamplingLogitsProcessor(make_vllm_config(), _request_state(8))
    assert isinstance(proc, V2Base)
    sp7, sp2 = _params(7, temperature=0.9, top_p=0.8), _params(8, temperature=1.0, top_k=3)
    assert proc.add_request(7, sp7) is True
    assert proc.add_request(2, sp2) is True
    assert proc.add_request(4, _params(None)) is False
    logits = _logits(3, seed=3)
    # rows are reordered every step: row 0 -> slot 2, row 1 -> slot 4, row 2 -> slot 7
    got = proc.apply(logits.clone(), _context([2, 4, 7], [10, 3, 40]))
    assert _one_hot_at(got[0]) == _expected(logits[0], 8, 11, sp2)
    assert torch.equal(got[1], logits[1])
    assert _one_hot_at(got[2]) == _expected(logits[2], 7, 41, sp7)


def test_v2_speculative_rows_each_draw_at_their_own_position(make_vllm_config):
    """Under speculative decoding a request owns one logits row per draft token (plus the
    bonus row): ``expanded_idx_mapping`` maps each row to its slot and ``pos`` holds each
    row's own position, so the rows of one request draw at consecutive positions."""
    proc = SeededSamplingLogitsProcessor(make_vllm_config(), _request_state(8))
    sp2, sp7 = _params(21, temperature=0.9), _params(77, temperature=1.2, top_k=20)
    proc.add_request(2, sp2)
    proc.add_request(5, _params(None))
    proc.add_request(7, sp7)
    slots, positions = [2, 2, 2, 5, 7, 7], [10, 11, 12, 3, 20, 21]
    ctx = LogitsContext(
        expanded_idx_mapping=torch.tensor(slots, dtype=torch.int32),
        idx_mapping=torch.tensor([2, 5, 7], dtype=torch.int32), idx_mapping_np=torch.tensor([2, 5, 7]).numpy(),
        expanded_local_pos=torch.tensor([0, 1, 2, 0, 0, 1], dtype=torch.int32),
        input_ids=torch.zeros(6, dtype=torch.int32), pos=torch.tensor(positions, dtype=torch.int64),
        seq_lens_upper_bound_np=torch.tensor([13, 4, 22]).numpy(),
    )  # fmt: skip
    logits = _logits(6, seed=9)
    got = proc.apply(logits.clone(), ctx)
    by_slot = {2: (21, sp2), 7: (77, sp7)}
    drawn = []
    for row, (slot, pos) in enumerate(zip(slots, positions, strict=True)):
        if slot not in by_slot:
            assert torch.equal(got[row], logits[row])
            continue
        seed, sp = by_slot[slot]
        drawn.append(_one_hot_at(got[row]))
        assert drawn[-1] == _expected(logits[row], seed, pos + 1, sp), row
    # the same logits row at the next position draws another token: positions matter
    same = logits[0:1].expand(3, -1).clone()
    ctx_same = LogitsContext(expanded_idx_mapping=torch.tensor([2, 2, 2], dtype=torch.int32), idx_mapping=ctx.idx_mapping[:1],
                             idx_mapping_np=ctx.idx_mapping_np[:1], expanded_local_pos=torch.tensor([0, 1, 2]),
                             input_ids=torch.zeros(3, dtype=torch.int32), pos=torch.tensor([10, 11, 12]),
                             seq_lens_upper_bound_np=ctx.seq_lens_upper_bound_np[:1])  # fmt: skip
    tokens = [_one_hot_at(r) for r in proc.apply(same, ctx_same)]
    assert tokens == [_expected(logits[0], 21, p + 1, sp2) for p in (10, 11, 12)]
    assert len(set(tokens)) > 1


def test_v2_recycled_slot_forgets_its_previous_occupant(make_vllm_config):
    proc = SeededSamplingLogitsProcessor(make_vllm_config(), _request_state(4))
    proc.add_request(1, _params(9))
    assert proc.add_request(1, _params(None)) is False  # a new, unseeded request in slot 1
    logits = _logits(1, seed=4)
    assert torch.equal(proc.apply(logits.clone(), _context([1], [5])), logits)


def test_v1_and_v2_draw_the_same_token_for_the_same_request(make_vllm_config):
    sp = _params(1234, temperature=0.7, top_p=0.95)
    v1 = SeededSamplingLogitsProcessorV1(None, torch.device("cpu"), False)
    v1.update_state(BatchUpdate(1, [], [(0, sp, [1, 2, 3, 4], [5, 6])], []))
    v2 = SeededSamplingLogitsProcessor(make_vllm_config(), _request_state(2))
    v2.add_request(0, sp)
    logits = _logits(1, seed=5)
    # 6 tokens so far: V1 counts them, V2 sees the last one at position 5
    assert _one_hot_at(v1.apply(logits.clone())[0]) == _one_hot_at(v2.apply(logits.clone(), _context([0], [5]))[0])


@pytest.mark.parametrize("bad", [-1, 2**64, "7", 1.5, True])
def test_bad_seeds_are_rejected_at_admission_with_value_error(bad):
    sp = _params(None)
    sp.extra_args = {"reasonserve_seed": bad}  # past vLLM's own range check for extra args
    for cls in (SeededSamplingLogitsProcessorV1, SeededSamplingLogitsProcessor):
        with pytest.raises(ValueError, match="reasonserve_seed"):
            cls.validate_params(sp)
        cls.validate_params(_params(None))  # not opted in: accepted
        cls.validate_params(_params(0))


def test_a_row_ops_sample_rejects_is_left_to_the_engine(make_vllm_config):
    proc = SeededSamplingLogitsProcessor(make_vllm_config(), _request_state(2))
    proc.add_request(0, _params(1))
    proc.add_request(1, _params(2))
    logits = _logits(2, seed=6)
    logits[0] = float("-inf")  # nothing can be sampled from this row
    got = proc.apply(logits.clone(), _context([0, 1], [3, 3]))
    assert torch.equal(got[0], logits[0])
    assert _one_hot_at(got[1]) == _expected(logits[1], 2, 4, _params(2))


def test_v1_slot_recycled_in_vllms_input_batch_forgets_the_old_seed():
    """vLLM's own InputBatch: a seeded request leaves and an unseeded one takes its slot in
    the same step. The builder reuses the removed index and reports it only as added
    (not removed), so the processor must clear the slot on an unseeded add."""
    from vllm.v1.worker.gpu_input_batch import CachedRequestState, InputBatch

    proc = SeededSamplingLogitsProcessorV1(None, torch.device("cpu"), False)
    batch = InputBatch(max_num_reqs=4, max_model_len=64, max_num_batched_tokens=64, device=torch.device("cpu"),
                       vocab_size=VOCAB, block_sizes=[16], max_num_blocks_per_req=[4],
                       logitsprocs=LogitsProcessors([proc]))  # fmt: skip

    def request(rid, sp):
        return CachedRequestState(req_id=rid, prompt_token_ids=[1, 2, 3], mm_features=[], sampling_params=sp,
                                  generator=None, block_ids=([0],), num_computed_tokens=3, output_token_ids=[])  # fmt: skip

    batch.add_request(request("seeded", _params(5, temperature=1.0)))
    batch.refresh_metadata()
    logits = _logits(1, seed=8)
    assert _one_hot_at(proc.apply(logits.clone())[0]) == _expected(logits[0], 5, 3, _params(5, temperature=1.0))
    batch.remove_request("seeded")
    batch.add_request(request("greedy", _params(None, temperature=0.0)))
    batch.condense()
    batch.refresh_metadata()
    assert batch.req_ids == ["greedy"]  # the same slot, 0
    assert torch.equal(proc.apply(logits.clone()), logits)  # left to vLLM's own (greedy) sampler
