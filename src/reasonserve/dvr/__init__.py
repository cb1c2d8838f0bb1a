"""Decode-verify-rollback (LLM-42): a pure controller the engine applies."""

from reasonserve.dvr.controller import Acceptance, DVRConfig, DVRState, accept, plan_groups, verify_inputs

__all__ = ["Acceptance", "DVRConfig", "DVRState", "accept", "plan_groups", "verify_inputs"]
