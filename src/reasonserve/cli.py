"""The ``reasonserve`` command line.

Commands that read recorded data find it with --data DIR, else the environment
variable REASONSERVE_DATA, else ../shared/data beside the source checkout.
Output paths (--out, --json, --png) are checked before any work starts.
Long commands draw a progress bar on stderr when it is a terminal.
"""

from __future__ import annotations

import argparse
import contextlib
import pathlib
import sys
from collections.abc import Sequence

from reasonserve.core.errors import ImplementationUnavailableError, InvalidArgumentError, ReasonserveError
from reasonserve.paths import checked_output, data_root
from reasonserve.progress import ProgressBar

__all__ = ["main"]

KINDS = ("probes", "sc", "cot", "prm", "mcts")


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    from reasonserve import __version__

    parser = argparse.ArgumentParser(prog="reasonserve", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = sub.add_parser("demo", help="the embedded engine on a mixed workload, with a determinism proof")
    demo.add_argument("--seed", type=int, default=0, help="seed for weights and prompts")
    demo.add_argument("--json", metavar="PATH", help="also write the report as JSON")
    _device_flags(demo)
    ops_demo = sub.add_parser("demo-ops", help="batch invariance with and without deterministic_mode()")
    ops_demo.add_argument("--batches", type=_at_least_one, default=6, help="random batches to try (>= 1)")
    ops_demo.add_argument("--seed", type=int, default=0, help="seed for weights and prompts")
    ops_demo.add_argument("--json", metavar="PATH", help="also write the report as JSON")
    check = sub.add_parser("check-determinism", help="sweep every op on this machine; print a verdict")
    check.add_argument("--cases", type=_at_least_one, default=2000, help="random (M, K, N) cases per op")
    check.add_argument("--seed", type=int, default=0, help="seed of the random cases")
    _replay_parsers(sub)
    serve = sub.add_parser("serve", help="OpenAI-compatible HTTP server over the embedded engine")
    serve.add_argument("--model", required=True, help="HF-format checkpoint folder")
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    serve.add_argument("--port", type=int, default=8000, help="TCP port (default 8000)")
    serve.add_argument("--mode", default="dvr", choices=["dvr", "batch_invariant"],
                       help="dvr: fast path verified and rolled back (default); batch_invariant: every step "
                            "batch-invariant (docs/dvr.md)")  # fmt: skip
    serve.add_argument("--dvr-window", type=int, default=8,
                       help="tokens decoded between verify passes of a deterministic request (default 8)")
    serve.add_argument("--dvr-group-size", type=int, default=4,
                       help="requests per fixed-shape verify pass (default 4)")  # fmt: skip
    serve.add_argument("--num-blocks", type=int, default=1024, help="KV-cache blocks (default 1024)")
    serve.add_argument("--block-size", type=int, default=16, help="tokens per KV-cache block (default 16)")
    serve.add_argument("--max-num-seqs", type=int, default=32, help="requests in the running batch")
    serve.add_argument("--max-model-len", type=int, default=None,
                       help="longest prompt + output in tokens (default: the model's)")  # fmt: skip
    serve.add_argument("--served-model-name", default=None, help="model id in the API (default: folder name)")
    ints = (("max-tokens-limit", 4096, "largest max_tokens a request may ask for"),
            ("max-request-bytes", 1_000_000, "largest request body"),
            ("max-queued-requests", 256, "requests waiting before new ones get 429"),
            ("max-connections", 1024, "open connections"))  # fmt: skip
    for flag, default, what in ints:
        serve.add_argument(f"--{flag}", type=int, default=default, help=f"{what} (default {default})")
    floats = (("header-timeout-s", 10.0, "seconds to receive a request's headers"),
              ("body-timeout-s", 30.0, "seconds to receive a request's body"),
              ("send-timeout-s", 30.0, "seconds a reply may stall on a client that does not read it"),
              ("drain-timeout-s", 10.0, "seconds running requests get to finish after SIGTERM"))  # fmt: skip
    for flag, seconds, what in floats:
        serve.add_argument(f"--{flag}", type=float, default=seconds, help=f"{what} (default {seconds})")
    serve.add_argument("--end-of-thinking-token-id", type=int, default=None, help="e.g. the id of </think>")
    serve.add_argument("--replicas", type=int, default=None,
                       help="N engine replicas on Ray Serve, PASCAL-routed (ray extra; docs/ray_serve.md)")
    serve.add_argument("--router", default=None, choices=["pascal", "pow2"],
                       help="replica router, with --replicas only (default pascal)")  # fmt: skip
    _serve_model_args(serve)
    _device_flags(serve)
    return parser


def _device_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N (default cpu)")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="weights and activations (auto: float32 on CPU, bfloat16 on CUDA)")  # fmt: skip


def _serve_model_args(serve) -> None:
    """How the checkpoint is served: chat, reasoning, scheduling (docs/serve.md)."""
    serve.add_argument("--max-num-batched-tokens", type=int, default=512, help="tokens per forward pass")
    serve.add_argument("--chat-template", default=None,
                       help="chat template file (or the template text); default: the tokenizer's")
    serve.add_argument("--trust-request-chat-template", action="store_true",
                       help="accept a request's own chat_template (Jinja from clients: trusted clients only)")
    serve.add_argument("--reasoning-parser", default=None, choices=["deepseek_r1", "qwen3"],
                       help="split <think>...</think> into message.reasoning (vLLM's parsers)")
    serve.add_argument("--policy", "--scheduling-policy", default="fcfs",
                       help="scheduling policy: fcfs, priority, pascal, dynasor, round_robin, app_fifo, lpm, "
                            "flashtts_prefix (default fcfs)")  # fmt: skip
    serve.add_argument("--policy-args", default=None, metavar="JSON",
                       help='the policy\'s fields as a JSON object, e.g. \'{"quantum": 500}\'')
    serve.add_argument("--seed", type=int, default=0, help="seeds for requests that bring none")


def _replay_parsers(sub) -> None:
    replay = sub.add_parser("replay", help="replay certainindex on recorded data; print and save a report")
    _kind_parsers(replay.add_subparsers(dest="kind", required=True, metavar="KIND"), report=True)
    from reasonserve.sim.cli import add_sim_parser

    add_sim_parser(sub)
    sub.choices["sim"].set_defaults(data=None)  # found by reasonserve.paths, not the working directory
    from reasonserve.adapters.cli import add_adapter_parser

    add_adapter_parser(sub)
    from reasonserve.gateway.cli import add_gateway_parser

    add_gateway_parser(sub)
    cal = sub.add_parser("calibrate", help="choose certainindex settings by cross-validation")
    _kind_parsers(cal.add_subparsers(dest="kind", required=True, metavar="KIND"), report=False)


def _kind_parsers(kinds, *, report: bool) -> None:
    """One parser per kind of recording, with the flags that kind reads (replay and calibrate)."""
    probes = kinds.add_parser("probes", help="probe-in-the-middle recordings")
    probes.add_argument("--run", action="append", help="one run folder (repeatable)")
    probes.add_argument("--runs", help="glob of run folders (default: DATA/probes/*)")
    probes.add_argument("--grader", choices=["fast", "reference"], default="fast",
                        help="grade answers with our equivalence (fast) or with Math-Verify in a worker "
                             "process (reference; needs the [grading] extra)")  # fmt: skip
    sc = kinds.add_parser("sc", help="self-consistency samples")
    sc.add_argument("--samples", help="JSONL file (default: DATA/sc_samples/qwen25math_*.jsonl)")
    cot = kinds.add_parser("cot", help="text-only probing of reasoning traces")
    cot.add_argument("--traces", help="JSONL(.gz) file (default: DATA/reasoning_traces/qwen3-8b_*)")
    cot.add_argument("--interval", type=_at_least_one, default=64, help="probe_interval_tokens (default 64)")
    prm = kinds.add_parser("prm", help="PRM beam search: beams as samples, PRM step scores as reward")
    prm.add_argument("--beams", help="JSONL file (default: DATA/prm_beams/*.jsonl)")
    prm.add_argument("--aggregate", default="last", choices=["last", "min", "mean", "product"],
                     help="how a beam's step scores become one reward (default last)")  # fmt: skip
    mcts = kinds.add_parser("mcts", help="rStar MCTS: rollouts as samples, node values as reward")
    mcts.add_argument("--run", dest="mcts_run", help="run folder (default: DATA/mcts/rstar_*)")
    for p in (probes, sc, cot, prm, mcts):
        p.add_argument("--data", default=None, help="data root (default: $REASONSERVE_DATA, else "
                                                     "../shared/data beside the checkout)")  # fmt: skip
        p.add_argument("--tolerance", type=float, default=None,
                       help="accuracy loss allowed (probes, cot: 0.005; others: 0)")  # fmt: skip
        p.add_argument("--json", metavar="PATH", help="write the report as JSON")
        if not report:
            p.set_defaults(setting="dev", png=None, stopping=False)
            continue
        p.add_argument("--setting", default="dev",
                       help="headline rule: dev (shipped, chosen on the development data), "
                            "calibrated (re-chosen here by cross-validation), "
                            "or key=value pairs as calibrate prints them")  # fmt: skip
        p.add_argument("--png", metavar="PATH", help="write the accuracy-vs-cost plot")
    if report:
        probes.add_argument("--no-stopping", dest="stopping", action="store_false",
                            help="leave out the early-exit section (certainindex.stopping: the shipped "
                                 "learned rule, leave-one-model-out learned and k-agree rules, "
                                 "PNG-stopping.png)")  # fmt: skip


def _refuse_idle_flags(args) -> None:
    """Flag combinations where a flag would do nothing are errors, not silently ignored."""
    given = {"--run": getattr(args, "run", None), "--runs": getattr(args, "runs", None)}
    if args.command == "serve" and args.router is not None and args.replicas is None:
        raise InvalidArgumentError("--router chooses among Ray Serve replicas: it needs --replicas N")
    if args.command == "serve" and args.replicas is not None and (args.device, args.dtype) != ("cpu", "auto"):
        raise InvalidArgumentError("--device/--dtype place one engine; --replicas (Ray Serve) run on CPU")
    if args.command not in ("replay", "calibrate"):
        return
    if given["--run"] and given["--runs"]:
        raise InvalidArgumentError("--run names the folders, so --runs (a glob) would be ignored: give one")
    files = {"--samples": "samples", "--traces": "traces", "--beams": "beams", "--run": "mcts_run"}
    named = [flag for flag, dest in files.items() if getattr(args, dest, None)] + [
        flag for flag in ("--run", "--runs") if given[flag]]  # fmt: skip
    if args.data is not None and named:
        raise InvalidArgumentError(f"--data is not read when {named[0]} names the input: give one")


def _outputs_writable(args) -> None:
    """Every output path of the command can be written, before the command's work starts."""
    for name in ("out", "json", "png"):
        value = getattr(args, name, None)
        if isinstance(value, (str, pathlib.Path)):
            checked_output(f"--{name}", value)


def _replay(args, out) -> int:
    save = {"json_path": args.json, "png_path": args.png, "out": out}
    with ProgressBar(f"{args.command} {args.kind}") as bar:
        report, show = _replay_report(args, bar)
    if args.command == "calibrate":
        from reasonserve.replay._report import print_calibration, write_json

        print_calibration(report, args.kind, out)
        if args.json:
            write_json(args.json, report)
        return 0
    show(report, **save)
    return 0


def _data(args) -> pathlib.Path:
    """The data root (called only where a default input path needs it)."""
    return data_root(args.data)


def _replay_report(args, progress: ProgressBar):
    """The replay report of ``args.kind`` and the function that prints and saves it."""
    if args.kind in ("probes", "cot"):
        from reasonserve.replay import cot, probes

        tol = 0.005 if args.tolerance is None else args.tolerance
        if args.kind == "probes":
            root = None if args.run or args.runs else _data(args)
            folders = probes.run_folders(args.run, args.runs, root)
            with _grader(args.grader) as grade:
                report = probes.replay_probes(folders, tolerance=tol, setting=args.setting, grade=grade,
                                              stopping=args.stopping, progress=progress)  # fmt: skip
        else:
            cot_rule = probes.headline_rule(args.setting, cot.DEV_SETTING)
            default = "reasoning_traces/qwen3-8b_fulltext_dev_split.jsonl.gz"
            path = args.traces or str(_data(args) / default)
            trajs = cot.load_traces(path, interval_tokens=args.interval)
            report = probes.replay_trajectories(
                trajs, runs=[path], tolerance=tol, title="replay cot", headline=cot_rule,
                headline_label="cot development setting", progress=progress)  # fmt: skip
        return report, probes.print_and_save
    from reasonserve.recordings import search as search_runs
    from reasonserve.replay import sc

    tol = 0.0 if args.tolerance is None else args.tolerance
    headline = sc.headline_rule(args.setting)
    if args.kind == "sc":
        path = args.samples or str(_data(args) / "sc_samples" / "qwen25math_math_cot_100_8samples_rm.jsonl")
        questions, unit = sc.load_samples(path), "samples"
    elif args.kind == "prm":
        path = args.beams or _first(_data(args) / "prm_beams", "*.jsonl")
        questions, unit = search_runs.load_prm_beams(path, aggregate=args.aggregate), "beams"
    else:
        path = args.mcts_run or _first(_data(args) / "mcts", "rstar_*")
        questions, unit = search_runs.load_mcts(path), "rollouts"
    report = sc.replay_questions(questions, source=path, tolerance=tol, unit=unit, headline=headline,
                                 progress=progress)  # fmt: skip
    return report, sc.print_and_save


@contextlib.contextmanager
def _grader(kind: str):
    """``grade(answer, target) -> bool``: ours, or Math-Verify in a worker (a timeout counts as wrong)."""
    if kind == "fast":
        from reasonserve.certainindex import equivalent

        yield equivalent
        return
    from reasonserve.certainindex.answers.grading import ReferenceGrader

    with ReferenceGrader() as grader:
        yield grader


def _serve(args) -> int:
    """Serve until SIGTERM (exit 0) or until the engine loop dies (exit 1)."""
    from reasonserve.engine import Engine

    try:
        from reasonserve.serve import launch
        from reasonserve.serve.config import ServeConfig
        from reasonserve.serve.server import serve
    except ImportError as err:  # fastapi / uvicorn missing
        hint = f"reasonserve serve needs: pip install 'reasonserve[serve]' ({err})"
        raise ImplementationUnavailableError(hint) from err

    tokenizer = launch.load_serving_tokenizer(args.model)
    engine_cfg = _serve_engine_config(args, tokenizer)
    policy = launch.make_policy(args.policy, args.policy_args)
    cfg = ServeConfig(model_name=args.served_model_name or pathlib.Path(args.model).name,
                      max_tokens_limit=args.max_tokens_limit, max_request_bytes=args.max_request_bytes,
                      max_queued_requests=args.max_queued_requests, max_connections=args.max_connections,
                      header_timeout_s=args.header_timeout_s, body_timeout_s=args.body_timeout_s,
                      send_timeout_s=args.send_timeout_s, drain_timeout_s=args.drain_timeout_s,
                      chat_template=launch.read_chat_template(args.chat_template),
                      trust_request_chat_template=args.trust_request_chat_template,
                      reasoning_parser=args.reasoning_parser)  # fmt: skip
    if args.replicas is not None:  # Ray Serve replicas (issue 17)
        if args.policy_args is not None:
            raise InvalidArgumentError("--policy-args does not reach --replicas (they take policies by name)")
        from reasonserve.adapters.ray_serve import RayServeConfig

        try:
            from reasonserve.adapters.ray_serve.local import run_local
        except ImportError as err:
            hint = "--replicas needs Ray Serve: pip install 'reasonserve[ray]'"
            raise ImplementationUnavailableError(hint) from err

        replicas = RayServeConfig(model=args.model, num_replicas=args.replicas, engine=engine_cfg,
                                  router=args.router or "pascal", serve=cfg)  # fmt: skip
        return run_local(replicas, host=args.host, port=args.port)
    engine = Engine.from_pretrained(args.model, engine_cfg, tokenizer=tokenizer, policy=policy,
                                    device=args.device, dtype=args.dtype)  # fmt: skip
    print(f"reasonserve serve: model {cfg.model_name!r} at http://{args.host}:{args.port}/v1", flush=True)
    return serve(engine, cfg, host=args.host, port=args.port)


def _serve_engine_config(args, tokenizer):
    """The engine configuration ``reasonserve serve`` flags describe."""
    from reasonserve.engine import EngineConfig
    from reasonserve.serve import launch

    eot = launch.end_of_thinking_config(args.end_of_thinking_token_id, args.reasoning_parser, tokenizer)
    return EngineConfig(mode=args.mode, num_blocks=args.num_blocks, block_size=args.block_size,
                        max_num_seqs=args.max_num_seqs, max_model_len=args.max_model_len,
                        max_num_batched_tokens=args.max_num_batched_tokens, seed=args.seed,
                        policy=args.policy, dvr_window=args.dvr_window, dvr_group_size=args.dvr_group_size,
                        eos_token_ids=launch.serving_eos_ids(args.model, tokenizer), **eot)  # fmt: skip


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
    return _reporting_errors(args.command, lambda: _run(args))


def _run(args) -> int:
    _refuse_idle_flags(args)
    _outputs_writable(args)
    if args.command == "demo":
        from reasonserve.demos.engine import run_engine_demo

        with ProgressBar("demo", unit="runs") as bar:
            return run_engine_demo(seed=args.seed, json_path=args.json, out=sys.stdout, progress=bar,
                                   device=args.device, dtype=args.dtype)  # fmt: skip
    if args.command == "demo-ops":
        from reasonserve.demos.ops import run_demo

        return run_demo(batches=args.batches, seed=args.seed, json_path=args.json, out=sys.stdout)
    if args.command in ("replay", "calibrate"):
        # Calibration is the cross-validated selection inside replay; it prints its choice.
        return _replay(args, sys.stdout)
    if args.command == "serve":
        return _serve(args)
    if args.command == "sim":
        from reasonserve.programs.recorded import run_sc_file
        from reasonserve.sim.cli import run_sim

        args.data = data_root(args.data)
        return run_sim(args, sys.stdout, run_sc_file)
    if args.command == "gateway":
        from reasonserve.gateway.cli import run_gateway

        return run_gateway(args)
    if args.command == "adapter":
        from reasonserve.adapters.cli import run_adapter

        return run_adapter(args, sys.stdout)
    if args.command == "check-determinism":
        from reasonserve.ops.check import print_verdict

        with ProgressBar("check-determinism", unit="cases") as bar:
            return print_verdict(cases=args.cases, seed=args.seed, out=sys.stdout, progress=bar)
    return 2
