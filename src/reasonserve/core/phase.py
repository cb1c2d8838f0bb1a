"""Request phases shared by engines, policies and the simulator."""

from __future__ import annotations

import enum

__all__ = ["Phase"]


class Phase(enum.Enum):
    PREFILL = "prefill"  # admitted or waiting, prompt not fully computed
    REASONING = "reasoning"  # decoding before the end-of-thinking token
    ANSWERING = "answering"  # decoding after it (or a request with no thinking)
    FINISHED = "finished"
