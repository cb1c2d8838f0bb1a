"""Serving traces replayed as simulator workloads (``reasonserve.sim.workloads.replayed``):
recorded arrival order and burstiness kept at a scaled rate, Mooncake prefix blocks turned
into shared prefix hashes, reasoning split drawn from ServeGen, malformed rows named; and
ServeGen's production arrival process (``reasonserve.sim.workloads.servegen``).
Small fake trace files; one test reads the real recordings when ``../shared/data`` is there."""

from __future__ import annotations

import itertools
import json
import pathlib
import statistics

import pytest

from reasonserve.cli import main
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.sim.workloads.replayed import TRACE_SOURCES, load_trace, trace_workload
from reasonserve.sim.workloads.requests import LengthTable, poisson_workload
from reasonserve.sim.workloads.servegen import retimed, servegen_arrival_times
from test_sim import _write_fake_traces

DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data"


def _write_serving_traces(root: pathlib.Path) -> None:
    _write_fake_traces(root)  # ServeGen (reason ratio 0.6) and Qwen3 texts
    st = root / "serving_traces"
    (st / "azure_llm_2023").mkdir()
    azure = ["TIMESTAMP,ContextTokens,GeneratedTokens", "2023-11-16 18:15:46.0000000,100,10",
             "2023-11-16 18:15:46.5000000,200,20", "2023-11-16 18:15:50.0000000,300,0",
             "2023-11-16 18:15:56.0000000,400,40"]  # fmt: skip
    (st / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv").write_text("\n".join(azure) + "\n")
    (st / "mooncake_fast25").mkdir()
    rows = [{"timestamp": 0, "input_length": 1100, "output_length": 10, "hash_ids": [0, 1, 2]},
            {"timestamp": 1000, "input_length": 700, "output_length": 5, "hash_ids": [0, 3]},
            {"timestamp": 3000, "input_length": 600, "output_length": 8, "hash_ids": [4, 5]}]  # fmt: skip
    (st / "mooncake_fast25" / "conversation_trace.jsonl").write_text("\n".join(map(json.dumps, rows)))
    (st / "sharegpt_lengths").mkdir()
    (st / "sharegpt_lengths" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv").write_text(
        "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n74,918,992,0.08\n290,905,1195,0.32\n"
    )


def test_azure_arrivals_keep_the_recorded_gaps_scaled_to_the_rate(tmp_path):
    _write_serving_traces(tmp_path)
    skipped: dict[str, int] = {}
    reqs = trace_workload("azure-conv", tmp_path, 0.3, 10, seed=0, skipped=skipped)
    # the 0-token output row and the 7 requests the 4-row trace cannot give, counted
    assert skipped == {"rows without prompt or output": 1, "requests asked for past the trace's end": 7}
    assert [r.prompt_tokens for r in reqs] == [100, 200, 400]
    skipped.clear()  # only the rows read up to the last one used count
    assert len(trace_workload("azure-conv", tmp_path, 0.3, 2, seed=0, skipped=skipped)) == 2
    assert skipped == {"rows without prompt or output": 0}
    # recorded at 0, 0.5, 10 s: 2 gaps over 10 s; at 0.3 req/s the mean gap is 1/0.3 s, so
    # the span becomes 2/0.3 s and every gap is scaled by 2/3
    assert [r.arrival_s for r in reqs] == pytest.approx([0.0, 0.5 * 2 / 3, 10 * 2 / 3])
    # ServeGen ratio 0.6 in the fake data: reasoning = round(0.6 * output), the rest answer
    assert [(r.reasoning_tokens, r.answer_tokens) for r in reqs] == [(6, 4), (12, 8), (24, 16)]
    plain = trace_workload("azure-conv", tmp_path, 0.3, 10, seed=0, reason_split="none")
    assert all(r.reasoning_tokens == 0 and r.answer_tokens > 0 for r in plain)


def test_mooncake_blocks_become_shared_prefix_hashes(tmp_path):
    _write_serving_traces(tmp_path)
    a, b, c = trace_workload("mooncake-conversation", tmp_path, 1.0, 3, seed=0, block_size=16)
    assert len(a.prefix_hashes) == 1100 // 16 and len(b.prefix_hashes) == 700 // 16
    # a and b share trace block 0 (tokens 0-511 = 32 blocks of 16) and nothing after it
    assert a.prefix_hashes[:32] == b.prefix_hashes[:32]
    assert a.prefix_hashes[32] != b.prefix_hashes[32]
    assert not set(c.prefix_hashes) & set(a.prefix_hashes)
    assert [r.arrival_s for r in (a, b, c)] == pytest.approx([0.0, 2 / 3, 2.0])  # 3 s span, 2 gaps


def test_sharegpt_has_no_times_and_needs_poisson(tmp_path):
    _write_serving_traces(tmp_path)
    with pytest.raises(InvalidArgumentError, match="poisson"):
        trace_workload("sharegpt", tmp_path, 1.0, 2, seed=0)
    a = trace_workload("sharegpt", tmp_path, 1.0, 2, seed=5, arrivals="poisson")
    assert a == trace_workload("sharegpt", tmp_path, 1.0, 2, seed=5, arrivals="poisson")
    assert [r.prompt_tokens for r in a] == [74, 290] and 0 < a[0].arrival_s < a[1].arrival_s


@pytest.mark.parametrize(
    ("name", "line", "where"),
    [
        ("azure_llm_2023/AzureLLMInferenceTrace_conv.csv", "yesterday,1,1", ":2"),
        ("azure_llm_2023/AzureLLMInferenceTrace_conv.csv", "2023-11-16 18:15:46.0,1.5,1", ":2"),
        ("mooncake_fast25/conversation_trace.jsonl", '{"timestamp": "x", "input_length": 1}', ":1"),
        ("mooncake_fast25/conversation_trace.jsonl", '{"timestamp": 0, "input_length": -4, "output_length": 1}',
         ":1"),
    ],
)  # fmt: skip
def test_malformed_rows_are_typed_errors_naming_file_and_line(tmp_path, name, line, where):
    _write_serving_traces(tmp_path)
    path = tmp_path / "serving_traces" / name
    header = "TIMESTAMP,ContextTokens,GeneratedTokens\n" if name.endswith(".csv") else ""
    path.write_text(header + line + "\n")
    source = "azure-conv" if "azure" in name else "mooncake-conversation"
    with pytest.raises(InvalidArgumentError, match=f"{path.name}{where}"):
        load_trace(source, tmp_path)


_AZ, _MC = "azure_llm_2023/AzureLLMInferenceTrace_conv.csv", "mooncake_fast25/conversation_trace.jsonl"
_SG = "sharegpt_lengths/sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
_H = b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.0,1,1\n"
_ROW = b'{"timestamp": 0, "input_length": 1, "output_length": 1'


@pytest.mark.parametrize(
    ("name", "data", "where"),
    [
        (_AZ, _H + b"2023-11-16 18:15:47.0,1e400,1\n", ":3: not a token count"),  # was an OverflowError
        (_AZ, _H + b"2023-11-16 18:15:47.0,1,inf\n", ":3: not a token count"),
        (_AZ, _H + b"2023-11-16 18:15:47.0,1,1," + b"x" * 200_000 + b"\n", ":3: field larger"),  # csv.Error
        (_AZ, _H + b"2023-11-16 18:15:47.0,1\xff,1\n", ":3: not UTF-8"),  # was a UnicodeDecodeError
        (_AZ, _H + b"2023-11-16 18:15:47.0," + b"1" * (1 << 24) + b"\n", ":3: line longer"),
        (_SG, b"num_prefill_tokens,num_decode_tokens\n1,1\n1,inf\n", ":3: not a token count"),
        (_MC, _ROW + b"}\n" + b'{"timestamp": NaN, "input_length": 1, "output_length": 1}\n', ":2: timestamp"),
        (_MC, b'{"timestamp": 1e308, "input_length": 1, "output_length": 1}\n', ":1: timestamp"),
        (_MC, b'{"timestamp": true, "input_length": 1, "output_length": 1}\n', ":1: not a Mooncake"),
        (_MC, _ROW + b', "hash_ids": [Infinity]}\n', ":1: not a Mooncake"),  # was an OverflowError
        (_MC, _ROW + b', "hash_ids": "123"}\n', ":1: not a Mooncake"),  # was read as ids 1, 2, 3
        (_MC, _ROW + b', "hash_ids": [1.5]}\n', ":1: not a Mooncake"),  # was truncated to 1
        (_MC, b"[" * 100_000 + b"\n", ":1: not a Mooncake"),  # was a RecursionError
        (_MC, _ROW + b"}\n" + _ROW + b"\xff}\n", ":2: not UTF-8"),
        (_MC, _ROW + b"}\n\n", ":2: not a Mooncake"),
    ],
)  # fmt: skip
def test_hostile_trace_files_are_typed_errors_naming_file_and_line(tmp_path, name, data, where):
    _write_serving_traces(tmp_path)
    path = tmp_path / "serving_traces" / name
    path.write_bytes(data)
    source = {_AZ: "azure-conv", _MC: "mooncake-conversation", _SG: "sharegpt"}[name]
    with pytest.raises(InvalidArgumentError, match=f"{path.name}{where}"):
        load_trace(source, tmp_path)


def test_a_byte_order_mark_is_dropped_and_an_empty_trace_is_named(tmp_path):
    _write_serving_traces(tmp_path)
    folder = tmp_path / "serving_traces"
    (folder / _AZ).write_bytes(b"\xef\xbb\xbf" + _H)
    (folder / _MC).write_bytes(b"\xef\xbb\xbf" + _ROW + b"}\n")
    assert len(load_trace("azure-conv", tmp_path)) == len(load_trace("mooncake-conversation", tmp_path)) == 1
    (folder / _AZ).write_bytes(b"")
    with pytest.raises(InvalidArgumentError, match="no usable rows in azure_llm_2023"):
        trace_workload("azure-conv", tmp_path, 1.0, 2, seed=0)


def test_bad_arguments(tmp_path):
    _write_serving_traces(tmp_path)
    for kwargs, match in (({"arrivals": "uniform"}, "arrivals"), ({"reason_split": "half"}, "reason_split")):
        with pytest.raises(InvalidArgumentError, match=match):
            trace_workload("azure-conv", tmp_path, 1.0, 2, seed=0, **kwargs)
    with pytest.raises(InvalidArgumentError, match="rate_per_s"):
        trace_workload("azure-conv", tmp_path, float("nan"), 2, seed=0)
    with pytest.raises(InvalidArgumentError, match="trace source"):
        load_trace("alpaca", tmp_path)
    with pytest.raises(InvalidArgumentError, match="data_dir"):
        load_trace("azure-code", tmp_path)  # not written


def test_cli_replays_a_trace_and_plots(tmp_path, capsys):
    _write_serving_traces(tmp_path)
    out, png = tmp_path / "sim.json", tmp_path / "sim.png"
    argv = ["sim", "--data", str(tmp_path), "--lengths", "mooncake-conversation", "--requests", "3",
            "--rate", "1", "--instances", "2", "--model", "qwen2.5-7b", "--policy", "lpm",
            "--out", str(out), "--png", str(png)]  # fmt: skip
    assert main(argv) == 0
    summary = json.loads(out.read_text())
    assert summary["num_requests"] == 3 and "mooncake-conversation trace, trace arrivals" in summary["lengths"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main([*argv[:4], "qwen3", "--arrivals", "trace"]) == 2
    assert "arrival times" in capsys.readouterr().err


@pytest.mark.skipif(not (DATA / "serving_traces").is_dir(), reason="needs ../shared/data")
def test_the_recorded_traces_load():
    for source in TRACE_SOURCES:
        rows = load_trace(source, DATA)
        assert len(rows) > 3000 and all(r.prompt_tokens >= 0 for r in rows)
        arrivals = "poisson" if source == "sharegpt" else "trace"
        reqs = trace_workload(source, DATA, 2.0, 500, seed=0, arrivals=arrivals)
        assert len(reqs) == 500 and all(b.arrival_s >= a.arrival_s for a, b in itertools.pairwise(reqs))
        assert 500 / reqs[-1].arrival_s == pytest.approx(2.0, rel=0.25)
    times = servegen_arrival_times(DATA, 2000, 4.0, seed=0)
    assert len(times) == 2000 and 1999 / times[-1] == pytest.approx(4.0)


def _write_rate_trace(root: pathlib.Path, rows: list[str]) -> None:
    folder = root / "serving_traces" / "servegen_deepseek_r1"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "chunk-0-trace.csv").write_bytes(("\n".join(rows) + "\n").encode(errors="surrogateescape"))


def test_servegen_arrivals_follow_the_windows_law_at_the_asked_rate(tmp_path):
    # one bursty window (Gamma shape 0.1: cv ~ 3.2), an idle one, a regular one (shape 50: cv ~ 0.14)
    _write_rate_trace(tmp_path, ["0,1,3.2,Gamma,0.1,10", "600,0,0,,0,0", "1200,1,0.14,Gamma,50,0.02"])
    times = servegen_arrival_times(tmp_path, 3000, 2.0, seed=1)
    assert times == sorted(times) and times[0] == 0.0
    assert (len(times) - 1) / times[-1] == pytest.approx(2.0)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    cv = statistics.pstdev(gaps) / statistics.fmean(gaps)
    assert cv > 1.5  # the bursty window dominates the gaps: far from Poisson's 1
    assert times == servegen_arrival_times(tmp_path, 3000, 2.0, seed=1)
    assert times != servegen_arrival_times(tmp_path, 3000, 2.0, seed=2)


def test_retimed_keeps_program_samples_together(tmp_path):
    _write_rate_trace(tmp_path, ["0,1,1,Weibull,1.0,1.0"])
    table = LengthTable(((10, 5, 5),), "fixture")
    reqs = poisson_workload(table, 1.0, 12, seed=0, programs_of=4)
    out = retimed(reqs, tmp_path, 0.5, seed=0)
    assert [r.request_id for r in out] == [r.request_id for r in reqs]
    assert len({r.arrival_s for r in out[:4]}) == 1 and len({r.arrival_s for r in out}) == 3
    assert out[4].arrival_s > out[0].arrival_s


@pytest.mark.parametrize(
    ("rows", "match"),
    [
        (["0,1,1,Gamma,0.5"], "6 fields"),
        (["0,1,1,Pareto,1,1"], "unknown inter-arrival law"),
        (["0,1,1,Gamma,nan,1"], "finite number > 0"),
        (["x,1,1,Gamma,1,1"], "not a number"),
        (["0,0,0,,0,0"], "no window with traffic"),
        (["0,1,1,Gamma,1,1e6"], "chunk-0-trace.csv: the laws put no arrival inside"),  # every gap > window
        (["0,1,1,Weibull,1e-300,1"], "no arrival inside"),  # was an OverflowError from weibullvariate
        (["0,1,1,Gamma,1e308,1"], "chunk-0-trace.csv:1: shape above"),  # gammavariate looped forever
        (["0,1,1,Gamma,1,1", "0,1,1,Gamma,1,1," + "x" * 200_000], "chunk-0-trace.csv:2: field larger"),
        (["0,1,1,Gamma,1,1", "0,1,1,Gamma,1,\udcff"], "chunk-0-trace.csv:2: not UTF-8"),
    ],
)
def test_bad_rate_traces_are_typed_errors(tmp_path, rows, match):
    _write_rate_trace(tmp_path, rows)
    with pytest.raises(InvalidArgumentError, match=match):
        servegen_arrival_times(tmp_path, 10, 1.0, seed=0)


def test_cli_servegen_arrivals(tmp_path):
    _write_serving_traces(tmp_path)
    _write_rate_trace(tmp_path, ["0,1,1,Gamma,0.5,2", "600,1,1,Gamma,1,1"])
    out = tmp_path / "sim.json"
    assert main(["sim", "--data", str(tmp_path), "--requests", "30", "--rate", "2", "--instances", "2",
                 "--model", "qwen2.5-7b", "--arrivals", "servegen", "--out", str(out)]) == 0  # fmt: skip
    summary = json.loads(out.read_text())
    assert summary["num_requests"] == 30 and "ServeGen chunk-0 arrivals" in summary["lengths"]
