"""``SimClient`` on a simulated cluster: requests are the cluster simulator's (the same
run as ``simulate`` on the same requests), programs react to a finished request at its
virtual time and before the next decision, same-time arrivals go in request id order,
programs' progress reaches the policies as ``SchedulerView.programs``, and misuse gets a
typed error instead of a hang."""

import asyncio

import pytest

from reasonserve.certainindex.allocation import ThresholdPolicy
from reasonserve.clients import GenerateRequest, ProgramProgress
from reasonserve.clients.errors import ClientError, UnsupportedError
from reasonserve.clients.sim import SimClient, SimCluster
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.policies import FCFSPolicy
from reasonserve.policies.dynasor import DynasorPolicy
from reasonserve.programs.sc import SelfConsistency
from reasonserve.sim import SimConfig, SimRequest, simulate

CONFIG = SimConfig(num_instances=2, hardware="h100", model="qwen2.5-7b", kv_capacity_tokens=2048, max_num_seqs=4)


def _client(policy=FCFSPolicy, config=CONFIG, **kwargs):
    return SimClient(cluster=SimCluster(config, policy), **kwargs)


def _lengths(table):
    """``outputs=``: request ``{program}/s{j}`` generates ``table[program][j]`` = (tokens, answer)."""

    def outputs(req):
        pid, _, j = req.request_id.rpartition("/s")
        tokens, answer = table[pid][int(j)]
        return tokens, f"so \\boxed{{{answer}}}"

    return outputs


def _timeline(result):
    return [(s.request_id, s.req.arrival_s, s.first_token_s, s.finished_s, s.num_output, s.num_preemptions)
            for s in result.sequences]  # fmt: skip


def test_requests_on_the_cluster_run_as_simulate_runs_them():
    prompts = {f"r{i}": tuple(range(1, 20 + 7 * i)) for i in range(10)}
    client = _client(outputs=lambda req: (15 + 11 * int(req.request_id[1:]), "x"))

    async def main():
        out = await asyncio.gather(*(client.generate(GenerateRequest(p, max_tokens=500, request_id=rid))
                                     for rid, p in reversed(prompts.items())))  # fmt: skip
        return {o.request_id: o for o in out}

    results = client.run(main())
    ran = client.result()
    reqs = [SimRequest(s.request_id, 0.0, s.req.prompt_tokens, s.req.reasoning_tokens, 0, None,
                       s.req.prefix_hashes) for s in ran.sequences]  # fmt: skip
    assert _timeline(ran) == _timeline(simulate(reqs, CONFIG, FCFSPolicy))
    for s in ran.sequences:
        r = results[s.request_id]
        assert len(r.token_ids) == s.num_output == 15 + 11 * int(s.request_id[1:])
        assert r.finish_reason == "stop" and r.elapsed_s == s.finished_s  # they all started at 0
    assert client.now_s == ran.end_s and client.num_steps == ran.steps


def test_a_program_reacts_at_the_virtual_time_a_request_finished():
    client = _client(outputs=lambda req: (40 if req.request_id == "a" else 10, "x"))

    async def chain():
        first = await client.generate(GenerateRequest((1, 2, 3), max_tokens=99, request_id="a"))
        t = client.now_s
        second = await client.generate(GenerateRequest((1, 2, 3), max_tokens=99, request_id="b"))
        return t, first, second

    t, first, _ = client.run(chain())
    seqs = {s.request_id: s for s in client.result().sequences}
    assert seqs["b"].req.arrival_s == seqs["a"].finished_s == t == first.elapsed_s


def test_same_time_arrivals_go_in_request_id_order_whoever_submits_first():
    runs = []
    for order in (["z", "m", "a"], ["a", "m", "z"]):
        client = _client(config=SimConfig(num_instances=1, model="qwen2.5-7b", max_num_seqs=1),
                         outputs=lambda req: (5, "x"))  # fmt: skip

        async def main(order=order, client=client):
            await client.sleep_until(0.25)
            await asyncio.gather(*(client.generate(GenerateRequest((7, 8, 9), request_id=r)) for r in order))

        client.run(main())
        res = client.result()
        assert all(s.req.arrival_s == 0.25 for s in res.sequences)
        runs.append(sorted((s.first_token_s, s.request_id) for s in res.sequences))
    assert runs[0] == runs[1] and [rid for _, rid in runs[0]] == ["a", "m", "z"]  # one seat: served in id order


def test_self_consistency_stops_early_and_its_aborted_samples_free_their_kv():
    table = {"p": [(30, 1), (40, 1), (50, 1), (60, 1), (70, 1), (900, 2), (900, 2), (900, 2)]}
    sc = SelfConsistency(samples_per_step=8, max_samples=8, max_tokens=1000,
                         policy=ThresholdPolicy(0.7, detect_at=3, max_knob=8))  # fmt: skip
    client = _client(DynasorPolicy, outputs=_lengths(table))
    out = client.run(sc.run(client, tuple(range(1, 30)), program_id="p"))
    res = client.result()
    assert out.answer == "1" and out.trace.exit == "denied" and out.trace.num_aborted == 5
    stopped = [s for s in res.sequences if s.finish_reason == "stop"]
    assert len(stopped) == 5 and all(s.num_output < 900 and s.num_blocks == 0 for s in stopped)
    assert all(s.finished_s == client.now_s for s in stopped)  # aborted when the third answer settled it
    assert out.trace.tokens_generated == 30 + 40 + 50


def test_policies_see_each_programs_progress_and_live_requests():
    seen = []

    class Spy(DynasorPolicy):
        def decide(self, view):
            seen.extend((view, p) for p in view.programs)
            return super().decide(view)

    table = {f"q{i}": [(15 + 5 * j, 1 if j < 7 else 2) for j in range(8)] for i in range(3)}
    sc = SelfConsistency(samples_per_step=8, first_step=5, max_samples=8, max_tokens=500,
                         policy=ThresholdPolicy(0.7, detect_at=5, recheck_every=8, max_knob=8))  # fmt: skip
    one = SimConfig(num_instances=1, hardware="h100", model="qwen2.5-7b", kv_capacity_tokens=2048, max_num_seqs=8)
    client = _client(Spy, one, outputs=_lengths(table))

    async def program(pid, at):
        await client.sleep_until(at)
        return await sc.run(client, tuple(range(1, 25)), program_id=pid)

    async def main():
        return await asyncio.gather(*(program(f"q{i}", 0.1 * i) for i in range(3)))

    client.run(main())
    assert seen and any(p.knob > 0 and p.certainty is not None for _, p in seen)
    for view, p in seen:
        live = {r.request_id for r in view.waiting + view.running if r.program_id == p.program_id}
        assert p.max_knob == 8 and set(p.request_ids) == live and p.knob + len(p.request_ids) <= 8
        assert p.arrival_s == 0.1 * int(p.program_id[1:]) and not p.done


def test_misuse_is_a_typed_error_not_a_hang():
    client = _client()
    with pytest.raises(InvalidArgumentError):  # the cluster's requests run under client.run only
        asyncio.run(client.generate(GenerateRequest((1, 2), request_id="x")))

    async def stuck():
        await asyncio.get_running_loop().create_future()  # nothing simulated will ever resolve it

    with pytest.raises(ClientError):
        _client().run(stuck())
    with pytest.raises(UnsupportedError):
        SimClient(CONFIG.cost_model()).report_progress("p", ProgramProgress())
    with pytest.raises(InvalidArgumentError):
        SimClient(CONFIG.cost_model(), cluster=SimCluster(CONFIG, FCFSPolicy))
    with pytest.raises(InvalidArgumentError):  # the cluster's blocks are its config's
        SimClient(block_size=32, cluster=SimCluster(CONFIG, FCFSPolicy))
    with pytest.raises(InvalidArgumentError):
        ProgramProgress(knob=-1)
    with pytest.raises(InvalidArgumentError):
        ProgramProgress(certainty=1.5)
    too_long = _client(outputs=lambda req: (10**9, "x"))
    with pytest.raises(InvalidArgumentError):  # more KV than an instance holds
        too_long.run(too_long.generate(GenerateRequest((1, 2), max_tokens=2**30, request_id="big")))
