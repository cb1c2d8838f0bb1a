"""OpenAI-compatible HTTP serving over the embedded engine (``pip install reasonserve[serve]``).

See ``docs/serve.md``: the parameter table, limits, errors and metrics.
"""

from reasonserve.serve.app import create_app
from reasonserve.serve.config import ServeConfig
from reasonserve.serve.runner import EngineRunner
from reasonserve.serve.server import serve

__all__ = ["EngineRunner", "ServeConfig", "create_app", "serve"]
