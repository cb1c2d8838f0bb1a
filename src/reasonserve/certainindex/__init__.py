"""Certainindex: how settled is a reasoning program's answer? (Dynasor)

Estimators are pure: observations in, a certainty in [0, 1] out, with a batched
tensor form for many programs and an incremental form updated per observation.
"""

from reasonserve.certainindex.allocation import (
    EvenPolicy,
    LengthPolicy,
    ParetoCapPolicy,
    ParetoCurve,
    ProgramStatus,
    ThresholdPolicy,
)
from reasonserve.certainindex.answers import (
    extract_answer,
    extract_boxed,
    extract_probe_answer,
    normalize_answer,
)
from reasonserve.certainindex.baselines import length_certainty, logprob_certainty
from reasonserve.certainindex.clustering import (
    EmbeddingClusterer,
    cluster_texts,
    embedding_model_available,
    jaccard_clusters,
)
from reasonserve.certainindex.combined import Combined, CombinedResult
from reasonserve.certainindex.equivalence import (
    AnswerClasses,
    Verdict,
    compare_answers,
    equivalent,
    group_answers,
)
from reasonserve.certainindex.probe_consistency import (
    HESITATION_WORDS,
    PRESETS,
    ProbeConsistency,
    ProbeTracker,
)
from reasonserve.certainindex.reward import RewardCertainty
from reasonserve.certainindex.semantic_entropy import SemanticEntropy, entropy_certainty
from reasonserve.certainindex.stopping import (
    ProbeObservation,
    StopDecision,
    StoppingRule,
    default_rule,
)
from reasonserve.certainindex.tv_stability import TVStability, tv_probe_bound

__all__ = [
    "HESITATION_WORDS",
    "PRESETS",
    "AnswerClasses",
    "Combined",
    "CombinedResult",
    "EmbeddingClusterer",
    "EvenPolicy",
    "LengthPolicy",
    "ParetoCapPolicy",
    "ParetoCurve",
    "ProbeConsistency",
    "ProbeObservation",
    "ProbeTracker",
    "ProgramStatus",
    "RewardCertainty",
    "SemanticEntropy",
    "StopDecision",
    "StoppingRule",
    "TVStability",
    "ThresholdPolicy",
    "Verdict",
    "cluster_texts",
    "compare_answers",
    "default_rule",
    "embedding_model_available",
    "entropy_certainty",
    "equivalent",
    "extract_answer",
    "extract_boxed",
    "extract_probe_answer",
    "group_answers",
    "jaccard_clusters",
    "length_certainty",
    "logprob_certainty",
    "normalize_answer",
    "tv_probe_bound",
]
