"""The gateway's request controls, program plans, priorities and error mapping (no servers)."""

from __future__ import annotations

import asyncio
import json

import pytest

from reasonserve.certainindex import AgreeSpanRule, EvenPolicy, ThresholdPolicy
from reasonserve.certainindex.stopping import WindowConsistencyRule
from reasonserve.clients.errors import (
    HostError,
    HostRejectedError,
    MalformedResponseError,
    RequestTimeoutError,
)
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.gateway import GatewayConfig, SelfConsistencySpec
from reasonserve.gateway.errors import upstream_error
from reasonserve.gateway.options import plan_program
from reasonserve.gateway.program import ProgramTimeoutError
from reasonserve.gateway.protocol import GatewayChatRequest, GatewayCompletionRequest
from reasonserve.gateway.scheduling import CERTAINTY_LEVELS, ESCALATED, ProgramScheduler
from reasonserve.programs import ProgramError, Trace
from reasonserve.programs.cot import host_default_rule
from reasonserve.serve.config import ServeConfig
from reasonserve.serve.errors import ApiError
from reasonserve.serve.parsing import parse_body

CFG = GatewayConfig("http://upstream", served_model_name="gw", limits=ServeConfig(max_tokens_limit=4096))
MESSAGES = [{"role": "user", "content": "hi"}]


def chat(**fields) -> GatewayChatRequest:
    return parse_body(json.dumps({"messages": MESSAGES, **fields}).encode(), GatewayChatRequest)


def plan(cfg: GatewayConfig = CFG, **fields):
    return plan_program(chat(**fields), cfg, "</think>", "\\boxed{")


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"early_exit": "sometimes"}, "early_exit"),
        ({"early_exit": {"agreement": 0}}, "early_exit.agreement"),
        ({"early_exit": {"probe_interval_tokens": 64, "window": 3}}, "early_exit.window"),
        ({"early_exit": {"probe_interval_tokens": "64"}}, "early_exit.probe_interval_tokens"),
        ({"thinking_token_budget": -1}, "thinking_token_budget"),
        ({"thinking_token_budget": 12.0}, "thinking_token_budget"),
        ({"self_consistency": {"n": 0}}, "self_consistency.n"),
        ({"self_consistency": {"n": 4, "stop": "vote"}}, "self_consistency.stop"),
        ({"self_consistency": {"n": 4, "answer": "best"}}, "self_consistency.answer"),
        ({"reasoning_effort": "high"}, "reasoning_effort"),
    ],
)
def test_controls_are_strict_and_errors_name_the_field(fields, param):
    with pytest.raises(ApiError) as err:
        chat(**fields)
    assert err.value.status == 400 and err.value.param == param, err.value.message


def test_the_certified_rule_is_the_default_and_probes_at_its_fitted_interval():
    p = plan()
    assert p.kind == "cot" and p.early_exit == "certified"
    assert p.cot.rule == host_default_rule() and p.cot.chunk_tokens == 64
    assert p.cot.stop == ("</think>",) and p.cot.think_end == "</think>"
    assert p.thinking_budget == p.max_tokens == 4096  # no budget: the whole max_tokens


@pytest.mark.parametrize(("name", "window", "interval"), [("mild", 8, 64), ("mid", 3, 64), ("crazy", 2, 32)])
def test_presets_are_dynasors(name, window, interval):
    p = plan(early_exit=name)
    assert p.cot.rule == AgreeSpanRule(k_probes=window, min_tokens=0) and p.cot.chunk_tokens == interval


def test_a_custom_rule_maps_every_field():
    spec = {"probe_interval_tokens": 16, "agreement": 5, "min_tokens": 100, "hesitation": False}
    p = plan(early_exit=spec)
    assert p.cot.rule == AgreeSpanRule(k_probes=5, min_tokens=100, hesitation=False)
    assert p.cot.chunk_tokens == 16 and p.early_exit == "custom"


def test_a_tolerance_lets_some_probes_disagree():
    p = plan(early_exit={"probe_interval_tokens": 32, "agreement": 5, "tolerance": 1})
    assert p.cot.rule == WindowConsistencyRule(5, 1) and p.cot.chunk_tokens == 32
    for bad in ({"agreement": 3, "tolerance": 3}, {"rule": "certified", "tolerance": 1}):
        with pytest.raises(ApiError) as err:
            plan(early_exit=bad)
        assert err.value.status == 400 and err.value.param == "early_exit.tolerance"


def test_the_certified_rule_at_another_probe_interval():
    p = plan(early_exit={"rule": "certified", "probe_interval_tokens": 128})
    assert p.cot.rule == host_default_rule() and p.cot.chunk_tokens == 128 and p.early_exit == "certified"
    with pytest.raises(ApiError) as err:
        plan(early_exit={"rule": "certified", "agreement": 4})
    assert err.value.status == 400 and err.value.param == "early_exit.agreement"


def test_thinking_budget_request_beats_default_and_never_passes_max_tokens():
    cfg = GatewayConfig("http://upstream", served_model_name="gw", default_thinking_token_budget=300)
    assert plan(cfg).thinking_budget == 300
    assert plan(cfg, thinking_token_budget=50).thinking_budget == 50
    assert plan(cfg, thinking_token_budget=500, max_tokens=200).thinking_budget == 200
    off = plan(cfg, early_exit="off", thinking_token_budget=40, max_tokens=90)
    assert (off.kind, off.thinking_budget, off.max_tokens) == ("think", 40, 90)


def test_self_consistency_stop_rules():
    entropy = plan(self_consistency={"n": 6, "threshold": 0.8, "min_samples": 3, "samples_per_step": 2})
    assert entropy.kind == "sc" and entropy.sc.max_samples == 6 and entropy.sc.samples_per_step == 2
    assert entropy.sc.policy == ThresholdPolicy(0.8, detect_at=3, max_knob=6)
    agree = plan(self_consistency={"n": 6, "stop": "agreement"})
    assert agree.sc.policy == ThresholdPolicy(1.0, detect_at=2, max_knob=6)
    assert plan(self_consistency={"n": 5, "stop": "none"}).sc.policy == EvenPolicy(5)
    with pytest.raises(ApiError, match="min_samples"):
        plan(self_consistency={"n": 2, "min_samples": 3})


def test_gateway_default_self_consistency_yields_to_a_request_early_exit():
    cfg = GatewayConfig(
        "http://upstream", served_model_name="gw", default_self_consistency=SelfConsistencySpec(n=3)
    )
    assert plan(cfg).kind == "sc"
    assert plan(cfg, early_exit="mid").kind == "cot"
    for contradiction in ({"early_exit": "mid"}, {"thinking_token_budget": 100}):
        with pytest.raises(ApiError) as err:
            plan(self_consistency={"n": 3}, **contradiction)
        assert err.value.status == 400 and err.value.param == next(iter(contradiction))


@pytest.mark.parametrize(
    ("fields", "status", "param"),
    [
        ({"n": 2}, 400, "n"),
        ({"logprobs": True}, 400, "logprobs"),
        ({"tools": [{"type": "function"}]}, 400, "tools"),
        ({"max_tokens": 5000}, 400, "max_tokens"),
        ({"model": "other"}, 404, "model"),
        ({"priority": 3}, 400, "priority"),
        ({"chat_template": "{{ messages }}"}, 400, "chat_template"),
    ],
)
def test_parameters_the_gateway_cannot_honour_are_refused(fields, status, param):
    with pytest.raises(ApiError) as err:
        plan(**fields)
    assert (err.value.status, err.value.param) == (status, param)


def test_completion_requests_take_the_same_controls():
    body = parse_body(b'{"prompt": "2+2?", "early_exit": "high", "max_tokens": 64}', GatewayCompletionRequest)
    p = plan_program(body, CFG, "</think>", "{")
    assert p.kind == "cot" and p.max_tokens == 64 and p.cot.rule == AgreeSpanRule(k_probes=2, min_tokens=0)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_priorities_gang_sjf_by_certainty_and_escalation():
    clock = Clock()
    sched = ProgramScheduler(max_programs=8, starvation_bound_s=60.0, clock=clock)
    early, late, fresh = Trace("cot"), Trace("cot"), Trace("sc")
    a = sched.admit(early)
    clock.now += 10
    b = sched.admit(late)
    c = sched.admit(fresh)
    assert sched.priority(c) == 0  # no certainty read yet
    late.event("probe", certainty=0.9)
    early.event("probe", certainty=0.25)
    early.event("chunk", tokens=64)  # a later event without a certainty does not hide the last one
    assert (
        sched.priority(b)
        == round(0.9 * CERTAINTY_LEVELS)
        > sched.priority(a)
        == round(0.25 * CERTAINTY_LEVELS)
    )
    assert sched.priority(b) == sched.priority(b)  # gang: the same value for every request at once
    clock.now += 55  # a: 65 s live, escalated; b and c: 55 s
    assert sched.priority(a) > ESCALATED > sched.priority(b)
    clock.now += 10  # now all three are escalated: arrival order
    assert sched.priority(a) > sched.priority(b) == sched.priority(c) > ESCALATED
    assert sched.priority(a) <= 2**31 - 1


def test_priorities_can_be_switched_off():
    sched = ProgramScheduler(max_programs=8, starvation_bound_s=1e-9, priorities=False)
    trace = Trace("cot")
    trace.event("probe", certainty=0.8)
    assert sched.priority(sched.admit(trace)) == 0  # neither certainty nor escalation


def test_admission_past_the_limit_is_429_and_release_frees_a_seat():
    sched = ProgramScheduler(max_programs=2, starvation_bound_s=60.0)
    first = sched.admit(Trace("cot"))
    sched.admit(Trace("cot"))
    with pytest.raises(ApiError) as err:
        sched.admit(Trace("cot"))
    assert err.value.status == 429 and err.value.headers == {"Retry-After": "1"}
    sched.release(first)
    sched.admit(Trace("cot"))
    assert sched.num_live == 2


@pytest.mark.parametrize(
    ("err", "status"),
    [
        (RequestTimeoutError("slow"), 504),
        (ProgramTimeoutError("deadline"), 504),
        (HostRejectedError("bad", status=400), 400),
        (HostRejectedError("no such model", status=404), 502),
        (HostError("boom", status=500), 502),
        (MalformedResponseError("garbage"), 502),
    ],
)
def test_upstream_failures_map_to_openai_errors(err, status):
    assert upstream_error(err).status == status
    wrapped = ProgramError("CoTWithProbe failed", Trace("cot"))
    wrapped.__cause__ = err
    assert upstream_error(wrapped).status == status


@pytest.mark.parametrize(
    "kwargs",
    [
        {"upstream_url": "ftp://x"},
        {"upstream_kind": "tgi"},
        {"default_early_exit": "always"},
        {"default_thinking_token_budget": 0},
        {"probe_tokens": 0},
        {"program_timeout_s": float("inf")},
    ],
)
def test_bad_gateway_settings_are_typed_errors(kwargs):
    with pytest.raises(InvalidArgumentError):
        GatewayConfig(**{"upstream_url": "http://upstream", **kwargs})


def gateway_args(*argv: str):
    import argparse

    from reasonserve.gateway.cli import add_gateway_parser

    parser = argparse.ArgumentParser()
    add_gateway_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["gateway", *argv])


def test_command_line_flags_map_onto_the_config():
    from reasonserve.gateway.cli import gateway_config

    cfg = gateway_config(gateway_args(
        "--upstream", "http://127.0.0.1:8000", "--upstream-kind", "sglang", "--served-model-name", "r1",
        "--early-exit", '{"probe_interval_tokens": 32, "agreement": 4}', "--thinking-token-budget", "2048",
        "--self-consistency", '{"n": 5, "stop": "agreement"}', "--max-programs", "7", "--max-tokens-limit", "9000",
        "--reasoning-parser", "qwen3", "--header-timeout-s", "3", "--no-priorities",
    ))  # fmt: skip
    assert (cfg.upstream_kind, cfg.served_model_name, cfg.reasoning_parser) == ("sglang", "r1", "qwen3")
    assert (cfg.default_early_exit.probe_interval_tokens, cfg.default_early_exit.agreement) == (32, 4)
    assert cfg.default_thinking_token_budget == 2048 and cfg.max_programs == 7 and not cfg.priorities
    assert cfg.default_self_consistency == SelfConsistencySpec(n=5, stop="agreement")
    assert (cfg.limits.max_tokens_limit, cfg.limits.header_timeout_s) == (9000, 3.0)
    assert (
        gateway_config(gateway_args("--upstream", "http://x", "--early-exit", "mid")).default_early_exit
        == "mid"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ("--early-exit", "sometimes"),
        ("--early-exit", "{not json"),
        ("--self-consistency", '{"n": 0}'),
        ("--upstream-kind", "tgi"),
        ("--max-tokens-limit", "0"),
    ],
)
def test_bad_command_line_values_are_typed_errors(argv):
    from reasonserve.gateway.cli import gateway_config

    with pytest.raises(InvalidArgumentError):
        gateway_config(gateway_args("--upstream", "http://x", *argv))


def test_chat_template_kwargs_may_not_replace_the_template(tmp_path):
    """``chat_template_kwargs`` are the template's variables: a key naming what the gateway
    sets (the template itself, the messages, ...) is a 400, as in ``reasonserve serve`` (a
    ``chat_template`` key used to replace the gateway's template with the client's own)."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from reasonserve.clients import OpenAIShim
    from reasonserve.clients.http import HTTPClient
    from reasonserve.gateway.prompts import ChatTemplate, chat_prompt

    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"<unk>": 0}, "<unk>")),
                                  unk_token="<unk>")  # fmt: skip
    tok.chat_template = "{% for m in messages %}<{{ m.content }}>{% endfor %}{% if flag %}!{% endif %}"
    tok.save_pretrained(tmp_path)
    template = ChatTemplate(str(tmp_path))
    client = HTTPClient("http://upstream", OpenAIShim(extensions=False))  # text prompts: no /tokenize call

    def prompt(**kwargs):
        return asyncio.run(chat_prompt(chat(chat_template_kwargs=kwargs), client, template, None))

    assert prompt(flag=True).text == "<hi>!"
    for key in ("chat_template", "messages", "add_generation_prompt", "tokenize"):
        with pytest.raises(ApiError) as err:
            prompt(**{key: "{{ 'injected' }}"})
        assert (err.value.status, err.value.param) == (400, "chat_template_kwargs")


def test_chat_messages_reach_the_template_with_their_reasoning_and_no_tools():
    from reasonserve.gateway.prompts import message_dicts

    history = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
               {"role": "assistant", "content": "4", "reasoning": "2+2"}, {"role": "user", "content": "x", "name": "u"}]  # fmt: skip
    assert message_dicts(chat(messages=history)) == [
        {"role": "user", "content": "ab"},
        {"role": "assistant", "content": "4", "reasoning_content": "2+2"},
        {"role": "user", "content": "x", "name": "u"},
    ]
    for messages, param in (([{"role": "tool", "content": "42", "tool_call_id": "c1"}], "messages[0].role"),
                            ([{"role": "assistant", "content": None, "tool_calls": [
                                {"id": "c1", "function": {"name": "f", "arguments": "{}"}}]}], "messages[0].tool_calls")):  # fmt: skip
        with pytest.raises(ApiError) as err:
            message_dicts(chat(messages=messages))
        assert (err.value.status, err.value.param) == (400, param)
