"""Reasoning programs on any :class:`~reasonserve.clients.EngineClient` (Dynasor §2.1):
chain-of-thought with probing and early exit, self-consistency, Rebase, MCTS and beam
search with a process reward model; :class:`ReasoningProgram` is the paper's two-hook
interface (``update_certainindex()``, ``execute()``) for algorithms of your own. Each
returns a :class:`ProgramResult` (answer, text, certainty, :class:`Trace`); a failed run
raises :class:`ProgramError` with its partial trace, and every request it started is
aborted when it fails or is cancelled. See ``docs/programs.md``."""

from reasonserve.programs._search import StepConfig
from reasonserve.programs.base import ReasoningProgram
from reasonserve.programs.beam import BeamSearchPRM
from reasonserve.programs.cot import DEFAULT_PROBE_SUFFIX, CoTWithProbe
from reasonserve.programs.mcts import MCTS
from reasonserve.programs.rebase import Rebase
from reasonserve.programs.sc import SelfConsistency
from reasonserve.programs.trace import ProgramError, ProgramResult, Trace

__all__ = [
    "DEFAULT_PROBE_SUFFIX",
    "MCTS",
    "BeamSearchPRM",
    "CoTWithProbe",
    "ProgramError",
    "ProgramResult",
    "ReasoningProgram",
    "Rebase",
    "SelfConsistency",
    "StepConfig",
    "Trace",
]
