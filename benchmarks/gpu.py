"""The engine on one GPU: against ``transformers`` ``generate``, DVR's cost, the invariant kernels.

Usage: ``python benchmarks/gpu.py [--device cuda] [--dtype bfloat16] [--repeats 3] [--skip 7b ops]
[--no-cuda-graphs] [--json PATH]``; ``--smoke`` runs the same code on tiny shapes (CPU,
seconds: what ``tests/test_engine_device.py`` runs). Needs torch, Triton, transformers and
this package; no network. Finishes in about 5 minutes on one H100 (``--budget-s`` stops
starting new sections past that many seconds; the table says what was skipped). The JSON
is rewritten after every section (``"complete": false`` until the end), so a run killed
midway keeps what finished; ``scripts/gpu_check.sh`` runs it as its ``bench`` stage.

Random models are built with transformers' own classes, shaped like Qwen2-0.5B (vocab
151936, hidden 896, 24 layers, 14/2 heads, intermediate 4864, tied embeddings) and
Qwen2-7B (vocab 152064, hidden 3584, 28 layers, 28/4 heads, intermediate 18944);
rope_theta is left at 10000 (the default of both loaders). The 0.5B model reaches the
engine through a ``save_pretrained`` folder, the 7B one from the transformers model's
tensors (the same weights, no 15 GB round trip through the disk). Each
request: 128 random prompt tokens, 128 greedy new tokens (``ignore_eos``/``min_new_tokens``).
In one process, alternated, medians of ``--repeats`` runs after a warm-up (which also
captures the engine's CUDA graphs); each run draws fresh prompts, so no prefix is reused:

* engine ``mode="dvr"`` (0 % deterministic) vs ``generate`` (the in-memory model that was
  saved, sdpa, same dtype), batch 1/32/128 on 0.5B and 32 on 7B;
* batch 32 on 0.5B: ``dvr`` at 0/10/50/100 % deterministic requests (verify passes,
  rollbacks and rolled-back tokens per run: real GPU non-determinism, no fault seam) and
  ``mode="batch_invariant"``, as ratios to ``dvr`` at 0 %;
* one decode step at batch 32 (context 128), invariant kernels vs stock (``ModelRunner.run``);
* the invariant ops vs stock at serving shapes (``benchmarks/ops.py``).

Prints ONE table (GPU, versions) and writes JSON (default ``benchmarks/results/gpu.json``).
Targets (issue #28): dvr 0 % >= 5x generate at batch 32 (0.5B), >= 2x (7B); dvr 10 % >=
0.9x of 0 %, 100 % >= 0.7x; batch_invariant >= 0.6x of dvr 0 %; decode step invariant
<= 1.6x stock; invariant linear >= 0.8x F.linear at M >= 256, >= 0.7x at M <= 64.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import pathlib
import random
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import ops as ops_bench
from _harness import RESULTS, compare, machine
from reasonserve.engine import DecoderModel, Engine, EngineConfig, SamplingParams
from reasonserve.engine.config import ModelConfig
from reasonserve.engine.device import resolve_device, resolve_dtype
from reasonserve.engine.kernels import INVARIANT, STOCK
from reasonserve.engine.model_runner import Chunk

QWEN2_05B = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                 num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True)  # fmt: skip
QWEN2_7B = dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                num_attention_heads=28, num_key_value_heads=4, tie_word_embeddings=False)  # fmt: skip
TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, tie_word_embeddings=True)  # fmt: skip
TINY_WIDE = TINY | dict(hidden_size=128, intermediate_size=256, tie_word_embeddings=False)


COUNTERS = ("verify_passes", "rollbacks", "tokens_rolled_back", "verify_s", "graph_replays")


@dataclass
class Row:
    section: str
    case: str
    ours: float | None  # tok/s, or ms for timings
    baseline: float | None
    ratio: float | None  # ours / baseline (throughput) or time ratio (ms rows)
    target: str = ""
    met: bool | None = None
    note: str = ""


@dataclass(frozen=True)
class Setup:
    device: str
    dtype: torch.dtype
    prompt: int
    new: int
    repeats: int
    batches: tuple[int, ...]  # engine vs generate on 0.5B
    batch: int  # the batch of the targets: DVR sweep, decode step, 7B
    shapes: dict
    window: int
    group: int
    cuda_graphs: bool = True  # False: every engine pass eager (the lever if graphs misbehave)


def build_model(shape: dict, setup: Setup):
    """A random model of transformers' own class, on the device, in eval mode."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    cfg = Qwen2Config(**shape, max_position_embeddings=4096, rms_norm_eps=1e-6)
    torch.manual_seed(0)
    with torch.device(setup.device):
        try:
            hf = AutoModelForCausalLM.from_config(cfg, dtype=setup.dtype, attn_implementation="sdpa")
        except TypeError:  # transformers < 4.56 names the argument torch_dtype
            hf = AutoModelForCausalLM.from_config(cfg, torch_dtype=setup.dtype, attn_implementation="sdpa")
    return hf.eval()


def prompts(batch: int, vocab: int, length: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(length)] for _ in range(batch)]


def engine_for(model: DecoderModel, setup: Setup, batch: int, mode: str) -> Engine:
    per_seq = -(-(setup.prompt + setup.new) // 16)
    return Engine(model, EngineConfig(
        block_size=16, num_blocks=batch * per_seq + 16, max_num_seqs=batch,
        max_num_batched_tokens=max(512, min(batch * setup.prompt, 8192)),
        max_model_len=per_seq * 16, mode=mode, dvr_window=setup.window, dvr_group_size=setup.group,
        cuda_graphs=setup.cuda_graphs,
    ))  # fmt: skip


class EngineRun:
    """One engine reused across runs (graphs captured once); each run fresh prompts."""

    def __init__(self, model, setup: Setup, batch: int, mode: str = "dvr", deterministic: float = 0.0):
        self.engine, self.setup, self.batch = engine_for(model, setup, batch, mode), setup, batch
        det = set(random.Random(2).sample(range(batch), round(deterministic * batch)))
        self.params = [
            SamplingParams(max_tokens=setup.new, temperature=0.0, ignore_eos=True, deterministic=i in det)
            for i in range(batch)
        ]
        self.seed, self.runs = 0, []

    def __call__(self) -> None:
        self.seed += 1
        before = self.engine.metrics()
        ps = prompts(self.batch, self.engine.model.cfg.vocab_size, self.setup.prompt, self.seed)
        outs = self.engine.generate(ps, self.params)
        assert all(len(o.token_ids) == self.setup.new and o.error is None for o in outs), outs[0].error
        m = self.engine.metrics()
        self.runs.append({k: getattr(m, k) - getattr(before, k) for k in COUNTERS})

    def note(self) -> str:
        last = self.runs[-1]
        return (f"per run: {last['verify_passes']} verify passes, {last['rollbacks']} rollbacks, "
                f"{last['tokens_rolled_back']} tokens rolled back, verify {last['verify_s'] * 1e3:.0f} ms, "
                f"{last['graph_replays']} graph steps")  # fmt: skip


def hf_run(hf, setup: Setup, batch: int):
    seed = [10**6]

    def run() -> None:
        seed[0] += 1
        ids = torch.tensor(prompts(batch, hf.config.vocab_size, setup.prompt, seed[0]), device=setup.device)
        with torch.no_grad():
            out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=setup.new,
                              min_new_tokens=setup.new, do_sample=False, pad_token_id=0)  # fmt: skip
        assert out.shape[1] == setup.prompt + setup.new

    return run


def vs_generate(name: str, model, hf, setup: Setup, batches, target: float | None) -> list[Row]:
    rows = []
    for batch in batches:
        ours = EngineRun(model, setup, batch)
        t_hf, t_ours = compare(
            hf_run(hf, setup, batch), ours, device=setup.device, repeats=setup.repeats, warmup=1
        )
        tok = batch * setup.new
        ratio = t_hf / t_ours
        met = None if target is None else ratio >= target
        case, want = f"batch {batch}, dvr 0% det", f">= {target}x" if target else ""
        section = f"engine vs generate ({name})"
        rows.append(Row(section, case, tok / t_ours, tok / t_hf, ratio, want, met, ours.note()))
        del ours
    return rows


def dvr_sweep(model, setup: Setup, batch: int = 32) -> list[Row]:
    runs = {
        f"dvr {round(f * 100)}% det": EngineRun(model, setup, batch, "dvr", f) for f in (0.0, 0.1, 0.5, 1.0)
    }
    runs["batch_invariant"] = EngineRun(model, setup, batch, "batch_invariant")
    times: dict[str, list[float]] = {k: [] for k in runs}
    for rep in range(setup.repeats + 1):  # the first round warms up (graphs, Triton compiles)
        for name, run in runs.items():
            _sync(setup.device)
            start = time.perf_counter()
            run()
            _sync(setup.device)
            if rep:
                times[name].append(time.perf_counter() - start)
    base = statistics.median(times["dvr 0% det"])
    targets = {"dvr 10% det": 0.9, "dvr 100% det": 0.7, "batch_invariant": 0.6}
    rows = []
    for name, run in runs.items():
        t = statistics.median(times[name])
        target = targets.get(name)
        rows.append(Row(f"DVR at batch {batch} (0.5B)", name, batch * setup.new / t, batch * setup.new / base,
                        base / t, f">= {target}x of dvr 0%" if target else "",
                        None if target is None else base / t >= target, run.note()))  # fmt: skip
    return rows


def decode_step(model, setup: Setup, batch: int = 32) -> list[Row]:
    engine = engine_for(model, setup, batch, "dvr")
    vocab = model.cfg.vocab_size
    for p in prompts(batch, vocab, setup.prompt, 7):
        engine.add_request(p, SamplingParams(max_tokens=setup.new, temperature=0.0, ignore_eos=True))
    while any(s.num_computed < len(s.prompt) for s in engine.running) or engine.waiting:
        engine.step()
    for s in engine.running:  # room for the decoded token, as the scheduler would grow the table
        engine.blocks.ensure_capacity(s.block_table, s.num_computed + 1)
    chunks = [Chunk([s.tokens[s.num_computed]], s.num_computed, s.block_table) for s in engine.running]

    def step(kernels):
        return lambda: engine.runner.run(chunks, kernels)

    t_stock, t_inv = compare(step(STOCK), step(INVARIANT), device=setup.device, repeats=max(5, setup.repeats))
    graphs = engine.runner.graphs
    note = f"{'CUDA graphs' if graphs is not None and graphs.enabled else 'eager'}, context {setup.prompt}"
    case, ratio = f"batch {len(chunks)}: batch_invariant vs stock (ms)", t_inv / t_stock
    return [Row("decode step", case, t_inv * 1e3, t_stock * 1e3, ratio, "<= 1.6x stock", ratio <= 1.6, note)]


def op_rows(setup: Setup, smoke: bool) -> list[Row]:
    """The invariant ops vs stock at serving shapes: ``benchmarks/ops.py``'s GPU section
    (quick set; its own table is folded into this one), or one CPU row with ``--smoke``."""
    if smoke:
        found = ops_bench.linear_rows(setup.device, setup.dtype, [1], "auto")[:1]
    else:
        with contextlib.redirect_stdout(io.StringIO()):
            found = ops_bench.print_ops_section(setup.device, quick=True)
    rows = []
    for r in found:
        target = f"time <= {r.target:g}x" if r.target is not None else ""
        case, ms = f"{r.op} {r.shape} vs {r.baseline}", (r.candidate_ms, r.baseline_ms)
        rows.append(Row("invariant ops vs stock (ms)", case, *ms, r.ratio, target, r.met))
    return rows


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _peak_memory(device: str) -> str:
    """``, peak GPU memory X GiB`` since the last call (nothing on CPU)."""
    if not device.startswith("cuda"):
        return ""
    peak = torch.cuda.max_memory_allocated(device) / 2**30
    torch.cuda.reset_peak_memory_stats(device)
    return f", peak GPU memory {peak:.1f} GiB"


def _release() -> None:
    """Give the memory of models the caller has dropped back to the device."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def load(shape: dict, setup: Setup, *, from_disk: bool = True):
    """A random model of ``shape``: the transformers model and our engine's model of the same
    weights. ``from_disk``: through a checkpoint folder (``save_pretrained``, then
    ``DecoderModel.from_pretrained``; deleted once loaded); else from the transformers
    model's own tensors and its ``config.json`` (the 7B shape: no 15 GB write and read)."""
    hf = build_model(shape, setup)
    folder = tempfile.mkdtemp(prefix="reasonserve-gpu-bench-")
    try:
        if from_disk:
            hf.save_pretrained(folder)
            return hf, DecoderModel.from_pretrained(folder, device=setup.device, dtype=setup.dtype)
        hf.config.save_pretrained(folder)
        cfg = ModelConfig.from_pretrained(folder)
        return hf, DecoderModel(cfg, dict(hf.state_dict()), device=setup.device, dtype=setup.dtype)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run_all(setup: Setup, skip: set[str], budget_s: float, smoke: bool, done=lambda rows: None) -> list[Row]:
    """The sections with targets first, cheapest first (the 7B one last of them), then the
    rest; ``done(rows)`` is called with the rows so far after each section."""
    start, rows = time.perf_counter(), []

    def section(name: str, fn) -> None:
        if name in skip:
            rows.append(Row(name, "skipped (--skip)", None, None, None))
        elif time.perf_counter() - start > budget_s:
            rows.append(Row(name, f"skipped: past --budget-s {budget_s:g}", None, None, None))
        else:
            try:
                rows.extend(fn())
            except Exception as err:  # one broken section must not lose the others' numbers
                traceback.print_exc()
                rows.append(Row(name, "ERROR", None, None, None, note=f"{type(err).__name__}: {err}"[:300]))
        print(f"[{time.perf_counter() - start:6.1f} s] {name} done{_peak_memory(setup.device)}",
              file=sys.stderr, flush=True)  # fmt: skip
        done(rows)

    def seven_b() -> list[Row]:
        hf7, model7 = load(setup.shapes["7B"], setup, from_disk=False)
        return vs_generate("7B", model7, hf7, setup, (setup.batch,), 2.0)

    hf, model = load(setup.shapes["0.5B"], setup)
    section("0.5B", lambda: vs_generate("0.5B", model, hf, setup, (setup.batch,), 5.0))
    section("dvr", lambda: dvr_sweep(model, setup, setup.batch))
    section("decode", lambda: decode_step(model, setup, setup.batch))
    section("ops", lambda: op_rows(setup, smoke))  # about a minute: before the 7B's two or so
    _release()
    section("7b", seven_b)
    _release()
    others = [b for b in setup.batches if b != setup.batch]
    section("0.5B", lambda: vs_generate("0.5B", model, hf, setup, others, None))
    return rows


def print_table(rows: list[Row], meta: dict) -> None:
    print("\n" + ", ".join(f"{k}={v}" for k, v in meta.items()))
    print(
        f"{'section':<30} {'case':<46} {'ours':>10} {'baseline':>10} {'ratio':>7}  {'target':<22} met   note"
    )
    print_rows(rows)
    print("(throughput rows: tok/s and ours/baseline; '(ms)' rows: ms and time ratio, lower is better)")


def print_rows(rows: list[Row]) -> None:
    def num(v):
        return f"{v:>10.1f}" if v is not None else f"{'-':>10}"

    for r in rows:
        met = "" if r.met is None else ("yes" if r.met else "NO")
        ratio = f"{r.ratio:>7.2f}" if r.ratio is not None else f"{'-':>7}"
        numbers = f"{num(r.ours)} {num(r.baseline)} {ratio}"
        print(f"{r.section:<30} {r.case:<46} {numbers}  {r.target:<22} {met:<5} {r.note}", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="auto", help="float32 | bfloat16 | float16 | auto (bf16 on CUDA)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip", nargs="*", default=[], choices=["0.5B", "dvr", "decode", "7b", "ops"])
    parser.add_argument("--dvr-window", type=int, default=8)
    parser.add_argument("--dvr-group-size", type=int, default=8)
    parser.add_argument("--budget-s", type=float, default=300.0)
    parser.add_argument("--no-cuda-graphs", action="store_true", help="run every engine pass eagerly")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny shapes on CPU: checks the script end to end"
    )
    parser.add_argument(
        "--json", default=None, help="output file (default benchmarks/results/gpu[-smoke].json)"
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="CPU threads (--smoke; more than free cores stall)"
    )
    args = parser.parse_args(argv)
    threads = torch.get_num_threads()
    try:
        if args.smoke:
            torch.set_num_threads(args.threads)
        return _main(args)
    finally:
        torch.set_num_threads(threads)


def _main(args) -> int:
    device = str(resolve_device("cpu" if args.smoke else args.device))  # a clear error without CUDA
    dtype = resolve_dtype(args.dtype, torch.device(device))
    if args.smoke:
        setup = Setup(device, dtype, 4, 4, 1, (1, 2), 2, {"0.5B": TINY, "7B": TINY_WIDE}, 2, 2,
                      not args.no_cuda_graphs)  # fmt: skip
    else:
        shapes = {"0.5B": QWEN2_05B, "7B": QWEN2_7B}
        setup = Setup(device, dtype, 128, 128, args.repeats, (1, 32, 128), 32, shapes, args.dvr_window,
                      args.dvr_group_size, not args.no_cuda_graphs)  # fmt: skip
    import transformers

    meta = machine(device) | {"transformers": transformers.__version__, "cuda": torch.version.cuda,
                              "dtype": str(dtype).removeprefix("torch."), "smoke": args.smoke,
                              "cuda_graphs": setup.cuda_graphs}  # fmt: skip
    path = pathlib.Path(args.json or RESULTS / ("gpu-smoke.json" if args.smoke else "gpu.json"))
    path.parent.mkdir(parents=True, exist_ok=True)
    printed = [0]

    def done(rows: list[Row]) -> None:
        """After each section: its rows to the log, all rows so far to the JSON (a run
        killed later keeps them; ``complete`` says whether every section ran)."""
        print_rows(rows[printed[0] :])
        printed[0] = len(rows)
        write_json(path, meta, rows, complete=False)

    rows = run_all(setup, set(args.skip), args.budget_s, args.smoke, done)
    print_table(rows, meta)
    write_json(path, meta, rows, complete=True)
    print(f"wrote {path}")
    return 1 if any(r.case == "ERROR" for r in rows) else 0


def write_json(path: pathlib.Path, meta: dict, rows: list[Row], *, complete: bool) -> None:
    """Write to a temporary file, then rename: a kill never leaves half a file."""
    tmp = path.with_name(path.name + ".tmp")
    payload = {"meta": meta, "complete": complete, "rows": [asdict(r) for r in rows]}
    tmp.write_text(json.dumps(payload, indent=2))
    tmp.replace(path)


if __name__ == "__main__":
    sys.exit(main())
