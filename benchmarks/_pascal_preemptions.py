"""Why PASCAL's answering requests miss QoE on the simulator: every preemption of an
answering request, how far its reader was ahead (the token pacer's buffer, seconds) and
how long it then waited for its next token. A diagnostic for docs/benchmarks.md, on the
workload of ``benchmarks/policies.py`` (it wraps ``SimInstance._preempt`` to log).

    python benchmarks/_pascal_preemptions.py --fraction 1.0     # the high rate
    python benchmarks/_pascal_preemptions.py --fraction 0.75    # medium
"""

from __future__ import annotations

import argparse
import bisect
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import policies
from reasonserve.policies.pacer import TokenPacer
from reasonserve.sim import load_lengths, poisson_workload, simulate, summarize
from reasonserve.sim.cluster.instance import SimInstance


def _quantiles(values: list[float]) -> str:
    ordered = sorted(values)
    return "/".join(f"{ordered[int(q * (len(ordered) - 1))]:.1f}" for q in (0.1, 0.5, 0.9))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fraction", type=float, default=1.0, help="arrival rate / capacity estimate")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--setup", default="pascal", choices=sorted(policies.SETUPS))
    parser.add_argument("--data", type=pathlib.Path, default=policies.ROOT.parent / "shared" / "data")
    args = parser.parse_args()
    table = load_lengths("servegen", args.data, seed=0)
    rate = args.fraction * policies._capacity_rps(table, policies.CONFIG)
    reqs = poisson_workload(table, rate, args.requests, seed=0)
    pacer, log = TokenPacer(policies.CONFIG.tpot_slo_s), []
    preempt = SimInstance._preempt

    def logged(inst, s, mode, now_s):
        if s.answer_times and s.num_output < s.req.output_tokens:
            log.append((s, now_s, pacer.released_until(s.answer_times) - now_s))
        return preempt(inst, s, mode, now_s)

    SimInstance._preempt = logged
    factory, router = policies.SETUPS[args.setup]
    result = simulate(reqs, policies.CONFIG, factory, router)
    print(f"{args.setup} at {rate:.2f} req/s: SLO violations {summarize(result)['slo_violation_rate']:.3f}")
    violating = {s.request_id for s in result.sequences if pacer.qoe(s.answer_times) < 0.95}
    rows = []
    for s, t, lead in log:
        k = bisect.bisect_right(s.answer_times, t)
        wait = s.answer_times[k] - t if k < len(s.answer_times) else 0.0
        rows.append((s.request_id in violating, lead, wait))
    for label, sel in (("all", rows), ("violating requests", [r for r in rows if r[0]])):
        if sel:
            outlasted = sum(r[2] > r[1] for r in sel) / len(sel)
            print(f"  {label}: {len(sel)} answering preemptions; reader ahead s p10/50/90 "
                  f"{_quantiles([r[1] for r in sel])}; wait for the next token s p10/50/90 "
                  f"{_quantiles([r[2] for r in sel])}; wait > buffer {outlasted:.2f}")
    preempted = {s.request_id for s, _, _ in log}
    never = len(violating - preempted)
    print(f"  violating requests never preempted while answering: {never} of {len(violating)}")


if __name__ == "__main__":
    main()
