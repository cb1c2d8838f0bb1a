"""The OpenAI-compatible ingress deployment: the server's own app
(:func:`reasonserve.serve.app.create_app`: its request models, validation, streaming and
errors) over a :class:`PoolRunner` that sends each request through the replicas."""

from __future__ import annotations

import pathlib

from ray import serve

from reasonserve.adapters.ray_serve.client import PhaseAwareClient
from reasonserve.adapters.ray_serve.config import RayServeConfig
from reasonserve.adapters.ray_serve.pool_runner import EngineInfo, PoolRunner
from reasonserve.engine.config import ModelConfig
from reasonserve.engine.tokenizer import load_tokenizer
from reasonserve.serve.app import create_app

__all__ = ["OpenAIIngress"]


@serve.ingress()
class OpenAIIngress:
    def __init__(self, replicas, config: RayServeConfig) -> None:
        """``replicas``: the handle to the :class:`EngineReplica` deployment."""
        model = ModelConfig.from_pretrained(config.model)
        engine = config.engine
        info = EngineInfo(
            load_tokenizer(pathlib.Path(config.model), model.vocab_size),
            engine.max_model_len or model.default_max_model_len,
            engine,
            model.vocab_size,
        )
        client = PhaseAwareClient(
            replicas,
            engine.end_of_thinking_token_id,
            config.max_migration_retries,
            migrate=config.router == "pascal" and config.migrate,
        )
        self.config = config
        queued = min(config.serve.max_queued_requests, config.num_replicas * config.max_ongoing_requests)
        self.runner = PoolRunner(client, info, max_queued_requests=queued)

    def __serve_build_asgi_app__(self):
        return create_app(self.runner, self.config.serve)
