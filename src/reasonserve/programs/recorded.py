"""Self-consistency programs replayed from recorded samples on the simulated cluster
(Dynasor's online protocol, SPEC 2.4; ``reasonserve sim --sc-file``,
``benchmarks/_repro_dynasor.py``).

Each :class:`~reasonserve.sim.programs.workload.SCProgram` runs
:class:`~reasonserve.programs.sc.SelfConsistency` itself on a
:class:`~reasonserve.clients.sim.SimClient` on the cluster, from its arrival time: sample
``j`` (request ``{program_id}/s{j}``) generates the ``j``-th recorded sample's output
tokens and answers its recorded answer, so the program's knob, semantic-entropy
certainty, allocation, aborts and majority vote are the program's own code, timed by the
simulator. With ``reward`` the certainty is that aggregate of the recorded samples'
rewards instead (the program's ``scorer`` reads them). A program's cap is the smaller of
``sc.max_samples`` and its recorded samples.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import pathlib
from collections.abc import Callable, Sequence
from dataclasses import replace

from reasonserve.certainindex.allocation import EvenPolicy, ThresholdPolicy
from reasonserve.certainindex.estimators.reward import RewardCertainty
from reasonserve.clients.protocol import GenerateRequest
from reasonserve.clients.sim import SimClient, SimCluster
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.programs.sc import SelfConsistency
from reasonserve.programs.trace import ProgramResult
from reasonserve.sim.cluster.config import SimConfig
from reasonserve.sim.cluster.result import SimResult
from reasonserve.sim.metrics import summarize
from reasonserve.sim.programs.cli import SCALES
from reasonserve.sim.programs.metrics import program_summary
from reasonserve.sim.programs.workload import SCProgram, load_sc_records, sc_program_workload

__all__ = ["run_recorded_sc", "run_sc_file", "sc_rounds"]


def sc_rounds(cap: int, first_round: int | None = None, allocation: object | None = None) -> SelfConsistency:
    """SC over recorded samples: ``first_round`` samples (None: ``cap``), then the rest
    unless ``allocation`` (None: none, every sample runs) denies more."""
    policy = allocation if allocation is not None else EvenPolicy(cap)
    return SelfConsistency(samples_per_step=cap, first_step=first_round, max_samples=cap, policy=policy)


class _Recorded:
    """What each sample request generates and scores: the recorded sample it names."""

    def __init__(self, programs: Sequence[SCProgram]) -> None:
        self.by_id = {p.program_id: p for p in programs}
        if len(self.by_id) != len(programs):
            raise InvalidArgumentError("program ids must be unique")
        self.rewards: dict[str, float] = {}

    def outputs(self, req: GenerateRequest) -> tuple[int, str]:
        pid, _, j = (req.request_id or "").rpartition("/s")
        p = self.by_id[pid]
        c, k = p.question.classes[int(j)], int(j)
        text = f"[{req.request_id}] \\boxed{{{c}}}" if c >= 0 else f"[{req.request_id}]"
        self.rewards[text] = p.question.rewards[k]
        return p.sample_tokens[k], text

    async def scorer(self, prompt: object, texts: list[str]) -> list[float]:
        return [self.rewards.get(t, math.nan) for t in texts]

    def correct(self, pid: str, out: ProgramResult) -> bool:
        return out.answer is not None and bool(self.by_id[pid].question.class_correct[int(out.answer)])


def run_recorded_sc(programs: Sequence[SCProgram], sc: SelfConsistency, cluster: SimCluster, *,
                    reward: RewardCertainty | None = None) -> tuple[SimResult, list[dict]]:  # fmt: skip
    """Run every program from its arrival; per program: arrival, latency, samples
    finished (its knob), issued, tokens, early stop, last certainty, whether its
    majority is correct."""
    recorded = _Recorded(programs)
    client = SimClient(cluster=cluster, outputs=recorded.outputs)
    if reward is not None:
        sc = replace(sc, scorer=recorded.scorer, reward=reward)

    async def one(p: SCProgram) -> dict:
        await client.sleep_until(p.arrival_s)
        cap = min(sc.max_samples, len(p.sample_tokens))
        mine = replace(sc, max_samples=cap, max_tokens=max(p.sample_tokens))
        out = await mine.run(client, p.prompt, program_id=p.program_id)
        t = out.trace
        return {"program_id": p.program_id, "arrival_s": p.arrival_s, "difficulty": p.difficulty,
                "latency_s": client.now_s - p.arrival_s,
                "samples": sum(e["kind"] == "sample" for e in t.events), "issued": t.num_requests,
                "tokens": t.tokens_generated, "stopped_early": t.exit == "denied", "certainty": out.certainty,
                "correct": recorded.correct(p.program_id, out)}  # fmt: skip

    async def main() -> list[dict]:
        return list(await asyncio.gather(*(one(p) for p in programs)))

    rows = client.run(main())
    return client.result(), rows


def _sc_of(args: argparse.Namespace) -> SelfConsistency:
    if args.sc_threshold is None:
        return sc_rounds(args.sc_cap)
    if not 1 <= args.sc_detect_at <= args.sc_cap:
        raise InvalidArgumentError(f"--sc-detect-at must be in [1, --sc-cap], got {args.sc_detect_at}")
    allocation = ThresholdPolicy(args.sc_threshold, detect_at=args.sc_detect_at, recheck_every=args.sc_cap,
                                 max_knob=args.sc_cap)  # fmt: skip
    return sc_rounds(args.sc_cap, args.sc_detect_at, allocation)


def run_sc_file(
    args: argparse.Namespace, config: SimConfig, factory: Callable[[], object], router: object
) -> dict:
    """``reasonserve sim --sc-file``: SC programs under ``factory()``'s policy (which sees
    the programs' progress); the request summary plus program metrics."""
    if not args.base_deadline > 0:
        raise InvalidArgumentError(f"--base-deadline must be > 0, got {args.base_deadline}")
    if isinstance(args.sc_cap, bool) or not isinstance(args.sc_cap, int) or args.sc_cap < 1:
        raise InvalidArgumentError(f"--sc-cap must be >= 1, got {args.sc_cap}")
    path = pathlib.Path(args.data) / args.sc_file
    sc = _sc_of(args)
    programs = sc_program_workload(load_sc_records(path), args.rate, args.requests, args.seed)
    result, rows = run_recorded_sc(programs, sc, SimCluster(config, factory, router))  # type: ignore[arg-type]
    summary = summarize(result)
    summary["programs"] = program_summary(rows, args.base_deadline, SCALES)
    summary.update(sc_file=str(path), rate_programs_s=args.rate, program=repr(sc))
    return summary
