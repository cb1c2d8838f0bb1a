"""Monte Carlo tree search over reasoning steps, rewards from a reward model (Dynasor's
MCTS program, SPEC 2.1; best-of-n by reward).

Each iteration selects a leaf from the root by UCT (``c_puct``), expands it with
``expansions`` sampled next steps, scores them with the reward model and backs the mean
reward up the path. The allocation ``policy`` is asked before each iteration (knob =
iterations; certainty = mean normalized reward of the finished paths,
:class:`~reasonserve.certainindex.estimators.reward.RewardCertainty`). The answer is the finished
path with the highest reward (the best leaf when none finished).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from reasonserve.certainindex.allocation import EvenPolicy, ProgramStatus
from reasonserve.certainindex.answers import extract_answer
from reasonserve.certainindex.estimators.reward import RewardCertainty
from reasonserve.clients.protocol import EngineClient
from reasonserve.core.checks import check_int
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.programs._inflight import InFlight, run_guarded
from reasonserve.programs._search import Node, Scorer, StepConfig, expand, resolve_scorer, score_nodes
from reasonserve.programs.trace import ProgramResult, Trace

__all__ = ["MCTS"]


@dataclass(frozen=True)
class MCTS:
    expansions: int = 3
    c_puct: float = 1.0
    steps: StepConfig = field(default_factory=StepConfig)
    policy: object = field(default_factory=lambda: EvenPolicy(8))
    certainty: RewardCertainty = field(default_factory=lambda: RewardCertainty("mean"))
    scorer: Scorer | None = None
    max_iterations: int = 256  # a hard cap whatever the policy grants

    def __post_init__(self) -> None:
        for name in ("expansions", "max_iterations"):
            check_int(name, getattr(self, name), 1)
        if not (isinstance(self.c_puct, (int, float)) and math.isfinite(self.c_puct) and self.c_puct >= 0):
            raise InvalidArgumentError(f"c_puct must be a finite number >= 0, got {self.c_puct!r}")

    async def run(self, client: EngineClient, prompt: str, *, trace: Trace | None = None) -> ProgramResult:
        trace = trace if trace is not None else Trace("mcts")
        flight = InFlight(client, trace, "mcts")
        scorer = resolve_scorer(client, self.scorer)
        return await run_guarded("MCTS", lambda: self._loop(flight, prompt, scorer), trace, flight)

    async def _loop(self, flight: InFlight, prompt: str, scorer: Scorer) -> ProgramResult:
        trace, root = flight.trace, Node("", 0)
        done: list[Node] = []
        certainty, iteration = 0.0, 0
        grant = self.policy.grant  # type: ignore[attr-defined]
        while iteration < self.max_iterations and grant(
            ProgramStatus(iteration, certainty, trace.tokens_generated)
        ):
            leaf = self._select(root)
            if leaf is None:
                break  # every path has finished
            children = await expand(flight, prompt, leaf, self.expansions, self.steps, iteration)
            await score_nodes(scorer, prompt, children, flight)
            for child in children:
                _backup(child, child.score)
            done += [c for c in children if c.terminal]
            certainty = self.certainty.score([n.score for n in done])
            iteration += 1
            trace.event("iteration", n=iteration, finished=len(done), certainty=certainty)
        trace.exit = "denied" if iteration < self.max_iterations else "budget"
        pool = done or _leaves(root)
        best = max(pool, key=lambda n: n.score, default=None)
        answer = extract_answer(best.text) if best is not None else None
        return ProgramResult(answer, best.text if best else "", certainty, trace)

    def _select(self, root: Node) -> Node | None:
        node = root
        while node.children:
            open_children = [c for c in node.children if not c.terminal or c.children]
            candidates = [c for c in open_children if _open(c)]
            if not candidates:
                return None if node is root else node
            total = max(1, node.visits)
            node = max(candidates, key=lambda c: _uct(c, total, self.c_puct))
        return None if node.terminal else node


def _open(node: Node) -> bool:
    return not node.terminal and (not node.children or any(_open(c) for c in node.children))


def _uct(node: Node, parent_visits: int, c: float) -> float:
    mean = node.value_sum / node.visits if node.visits else 0.0
    return mean + c * math.sqrt(math.log(parent_visits + 1) / (node.visits + 1))


def _backup(node: Node | None, value: float) -> None:
    while node is not None:
        node.visits += 1
        node.value_sum += value
        node = node.parent


def _leaves(root: Node) -> list[Node]:
    out, stack = [], [root]
    while stack:
        n = stack.pop()
        if n.children:
            stack += n.children
        elif n is not root:
            out.append(n)
    return out
