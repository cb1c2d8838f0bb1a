"""``reasonserve adapter vllm|sglang``: the exact command and environment that start the
engine with reasonserve's pieces in it. Needs neither engine installed (it only prints)."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from importlib import metadata

from reasonserve.adapters.phase_book import CONFIG_KEY, PhaseAwareConfig
from reasonserve.adapters.seeded import SEED_KEY
from reasonserve.core.errors import InvalidArgumentError

__all__ = ["EngineCommand", "add_adapter_parser", "engine_command", "run_adapter"]

VLLM_SCHEDULER = "reasonserve.adapters.vllm.scheduler.PhaseAwareScheduler"
VLLM_SYNC_SCHEDULER = "reasonserve.adapters.vllm.scheduler.PhaseAwareSyncScheduler"
SGLANG_ENV = "REASONSERVE_SGLANG_PHASE_AWARE"  # == reasonserve.adapters.sglang.plugin.ENV_SETTINGS
SGLANG_PROCESSOR = "reasonserve.adapters.sglang.logits:SeededSamplingProcessor"


@dataclass(frozen=True, slots=True)
class EngineCommand:
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def shell(self) -> str:
        """One copy-paste shell line (env assignments, then the command)."""
        lines = [f"{k}={shlex.quote(v)}" for k, v in self.env.items()] + [""]
        for word in self.argv:  # a new line before each flag; its value stays beside it
            if word.startswith("--") and lines[-1]:
                lines.append("")
            lines[-1] = f"{lines[-1]} {shlex.quote(word)}".lstrip()
        return " \\\n  ".join(lines)


def add_adapter_parser(sub) -> None:
    p = sub.add_parser("adapter", help="print the vLLM / SGLang command line that loads reasonserve's pieces")
    p.add_argument("engine", choices=["vllm", "sglang"], help="the engine whose command line to print")
    p.add_argument("--model", default="Qwen/Qwen3-8B", help="model path or hub id for the engine")
    p.add_argument("--think-end-token-id", type=int, default=None,
                   help="id of </think> in the model's tokenizer: phase-aware scheduling on")  # fmt: skip
    p.add_argument("--quantum", type=int, default=None, help="vLLM: PASCAL token quantum (default 500)")
    p.add_argument("--demote-threshold-tokens", type=int, default=5000, help="PASCAL demotion threshold")
    p.add_argument("--no-async-scheduling", action="store_true", help="vLLM: the synchronous scheduler")
    p.add_argument("--seeded-sampling", action="store_true",
                   help="SGLang: allow custom logit processors (clients run code on the server)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print {argv, env, notes} as JSON")


def engine_command(
    engine: str,
    *,
    model: str = "Qwen/Qwen3-8B",
    think_end_token_id: int | None = None,
    quantum: int | None = None,
    demote_threshold_tokens: int = 5000,
    async_scheduling: bool = True,
    seeded_sampling: bool = False,
) -> EngineCommand:
    """The command for ``engine`` ("vllm" or "sglang"); settings validated as the adapters do.
    ``quantum`` is vLLM's only (default 500): SGLang's hook orders admission only."""
    settings = None
    if engine == "sglang" and quantum is not None:
        raise InvalidArgumentError("quantum applies to vLLM only: SGLang's hook orders admission only")
    if think_end_token_id is not None:
        settings = {"think_end_token_id": think_end_token_id}
        if engine == "vllm":
            settings["quantum"] = 500 if quantum is None else quantum
        settings["demote_threshold_tokens"] = demote_threshold_tokens
        PhaseAwareConfig.from_mapping(settings, quantum=engine == "vllm")  # the checks the engine side runs
    if engine == "vllm":
        return _vllm(model, settings, async_scheduling)
    if engine == "sglang":
        return _sglang(model, settings, seeded_sampling)
    raise InvalidArgumentError(f"engine must be 'vllm' or 'sglang', got {engine!r}")


def _vllm(model: str, settings: dict | None, async_scheduling: bool) -> EngineCommand:
    argv = ["vllm", "serve", model]
    notes = [f"seeded sampling: loaded by reasonserve's vllm.logits_processors entry point (V1 and V2 "
             f"runners); a request opts in with vllm_xargs {{\"{SEED_KEY}\": SEED}}"]  # fmt: skip
    if settings is None:
        notes.append("phase-aware scheduling: off (pass --think-end-token-id to enable it)")
    else:
        scheduler = VLLM_SCHEDULER if async_scheduling else VLLM_SYNC_SCHEDULER
        extra = json.dumps({CONFIG_KEY: settings}, separators=(",", ":"))
        argv += ["--scheduler-cls", scheduler, "--scheduling-policy", "fcfs", "--additional-config", extra]
        if not async_scheduling:
            argv.append("--no-async-scheduling")
        notes.append("phase-aware scheduling: experimental (vLLM's scheduler interface is not public)")
    return EngineCommand(tuple(argv), {}, tuple(notes))


def _sglang(model: str, settings: dict | None, seeded_sampling: bool) -> EngineCommand:
    argv = ["python", "-m", "sglang.launch_server", "--model-path", model]
    env: dict[str, str] = {}
    notes = []
    module, cls = SGLANG_PROCESSOR.split(":")
    if seeded_sampling:
        argv.append("--enable-custom-logit-processor")
        notes += ["SECURITY: --enable-custom-logit-processor makes the server unpickle (dill) and run "
                  "code sent by any client; expose it only to trusted clients",
                  f"seeded sampling: send custom_logit_processor = {cls}.to_str() (from {module}) "
                  f"and custom_params {{\"{SEED_KEY}\": SEED}}"]  # fmt: skip
    else:
        notes.append("seeded sampling: off (pass --seeded-sampling; read the security note it prints)")
    if settings is None:
        notes.append("phase-aware admission: off (pass --think-end-token-id to enable it)")
    else:
        env[SGLANG_ENV] = json.dumps(settings, separators=(",", ":"))
        notes.append("phase-aware admission: reasonserve's sglang.srt.plugins entry point reads "
                     f"{SGLANG_ENV} (SGLang >= 0.5.23)")  # fmt: skip
    return EngineCommand(tuple(argv), env, tuple(notes))


def _installed(dist: str) -> str:
    try:
        return f"{dist} {metadata.version(dist)} installed here"
    except metadata.PackageNotFoundError:
        return f"{dist} is not installed here; install it as docs/use_{dist}.md says"


def run_adapter(args, out) -> int:
    cmd = engine_command(
        args.engine, model=args.model, think_end_token_id=args.think_end_token_id, quantum=args.quantum,
        demote_threshold_tokens=args.demote_threshold_tokens, async_scheduling=not args.no_async_scheduling,
        seeded_sampling=args.seeded_sampling,
    )  # fmt: skip
    if args.json:
        body = {"argv": list(cmd.argv), "env": cmd.env, "notes": list(cmd.notes)}
        print(json.dumps(body, indent=2), file=out)
        return 0
    print(f"# {_installed(args.engine)}", file=out)
    for note in cmd.notes:
        print(f"# {note}", file=out)
    print(cmd.shell(), file=out)
    return 0
