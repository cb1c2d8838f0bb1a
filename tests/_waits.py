"""Waiting on a condition inside async tests: bounded, named, never a fixed sleep."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

TIMEOUT_S = 60.0  # a condition that has not come true by then never will: fail, do not hang


async def until(condition: Callable[[], object], what: str, timeout_s: float = TIMEOUT_S) -> None:
    """Yield to the event loop until ``condition()`` holds; an AssertionError naming ``what``
    after ``timeout_s`` (a bound on failure, never a gate on speed)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s} s for {what}")
        await asyncio.sleep(0.005)
