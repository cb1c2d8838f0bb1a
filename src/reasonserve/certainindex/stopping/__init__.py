"""Chain-of-thought early exit: one incremental interface for hosts and for replay.

A host probes the model every few reasoning tokens and hands each probe to a rule's
state as a :class:`ProbeObservation`; the state answers a :class:`StopDecision`.
The offline replay (``reasonserve replay probes``) feeds recorded probes through the
very same ``observe`` calls, so what is measured there is what a host runs.

* :mod:`.observation` — the interface: observations, decisions, rule protocols;
* :mod:`.agree_span` — the agree-span rule (Dynasor) and its "last k agree" baseline;
* :mod:`.window_consistency` — Dynasor's window consistency with a tolerance;
* :mod:`.features` — incremental features of a probe stream;
* :mod:`.learned` — the learned rule over those features, and :func:`default_rule`,
  the shipped one (:mod:`.shipped_rule` holds its fitted weights).
"""

from reasonserve.certainindex.stopping.agree_span import AgreeSpanRule, window_rule
from reasonserve.certainindex.stopping.features import FEATURE_GROUPS, FEATURE_NAMES, FeatureState
from reasonserve.certainindex.stopping.learned import LogisticStopRule, default_rule, fit_logistic
from reasonserve.certainindex.stopping.observation import (
    MAX_COMPARED,
    SIGNALS,
    ProbeObservation,
    RuleState,
    StopDecision,
    StoppingRule,
)
from reasonserve.certainindex.stopping.window_consistency import WindowConsistencyRule

__all__ = [
    "FEATURE_GROUPS",
    "FEATURE_NAMES",
    "MAX_COMPARED",
    "SIGNALS",
    "AgreeSpanRule",
    "FeatureState",
    "LogisticStopRule",
    "ProbeObservation",
    "RuleState",
    "StopDecision",
    "StoppingRule",
    "WindowConsistencyRule",
    "default_rule",
    "fit_logistic",
    "window_rule",
]
