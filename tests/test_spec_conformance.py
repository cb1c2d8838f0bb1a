"""Conformance with the shared SPEC (``../shared/docs/SPEC.md``) and ARCHITECTURE, as a test
written against those pages would check it: the names they give, importable from the
packages they name (and in those packages' ``__all__``); the per-request
``is_deterministic`` flag (SPEC 5, O4); the reasoning-program hooks (SPEC 2.1); the
finish-time fairness metric (SPEC 2.3); the DVR window and group flags (SPEC 5); the
defaults the SPEC pins with numbers. Expected values are derived by hand in comments."""

from __future__ import annotations

import asyncio
import importlib
import math
from collections import Counter

import pytest
import torch

from reasonserve.certainindex import EvenPolicy, ThresholdPolicy, entropy_certainty
from reasonserve.core import InvalidArgumentError, Phase, RequestView
from reasonserve.engine import SamplingParams
from reasonserve.programs import ProgramError, ReasoningProgram

# (package, names a SPEC/ARCHITECTURE reader imports from it)
SURFACE = [
    ("reasonserve", ["deterministic_mode", "is_deterministic_mode"]),
    ("reasonserve.ops", ["matmul", "linear", "rms_norm", "log_softmax", "softmax", "mean", "attention",
                         "decode_attention", "paged_attention", "sample", "greedy", "gumbel_noise",
                         "deterministic_mode", "is_deterministic_mode", "matmul_reference", "linear_reference",
                         "rms_norm_reference", "log_softmax_reference", "softmax_reference", "mean_reference",
                         "attention_reference"]),
    ("reasonserve.core", ["Phase", "Admit", "Preempt", "Migrate", "Stop", "Abort", "Order", "TokenBudget",
                          "Decision", "RequestView", "SchedulerView", "ProgramView", "InstanceView",
                          "SchedulingPolicy", "check_policy", "ReasonserveError", "InvalidArgumentError",
                          "InvalidTypeError", "PolicyError", "ImplementationUnavailableError",
                          "UnknownRequestError"]),
    ("reasonserve.certainindex", ["PRESETS", "HESITATION_WORDS", "ProbeConsistency", "TVStability",
                                  "tv_probe_bound", "SemanticEntropy", "entropy_certainty", "RewardCertainty",
                                  "Combined", "length_certainty", "logprob_certainty", "extract_answer",
                                  "extract_boxed", "extract_probe_answer", "equivalent", "normalize_answer",
                                  "ThresholdPolicy", "ParetoCapPolicy", "ParetoCurve", "EvenPolicy",
                                  "LengthPolicy", "EmbeddingClusterer", "jaccard_clusters"]),
    ("reasonserve.policies", ["FCFSPolicy", "RoundRobinPolicy", "PascalPolicy", "DynasorPolicy", "AppFIFOPolicy",
                              "LPMPolicy", "TokenPacer", "PascalRouter", "SelectSpec", "TwoPhaseSpeculation",
                              "LookaheadVerification", "PrefixAwarePolicy", "RooflineKVAllocator", "REGISTRY",
                              "Admit", "Preempt", "Migrate", "Stop"]),
    ("reasonserve.dvr", ["DVRState", "DVRCounters", "accept", "plan_groups", "verify_inputs"]),
    ("reasonserve.programs", ["ReasoningProgram", "CoTWithProbe", "SelfConsistency", "Rebase", "MCTS",
                              "BeamSearchPRM", "DEFAULT_PROBE_SUFFIX"]),
    ("reasonserve.engine", ["Engine", "EngineConfig", "SamplingParams"]),
    ("reasonserve.sim", ["simulate", "SimConfig", "RooflineCostModel", "summarize", "tail_ttft_by_bin"]),
    ("reasonserve.clients", ["EngineClient"]),
    ("reasonserve.serve", ["create_app", "serve", "ServeConfig"]),
    ("reasonserve.gateway", ["create_gateway_app", "GatewayConfig"]),
]  # fmt: skip


@pytest.mark.parametrize("package,names", SURFACE, ids=[p for p, _ in SURFACE])
def test_spec_names_are_exported_where_the_spec_puts_them(package, names):
    module = importlib.import_module(package)
    missing = [n for n in names if n not in module.__all__]
    assert not missing, f"{package}.__all__ lacks {missing}"
    for name in module.__all__:  # and everything exported resolves
        assert getattr(module, name) is not None, f"{package}.{name}"


# SPEC 5 (O4): a per-request flag `is_deterministic`, default False.


def test_sampling_params_take_is_deterministic_default_false():
    assert SamplingParams().is_deterministic is False
    on = SamplingParams(is_deterministic=True, seed=3)
    assert on.deterministic is True and on.is_deterministic is True
    assert on == SamplingParams(deterministic=True, seed=3)  # one flag, two spellings
    assert SamplingParams(deterministic=True).is_deterministic is True


@pytest.mark.parametrize(
    "kwargs", [{"is_deterministic": 1}, {"deterministic": True, "is_deterministic": False}]
)
def test_is_deterministic_rejects_non_bools_and_conflicts(kwargs):
    with pytest.raises(InvalidArgumentError, match="is_deterministic"):
        SamplingParams(**kwargs)


def test_request_view_reads_is_deterministic():
    view = RequestView("r", 0.0, Phase.PREFILL, 4, 0, 0, deterministic=True)
    assert view.is_deterministic is True
    assert view._replace(deterministic=False).is_deterministic is False


def test_http_body_accepts_is_deterministic_and_refuses_a_conflict():
    pydantic = pytest.importorskip("pydantic")
    from reasonserve.serve.protocol import ChatCompletionRequest, CompletionRequest

    body = CompletionRequest.model_validate({"prompt": "hi", "is_deterministic": True})
    assert body.deterministic is True
    chat = ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "hi"}],
                                                 "is_deterministic": False})  # fmt: skip
    assert chat.deterministic is False
    with pytest.raises(pydantic.ValidationError, match="disagree"):
        CompletionRequest.model_validate({"prompt": "hi", "deterministic": True, "is_deterministic": False})
    with pytest.raises(pydantic.ValidationError):  # strict: a bool, not "yes"
        CompletionRequest.model_validate({"prompt": "hi", "is_deterministic": "yes"})


def test_a_served_is_deterministic_request_is_verified(tmp_path):
    """Only deterministic requests are verified (DVR), so verify passes prove the flag arrived."""
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("uvicorn")
    from _live_server import TIMEOUT_S, live_server, tiny_engine

    with live_server(tiny_engine(tmp_path)) as live:
        body = {"prompt": [1, 2, 3], "max_tokens": 5, "seed": 1, "ignore_eos": True}
        assert httpx.post(live.url + "/v1/completions", json=body, timeout=TIMEOUT_S).status_code == 200
        assert live.runner.engine.metrics().verify_passes == 0
        reply = httpx.post(live.url + "/v1/completions", json={**body, "is_deterministic": True},
                           timeout=TIMEOUT_S)  # fmt: skip
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 5
        assert live.runner.engine.metrics().verify_passes >= 1


# SPEC 5: counters exposed per request: rollbacks, tokens rolled back, verification windows.


def test_dvr_counters_are_exposed_per_request(tmp_path):
    from reasonserve.engine import Engine, EngineConfig, make_tiny_checkpoint

    path = make_tiny_checkpoint(tmp_path / "m", hidden_size=128, intermediate_size=256)
    # Every fast-path token is wrong. The invariant prefill's first token is verified; then
    # each pass replaces the first unverified token and discards the rest: one token per
    # pass, so 9 passes (and 9 rollbacks) reach 10 tokens. Discarded: 4 a pass while 4 fit
    # (verified 1..6: 24), then 3, 2, 1 as the request hits max_tokens: 30.
    engine = Engine.from_pretrained(
        path, EngineConfig(dvr_window=4), fast_path_fault=lambda _r, _p, t: (t + 1) % 256
    )
    det = SamplingParams(max_tokens=10, temperature=0.9, seed=5, is_deterministic=True, ignore_eos=True)
    outs = engine.generate(
        [[3, 1, 4, 1, 5], [2, 7, 1]], [det, SamplingParams(max_tokens=6, seed=1, ignore_eos=True)]
    )
    m = outs[0].metrics
    assert (m.num_verify_passes, m.num_rollbacks, m.num_tokens_rolled_back) == (9, 9, 30)
    other = outs[1].metrics  # not deterministic: never verified
    assert (other.num_verify_passes, other.num_rollbacks, other.num_tokens_rolled_back) == (0, 0, 0)
    totals = engine.metrics()
    assert (totals.verify_passes, totals.rollbacks, totals.tokens_rolled_back) == (9, 9, 30)


# SPEC 5: verify window and group are flags of the server too.


def test_serve_flags_set_the_dvr_window_and_group(tmp_path):
    from reasonserve.cli import _parser, _serve_engine_config
    from reasonserve.engine import make_tiny_checkpoint
    from reasonserve.serve import launch

    path = str(make_tiny_checkpoint(tmp_path / "m"))
    tokenizer = launch.load_serving_tokenizer(path)
    args = _parser().parse_args(["serve", "--model", path, "--dvr-window", "64", "--dvr-group-size", "8"])
    config = _serve_engine_config(args, tokenizer)
    assert (config.dvr_window, config.dvr_group_size) == (64, 8)  # the reference code's flags
    default = _serve_engine_config(_parser().parse_args(["serve", "--model", path]), tokenizer)
    assert (default.dvr_window, default.dvr_group_size) == (8, 4)
    with pytest.raises(InvalidArgumentError, match="dvr_window"):
        _serve_engine_config(_parser().parse_args(["serve", "--model", path, "--dvr-window", "0"]), tokenizer)


# SPEC 2.1: a program holds certainindex, knob and state; users implement
# update_certainindex() and execute(); the intra-program policy grants or denies (2.2).


class SyncVote(ReasoningProgram):
    """Self-consistency as the paper's Fig. 6c writes it, over a fixed answer stream;
    ``execute`` is a plain method here, a coroutine in :class:`VoteProgram`."""

    name = "vote"

    def __init__(self, answers, per_step):
        super().__init__(state=[])
        self.source, self.per_step = iter(answers), per_step

    def execute(self):
        self.state.extend(next(self.source) for _ in range(self.per_step))
        self.knob += self.per_step
        self.tokens += 10 * self.per_step

    def update_certainindex(self):
        counts = torch.tensor([list(Counter(self.state).values())])
        return float(entropy_certainty(counts)[0])

    def aggregate(self):
        answer = Counter(self.state).most_common(1)[0][0]
        return answer, f"\\boxed{{{answer}}}"


class VoteProgram(SyncVote):
    async def execute(self):
        await asyncio.sleep(0)  # a real program awaits its engine client here
        super().execute()


def test_program_hooks_stop_when_the_threshold_policy_denies():
    # Knob 0: certainty 0, granted. Five "42": one group, certainty 1 >= 0.7 at detect@5: denied.
    program = VoteProgram(["42"] * 10, per_step=5)
    result = asyncio.run(program.run(ThresholdPolicy(0.7, detect_at=5)))
    assert (result.answer, result.certainty, program.knob, program.tokens) == ("42", 1.0, 5, 50)
    assert result.trace.exit == "denied" and [e["knob"] for e in result.trace.events] == [5]


def test_program_hooks_run_to_the_cap_when_uncertain():
    # After 5: five singletons, H = log 5, certainty (log 5 - log 5) / log 5 = 0: granted.
    # After 10: "1" x6 and four singletons: H = -(0.6 ln 0.6 + 4 x 0.1 ln 0.1), certainty
    # (ln 10 - H) / ln 10 = 0.4669 < 0.7; max_knob=10 is the hard cap: exit "budget".
    answers = ["1", "2", "3", "4", "5", "1", "1", "1", "1", "1"]
    result = asyncio.run(VoteProgram(answers, per_step=5).run(ThresholdPolicy(0.7, detect_at=5), max_knob=10))
    h = -(0.6 * math.log(0.6) + 4 * 0.1 * math.log(0.1))
    assert result.answer == "1" and result.trace.exit == "budget"
    assert result.certainty == pytest.approx((math.log(10) - h) / math.log(10), abs=1e-6)
    assert [e["certainty"] for e in result.trace.events] == pytest.approx([0.0, result.certainty], abs=1e-6)


def test_program_hooks_baseline_even_and_sync_execute():
    # baseline-even: the same cap (3 units) whatever the certainty; execute may be sync.
    program = SyncVote(["7"] * 10, per_step=1)
    result = asyncio.run(program.run(EvenPolicy(3)))
    assert (program.knob, result.trace.exit, result.answer) == (3, "denied", "7")


class _Stuck(VoteProgram):
    async def execute(self):  # forgets to advance knob
        self.state.append(next(self.source))


class _Overconfident(VoteProgram):
    def update_certainindex(self):
        return 1.5


@pytest.mark.parametrize("cls,match", [(_Stuck, "advance knob"), (_Overconfident, r"in \[0, 1\]")])
def test_program_hooks_that_break_the_contract_fail_instead_of_hanging(cls, match):
    program = cls(["1"] * 100, per_step=1)
    with pytest.raises(ProgramError, match=match) as err:
        asyncio.run(program.run(ThresholdPolicy(1.0)))
    assert err.value.trace.exit == "error"


def test_program_run_validates_its_arguments():
    with pytest.raises(InvalidArgumentError, match="max_knob"):
        asyncio.run(VoteProgram(["1"], 1).run(EvenPolicy(1), max_knob=0))
    with pytest.raises(InvalidArgumentError, match="grant"):
        asyncio.run(VoteProgram(["1"], 1).run(object()))


# SPEC 2.3: finish-time fairness phi = T_shared / #output tokens.


def test_finish_time_fairness_is_latency_per_output_token():
    from reasonserve.sim.programs.metrics import finish_time_fairness, program_summary

    def row(latency_s, tokens):
        return {"latency_s": latency_s, "tokens": tokens, "difficulty": 1, "samples": 1, "stopped_early": False,
                "correct": True}  # fmt: skip

    rows = [row(10.0, 100), row(3.0, 10), row(None, 50), row(2.0, 0)]
    assert finish_time_fairness(rows) == [0.1, 0.3, math.inf, math.inf]
    phi = program_summary(rows[:2] * 5, 100.0, (1.0,))["phi_s_per_token"]
    assert phi == {"p50": 0.3, "p90": 0.3, "max": 0.3}  # sorted: 0.1 x5, 0.3 x5
    assert program_summary(rows[:1], 100.0, (1.0,))["phi_s_per_token"]["max"] == 0.1


# SPEC 1.4: the paper's thresholds (Table 3); a program is certain only if all signals pass.

TABLE_3 = [  # algorithm, dataset, H threshold, R threshold, detect@knob (None: "/")
    ("sc", "math", 0.7, None, 5),
    ("sc", "gsm8k", 0.7, None, 5),
    ("sc", "livecodebench", 0.4, None, 5),
    ("mcts", "gsm8k", 0.99, 0.4, 3),
    ("mcts", "asdiv", None, 0.4, 3),
    ("rebase", "gsm8k", 0.85, 0.99, 16),
    ("rebase", "math", 0.75, None, 16),
]


@pytest.mark.parametrize("algorithm,dataset,h,r,detect_at", TABLE_3)
def test_paper_thresholds_are_table_3(algorithm, dataset, h, r, detect_at):
    from reasonserve.certainindex import PAPER_THRESHOLDS

    combined, detect = PAPER_THRESHOLDS[(algorithm, dataset)]
    assert detect == detect_at
    want = {name: t for name, t in (("entropy", h), ("reward", r)) if t is not None}
    assert dict(combined.thresholds) == want
    assert combined.evaluate(want).certain  # each signal exactly at its threshold passes
    for name in want:  # and any one signal below its threshold makes the program uncertain
        assert not combined.evaluate({**want, name: want[name] - 0.01}).certain
    assert len(PAPER_THRESHOLDS) == len(TABLE_3)


# SPEC 2.3 (Dynasor Fig. 7): two programs x two requests (4 ms / 5 ms), batch 2: gang
# scheduling gives a mean program latency of 6.5 ms, arrival order 9 ms.


def _mean_program_latency(order, ms):
    """Two slots, each request runs as soon as a slot frees (list scheduling, in ``order``)."""
    slots, done = [0.0, 0.0], {}
    for rid in order:
        start = min(slots)
        slots[slots.index(start)] = end = start + ms[rid[0]]
        done[rid[0]] = max(done.get(rid[0], 0.0), end)
    return sum(done.values()) / len(done)


@pytest.mark.parametrize("policy_name,want_ms", [("dynasor", 6.5), ("fcfs", 9.0)])
def test_gang_scheduling_reproduces_figure_7(policy_name, want_ms):
    from reasonserve.core import Admit, SchedulerView
    from reasonserve.policies import REGISTRY

    ms = {"a": 4.0, "b": 5.0}  # program a's requests take 4 ms, b's 5 ms
    arrivals = ["a1", "b1", "a2", "b2"]  # interleaved arrivals, all at about t=0
    waiting = [RequestView(r, i * 1e-6, Phase.PREFILL, 8, 0, 0, blocks_needed=1, program_id=r[0])
               for i, r in enumerate(arrivals)]  # fmt: skip
    policy, order = REGISTRY[policy_name](), []
    while waiting:  # the order in which the policy fills two free slots, round after round
        view = SchedulerView(0.0, tuple(waiting), (), 100, 16, max_num_seqs=2)
        admitted = [d.request_id for d in policy.decide(view) if isinstance(d, Admit)]
        assert len(admitted) == min(2, len(waiting)), admitted
        order += admitted
        waiting = [r for r in waiting if r.request_id not in admitted]
    assert order == (["a1", "a2", "b1", "b2"] if policy_name == "dynasor" else arrivals)
    assert _mean_program_latency(order, ms) == want_ms


# Numbers the SPEC pins.


def _defaults():
    from reasonserve.certainindex import HESITATION_WORDS, PRESETS
    from reasonserve.cost import RooflineCostModel
    from reasonserve.policies import PascalPolicy, SelectSpec, TokenPacer
    from reasonserve.programs import DEFAULT_PROBE_SUFFIX
    from reasonserve.sim import SimConfig

    suffix = "... Oh, I suddenly got the answer to the whole problem, **Final Answer**\n\n\\[ \\boxed{"
    return [
        ("1.1 presets", PRESETS, {"mild": (8, 64), "low": (5, 64), "mid": (3, 64), "high": (2, 64),
                                  "crazy": (2, 32)}),
        ("1.1 hesitation words", set(HESITATION_WORDS), {"wait", "hmm", "hold", "but", "okay", "no"}),
        ("1.1 probe suffix", DEFAULT_PROBE_SUFFIX, suffix),
        ("3 quantum", PascalPolicy().quantum, 500),
        ("3 demotion", PascalPolicy().demote_threshold_tokens, 5000),
        ("3 TPOT", TokenPacer().tpot_s, 0.1),
        ("3 TTFAT, QoE SLO", (SimConfig().ttfat_slo_s, SimConfig().qoe_slo), (0.25, 0.95)),
        ("3 migration", RooflineCostModel.__dataclass_fields__["migration_s_per_2048_tokens"].default, 0.040),
        ("4 truncation R", SelectSpec().truncation_mean, 0.85),
    ]  # fmt: skip


def test_defaults_the_spec_pins():
    for item, got, want in _defaults():
        assert got == want, item
