"""The work budget of one answer comparison: counted steps, never a clock.

A comparison may recurse (lists of lists, relations whose sides are lists) and evaluate
expression trees at several points. Each recursive step costs one, and each evaluation
of a pair of trees costs their node count; when the budget is spent the verdict is
``UNKNOWN``. Counting work instead of reading a clock makes every verdict the same on a
fast machine, a slow one, or a loaded one.
"""

from __future__ import annotations

__all__ = ["Work"]


class Work:
    """Steps left for one comparison, shared by all of its recursive parts."""

    __slots__ = ("left",)

    def __init__(self, steps: int) -> None:
        self.left = steps

    def spend(self, steps: int) -> bool:
        """Take ``steps``; False once the budget is overdrawn (the caller answers UNKNOWN)."""
        self.left -= steps
        return self.left >= 0
