"""Cost of the phase-aware reorder in vLLM's scheduler: ``PhaseAwareSyncScheduler``
against vLLM's own ``Scheduler`` on the same steps (no model: each scheduled request
gets one sampled token back). Needs vLLM (``.venv-vllm`` from ``scripts/adapter_envs.sh
vllm``):

    .venv-vllm/bin/python benchmarks/vllm_scheduler.py             # 256 running + 256 waiting
    .venv-vllm/bin/python benchmarks/vllm_scheduler.py --running 1024 --waiting 2048

Printed: the median wall time of one ``reorder_queues`` (target <= 0.5 ms at 256 + 256)
and of one whole step (``schedule`` + ``update_from_output``) with and without it,
alternated, medians. Every 7th running request has closed its thinking (answering),
every 5th waiting request is a long prompt, a few hold KV blocks while waiting.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
END = 99
# A config.json is all vLLM's ModelConfig reads (no weights, no tokenizer).
_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
           "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
           "num_hidden_layers": 2, "vocab_size": 128, "max_position_embeddings": 32768,
           "rms_norm_eps": 1e-5, "torch_dtype": "float32"}  # fmt: skip


def _scheduler(cls, running: int, budget: int):
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    folder = tempfile.mkdtemp(prefix="tiny-config-")
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(_CONFIG, f)
    model = ModelConfig(model=folder, skip_tokenizer_init=True, dtype="float32", max_model_len=32768)
    sched = SchedulerConfig(max_model_len=32768, is_encoder_decoder=False, max_num_seqs=running,
                            max_num_batched_tokens=budget, enable_chunked_prefill=True)  # fmt: skip
    blocks = 200_000
    config = VllmConfig(model_config=model, scheduler_config=sched, cache_config=CacheConfig(block_size=16),
                        additional_config={"reasonserve": {"think_end_token_id": END}})  # fmt: skip
    config.cache_config.num_gpu_blocks = blocks
    config.cache_config.enable_prefix_caching = False
    spec = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=16, dtype=torch.float32)
    kv = KVCacheConfig(num_blocks=blocks, kv_cache_tensors=[],
                       kv_cache_groups=[KVCacheGroupSpec(["model.layers.0.self_attn"], spec)])  # fmt: skip
    outputs = StructuredOutputManager(config)
    return cls(vllm_config=config, kv_cache_config=kv, structured_output_manager=outputs, block_size=16)


def _step(sched) -> None:
    from vllm.v1.outputs import ModelRunnerOutput

    out = sched.schedule()
    ids = list(out.num_scheduled_tokens)
    sampled = []
    for i, rid in enumerate(ids):
        req = sched.requests[rid]
        done = req.num_computed_tokens + out.num_scheduled_tokens[rid] >= req.num_prompt_tokens
        sampled.append([END if done and hash(rid) % 7 == 0 and i % 3 == 0 else 7] if done else [])
    result = ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                               sampled_token_ids=sampled)  # fmt: skip
    sched.update_from_output(out, result)


def _filled(cls, running: int, waiting: int):
    from vllm import SamplingParams
    from vllm.v1.request import Request

    sched = _scheduler(cls, running, budget=64 * running)
    params = SamplingParams(max_tokens=100_000, ignore_eos=True)
    for i in range(running):
        sched.add_request(Request(f"r{i}", list(range(1, 33)), params, None, arrival_time=float(i)))
    while len(sched.running) < running:
        _step(sched)
    for _ in range(3):
        _step(sched)
    for i in range(waiting):
        prompt = 6000 if i % 5 == 0 else 40
        sched.add_request(Request(f"w{i}", list(range(1, prompt + 1)), params, None, arrival_time=1e3 + i))
    return sched


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--running", type=int, default=256)
    p.add_argument("--waiting", type=int, default=256)
    p.add_argument("--steps", type=int, default=40)
    args = p.parse_args()
    import vllm
    from vllm.v1.core.sched.scheduler import Scheduler

    from reasonserve.adapters.vllm import PhaseAwareSyncScheduler

    ours = _filled(PhaseAwareSyncScheduler, args.running, args.waiting)
    stock = _filled(Scheduler, args.running, args.waiting)
    reorder, step_ours, step_stock = [], [], []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        ours.reorder_queues(time.time())
        reorder.append(time.perf_counter() - t0)
        for sched, times in ((ours, step_ours), (stock, step_stock)):
            t0 = time.perf_counter()
            _step(sched)
            times.append(time.perf_counter() - t0)
    med = {k: statistics.median(v) * 1e3 for k, v in
           (("reorder", reorder), ("step ours", step_ours), ("step vLLM", step_stock))}  # fmt: skip
    print(f"vLLM {vllm.__version__}, python {sys.version.split()[0]}, {args.running} running + "
          f"{args.waiting} waiting, medians of {args.steps} steps (alternated)")  # fmt: skip
    print(f"reorder_queues: {med['reorder']:.3f} ms (target <= 0.5 ms at 256 + 256)")
    print(f"whole step: ours {med['step ours']:.3f} ms, vLLM's Scheduler {med['step vLLM']:.3f} ms, "
          f"ratio {med['step ours'] / med['step vLLM']:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
