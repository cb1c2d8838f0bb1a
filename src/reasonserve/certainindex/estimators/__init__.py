"""Certainty estimators: observations of one program in, a certainty in [0, 1] out.

Each has a batched tensor form for many programs and an incremental form updated per
observation: probe consistency and the TV stability test (chain-of-thought probes),
semantic entropy (answers of several paths), reward certainty (PRM scores), the
length and log-probability baselines, and :class:`Combined` for several at once.
"""

from reasonserve.certainindex.estimators.baselines import length_certainty, logprob_certainty
from reasonserve.certainindex.estimators.combined import PAPER_THRESHOLDS, Combined, CombinedResult
from reasonserve.certainindex.estimators.probe_consistency import (
    HESITATION_WORDS,
    PRESETS,
    ProbeConsistency,
    ProbeConsistencyState,
    ProbeTracker,
)
from reasonserve.certainindex.estimators.reward import AGGREGATES, RewardCertainty
from reasonserve.certainindex.estimators.semantic_entropy import (
    SemanticEntropy,
    SemanticEntropyState,
    entropy_certainty,
)
from reasonserve.certainindex.estimators.tv_stability import TVStability, tv_probe_bound

__all__ = [
    "AGGREGATES",
    "HESITATION_WORDS",
    "PAPER_THRESHOLDS",
    "PRESETS",
    "Combined",
    "CombinedResult",
    "ProbeConsistency",
    "ProbeConsistencyState",
    "ProbeTracker",
    "RewardCertainty",
    "SemanticEntropy",
    "SemanticEntropyState",
    "TVStability",
    "entropy_certainty",
    "length_certainty",
    "logprob_certainty",
    "tv_probe_bound",
]
