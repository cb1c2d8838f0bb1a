"""reasonserve inside SGLang (extra ``sglang``; SGLang itself is installed by the user, see
``docs/use_sglang.md``): seeded sampling as a ``CustomLogitProcessor`` (:mod:`.logits`),
named per request by :class:`.client.SeededSGLangShim`, and a ``sglang.srt.plugins``
entry point that hooks SGLang's schedule policy to put reasoning requests before
answering ones (:mod:`.plugin`).

Importing this package does not import SGLang; each name imports its module when first
used (``SeededSGLangShim`` never needs SGLang).
"""

from __future__ import annotations

from reasonserve.adapters._lazy import load_attr

__all__ = ["PhaseAwareHook", "SeededSGLangShim", "SeededSamplingProcessor", "register"]

_HOME = {
    "SeededSamplingProcessor": "logits",
    "PhaseAwareHook": "plugin",
    "SeededSGLangShim": "client",
    "register": "plugin",
}


def __getattr__(name: str):
    return load_attr(__name__, _HOME, name)
