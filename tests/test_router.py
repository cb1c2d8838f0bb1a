"""PASCAL Algorithm 2 and adaptive migration (``route_transition``) as a decision table."""

from __future__ import annotations

import pytest

from reasonserve.core.errors import InvalidArgumentError, InvalidTypeError
from reasonserve.policies.router import InstanceLoad, LeastKVRouter, PascalRouter


def _load(iid: str, ok: bool = True, r: int = 0, a: int = 0, free: int = 100, m: int = 0) -> InstanceLoad:
    return InstanceLoad(iid, m, ok, r, a, free)


CASES = [
    # (loads, current, blocks_needed, expected full, NoMigration, NonAdaptive)
    # SLO-meeting instances: min r_i, even when another has fewer r_i + a_i.
    ([_load("0", r=3), _load("1", r=1, a=9), _load("2", ok=False, r=0)], "0", 10, "1", "0", "1"),
    # none meets its SLO: min r_i + a_i.
    ([_load("0", False, 3, 0), _load("1", False, 1, 5), _load("2", False, 2, 0)], "0", 10, "2", "0", "2"),
    # ties by instance id.
    ([_load("b", r=1), _load("a", r=1), _load("c", r=2)], "c", 10, "a", "c", "a"),
    # adaptive: current has room, chosen has not -> stay; NonAdaptive moves anyway.
    ([_load("0", r=5, free=50), _load("1", r=0, free=5)], "0", 10, "0", "0", "1"),
    # adaptive: both short of room -> move to the choice.
    ([_load("0", r=5, free=5), _load("1", r=0, free=5)], "0", 10, "1", "0", "1"),
    # adaptive: chosen has room -> move even if current has room too.
    ([_load("0", r=5, free=50), _load("1", r=0, free=50)], "0", 10, "1", "0", "1"),
    # the choice is the current instance -> stay.
    ([_load("0", r=0, free=0), _load("1", r=4, free=99)], "0", 10, "0", "0", "0"),
    # exactly enough free blocks counts as enough.
    ([_load("0", r=5, free=10), _load("1", r=0, free=9)], "0", 10, "0", "0", "1"),
]


@pytest.mark.parametrize(("loads", "current", "need", "full", "nomig", "nonadaptive"), CASES)
def test_algorithm2_decision_table(loads, current, need, full, nomig, nonadaptive) -> None:
    assert PascalRouter().route_transition(None, current, loads, need) == full
    assert PascalRouter(migrate=False).route_transition(None, current, loads, need) == nomig
    assert PascalRouter(adaptive=False).route_transition(None, current, loads, need) == nonadaptive
    assert LeastKVRouter().route_transition(None, current, loads, need) == current


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: PascalRouter().route_transition(None, "0", [], 1), "instances"),
        (lambda: PascalRouter().route_transition(None, "9", [_load("0")], 1), "current_id"),
        (lambda: PascalRouter().route_transition(None, "0", [_load("0")], -1), "blocks_needed"),
        (lambda: PascalRouter(migrate=False).route_transition(None, "x", [_load("0")], 1), "current_id"),
        (lambda: LeastKVRouter().route_transition(None, "0", [], 1), "instances"),
        (lambda: PascalRouter().route_transition(None, "0", [_load("0")], 1, stay_blocks_needed=-1), "stay_"),
        (lambda: InstanceLoad("0", -1), "kv_blocks_footprint"),
        (lambda: InstanceLoad("0", 0, True, -1), "num_reasoning"),
        (lambda: InstanceLoad("0", 0, True, 0, -2), "num_fresh_answering"),
        (lambda: InstanceLoad("0", 0, True, 0, 0, -3), "free_kv_blocks"),
    ],
)
def test_invalid_inputs_raise(call, match) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        call()


def test_instance_id_type_checked() -> None:
    with pytest.raises(InvalidTypeError, match="instance_id"):
        InstanceLoad(3, 0)


def test_staying_needs_only_room_to_go_on():
    """Adaptive migration with a separate stay requirement: the current instance keeps the
    request when it has ``stay_blocks_needed`` free and the choice lacks ``blocks_needed``."""
    loads = [_load("0", r=5, free=2), _load("1", r=0, free=5)]
    assert PascalRouter().route_transition(None, "0", loads, 10) == "1"  # current lacks 10 too: move
    assert PascalRouter().route_transition(None, "0", loads, 10, stay_blocks_needed=1) == "0"
    assert PascalRouter().route_transition(None, "0", loads, 10, stay_blocks_needed=3) == "1"
    assert PascalRouter().route_transition(None, "0", loads, 4, stay_blocks_needed=1) == "1"  # choice has room
    assert PascalRouter(adaptive=False).route_transition(None, "0", loads, 10, stay_blocks_needed=1) == "1"
    assert LeastKVRouter().route_transition(None, "0", loads, 10, stay_blocks_needed=1) == "0"
