"""The embedded reference engine: model, checkpoints, paged KV cache, continuous
batching over policy objects, decode-verify-rollback and probing forks. See
``docs/engine.md``."""

from reasonserve.engine.checkpoint import checkpoint_eos_ids, load_weights, make_tiny_checkpoint
from reasonserve.engine.config import ModelConfig
from reasonserve.engine.engine import Engine
from reasonserve.engine.engine_config import EngineConfig
from reasonserve.engine.metrics import EngineMetrics
from reasonserve.engine.model import DecoderModel, SequenceBatch
from reasonserve.engine.outputs import RequestOutput
from reasonserve.engine.sampling_params import SamplingParams

__all__ = [
    "DecoderModel",
    "Engine",
    "EngineConfig",
    "EngineMetrics",
    "ModelConfig",
    "RequestOutput",
    "SamplingParams",
    "SequenceBatch",
    "checkpoint_eos_ids",
    "load_weights",
    "make_tiny_checkpoint",
]
