"""SGLang adapter against the real package: the custom logit processor's pickling round
trip and draws, the plugin's discovery, version gate and hook registration.

The light environment cannot import SGLang's scheduler modules (``schedule_batch``
imports torchvision, whose PyPI wheel needs CUDA's libraries), so requests here are
plain objects with the fields the adapter reads (``rid``, ``origin_input_ids``,
``output_ids`` and SGLang's real ``SamplingParams``), and the hook is wrapped around
FCFS's ``calc_priority`` (which leaves the queue as it is) by SGLang's own wrapper."""

import importlib.metadata
from array import array
from types import SimpleNamespace

import pytest

pytest.importorskip("sglang", reason="SGLang is not installed here (make test-adapters builds .venv-sglang)")

import torch
from sglang.srt.plugins import GENERAL_PLUGINS_GROUP
from sglang.srt.plugins.hook_registry import HookRegistry, HookType, _wrap_fn
from sglang.srt.sampling.custom_logit_processor import CustomLogitProcessor
from sglang.srt.sampling.sampling_params import SamplingParams

from reasonserve import ops
from reasonserve.adapters.sglang import PhaseAwareHook, SeededSamplingProcessor
from reasonserve.adapters.sglang import plugin as rs_plugin
from reasonserve.core.errors import InvalidArgumentError

END = 99


def _req(rid: str, prompt_len: int, output=(), decode_steps=0, **sampling):
    """A request as the processor and the hook read it: prompt, output, sampling params,
    and SGLang's forward-side counters (prompt + output at the last prefill, decode steps
    prepared since). See test_sglang_overlap.py for SGLang's own Req."""
    params = SamplingParams(**sampling)
    params.normalize(None)
    prompt = array("i", range(1, prompt_len + 1))
    return SimpleNamespace(rid=rid, origin_input_ids=prompt, output_ids=list(output), sampling_params=params,
                           full_untruncated_fill_ids=prompt + array("i", output), decode_batch_idx=decode_steps)  # fmt: skip


# custom logit processor ---------------------------------------------------------------
def test_to_str_from_str_round_trip_gives_our_processor():
    text = SeededSamplingProcessor.to_str()
    proc = CustomLogitProcessor.from_str(text)
    assert isinstance(proc, SeededSamplingProcessor)
    assert isinstance(proc, CustomLogitProcessor)


def test_rows_draw_the_ops_sample_token_and_other_rows_stay():
    proc = CustomLogitProcessor.from_str(SeededSamplingProcessor.to_str())
    seeded = _req("a", 5, output=[7, 8], temperature=0.8, top_p=0.9, top_k=10)
    plain = _req("b", 3, temperature=0.8)
    params = [{"reasonserve_seed": 42, "__req__": seeded}, {"__req__": plain}]
    logits = torch.randn(2, 80, generator=torch.Generator().manual_seed(0)) * 3
    out = proc(logits.clone(), params)
    want = ops.sample(logits[:1], seeds=42, positions=7, temperature=0.8, top_p=0.9, top_k=10)
    assert torch.isfinite(out[0]).nonzero().flatten().tolist() == want.tolist()
    assert torch.equal(out[1], logits[1])


def test_greedy_requests_normalised_by_sglang_get_the_argmax():
    proc = SeededSamplingProcessor()
    req = _req("g", 4, temperature=0.0)  # SGLang turns this into top_k=1
    logits = torch.randn(1, 50, generator=torch.Generator().manual_seed(1))
    out = proc(logits.clone(), [{"reasonserve_seed": 1, "__req__": req}])
    assert int(out[0].argmax()) == int(logits[0].argmax())
    assert torch.isfinite(out[0]).sum() == 1


def test_each_row_draws_at_its_own_seed_position_and_temperature():
    """The token is ops.sample's for the row's own seed, position (SGLang's counters) and
    temperature; changing any one of them changes the draws over a flat distribution.
    (A processor that ignored one of them gives the same token across that column.)"""
    proc = SeededSamplingProcessor()
    logits = torch.randn(1, 200, generator=torch.Generator().manual_seed(5)) * 0.5
    cases = [(seed, prompt, steps, temp) for seed in (1, 2, 3) for prompt, steps in ((5, 0), (5, 3), (9, 1))
             for temp in (0.3, 1.0, 3.0)]  # fmt: skip
    drawn = {}
    for seed, prompt, steps, temp in cases:
        req = _req("r", prompt, output=[7] * steps, decode_steps=steps, temperature=temp)
        out = proc(logits.clone(), [{"reasonserve_seed": seed, "__req__": req}])
        token = torch.isfinite(out[0]).nonzero().flatten().tolist()
        want = ops.sample(logits, seeds=seed, positions=prompt + 2 * steps, temperature=temp).tolist()
        assert token == want, (seed, prompt, steps, temp)
        drawn[seed, prompt + 2 * steps, temp] = want[0]  # the position: prompt + output + decode steps
    for axis in range(3):  # seed, position, temperature: each on its own changes the token somewhere
        groups: dict = {}
        for key, token in drawn.items():
            groups.setdefault(key[:axis] + key[axis + 1 :], set()).add(token)
        assert any(len(tokens) > 1 for tokens in groups.values()), axis


def test_a_bad_seed_leaves_the_row_to_sglang():
    req = _req("x", 2)
    logits = torch.randn(1, 30, generator=torch.Generator().manual_seed(2))
    out = SeededSamplingProcessor()(logits.clone(), [{"reasonserve_seed": "7", "__req__": req}])
    assert torch.equal(out, logits)


# plugin -------------------------------------------------------------------------------
def test_the_plugin_is_discovered_as_sglang_discovers_plugins():
    eps = importlib.metadata.entry_points(group=GENERAL_PLUGINS_GROUP)
    ours = [ep for ep in eps if ep.name == "reasonserve_phase_aware"]
    assert len(ours) == 1
    assert ours[0].load() is rs_plugin.register


def test_without_settings_the_plugin_registers_nothing():
    HookRegistry.reset()
    assert rs_plugin.register({}) is False
    assert rs_plugin.TARGET not in HookRegistry._hooks


def test_bad_settings_are_typed_errors_and_never_stop_sglang():
    with pytest.raises(InvalidArgumentError, match="JSON"):
        rs_plugin._settings("{not json")
    with pytest.raises(InvalidArgumentError, match="think_end_token_id"):
        rs_plugin._settings("{}")
    HookRegistry.reset()
    assert rs_plugin.register({rs_plugin.ENV_SETTINGS: "{not json"}) is False  # logged, SGLang runs on
    assert rs_plugin.TARGET not in HookRegistry._hooks


@pytest.mark.parametrize("version", ["0.5.22", "0.6.0"])
def test_the_version_gate_refuses_sglang_outside_the_range(version, monkeypatch):
    monkeypatch.setattr(rs_plugin.metadata, "version", lambda name: version)
    HookRegistry.reset()
    assert rs_plugin.register({rs_plugin.ENV_SETTINGS: '{"think_end_token_id": 99}'}) is False
    assert rs_plugin.TARGET not in HookRegistry._hooks


def _fcfs_calc_priority(self, waiting_queue, running_batch=None, processed_tokens=0):
    """SchedulePolicy.calc_priority under FCFS without priorities: the queue stays as it is."""


@pytest.fixture
def hooked_calc_priority():
    """Register through the plugin into SGLang's registry; wrap with SGLang's AFTER wrapper."""
    HookRegistry.reset()
    settings = f'{{"think_end_token_id": {END}, "demote_threshold_tokens": 50}}'
    assert rs_plugin.register({rs_plugin.ENV_SETTINGS: settings}) is True
    [(kind, hook, _source)] = HookRegistry._hooks[rs_plugin.TARGET]
    assert kind is HookType.AFTER and isinstance(hook, PhaseAwareHook)
    yield _wrap_fn(_fcfs_calc_priority, hook, kind)
    HookRegistry.reset()


def test_the_hooked_policy_admits_reasoning_before_answering(hooked_calc_priority):
    queue = [
        _req("answering", 4, output=[5, END, 6]),  # retracted after it closed its thinking
        _req("fresh-1", 8),
        _req("long", 10, output=[5] * 55),  # generated past the demotion threshold
        _req("long-prompt", 400),  # a prompt alone never demotes: not behind later arrivals
        _req("fresh-2", 3),
        _req("reasoning", 4, output=[5, 6]),
    ]
    assert hooked_calc_priority(object(), queue) is None
    assert [r.rid for r in queue] == ["fresh-1", "long-prompt", "fresh-2", "reasoning", "answering", "long"]
    _fcfs_calc_priority(object(), queue)  # unhooked, nothing moves: the order above is the hook's


def test_the_hook_forgets_requests_that_left_the_queue(hooked_calc_priority):
    queue = [_req("a", 3, output=[END]), _req("b", 3)]
    hooked_calc_priority(object(), queue)
    hooked_calc_priority(object(), queue[1:])
    [(_, hook, _)] = HookRegistry._hooks[rs_plugin.TARGET]
    assert len(hook.book) == 1
