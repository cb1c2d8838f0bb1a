"""reasonserve inside vLLM (extra ``vllm``; vLLM itself is installed by the user, see
``docs/use_vllm.md``): seeded sampling as logits processors for Model Runner V2
(:mod:`.logits_v2`, also the ``vllm.logits_processors`` entry point) and V1
(:mod:`.logits_v1`), and an experimental phase-aware scheduler (:mod:`.scheduler`).

Importing this package does not import vLLM; each name imports its module (and
vLLM) when first used, so ``reasonserve adapter vllm`` runs without vLLM installed.
"""

from __future__ import annotations

from reasonserve.adapters._lazy import load_attr

__all__ = [
    "PhaseAwareScheduler",
    "PhaseAwareSyncScheduler",
    "SeededSamplingLogitsProcessor",
    "SeededSamplingLogitsProcessorV1",
    "SeededSamplingPlugin",
]

_HOME = {
    "PhaseAwareScheduler": "scheduler",
    "PhaseAwareSyncScheduler": "scheduler",
    "SeededSamplingLogitsProcessor": "logits_v2",
    "SeededSamplingPlugin": "logits_v2",
    "SeededSamplingLogitsProcessorV1": "logits_v1",
}


def __getattr__(name: str):
    return load_attr(__name__, _HOME, name)
