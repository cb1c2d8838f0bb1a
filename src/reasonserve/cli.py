"""The ``reasonserve`` command line."""

from __future__ import annotations

import argparse
import contextlib
import pathlib
import sys
from collections.abc import Sequence

from reasonserve.core.errors import ImplementationUnavailableError, InvalidArgumentError, ReasonserveError

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="reasonserve", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="the embedded engine on a mixed workload, with a determinism proof")
    demo.add_argument("--seed", type=int, default=0, help="seed for weights and prompts")
    demo.add_argument("--json", metavar="PATH", help="also write the report as JSON")
    ops_demo = sub.add_parser("demo-ops", help="batch invariance with and without deterministic_mode()")
    ops_demo.add_argument("--batches", type=int, default=6, help="random batches to try (>= 1)")
    ops_demo.add_argument("--seed", type=int, default=0, help="seed for weights and prompts")
    ops_demo.add_argument("--json", metavar="PATH", help="also write the report as JSON")
    check = sub.add_parser("check-determinism", help="sweep every op on this machine; print a verdict")
    check.add_argument("--cases", type=int, default=2000, help="random (M, K, N) cases per op (>= 1)")
    check.add_argument("--seed", type=int, default=0)
    _replay_parsers(sub)
    serve = sub.add_parser("serve", help="OpenAI-compatible HTTP server over the embedded engine")
    serve.add_argument("--model", required=True, help="HF-format checkpoint folder")
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--mode", default="dvr", choices=["dvr", "batch_invariant"])
    serve.add_argument("--num-blocks", type=int, default=1024)
    serve.add_argument("--block-size", type=int, default=16)
    serve.add_argument("--max-num-seqs", type=int, default=32, help="requests in the running batch")
    serve.add_argument("--max-model-len", type=int, default=None)
    serve.add_argument("--served-model-name", default=None, help="model id in the API (default: folder name)")
    ints = (("max-tokens-limit", 4096), ("max-request-bytes", 1_000_000), ("max-queued-requests", 256),
            ("max-connections", 1024))
    for flag, default in ints:
        serve.add_argument(f"--{flag}", type=int, default=default)
    for flag, default in (("header-timeout-s", 10.0), ("body-timeout-s", 30.0), ("drain-timeout-s", 10.0)):
        serve.add_argument(f"--{flag}", type=float, default=default)
    serve.add_argument("--end-of-thinking-token-id", type=int, default=None, help="e.g. the id of </think>")
    serve.add_argument("--replicas", type=int, default=None,
                       help="N engine replicas on Ray Serve, PASCAL-routed (ray extra; docs/ray_serve.md)")
    serve.add_argument("--router", default="pascal", choices=["pascal", "pow2"], help="with --replicas")
    return parser


def _default_data() -> str:
    """``../shared/data`` next to the repository (the working directory's parent)."""
    return str(pathlib.Path.cwd().parent / "shared" / "data")


def _replay_parsers(sub) -> None:
    replay = sub.add_parser("replay", help="replay certainindex on recorded data")
    kinds = replay.add_subparsers(dest="kind", required=True)
    probes = kinds.add_parser("probes", help="probe-in-the-middle recordings")
    probes.add_argument("--run", action="append", help="one run folder (repeatable)")
    probes.add_argument("--runs", help="glob of run folders (default: DATA/probes/*)")
    probes.add_argument("--grader", choices=["fast", "reference"], default="fast",
                        help="grade answers with our equivalence (fast) or with Math-Verify in a worker "
                             "process (reference; needs the [grading] extra)")  # fmt: skip
    probes.add_argument("--no-stopping", dest="stopping", action="store_false",
                        help="leave out the early-exit section (certainindex.stopping: the shipped learned "
                             "rule, leave-one-model-out learned and k-agree rules, PNG-stopping.png)")
    sc = kinds.add_parser("sc", help="self-consistency samples")
    sc.add_argument("--samples", help="JSONL file (default: DATA/sc_samples/qwen25math_*.jsonl)")
    cot = kinds.add_parser("cot", help="text-only probing of reasoning traces")
    cot.add_argument("--traces", help="JSONL(.gz) file (default: DATA/reasoning_traces/qwen3-8b_*)")
    cot.add_argument("--interval", type=int, default=64, help="probe_interval_tokens (default 64)")
    prm = kinds.add_parser("prm", help="PRM beam search: beams as samples, PRM step scores as reward")
    prm.add_argument("--beams", help="JSONL file (default: DATA/prm_beams/*.jsonl)")
    prm.add_argument("--aggregate", default="last", help="step-score aggregate: last|min|mean|product")
    mcts = kinds.add_parser("mcts", help="rStar MCTS: rollouts as samples, node values as reward")
    mcts.add_argument("--run", dest="mcts_run", help="run folder (default: DATA/mcts/rstar_*)")
    for p in (probes, sc, cot, prm, mcts):
        p.add_argument("--data", default=None, help="data root (default: ../shared/data)")
        p.add_argument("--tolerance", type=float, default=None,
                       help="accuracy loss allowed when calibrating (probes 0.005, sc 0)")  # fmt: skip
        p.add_argument("--setting", default="dev",
                       help="headline rule: dev (shipped, chosen on the development data), "
                            "calibrated (re-chosen here by cross-validation), "
                            "or key=value pairs as calibrate prints them")  # fmt: skip
        p.add_argument("--json", metavar="PATH", help="write the report as JSON")
        p.add_argument("--png", metavar="PATH", help="write the accuracy-vs-cost plot")
    from reasonserve.sim.cli import add_sim_parser

    add_sim_parser(sub)
    from reasonserve.adapters.cli import add_adapter_parser

    add_adapter_parser(sub)
    cal = sub.add_parser("calibrate", help="choose certainindex settings by cross-validation")
    cal.add_argument("kind", choices=["probes", "sc", "cot", "prm", "mcts"])
    cal.add_argument("--data", default=None)
    cal.add_argument("--runs", help="glob of probe run folders")
    cal.add_argument("--samples", help="sc samples file")
    cal.add_argument("--traces", help="reasoning traces file (cot)")
    cal.add_argument("--interval", type=int, default=64)
    cal.add_argument("--beams", help="PRM beams file")
    cal.add_argument("--aggregate", default="last")
    cal.add_argument("--run", dest="mcts_run", help="MCTS run folder")
    cal.add_argument("--tolerance", type=float, default=None)
    cal.add_argument("--setting", default="dev", help=argparse.SUPPRESS)


def _replay(args, out) -> int:
    data = pathlib.Path(args.data or _default_data())
    save = {"json_path": getattr(args, "json", None), "png_path": getattr(args, "png", None), "out": out}
    if args.kind in ("probes", "cot"):
        from reasonserve.replay import cot, probes

        tol = 0.005 if args.tolerance is None else args.tolerance
        if args.kind == "probes":
            folders = probes.run_folders(getattr(args, "run", None), args.runs, data)
            with _grader(getattr(args, "grader", "fast")) as grade:
                report = probes.replay_probes(folders, tolerance=tol, setting=args.setting, grade=grade,
                                              stopping=args.stopping)  # fmt: skip
        else:
            cot_rule = probes.headline_rule(args.setting, cot.DEV_SETTING)
            path = args.traces or str(data / "reasoning_traces" / "qwen3-8b_fulltext_dev_split.jsonl.gz")
            trajs = cot.load_traces(path, interval_tokens=args.interval)
            report = probes.replay_trajectories(
                trajs, runs=[path], tolerance=tol, title="replay cot", headline=cot_rule,
                headline_label="cot development setting")  # fmt: skip
        probes.print_and_save(report, **save)
        return 0
    from reasonserve.recordings import search as search_runs
    from reasonserve.replay import sc

    tol = 0.0 if args.tolerance is None else args.tolerance
    headline = sc.headline_rule(args.setting)
    if args.kind == "sc":
        path = args.samples or str(data / "sc_samples" / "qwen25math_math_cot_100_8samples_rm.jsonl")
        report = sc.replay_questions(sc.load_samples(path), source=path, tolerance=tol, headline=headline)
    elif args.kind == "prm":
        path = args.beams or _first(data / "prm_beams", "*.jsonl")
        questions = search_runs.load_prm_beams(path, aggregate=args.aggregate)
        report = sc.replay_questions(questions, source=path, tolerance=tol, unit="beams", headline=headline)
    else:
        path = args.mcts_run or _first(data / "mcts", "rstar_*")
        questions = search_runs.load_mcts(path)
        report = sc.replay_questions(questions, source=path, tolerance=tol, unit="rollouts",
                                     headline=headline)  # fmt: skip
    sc.print_and_save(report, **save)
    return 0


@contextlib.contextmanager
def _grader(kind: str):
    """``grade(answer, target) -> bool``: ours, or Math-Verify in a worker (a timeout counts as wrong)."""
    if kind == "fast":
        from reasonserve.certainindex import equivalent

        yield equivalent
        return
    from reasonserve.certainindex.grading import ReferenceGrader

    with ReferenceGrader() as grader:
        yield grader


def _serve(args) -> int:
    """Serve until SIGTERM (exit 0) or until the engine loop dies (exit 1)."""
    from reasonserve.engine import Engine, EngineConfig
    from reasonserve.serve.config import ServeConfig
    from reasonserve.serve.server import serve

    engine_cfg = EngineConfig(mode=args.mode, num_blocks=args.num_blocks, block_size=args.block_size,
                              max_num_seqs=args.max_num_seqs, max_model_len=args.max_model_len,
                              end_of_thinking_token_id=args.end_of_thinking_token_id)  # fmt: skip
    cfg = ServeConfig(model_name=args.served_model_name or pathlib.Path(args.model).name,
                      max_tokens_limit=args.max_tokens_limit, max_request_bytes=args.max_request_bytes,
                      max_queued_requests=args.max_queued_requests, max_connections=args.max_connections,
                      header_timeout_s=args.header_timeout_s, body_timeout_s=args.body_timeout_s,
                      drain_timeout_s=args.drain_timeout_s)  # fmt: skip
    if args.replicas is not None:  # Ray Serve replicas (issue 17)
        from reasonserve.adapters.ray_serve import RayServeConfig

        try:
            from reasonserve.adapters.ray_serve.local import run_local
        except ImportError as err:
            hint = "--replicas needs Ray Serve: pip install 'reasonserve[ray]'"
            raise ImplementationUnavailableError(hint) from err

        replicas = RayServeConfig(model=args.model, num_replicas=args.replicas, engine=engine_cfg,
                                  router=args.router, serve=cfg)  # fmt: skip
        return run_local(replicas, host=args.host, port=args.port)
    return serve(Engine.from_pretrained(args.model, engine_cfg), cfg, host=args.host, port=args.port)


def _first(folder: pathlib.Path, pattern: str) -> str:
    found = sorted(folder.glob(pattern))
    if not found:
        raise InvalidArgumentError(f"nothing matches {folder / pattern}")
    return str(found[0])


def _reporting_errors(command: str, run) -> int:
    """``run()``'s exit code, or 2 with a one-line message for a typed error."""
    try:
        return run()
    except ReasonserveError as exc:
        print(f"reasonserve {command}: error: {exc}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "demo":
        from reasonserve.engine_demo import run_engine_demo

        return run_engine_demo(seed=args.seed, json_path=args.json, out=sys.stdout)
    if args.command == "demo-ops":
        from reasonserve.demo import run_demo

        return run_demo(batches=args.batches, seed=args.seed, json_path=args.json, out=sys.stdout)
    if args.command in ("replay", "calibrate"):
        # Calibration is the cross-validated selection inside replay; it prints its choice.
        return _reporting_errors(args.command, lambda: _replay(args, sys.stdout))
    if args.command == "serve":
        return _reporting_errors("serve", lambda: _serve(args))
    if args.command == "sim":
        from reasonserve.sim.cli import run_sim

        return _reporting_errors("sim", lambda: run_sim(args, sys.stdout))
    if args.command == "adapter":
        from reasonserve.adapters.cli import run_adapter

        return _reporting_errors("adapter", lambda: run_adapter(args, sys.stdout))
    if args.command == "check-determinism":
        from reasonserve.ops.check import print_verdict

        return print_verdict(cases=args.cases, seed=args.seed, out=sys.stdout)
    return 2
