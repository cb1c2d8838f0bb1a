"""Seeded positions under SGLang's overlap loop, on SGLang's own ``Req``.

SGLang's default event loop runs step t (``get_next_batch_to_run`` ->
``prepare_for_decode``, then ``run_batch``: the forward and the sampler, where custom
logit processors run) *before* it processes step t-1's result (which appends that
token to ``req.output_ids``). The processor must therefore not count
``req.output_ids``; it reads ``req.full_untruncated_fill_ids`` (set by the request's
own ``init_next_round_input`` at each prefill) plus ``req.decode_batch_idx`` (advanced
by ``prepare_for_decode`` before each decode forward). Here SGLang's own ``Req`` goes
through both loop orders, with SGLang's own ``ScheduleBatch.prepare_for_decode``
advancing it (only the KV-slot allocation is replaced), and every step's draw must be
the same, at the position the embedded engine would use.

SGLang's scheduler module is imported through ``_sglang_scheduler`` (see there).
"""

from array import array

import pytest

pytest.importorskip("sglang", reason="SGLang is not installed here (make test-adapters builds .venv-sglang)")

import torch
from _sglang_scheduler import decode_batch, schedule_batch
from sglang.srt.sampling.sampling_params import SamplingParams

from reasonserve import ops
from reasonserve.adapters.sglang import SeededSamplingProcessor

Req = schedule_batch().Req
VOCAB, PROMPT, STEPS, SEED = 300, [11, 12, 13, 14, 15], 6, 1234


def _new_req(rid: str) -> Req:
    params = SamplingParams(temperature=0.9, max_new_tokens=STEPS + 1, custom_params={"reasonserve_seed": SEED})
    params.normalize(None)
    req = Req(rid, "", array("q", PROMPT), params, custom_logit_processor=SeededSamplingProcessor.to_str())
    req.init_next_round_input()  # the prefill round: fill ids = prompt + output so far
    return req


def _logits(step: int) -> torch.Tensor:
    return torch.randn(1, VOCAB, generator=torch.Generator().manual_seed(step)) * 2


def _draw(req: Req, step: int) -> int:
    """The forward's sampler: SGLang hands the processor its row and custom params."""
    out = SeededSamplingProcessor()(_logits(step), [req.sampling_params.custom_params])
    return int(torch.isfinite(out[0]).nonzero().flatten()[0])


@pytest.fixture
def prepare(monkeypatch, tmp_path):
    """``prepare(req)``: SGLang's ``ScheduleBatch.prepare_for_decode`` for a batch of it."""
    module = schedule_batch()
    monkeypatch.setattr(module, "alloc_for_decode", lambda batch, token_per_req: torch.zeros(len(batch.reqs)))
    (tmp_path / "config.json").write_text(
        '{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, '
        '"intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128, '
        '"max_position_embeddings": 512, "rms_norm_eps": 1e-5, "torch_dtype": "float32"}'
    )

    def run(req):
        decode_batch(module, [req], tmp_path).prepare_for_decode()

    return run


def _run(overlap: bool, prepare) -> list[int]:
    req = _new_req("overlap" if overlap else "plain")
    pending: list[int] = []
    tokens = [_draw(req, 0)]  # the prefill forward samples the first token
    req.output_ids.append(tokens[0])
    for step in range(1, STEPS + 1):
        prepare(req)  # SGLang's prepare_for_decode, before the forward
        token = _draw(req, step)
        if overlap:  # the previous step's result is processed only now
            req.output_ids.extend(pending)
            pending = [token]
        else:
            req.output_ids.append(token)
        tokens.append(token)
    return tokens


def test_overlapped_and_plain_loops_draw_the_engines_tokens(prepare):
    plain, overlapped = _run(False, prepare), _run(True, prepare)
    assert overlapped == plain
    want = [int(ops.sample(_logits(step), seeds=SEED, positions=len(PROMPT) + step, temperature=0.9)[0])
            for step in range(STEPS + 1)]  # fmt: skip
    assert plain == want


def test_prompt_plus_output_lags_under_overlap(prepare):
    """Why the processor does not read req.output_ids: under overlap it is one short."""
    req = _new_req("lag")
    req.output_ids.append(_draw(req, 0))
    prepare(req)
    _draw(req, 1)  # step 1 runs; step 0's token is already appended, step 1's is not
    prepare(req)
    assert len(req.origin_input_ids) + len(req.output_ids) == len(PROMPT) + 1  # what the old code read
    assert len(req.full_untruncated_fill_ids) + req.decode_batch_idx == len(PROMPT) + 2  # the truth
