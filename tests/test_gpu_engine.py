"""The engine on CUDA: every dtype, decode graphs against eager, DVR on real GPU
non-determinism, no host sync inside a forward, and faults that stay typed errors.
Marked ``gpu``: skipped without CUDA (their CPU counterparts: ``test_engine_device.py``)."""

import pytest
import torch

from _compare import assert_bitwise_equal
from _engine_steps import decode_chunks
from reasonserve.core import InvalidArgumentError, InvalidTypeError
from reasonserve.engine import DecoderModel, Engine, EngineConfig, SamplingParams, make_tiny_checkpoint
from reasonserve.engine.kernels import INVARIANT, STOCK
from reasonserve.engine.model_runner import ModelRunner
from reasonserve.engine.step_inputs import Chunk

pytestmark = pytest.mark.gpu
DEVICE = "cuda"
DTYPES = ["bfloat16", "float16", "float32"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("gpu"), vocab_size=1024, hidden_size=256,
                                intermediate_size=512, num_hidden_layers=4, num_attention_heads=8,
                                num_key_value_heads=2, max_position_embeddings=1024)  # fmt: skip


def _engine(ckpt, dtype, **config) -> Engine:
    cfg = EngineConfig(block_size=16, num_blocks=256, max_num_seqs=16, max_model_len=512, **config)
    return Engine.from_pretrained(ckpt, cfg, device=DEVICE, dtype=dtype)


def _mixed(target_params):
    """A target request among nine others of other lengths and parameters."""
    others = [([1 + i] * (3 + 7 * i), SamplingParams(max_tokens=20 + i, temperature=0.7, seed=i)) for i in range(9)]
    requests = [*others[:4], ([5, 6, 7, 8, 9], target_params), *others[4:]]
    return [r[0] for r in requests], [r[1] for r in requests]


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_invariant_mode_on_cuda_gives_a_request_its_tokens_in_any_batch(ckpt, dtype):
    params = SamplingParams(max_tokens=24, temperature=0.9, seed=11)
    alone = _engine(ckpt, dtype, mode="batch_invariant").generate([[5, 6, 7, 8, 9]], params)[0]
    busy = _engine(ckpt, dtype, mode="batch_invariant")
    outs = busy.generate(*_mixed(params))
    assert outs[4].token_ids == alone.token_ids and len(alone.token_ids) == 24
    assert busy.model.dtype == getattr(torch, dtype) and busy.cache.k.is_cuda
    assert busy.metrics().graph_replays > 0  # decode steps replayed captured graphs


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("n", [1, 3, 5, 16])
def test_invariant_decode_graphs_give_the_eager_bits(ckpt, dtype, n):
    model = DecoderModel.from_pretrained(ckpt, device=DEVICE, dtype=dtype)
    eager = ModelRunner(model, 160, 16, max_num_seqs=16, max_model_len=512, cuda_graphs=False)
    graphed = ModelRunner(model, 160, 16, max_num_seqs=16, max_model_len=512)
    chunks = decode_chunks(eager, n, blocks_each=10)
    decode_chunks(graphed, n, blocks_each=10)
    for _ in range(2):  # the first run captures, the second replays
        got = graphed.run(chunks, INVARIANT)
    assert graphed.graphs.replays == 2
    assert_bitwise_equal(got, eager.run(chunks, INVARIANT), f"graph (bucket of {n}) vs eager")
    real = slice(0, eager.cache.scratch)
    assert_bitwise_equal(graphed.cache.k[:, real], eager.cache.k[:, real], "K of request blocks")
    assert_bitwise_equal(graphed.cache.v[:, real], eager.cache.v[:, real], "V of request blocks")


def test_stock_decode_graphs_replay_the_eager_step_of_their_bucket(ckpt):
    model = DecoderModel.from_pretrained(ckpt, device=DEVICE, dtype="bfloat16")
    runner = ModelRunner(model, 160, 16, max_num_seqs=16, max_model_len=512)
    chunks = decode_chunks(runner, 5, blocks_each=10)
    graphed = runner.graphs.run(chunks, STOCK).clone()
    padded = runner.forward(runner.stage(chunks + [Chunk([], 0, [], want=0, pad_to=1)] * 3), STOCK)
    torch.testing.assert_close(graphed, padded[:5], atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("kernels", [STOCK, INVARIANT], ids=["stock", "invariant"])
def test_a_forward_never_syncs_with_the_host(ckpt, kernels):
    """Only reading the sampled tokens may sync: a forward (prefill and decode rows, over
    the paged cache) must not read anything back from the device."""
    model = DecoderModel.from_pretrained(ckpt, device=DEVICE, dtype="bfloat16")
    runner = ModelRunner(model, 160, 16, cuda_graphs=False)
    chunks = [*decode_chunks(runner, 4, blocks_each=10), Chunk(list(range(1, 40)), 0, list(range(40, 50)))]
    step = runner.stage(chunks)
    runner.forward(step, kernels)  # compiles kernels, sets up cuBLAS
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        runner.forward(step, kernels)
    finally:
        torch.cuda.set_sync_debug_mode(0)


def test_dvr_commits_the_batch_invariant_tokens_through_real_rollbacks(ckpt):
    """Output rows that differ by far less than a bf16 ulp of the logits make the vocabulary
    a field of near-ties: stock and invariant rounding pick different argmaxes, so rollbacks
    come from the GPU's own arithmetic (no fault seam), and the committed output still
    equals the all-invariant run."""
    prompts = [[1 + i] * (5 + 3 * i) for i in range(12)]
    params = [SamplingParams(max_tokens=32, temperature=0.0 if i % 2 else 0.8, seed=i, deterministic=True)
              for i in range(12)]  # fmt: skip

    def run(mode):
        eng = _engine(ckpt, "bfloat16", mode=mode, dvr_window=4, dvr_group_size=4)
        head = eng.model.lm_head
        head.copy_(head[:1] + 1e-3 * head)  # every logit = one shared value + a sub-ulp part
        return eng, [o.token_ids for o in eng.generate(prompts, params)]

    _, reference = run("batch_invariant")
    dvr, committed = run("dvr")
    assert committed == reference
    m = dvr.metrics()
    assert m.verify_passes > 0 and m.rollbacks > 0 and m.tokens_rolled_back >= m.rollbacks
    assert m.verify_s > 0 and m.graph_replays > m.verify_passes  # decode steps and verify passes
    assert (4, 4) in dvr.runner.graphs._static  # the verify shape ran from its graph


def test_nan_logits_fail_their_request_alone_on_cuda(ckpt):
    eng = _engine(ckpt, "bfloat16")
    eng.model.embed[10] = float("nan")
    prompts = [[1, 2, 3], [9, 10, 11], [4, 5, 6, 7]]
    outs = eng.generate(prompts, SamplingParams(max_tokens=6, temperature=0.0))
    assert [o.finish_reason for o in outs] == ["length", "error", "length"]
    assert "not finite" in outs[1].error
    again = eng.generate([[1, 2, 3]], SamplingParams(max_tokens=6, temperature=0.0))[0]
    assert again.token_ids == outs[0].token_ids  # the device is fine afterwards


def test_bad_indices_and_devices_are_typed_errors_not_device_faults(ckpt):
    model = DecoderModel.from_pretrained(ckpt, device=DEVICE, dtype="bfloat16")
    runner = ModelRunner(model, 16, 16)
    for chunk in (Chunk([1, 2], 0, [10**6]), Chunk([1, 5000], 0, [0]), Chunk([1] * 20, 0, [0])):
        with pytest.raises(InvalidArgumentError, match=r"chunks\[0\]"):
            runner.run([chunk], STOCK)
    step = runner.stage([Chunk([1, 2], 0, [0])])
    with pytest.raises(InvalidTypeError, match="input_ids"):
        model.forward_paged(step.input_ids.cpu(), step.positions, step.meta, runner.cache.k, runner.cache.v)
    with pytest.raises(InvalidTypeError, match="k_cache"):
        model.forward_paged(step.input_ids, step.positions, step.meta, runner.cache.k.float(), runner.cache.v)
    torch.cuda.synchronize()  # no device-side fault is pending
    assert runner.run([Chunk([1, 2], 0, [0])], STOCK).shape == (1, 1024)
