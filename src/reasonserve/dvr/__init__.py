"""Decode-verify-rollback (LLM-42): a pure controller any host (engine, simulator,
adapter) drives: per-request :class:`DVRState` (verified prefix, commit/rollback,
counters), and the pass planning helpers."""

from reasonserve.dvr.controller import Acceptance, DVRCounters, DVRState, accept, plan_groups, verify_inputs

__all__ = ["Acceptance", "DVRCounters", "DVRState", "accept", "plan_groups", "verify_inputs"]
