"""The token pacer's fold carried on each request (``SimSequence.paced_tokens`` /
``paced_s``, advanced by :meth:`SimInstance.paced_until`, reset when the request finishes):
every paced time an instance reports is the fold over all the request's answer tokens from
the first, whichever instance advanced it before (migrations) and across swaps; a finished
request keeps no pacer state, so results do not depend on how often views were built
(quiet stretches build fewer). (Reasoning programs' requests have no answer tokens: a
program stop never meets a pacer state.)"""

import pathlib

import pytest

from reasonserve.policies.pacer import TokenPacer
from reasonserve.policies.pascal import PascalPolicy
from reasonserve.policies.router import PascalRouter
from reasonserve.sim import SimConfig, SimRequest, load_lengths, poisson_workload, simulate
from reasonserve.sim.cluster.instance import SimInstance
from reasonserve.sim.cluster.sequence import SimSequence

DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data"


def _scratch(cfg: SimConfig, s: SimSequence) -> float | None:
    """The pacer's fold over every answer token ``s`` has, from its first."""
    return TokenPacer(cfg.tpot_slo_s).released_until(s.answer_times)


def test_instances_resume_each_others_fold():
    """Two instances take turns advancing one request's fold, by one token and by several:
    each answer is the fold from the first token, bit for bit (no per-instance state)."""
    cfg = SimConfig(num_instances=2, model="qwen2.5-7b")
    cost = cfg.cost_model()
    a, b = (SimInstance(str(i), cfg, cost, PascalPolicy()) for i in range(2))
    s = SimSequence(SimRequest("r", 0.0, 4, 1, 40), 0.0)
    stamps = [0.3, 0.31, 0.9, 0.95, 0.951, 2.0, 2.07, 2.1, 5.0, 5.03, 5.06, 5.09]
    for k, (lo, hi) in enumerate([(0, 1), (1, 2), (2, 5), (5, 6), (6, 9), (9, 12)]):
        s.answer_times.extend(stamps[lo:hi])
        inst = (a, b, b, a, b, a)[k]
        assert repr(inst.paced_until(s)) == repr(_scratch(cfg, s))
        other = a if inst is b else b
        assert repr(other.paced_until(s)) == repr(_scratch(cfg, s))  # nothing new: unchanged
        assert s.paced_tokens == len(s.answer_times)


def _checked(monkeypatch) -> list[tuple[bool, bool]]:
    """Patches :meth:`SimInstance.paced_until` to compare every answer with the fold from
    scratch; returns a log of (went on from a fold so far, after a migration)."""
    real, log = SimInstance.paced_until, []

    def checked(self, s):
        resumed = 0 < s.paced_tokens < len(s.answer_times)
        got = real(self, s)
        assert repr(got) == repr(_scratch(self.config, s)), s.request_id
        log.append((resumed, s.num_migrations > 0))
        return got

    monkeypatch.setattr(SimInstance, "paced_until", checked)
    return log


@pytest.mark.skipif(not (DATA / "serving_traces").is_dir(), reason="needs the shared ServeGen trace")
@pytest.mark.parametrize("skip", [False, True])
def test_the_carried_fold_is_the_fold_from_scratch_across_migrations_and_swaps(monkeypatch, skip):
    log = _checked(monkeypatch)
    table = load_lengths("servegen", DATA, seed=0)
    reqs = [r for r in poisson_workload(table, 7.0, 80, seed=1) if r.prompt_tokens + r.output_tokens <= 6000]
    cfg = SimConfig(num_instances=4, hardware="h100", model="qwen2.5-32b", preemption="swap",
                    kv_capacity_tokens=6000, skip_quiet_steps=skip)  # fmt: skip
    pacer = TokenPacer(0.05)
    res = simulate(reqs, cfg, lambda: PascalPolicy(quantum=50, demote_threshold_tokens=500, starving_first=pacer),
                   PascalRouter())  # fmt: skip
    assert any(resumed for resumed, _ in log)  # folds went on from where they were
    assert sum(s.num_swaps for s in res.sequences) > 0
    assert sum(moved for _, moved in log) > 0  # folds of migrated requests (PASCAL moves them as they start
    # answering: the carried fold is read from there; test_instances_resume_each_others_fold covers the rest)
    assert all(s.paced_tokens == 0 and s.paced_s is None for s in res.sequences)  # reset at the finish
