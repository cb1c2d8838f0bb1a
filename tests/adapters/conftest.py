"""Contract tests against the real vLLM / SGLang packages (``make test-adapters`` builds
their light CPU environments). Each module skips, with the reason, where its engine is
not importable, so the default suite passes without them."""

import importlib.util
import json
import os

import pytest

if importlib.util.find_spec("vllm") is not None:
    # The CUDA wheel on a CPU box: tell vLLM which platform it is on; no hub access.
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

# A config.json is all vLLM's ModelConfig reads here (no weights, no tokenizer).
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
    "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
    "num_hidden_layers": 2, "vocab_size": 128, "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5, "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2,
}  # fmt: skip


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-llama")
    (folder / "config.json").write_text(json.dumps(TINY_LLAMA))
    return str(folder)


@pytest.fixture(scope="session")
def make_vllm_config(tiny_model_dir):
    """``make_vllm_config(**scheduler_kwargs, additional_config=...)`` -> a real VllmConfig."""
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig

    def make(additional_config=None, block_size=16, num_blocks=64, **scheduler):
        model = ModelConfig(model=tiny_model_dir, skip_tokenizer_init=True, dtype="float32", max_model_len=256)
        scheduler.setdefault("max_num_seqs", 8)
        scheduler.setdefault("max_num_batched_tokens", 256)
        sched = SchedulerConfig(max_model_len=256, is_encoder_decoder=False, **scheduler)
        cache = CacheConfig(block_size=block_size)
        config = VllmConfig(model_config=model, scheduler_config=sched, cache_config=cache,
                            additional_config=additional_config or {})  # fmt: skip
        config.cache_config.num_gpu_blocks = num_blocks
        return config

    return make
