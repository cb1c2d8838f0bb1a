"""Names of an adapter package imported on first use, so that importing the package
never imports its runtime (vLLM, SGLang, Ray) by itself."""

from __future__ import annotations

import importlib
from collections.abc import Mapping

__all__ = ["load_attr"]


def load_attr(package: str, home: Mapping[str, str], name: str, *, runtime: str = "", hint: str = ""):
    """``package.home[name].name``; AttributeError for a name not in ``home``. When the
    module fails because ``runtime`` (a top-level package) is missing, raise ImportError
    with ``hint`` (how to install it)."""
    if name not in home:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    try:
        module = importlib.import_module(f"{package}.{home[name]}")
    except ModuleNotFoundError as err:
        if runtime and err.name is not None and err.name.split(".")[0] == runtime:
            raise ImportError(f"{name} needs {hint or runtime}") from err
        raise
    return getattr(module, name)
