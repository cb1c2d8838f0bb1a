"""The engine's device code paths, run on CPU: device/dtype arguments, host-side checks and
staging of a step's inputs, the decode-graph buckets, padding and static buffers (with an
eager "capture"), capture failures, and requests that fail alone (NaN logits, a failing pass).
The same paths with real CUDA graphs: ``tests/test_gpu_engine.py``."""

import importlib.util
import json
import pathlib
import sys
import warnings
from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from _compare import assert_bitwise_equal
from _engine_steps import decode_chunks
from reasonserve.core import ImplementationUnavailableError, InvalidArgumentError, InvalidTypeError
from reasonserve.engine import DecoderModel, Engine, EngineConfig, SamplingParams, make_tiny_checkpoint
from reasonserve.engine.cuda_graphs import StepGraphs, bucket_for, decode_buckets, graph_shape, pad_to_shape
from reasonserve.engine.kernels import INVARIANT, STOCK
from reasonserve.engine.model_runner import ModelRunner
from reasonserve.engine.step_inputs import Chunk, Staging, pack


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("device"), max_position_embeddings=256)


@pytest.fixture(scope="module")
def model(ckpt):
    return DecoderModel.from_pretrained(ckpt)


def eager(fn):
    """A "capture" that runs the graph's function on its static buffers each replay."""
    return fn


# device and dtype ------------------------------------------------------------------------
def test_device_and_dtype_arguments_are_checked_and_named(ckpt):
    with pytest.raises(InvalidArgumentError, match="device"):
        DecoderModel.from_pretrained(ckpt, device="tpu")
    with pytest.raises(InvalidTypeError, match="device"):
        DecoderModel.from_pretrained(ckpt, device=3)
    if not torch.cuda.is_available():
        with pytest.raises(ImplementationUnavailableError, match="device='cuda'"):
            Engine.from_pretrained(ckpt, device="cuda")
    with pytest.raises(InvalidArgumentError, match="dtype"):
        DecoderModel.from_pretrained(ckpt, dtype="int8")
    with pytest.raises(InvalidTypeError, match="dtype"):
        DecoderModel.from_pretrained(ckpt, dtype=torch.float64)
    half = Engine.from_pretrained(ckpt, dtype="bf16")
    assert half.model.dtype == torch.bfloat16 and half.cache.k.dtype == torch.bfloat16
    assert DecoderModel.from_pretrained(ckpt).dtype == torch.float32  # auto on CPU
    out = half.generate([[1, 2, 3]], SamplingParams(max_tokens=3, temperature=0.0))[0]
    assert out.finish_reason == "length" and len(out.token_ids) == 3


def test_forward_paged_names_the_argument_with_a_wrong_device_dtype_or_shape(model):
    runner = ModelRunner(model, 16, 4)
    step = runner.stage([Chunk([1, 2, 3], 0, [0]), Chunk([4], 0, [1])])
    k, v = runner.cache.k, runner.cache.v
    cases = [
        (step._replace(input_ids=step.input_ids.float()), k, InvalidTypeError, "input_ids"),
        (step._replace(input_ids=step.input_ids.to("meta")), k, InvalidTypeError, "input_ids"),
        (step._replace(positions=step.positions[:2]), k, InvalidArgumentError, "positions"),
        (
            step._replace(meta=replace(step.meta, seq_lens=step.meta.seq_lens[:1])),
            k,
            InvalidArgumentError,
            "seq_lens",
        ),
        (step, k.double(), InvalidTypeError, "k_cache"),
        (step, k[:, :, :1], InvalidArgumentError, "k_cache"),
    ]
    for s, kc, error, name in cases:
        with pytest.raises(error, match=name):
            model.forward_paged(s.input_ids, s.positions, s.meta, kc, v, logit_rows=s.rows)


# the host side of a step -------------------------------------------------------------------
def test_pack_checks_every_index_on_the_host_and_names_the_chunk(model):
    runner = ModelRunner(model, 8, 4)
    before = runner.cache.k.clone()
    vocab = model.cfg.vocab_size
    bad = {
        "token id": Chunk([1, vocab], 0, [0]),
        "negative token": Chunk([-1], 0, [0]),
        "block past the cache": Chunk([1, 2], 0, [9]),
        "negative block": Chunk([1], 0, [-1]),
        "table too short": Chunk([1] * 5, 0, [0]),
        "position past the model": Chunk([1], 256, list(range(8)) * 9),
    }
    for what, chunk in bad.items():
        with pytest.raises(InvalidArgumentError, match=r"chunks\[1\]"):
            runner.run([Chunk([3], 0, [1]), chunk], STOCK)
        assert torch.equal(runner.cache.k, before), what  # nothing reached the device
    assert runner.run([Chunk([3], 0, [1]), Chunk([1, 2], 0, [2])]).shape == (2, vocab)


def test_staging_copies_the_packed_step_as_one_buffer_and_keeps_every_field():
    chunks = [Chunk([5, 6, 7], 2, [3, 1]), Chunk([], 0, [], want=0, pad_to=2), Chunk([9], 6, [0, 2], want=1)]
    host = pack(chunks, 4, 8, 100, 64)
    step = Staging(torch.device("cpu")).to_device(host)
    assert step.input_ids.tolist() == [5, 6, 7, 0, 0, 9]
    assert step.positions.tolist() == [2, 3, 4, 0, 1, 6]
    assert step.meta.slot_blocks.tolist() == [3, 3, 1, 8, 8, 2] and step.meta.slot_offsets.tolist() == [
        2,
        3,
        0,
        0,
        1,
        2,
    ]
    assert step.meta.block_tables.tolist() == [[3, 1], [8, 8], [0, 2]]
    assert step.meta.seq_lens.tolist() == [5, 2, 7] and step.meta.query_lens.tolist() == [3, 2, 1]
    assert step.rows.tolist() == [2, 5] and (step.meta.max_seq_len, step.meta.max_query_len) == (7, 3)
    assert {t.dtype for t in (step.input_ids, step.rows, step.meta.slot_blocks)} == {torch.int64}
    assert {t.dtype for t in (step.meta.block_tables, step.meta.seq_lens, step.meta.query_lens)} == {torch.int32}


# decode graphs: buckets, padding, static buffers ------------------------------------------
def test_buckets_are_powers_of_two_up_to_max_num_seqs():
    assert decode_buckets(1) == (1,)
    assert decode_buckets(32) == (1, 2, 4, 8, 16, 32)
    assert decode_buckets(48) == (1, 2, 4, 8, 16, 32, 48)
    fits = [bucket_for(n, decode_buckets(48)) for n in (1, 3, 8, 9, 33, 48, 49)]
    assert fits == [1, 4, 8, 16, 48, 48, None]


def test_a_pass_runs_from_a_graph_only_at_a_decode_or_verify_shape():
    buckets, one = decode_buckets(4), Chunk([4], 7, [0, 1])
    assert graph_shape([one] * 3, buckets, None) == (4, 1) and graph_shape([one] * 5, buckets, None) is None
    assert graph_shape([one, Chunk([4, 5], 7, [0, 1])], buckets, None) is None  # a prefill chunk
    assert graph_shape([one, Chunk([4], 7, [0, 1], want=0)], buckets, None) is None  # a prompt's last-but-one
    slot, dummy = Chunk([4, 5], 7, [0, 1], want=2, pad_to=3), Chunk([], 0, [], want=0, pad_to=3)
    assert graph_shape([slot, dummy], buckets, (2, 3)) == (2, 3)
    assert graph_shape([slot, dummy], buckets, None) is None and graph_shape([slot], buckets, (2, 3)) is None
    assert graph_shape([slot, Chunk([1], 0, [2], pad_to=2)], buckets, (2, 3)) is None
    assert pad_to_shape([one], (4, 1))[1:] == [Chunk([], 0, [], want=0, pad_to=1)] * 3


@pytest.mark.parametrize("n", [1, 3, 5, 8])
def test_a_padded_decode_step_from_static_buffers_gives_the_eager_bits(model, n):
    """Invariant kernels: the real rows of a step padded to its bucket equal the unpadded
    eager step bit for bit, and the padding writes only the scratch block."""

    def runners():
        eager_runner = ModelRunner(model, 64, 4)
        graph_runner = ModelRunner(model, 64, 4, max_num_seqs=8, max_model_len=64, capture=eager)
        return eager_runner, graph_runner

    plain, graphed = runners()
    chunks = decode_chunks(plain, n)
    decode_chunks(graphed, n)
    want = plain.run(chunks, INVARIANT)
    got = graphed.run(chunks, INVARIANT)
    assert graphed.graphs.replays == 1 and (bucket_for(n, graphed.graphs.buckets), 1) in graphed.graphs._static
    assert_bitwise_equal(got, want, f"decode of {n} padded to its bucket")
    real = slice(0, graphed.cache.scratch)
    assert_bitwise_equal(graphed.cache.k[:, real], plain.cache.k[:, real], "K of real blocks")
    assert_bitwise_equal(graphed.cache.v[:, real], plain.cache.v[:, real], "V of real blocks")


def test_a_smaller_step_in_a_bucket_pads_with_dummies_not_with_the_last_steps_rows(model):
    runner = ModelRunner(model, 64, 4, max_num_seqs=8, max_model_len=64, capture=eager)
    chunks = decode_chunks(runner, 7)
    runner.run(chunks, INVARIANT)
    runner.run(chunks[:5], INVARIANT)  # same bucket of 8
    static = runner.graphs._static[(8, 1)]
    assert static.ids[5:].tolist() == [0, 0, 0] and static.blocks[5:].tolist() == [runner.cache.scratch] * 3
    assert static.seq_lens[5:].tolist() == [1, 1, 1]


def test_capturing_a_second_kernel_set_writes_no_request_block(model):
    """A capture runs the forward on dummy rows: a bucket's static buffers still holding
    the last step's rows must not reach a request's blocks (probes decode on INVARIANT
    while DVR decodes on STOCK at the same bucket)."""
    captured = []

    def run_once_at_capture(fn):
        captured.append(fn())
        return fn

    runner = ModelRunner(model, 64, 4, max_num_seqs=4, max_model_len=64, capture=run_once_at_capture)
    chunks = decode_chunks(runner, 3)
    runner.run(chunks, STOCK)
    k, v = runner.cache.k.clone(), runner.cache.v.clone()
    assert runner.graphs.run(chunks[:1] * 3, INVARIANT) is not None  # captures INVARIANT at bucket 4
    real = slice(0, runner.cache.scratch)
    # The replay itself rewrote chunk 0's slot with invariant K/V; every other request slot is untouched.
    slot = chunks[0].table[chunks[0].start // 4], chunks[0].start % 4
    for name, before, after in (("K", k, runner.cache.k), ("V", v, runner.cache.v)):
        before, after = before[:, real].clone(), after[:, real].clone()
        before[:, slot[0], :, slot[1]] = after[:, slot[0], :, slot[1]] = 0
        assert_bitwise_equal(after, before, f"{name} of request blocks after a capture")
    assert len(captured) == 2


def test_steps_that_are_not_plain_decodes_run_eagerly(model):
    runner = ModelRunner(model, 64, 4, max_num_seqs=4, max_model_len=64, capture=eager)
    chunks = decode_chunks(runner, 3)
    assert runner.graphs.run([Chunk([1, 2], 0, [40])], INVARIANT) is None  # a prefill chunk
    assert runner.graphs.run(chunks + chunks[:2], INVARIANT) is None  # more than max_num_seqs
    assert runner.graphs.replays == 0


def test_a_failed_capture_warns_once_and_every_request_finishes_with_the_eager_tokens(ckpt):
    def out_of_memory(fn):
        raise torch.OutOfMemoryError("CUDA out of memory (simulated at capture)")

    config = EngineConfig(block_size=4, num_blocks=64, max_num_seqs=4, mode="batch_invariant")
    prompts = [[1, 2, 3], [4, 5], [6] * 9, [7, 8]]
    params = SamplingParams(max_tokens=6, temperature=0.8, seed=5)
    reference = [o.token_ids for o in Engine.from_pretrained(ckpt, config).generate(prompts, params)]
    eng = Engine.from_pretrained(ckpt, config)
    g = eng.runner.graphs = _graphs_with(eng.runner, out_of_memory)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = eng.generate(prompts, params)
    assert [o.token_ids for o in outs] == reference and all(o.finish_reason == "length" for o in outs)
    assert [str(w.message).count("OutOfMemoryError") for w in caught] == [1]
    assert not g.enabled and eng.metrics().graph_replays == 0


def test_engine_decodes_through_static_buffers_with_the_same_tokens(ckpt):
    config = EngineConfig(block_size=4, num_blocks=64, max_num_seqs=4, mode="batch_invariant")
    prompts = [[1, 2, 3], [4, 5], [6] * 9, [7, 8], [9]]
    params = SamplingParams(max_tokens=5, temperature=0.0)
    reference = [o.token_ids for o in Engine.from_pretrained(ckpt, config).generate(prompts, params)]
    eng = Engine.from_pretrained(ckpt, config)
    eng.runner.graphs = _graphs_with(eng.runner, eager)
    assert [o.token_ids for o in eng.generate(prompts, params)] == reference
    assert eng.metrics().graph_replays > 0


def test_dvr_verifies_through_static_buffers_and_commits_the_invariant_tokens(ckpt):
    """Verify passes at their one shape run from the graphs' static buffers; with a fast
    path that flips tokens, the committed output is still the all-invariant output."""
    prompts = [[1, 2, 3], [4, 5], [6] * 9, [7, 8], [9]]
    params = [SamplingParams(max_tokens=7, temperature=0.0 if i % 2 else 0.9, seed=i, deterministic=True)
              for i in range(5)]  # fmt: skip
    reference = Engine.from_pretrained(ckpt, EngineConfig(block_size=4, num_blocks=64, mode="batch_invariant"))
    want = [o.token_ids for o in reference.generate(prompts, params)]
    config = EngineConfig(block_size=4, num_blocks=64, max_num_seqs=4, dvr_window=3, dvr_group_size=2)
    eng = Engine.from_pretrained(ckpt, config, fast_path_fault=lambda _r, pos, tok: (tok + 1) % 256 if pos % 4 else tok)
    eng.runner.graphs = _graphs_with(eng.runner, eager, verify=(2, 3))
    assert [o.token_ids for o in eng.generate(prompts, params)] == want
    m = eng.metrics()
    assert m.rollbacks > 0 and (2, 3) in eng.runner.graphs._static and m.graph_replays > m.verify_passes > 0


def _graphs_with(runner, capture, verify=None):
    return StepGraphs(runner.forward, runner.stage, max_num_seqs=4, max_model_len=64, block_size=runner.block_size,
                      scratch=runner.cache.scratch, device=runner.model.device, capture=capture, verify=verify)  # fmt: skip


# kernels ------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_add_rms_norm_returns_the_sum_and_its_norm(dtype):
    g = torch.Generator().manual_seed(0)
    h, d = (torch.randn(7, 64, generator=g).to(dtype) for _ in range(2))
    w = (1 + 0.1 * torch.randn(64, generator=g)).to(dtype)
    total, normed = INVARIANT.add_rms_norm(h, d, w, 1e-6)
    assert_bitwise_equal(total, h + d, "residual")
    assert_bitwise_equal(normed, INVARIANT.rms_norm(h + d, w, 1e-6), "invariant norm")
    s_total, s_normed = STOCK.add_rms_norm(h, d, w, 1e-6)
    assert_bitwise_equal(s_total, h + d, "stock residual")
    torch.testing.assert_close(s_normed, normed, atol=1e-5 if dtype == torch.float32 else 2e-2, rtol=1e-5)


# requests that fail alone ---------------------------------------------------------------------
def test_nan_logits_fail_their_request_alone(ckpt):
    config = EngineConfig(block_size=4, num_blocks=64)
    prompts = [[1, 2, 3], [9, 10, 11, 12], [4, 5]]
    params = [SamplingParams(max_tokens=5, temperature=0.0), SamplingParams(max_tokens=5, temperature=0.9, seed=3),
              SamplingParams(max_tokens=5, temperature=0.0, deterministic=True)]  # fmt: skip
    reference = Engine.from_pretrained(ckpt, config).generate(
        [prompts[0], prompts[2]], [params[0], params[2]]
    )
    eng = Engine.from_pretrained(ckpt, config)
    eng.model.embed[10] = float("nan")  # token 10 poisons its own sequence only
    outs = eng.generate(prompts, params)
    assert outs[1].finish_reason == "error" and "not finite" in outs[1].error
    assert "InvalidArgumentError" in outs[1].error
    assert [outs[0].token_ids, outs[2].token_ids] == [o.token_ids for o in reference]
    eng.check_blocks()
    assert eng.blocks.num_free == 64


def test_a_pass_that_fails_is_retried_request_by_request(ckpt):
    eng = Engine.from_pretrained(ckpt, EngineConfig(block_size=4, num_blocks=64))
    forward = eng.runner.forward

    def fails_on_token_99(step, kernels):
        if bool((step.input_ids == 99).any()):
            raise RuntimeError("the device failed this pass")
        return forward(step, kernels)

    eng.runner.forward = fails_on_token_99
    params = SamplingParams(max_tokens=4, temperature=0.0)
    outs = eng.generate([[1, 2], [99, 3], [5, 6, 7]], params)
    assert [o.finish_reason for o in outs] == ["length", "error", "length"]
    assert "the device failed this pass" in outs[1].error
    eng.runner.forward = forward
    reference = Engine.from_pretrained(ckpt, EngineConfig(block_size=4, num_blocks=64))
    assert [o.token_ids for o in (outs[0], outs[2])] == [
        o.token_ids for o in reference.generate([[1, 2], [5, 6, 7]], params)
    ]


def test_dvr_reports_verify_cost(ckpt):
    eng = Engine.from_pretrained(
        ckpt, EngineConfig(block_size=4, num_blocks=64, dvr_window=2, dvr_group_size=2)
    )
    eng.generate([[1, 2, 3], [4, 5]], SamplingParams(max_tokens=6, temperature=0.0, deterministic=True))
    m = eng.metrics()
    assert m.verify_passes > 0 and m.verify_tokens == m.verify_passes * 2 * 2 and m.verify_s > 0
    assert m.graph_replays == 0  # CPU: no graphs


# the GPU benchmark, end to end on tiny shapes ----------------------------------------------------
def _gpu_benchmark(monkeypatch):
    pytest.importorskip("transformers", reason="the benchmark compares with transformers (dev extra)")
    path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"
    spec = importlib.util.spec_from_file_location("gpu_benchmark", path)
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, bench)  # its dataclasses look their module up
    monkeypatch.syspath_prepend(str(path.parent))
    spec.loader.exec_module(bench)
    return bench


def test_gpu_benchmark_smoke_runs_every_section_on_cpu(tmp_path, capsys, monkeypatch):
    bench = _gpu_benchmark(monkeypatch)
    out = tmp_path / "gpu.json"
    assert bench.main(["--smoke", "--json", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["complete"] is True
    rows = written["rows"]
    sections = {r["section"].split(" (")[0].split(" at ")[0] for r in rows}
    assert sections == {"engine vs generate", "DVR", "decode step", "invariant ops vs stock"}
    assert all(r["case"] != "ERROR" and r["ours"] > 0 and r["baseline"] > 0 for r in rows)
    sweep = {r["case"]: r for r in rows if r["section"].startswith("DVR")}
    assert set(sweep) == {"dvr 0% det", "dvr 10% det", "dvr 50% det", "dvr 100% det", "batch_invariant"}
    assert (
        "0 verify passes" in sweep["dvr 0% det"]["note"]
        and "0 verify passes" not in sweep["dvr 100% det"]["note"]
    )
    assert "engine vs generate (7B)" in capsys.readouterr().out


def test_gpu_benchmark_killed_midway_keeps_the_finished_sections(tmp_path, capsys, monkeypatch):
    """scripts/gpu_check.sh kills the benchmark at its timeout: the sections that finished
    must already be in the JSON and in the log."""
    bench = _gpu_benchmark(monkeypatch)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # what a timeout's signal does mid-section (not an Exception)

    engines = []
    real_engine_for = bench.engine_for

    def engine_for(*args):
        engines.append(real_engine_for(*args))
        return engines[-1]

    monkeypatch.setattr(bench, "decode_step", killed)
    monkeypatch.setattr(bench, "engine_for", engine_for)
    out = tmp_path / "gpu.json"
    with pytest.raises(KeyboardInterrupt):
        bench.main(["--smoke", "--skip", "7b", "ops", "--no-cuda-graphs", "--json", str(out)])
    assert engines and not any(e.config.cuda_graphs for e in engines)  # the eager lever reaches them
    written = json.loads(out.read_text())
    assert written["complete"] is False and written["meta"]["smoke"] is True
    sections = [r["section"] for r in written["rows"]]
    assert sections[0] == "engine vs generate (0.5B)" and sections[-1].startswith("DVR at batch")
    assert len(sections) == 6 and all(r["ours"] > 0 for r in written["rows"])
    log = capsys.readouterr().out
    assert "dvr 100% det" in log and "batch_invariant" in log  # each section printed as it ended


def _read_rows(chunks, bs, scratch, max_positions):
    """Row by row: token (0 for dummies), position, block (scratch for dummies), offset,
    and the logit rows (each chunk's last ``want`` real rows)."""
    ids, positions, blocks, offsets, rows = [], [], [], [], []
    for c in chunks:
        rows += [len(ids) + j for j in range(len(c.tokens)) if j >= len(c.tokens) - c.want]
        for j in range(max(len(c.tokens), c.pad_to)):
            p, real = c.start + j, j < len(c.tokens)
            ids.append(c.tokens[j] if real else 0)
            positions.append(min(p, max_positions - 1))
            blocks.append(c.table[p // bs] if real else scratch)
            offsets.append(p % bs)
    return ids, positions, blocks, offsets, rows


def _check_pack(specs):
    bs, scratch, vocab = 4, 200, 100
    chunks = []
    for i, (real, pad_to, start, want) in enumerate(specs):
        table = list(range(i * 10, i * 10 + -(-(start + max(real, pad_to)) // bs)))
        chunks.append(Chunk([(7 * i + j) % vocab for j in range(real)], start, table, want, pad_to))
    host = pack(chunks, bs, scratch, vocab, 64)
    got = [t.tolist() for t in (host.ids, host.positions, host.slot_blocks, host.slot_offsets, host.rows)]
    assert got == list(_read_rows(chunks, bs, scratch, 64))
    assert host.seq_lens.tolist() == [c.start + max(len(c.tokens), c.pad_to) for c in chunks]
    assert host.query_lens.tolist() == [max(len(c.tokens), c.pad_to) for c in chunks]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 12), st.integers(0, 30), st.integers(0, 10)),
                min_size=1, max_size=6))  # fmt: skip
def test_pack_matches_a_row_by_row_reading_of_the_chunks(specs):
    _check_pack(specs)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.just(1), st.integers(0, 1), st.integers(0, 40), st.integers(0, 1)), min_size=1, max_size=9))
def test_pack_of_one_row_chunks_matches_the_row_by_row_reading(specs):
    """Decode steps (one real row per chunk) take their own path through pack."""
    _check_pack(specs)


def test_cli_device_flags_are_checked_before_any_work(ckpt, capsys):
    from reasonserve.cli import main

    serve = ["serve", "--model", str(ckpt), "--replicas", "2", "--device", "cuda"]
    assert main(serve) == 2 and "--device/--dtype place one engine" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(["demo", "--device", "cuda", "--dtype", "bfloat16"]) == 2
        assert "no usable CUDA device" in capsys.readouterr().err
