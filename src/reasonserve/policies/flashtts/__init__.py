"""FlashTTS policies (Wang et al., "Democratizing Agentic AI with Fast Test-Time Scaling on
the Edge"): verifier-guided beam search serving.

* :class:`SelectSpec` — speculative-candidate ranking by previous-step score bins, and the
  truncation of duplicated beams' speculative tokens (§4.1.1, Algorithm 1).
* :class:`TwoPhaseSpeculation` — phase 1 continuous beam batching, phase 2 speculation only
  with an empty waiting queue; preempted at once by a new request or memory pressure (§4.1.2).
* :class:`LookaheadVerification` — verify the current and the speculative next step in one
  verifier request (§4.1.3).
* :class:`PrefixAwarePolicy`, :func:`prefix_order`, :func:`eviction_cost` — dynamic
  prefix-aware scheduling (§4.2, App. A).
* :class:`RooflineKVAllocator` — roofline-guided KV split between generator and verifier,
  with the offloading variant (§4.3); :class:`PrefixCachedVerifier` plans for a verifier with
  prefix caching (an extension: new steps prefilled, tree-shared prefixes held).

Each is a pure, validated object; the beam-search simulator
(:mod:`reasonserve.sim.beam`) composes them.
"""

from reasonserve.policies.flashtts.control import SpeculationState, TwoPhaseSpeculation
from reasonserve.policies.flashtts.kv import KVPlan, PrefixCachedVerifier, RooflineKVAllocator
from reasonserve.policies.flashtts.lookahead import LookaheadVerification, VerifyCandidate, VerifyRequest
from reasonserve.policies.flashtts.prefix import PrefixAwarePolicy, eviction_cost, prefix_order
from reasonserve.policies.flashtts.spec import SelectSpec, SpecSlot

__all__ = [
    "KVPlan",
    "LookaheadVerification",
    "PrefixAwarePolicy",
    "PrefixCachedVerifier",
    "RooflineKVAllocator",
    "SelectSpec",
    "SpecSlot",
    "SpeculationState",
    "TwoPhaseSpeculation",
    "VerifyCandidate",
    "VerifyRequest",
    "eviction_cost",
    "prefix_order",
]
