"""reasonserve: serving components for LLM reasoning workloads."""

from reasonserve.ops.mode import deterministic_mode, is_deterministic_mode

__version__ = "0.1.0"

__all__ = ["__version__", "deterministic_mode", "is_deterministic_mode"]
