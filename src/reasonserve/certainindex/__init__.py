"""Certainindex: how settled is a reasoning program's answer? (Dynasor)

* :mod:`.answers` — answers in model output: extraction, normalization, equivalence;
* :mod:`.estimators` — certainty estimators: observations in, a certainty in [0, 1] out,
  with a batched tensor form for many programs and an incremental form per observation;
* :mod:`.stopping` — chain-of-thought early exit: the rule interface hosts call per probe;
* :mod:`.allocation` — how much more compute one program gets, given its certainty;
* :mod:`.calibration` and :mod:`.conformal` — choosing thresholds from recorded runs.
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
    AnswerClasses,
    EmbeddingClusterer,
    Verdict,
    cluster_texts,
    compare_answers,
    embedding_model_available,
    equivalent,
    extract_answer,
    extract_boxed,
    extract_probe_answer,
    group_answers,
    jaccard_clusters,
    normalize_answer,
)
from reasonserve.certainindex.estimators import (
    HESITATION_WORDS,
    PAPER_THRESHOLDS,
    PRESETS,
    Combined,
    CombinedResult,
    ProbeConsistency,
    ProbeTracker,
    RewardCertainty,
    SemanticEntropy,
    TVStability,
    entropy_certainty,
    length_certainty,
    logprob_certainty,
    tv_probe_bound,
)
from reasonserve.certainindex.stopping import (
    AgreeSpanRule,
    LogisticStopRule,
    ProbeObservation,
    StopDecision,
    StoppingRule,
    default_rule,
)

__all__ = [
    "HESITATION_WORDS",
    "PAPER_THRESHOLDS",
    "PRESETS",
    "AgreeSpanRule",
    "AnswerClasses",
    "Combined",
    "CombinedResult",
    "EmbeddingClusterer",
    "EvenPolicy",
    "LengthPolicy",
    "LogisticStopRule",
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
