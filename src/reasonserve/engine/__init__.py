"""The embedded reference engine (in progress: model, checkpoints; see issue #4)."""

from reasonserve.engine.checkpoint import load_weights, make_tiny_checkpoint
from reasonserve.engine.config import ModelConfig
from reasonserve.engine.model import DecoderModel, SequenceBatch

__all__ = ["DecoderModel", "ModelConfig", "SequenceBatch", "load_weights", "make_tiny_checkpoint"]
