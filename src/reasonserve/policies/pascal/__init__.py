"""PASCAL's intra-instance scheduler (Kim et al., §IV-C): the queue rule
(:mod:`~reasonserve.policies.pascal.rule`) and the policy that ranks and fills both queues
(:mod:`~reasonserve.policies.pascal.policy`). Instance placement (Algorithms 1 and 2) is
:class:`reasonserve.policies.router.PascalRouter`; the token pacer
:class:`reasonserve.policies.pacer.TokenPacer`."""

from reasonserve.policies.pascal.policy import PascalPolicy
from reasonserve.policies.pascal.rule import HIGH, LOW, in_low_queue, place

__all__ = ["HIGH", "LOW", "PascalPolicy", "in_low_queue", "place"]
