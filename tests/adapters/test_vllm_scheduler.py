"""The phase-aware scheduler subclasses driven through vLLM's real ``Scheduler`` with a
fake KV-cache config (no model runs: each step's sampled tokens are handed back)."""

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here (make test-adapters builds .venv-vllm)")

import torch
from vllm import SamplingParams
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus
from vllm.v1.structured_output import StructuredOutputManager

from reasonserve.adapters.vllm import PhaseAwareScheduler, PhaseAwareSyncScheduler
from reasonserve.core.errors import InvalidArgumentError

END = 99  # the end-of-thinking token id in these tests
BLOCK = 16


def _scheduler(cls, make_vllm_config, *, num_blocks=64, budget=256, settings=None, **sched):
    extra = {"reasonserve": {"think_end_token_id": END} if settings is None else settings}
    config = make_vllm_config(additional_config=extra, num_blocks=num_blocks, max_num_batched_tokens=budget,
                              enable_chunked_prefill=True, long_prefill_token_threshold=0, **sched)  # fmt: skip
    config.cache_config.enable_prefix_caching = False
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=2, head_size=16, dtype=torch.float32)
    kv = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[],
                       kv_cache_groups=[KVCacheGroupSpec(["model.layers.0.self_attn"], spec)])  # fmt: skip
    return cls(vllm_config=config, kv_cache_config=kv, structured_output_manager=StructuredOutputManager(config),
               block_size=BLOCK)  # fmt: skip


def _request(rid: str, prompt_len: int, arrival: float) -> Request:
    params = SamplingParams(max_tokens=64, ignore_eos=True)
    return Request(rid, list(range(1, prompt_len + 1)), params, None, arrival_time=arrival)


def _step(sched, tokens: dict[str, int]) -> dict[str, int]:
    """One schedule + one model step; requests that finished their prompt sample
    ``tokens.get(id, 7)``. Returns the tokens scheduled per request."""
    out = sched.schedule()
    ids = list(out.num_scheduled_tokens)
    sampled = []
    for rid in ids:
        req = sched.requests[rid]
        done_prompt = req.num_computed_tokens >= req.num_prompt_tokens
        sampled.append([tokens.get(rid, 7)] if done_prompt else [])
    result = ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                               sampled_token_ids=sampled)  # fmt: skip
    sched.update_from_output(out, result)
    return dict(out.num_scheduled_tokens)


def _answering_then_reasoning(sched) -> dict[str, int]:
    """A arrives first and answers (its first token is END); B arrives later with a long
    prompt and is still reasoning. Returns the third step's token split."""
    sched.add_request(_request("A", 4, arrival=1.0))
    assert _step(sched, {"A": END}) == {"A": 4}
    sched.add_request(_request("B", 40, arrival=2.0))
    _step(sched, {})  # B is admitted behind A
    return _step(sched, {})


@pytest.mark.parametrize("cls", [PhaseAwareScheduler, PhaseAwareSyncScheduler])
def test_reasoning_gets_the_token_budget_before_answering(cls, make_vllm_config):
    split = _answering_then_reasoning(_scheduler(cls, make_vllm_config, budget=8))
    assert split == {"B": 8}  # A (answering, arrived first) waits for B's prefill


def test_vllm_fcfs_serves_the_earlier_answering_request_first(make_vllm_config):
    """The same steps on vLLM's own scheduler: the behaviour the subclass changes."""
    split = _answering_then_reasoning(_scheduler(AsyncScheduler, make_vllm_config, budget=8))
    assert split == {"A": 1, "B": 7}


def _preemption_victim(sched) -> str:
    """A answers, B reasons; both grow until the KV blocks run out. Returns who is preempted."""
    sched.add_request(_request("A", 14, arrival=1.0))
    sched.add_request(_request("B", 14, arrival=2.0))
    _step(sched, {"A": END})
    for _ in range(40):
        out = sched.schedule()
        if out.preempted_req_ids:
            return ",".join(sorted(out.preempted_req_ids))
        ids = list(out.num_scheduled_tokens)
        result = ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                   sampled_token_ids=[[7] for _ in ids])  # fmt: skip
        sched.update_from_output(out, result)
    raise AssertionError("no preemption happened")


@pytest.mark.parametrize("cls", [PhaseAwareScheduler, PhaseAwareSyncScheduler])
def test_answering_requests_are_preempted_first(cls, make_vllm_config):
    # 3 blocks of 16 tokens: two 14-token prompts fit, then the third block is contended.
    assert _preemption_victim(_scheduler(cls, make_vllm_config, num_blocks=3)) == "A"


def test_vllm_fcfs_preempts_the_latest_request(make_vllm_config):
    from vllm.v1.core.sched.scheduler import Scheduler

    assert _preemption_victim(_scheduler(Scheduler, make_vllm_config, num_blocks=3)) == "B"


def test_the_phase_book_forgets_finished_requests(make_vllm_config):
    sched = _scheduler(PhaseAwareSyncScheduler, make_vllm_config)
    sched.add_request(_request("A", 4, arrival=1.0))
    _step(sched, {"A": END})
    assert len(sched.phase_book) == 1
    sched.finish_requests(["A"], finished_status=RequestStatus.FINISHED_ABORTED)
    sched.schedule()
    assert len(sched.phase_book) == 0


def test_missing_or_bad_settings_are_typed_errors(make_vllm_config):
    with pytest.raises(InvalidArgumentError, match="think_end_token_id"):
        _scheduler(PhaseAwareScheduler, make_vllm_config, settings={})
    with pytest.raises(InvalidArgumentError, match="unknown"):
        _scheduler(PhaseAwareScheduler, make_vllm_config, settings={"think_end_token_id": 5, "quantm": 3})
    with pytest.raises(InvalidArgumentError, match="quantum"):
        _scheduler(PhaseAwareScheduler, make_vllm_config, settings={"think_end_token_id": 5, "quantum": 0})
    with pytest.raises(InvalidArgumentError, match="fcfs"):
        _scheduler(PhaseAwareScheduler, make_vllm_config, policy="priority")


def _admitted_after_preemption(sched) -> dict[str, int]:
    """A answers and B reasons until A is preempted (back to the queue, answering); C, a new
    reasoning request, then waits behind it. Returns the next step's token split."""
    sched.add_request(_request("A", 14, arrival=1.0))
    sched.add_request(_request("B", 14, arrival=2.0))
    _step(sched, {"A": END})
    for _ in range(40):
        out = sched.schedule()
        ids = list(out.num_scheduled_tokens)
        result = ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                   sampled_token_ids=[[7] for _ in ids])  # fmt: skip
        sched.update_from_output(out, result)
        if out.preempted_req_ids:
            assert set(out.preempted_req_ids) == {"A"}
            sched.add_request(_request("C", 4, arrival=3.0))
            return _step(sched, {})
    raise AssertionError("no preemption happened")


@pytest.mark.parametrize("cls", [PhaseAwareScheduler, PhaseAwareSyncScheduler])
def test_the_waiting_queue_puts_reasoning_before_a_preempted_answering_request(cls, make_vllm_config):
    split = _admitted_after_preemption(_scheduler(cls, make_vllm_config, num_blocks=4))
    assert "C" in split and "A" not in split


def _decode_counts(sched, steps: int) -> dict[str, int]:
    """Tokens (prefill and decode) each request is scheduled over ``steps`` steps."""
    counts: dict[str, int] = {}
    for _ in range(steps):
        for rid, n in _step(sched, {}).items():
            counts[rid] = counts.get(rid, 0) + n
    return counts


def _three_reasoning(sched):
    """A, B, C admitted together (one-token prompts, a budget of 3), then a budget of 2
    tokens a step: only two of the three running requests can decode each step."""
    for i, rid in enumerate("ABC"):
        sched.add_request(_request(rid, 1, arrival=float(i)))
    assert _step(sched, {}) == {"A": 1, "B": 1, "C": 1}
    sched.max_num_scheduled_tokens = 2  # vLLM's per-step budget (its config wants >= max_num_seqs)
    return sched


@pytest.mark.parametrize("cls", [PhaseAwareScheduler, PhaseAwareSyncScheduler])
def test_the_quantum_rotates_the_token_budget_through_the_queue(cls, make_vllm_config):
    """Three running reasoning requests, two tokens a step: each in turn gets its quantum
    (4 tokens, its prompt token included) at the head of the queue, so none starves."""
    settings = {"think_end_token_id": END, "quantum": 4}
    sched = _three_reasoning(_scheduler(cls, make_vllm_config, budget=3, settings=settings, max_num_seqs=3))
    counts = _decode_counts(sched, 36)
    assert set(counts) == {"A", "B", "C"}
    assert max(counts.values()) - min(counts.values()) <= 4, counts  # 72 tokens, about 24 each


def test_vllm_fcfs_gives_the_third_request_nothing(make_vllm_config):
    """The same steps on vLLM's own scheduler: the behaviour the quantum changes."""
    from vllm.v1.core.sched.scheduler import Scheduler

    sched = _three_reasoning(_scheduler(Scheduler, make_vllm_config, budget=3, max_num_seqs=3))
    assert "C" not in _decode_counts(sched, 36)


def test_both_waiting_queues_are_ordered(make_vllm_config):
    """vLLM drains kv_holding_waiting (waiting requests that still hold KV blocks) before
    waiting: an answering request there goes behind a reasoning one, as in waiting."""
    sched = _scheduler(PhaseAwareSyncScheduler, make_vllm_config)
    answering, reasoning = _request("ans", 4, arrival=1.0), _request("rea", 4, arrival=2.0)
    answering.append_output_token_ids([5, END])
    for queue in (sched.kv_holding_waiting, sched.waiting):
        queue.add_request(answering)
        queue.add_request(reasoning)
        sched.requests.update({"ans": answering, "rea": reasoning})
        sched.reorder_queues(10.0)
        assert [r.request_id for r in queue] == ["rea", "ans"]
        queue.remove_requests([answering, reasoning])
