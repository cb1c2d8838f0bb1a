"""Shared pieces of the step-wise search programs (Rebase, MCTS, beam search with a PRM).

A *step* is one continuation of a path: up to ``step_tokens`` tokens, or up to the
``step_delimiter`` when one is set. A path is *terminal* when its step ended without
hitting the length limit and either no delimiter is set (the host stopped: eos) or the
step holds a ``\\boxed`` answer or is empty; or when it reaches ``max_depth``.
Paths are text (prompt + steps), so every client can run them.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from reasonserve.certainindex.answers import extract_answer
from reasonserve.clients.errors import UnsupportedError
from reasonserve.clients.protocol import EngineClient, GenerateRequest
from reasonserve.core.checks import check_int
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.programs._inflight import InFlight

__all__ = ["Node", "Scorer", "StepConfig", "expand", "resolve_scorer", "score_nodes", "weighted_vote"]

Scorer = Callable[[str, list[str]], Awaitable[Sequence[float]]]


@dataclass(frozen=True)
class StepConfig:
    step_tokens: int = 128
    step_delimiter: str | None = "\n\n"
    max_depth: int = 16
    temperature: float = 0.8
    top_p: float = 0.95
    seed: int | None = None
    priority: int = 0

    def __post_init__(self) -> None:
        for name in ("step_tokens", "max_depth"):
            check_int(name, getattr(self, name), 1)
        delimiter = self.step_delimiter
        if delimiter is not None and (not isinstance(delimiter, str) or not delimiter):
            raise InvalidArgumentError("step_delimiter must be None or a non-empty str")
        # The sampling settings: checked here, not in the middle of a search.
        GenerateRequest("x", max_tokens=self.step_tokens, temperature=self.temperature, top_p=self.top_p,
                        seed=self.seed, priority=self.priority)  # fmt: skip


@dataclass(eq=False)
class Node:
    text: str  # the path's steps (without the prompt)
    depth: int
    terminal: bool = False
    score: float = 0.0
    scores: list[float] = field(default_factory=list)  # per step (PRM)
    visits: int = 0
    value_sum: float = 0.0
    children: list[Node] = field(default_factory=list)
    parent: Node | None = None

    @property
    def answer(self) -> str | None:
        return extract_answer(self.text) if self.terminal else None


async def expand(flight: InFlight, prompt: str, node: Node, n: int, cfg: StepConfig, salt: int) -> list[Node]:
    """``n`` sampled next steps of ``node`` (concurrently); the children are attached."""
    if n < 1:
        return []
    stop = () if cfg.step_delimiter is None else (cfg.step_delimiter,)
    tasks = []
    for i in range(n):
        seed = None if cfg.seed is None else (cfg.seed + 7919 * salt + i) % 2**63
        req = GenerateRequest(prompt + node.text, max_tokens=cfg.step_tokens, temperature=cfg.temperature,
                              top_p=cfg.top_p, seed=seed, priority=cfg.priority, stop=stop)  # fmt: skip
        tasks.append(flight.generate(req))
    children = []
    for res in await asyncio.gather(*tasks):
        n_tok = len(res.token_ids) if res.token_ids is not None else len(res.text.split())
        flight.trace.tokens_generated += n_tok
        step = res.text + ((cfg.step_delimiter or "") if res.finish_reason == "stop" else "")
        ended = res.finish_reason != "length" and (
            cfg.step_delimiter is None or "\\boxed" in res.text or not res.text.strip()
        )
        child = Node(node.text + step, node.depth + 1, ended or node.depth + 1 >= cfg.max_depth, parent=node)
        node.children.append(child)
        children.append(child)
    return children


def resolve_scorer(client: EngineClient, scorer: Scorer | None) -> Scorer:
    if scorer is not None:
        return scorer
    if not client.capabilities.score:
        raise UnsupportedError("this program needs a reward model: pass scorer=... or a client with score()")
    return client.score


async def score_nodes(scorer: Scorer, prompt: str, nodes: Sequence[Node], flight: InFlight) -> None:
    """Score every node's path; non-finite scores read as 0."""
    if not nodes:
        return
    scores = list(await scorer(prompt, [n.text for n in nodes]))
    if len(scores) != len(nodes):
        raise InvalidArgumentError(f"the scorer returned {len(scores)} scores for {len(nodes)} paths")
    for node, s in zip(nodes, scores, strict=True):
        value = float(s) if isinstance(s, (int, float)) and math.isfinite(s) else 0.0
        node.score = value
        node.scores = [*(node.parent.scores if node.parent else []), value]
    flight.trace.event("score", n=len(nodes), best=max(n.score for n in nodes))


def weighted_vote(nodes: Sequence[Node], classes, temperature: float = 1.0) -> tuple[str | None, float]:
    """Softmax(score / temperature)-weighted majority over the nodes' answers ->
    (answer, its share of the weight)."""
    weights: dict[int, float] = {}
    top = max((n.score for n in nodes), default=0.0)
    for n in nodes:
        cid = classes.add(n.answer)
        if cid >= 0:
            weights[cid] = weights.get(cid, 0.0) + math.exp((n.score - top) / temperature)
    if not weights:
        return None, 0.0
    best = max(weights, key=lambda c: (weights[c], -c))
    return classes.representative(best), weights[best] / sum(weights.values())
