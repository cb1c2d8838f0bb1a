"""One request's beam search as a tree of beams, independent of timing and policy.

Each iteration every active beam extends by one step; the verifier scores the steps; beams
whose step is final are collected; of the others the top ``n // B`` by score (ties by beam
id) are kept and duplicated copy by copy until ``n`` beams are active again, as
search-and-learn's ``_beam_search`` and the FlashTTS artifact do (``(active * repeats)[:n]``).
The search ends once ``n`` beams have finished (the artifact's stopping rule) or no beam is
left. Selection reads only the recorded scores, so no serving policy can change it (the
paper's algorithmic equivalence).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reasonserve.sim.beam.workload import BeamRequest, BeamSearchSpec, StepPool

__all__ = ["Beam", "SearchTree", "context_share"]


@dataclass(slots=True)
class Beam:
    """A beam's current step: ``path`` names the tree nodes before it (prompt, then each
    ancestor step, by the id of the beam that made it); its own step's node is its id."""

    beam_id: str
    trajectory: int
    depth: int
    path: tuple[str, ...]
    path_tokens: int  # generated tokens before this step
    step_tokens: int
    score: float
    final: bool
    child_ids: tuple[str, ...] = ()
    prior_score: float | None = None  # the parent's verifier score (SelectSpec's bins)

    @property
    def tokens(self) -> int:
        return self.path_tokens + self.step_tokens


@dataclass(slots=True)
class SearchTree:
    request: BeamRequest
    pool: StepPool
    spec: BeamSearchSpec
    active: list[Beam] = field(default_factory=list)
    finished: list[Beam] = field(default_factory=list)
    selections: list[tuple[str, ...]] = field(default_factory=list)  # kept beam ids per iteration

    def __post_init__(self) -> None:
        root = (self.prompt_node,)
        self.active = [self._beam(f"{self.request.request_id}/{i}", root, 0, 0, None)
                       for i in range(self.spec.width)]  # fmt: skip

    @property
    def prompt_node(self) -> str:
        return f"{self.request.request_id}/q"

    def _beam(
        self, beam_id: str, path: tuple[str, ...], depth: int, path_tokens: int, traj: int | None,
        prior: float | None = None,
    ) -> Beam:  # fmt: skip
        if traj is None:
            traj = self.pool.draw(self.request.seed, beam_id, depth)
        tokens, score, final = self.pool.step(traj, depth)
        room = self.spec.max_model_len - self.request.prompt_tokens - path_tokens
        # the engine stops a step at max_tokens and a beam at the model's context: both end it
        capped = tokens >= self.spec.max_step_tokens
        tokens = max(1, min(tokens, room, self.spec.max_step_tokens))
        length = self.request.prompt_tokens + path_tokens + tokens
        final = final or capped or depth + 1 >= self.spec.max_steps or length >= self.spec.max_model_len
        kids = tuple(f"{beam_id}.{k}" for k in range(self.spec.branching))  # speculation's branches
        return Beam(beam_id, traj, depth, path, path_tokens, tokens, score, final, kids, prior)

    def child(self, parent: Beam, k: int) -> Beam:
        """The k-th copy of ``parent`` (copy 0 continues the parent's trajectory); a pure
        function of the parent, so speculation can look at it before selection."""
        traj = parent.trajectory if k == 0 else None
        path = (*parent.path, parent.beam_id)
        beam_id = f"{parent.beam_id}.{k}"
        return self._beam(beam_id, path, parent.depth + 1, parent.tokens, traj, parent.score)

    def select(self) -> tuple[list[Beam], list[Beam]]:
        """After verification of every active beam: (beams that finished now, the next
        ``n`` active beams: the kept parents by score, copied copy by copy)."""
        done = [b for b in self.active if b.final]
        self.finished += done
        going = sorted((b for b in self.active if not b.final), key=lambda b: (-b.score, b.beam_id))
        if len(self.finished) >= self.spec.width or not going:
            self.active = []
            self.selections.append(())
            return done, []
        kept = going[: self.spec.width // self.spec.branching]
        self.selections.append(tuple(b.beam_id for b in kept))
        children = [self.child(kept[i % len(kept)], i // len(kept)) for i in range(self.spec.width)]
        self.active = children
        return done, children


def context_share(trees: list[SearchTree]) -> float:
    """How many active beams share each token of their contexts (prompt and path), over every
    iteration of ``trees`` run to the end policy-free: the tokens of all contexts / the
    tokens of their distinct nodes (>= 1). A search's own tree, so a host measures it on
    searches it already ran (warm-up), not on the ones it plans for."""
    total = distinct = 0
    for tree in trees:
        sizes = {tree.prompt_node: tree.request.prompt_tokens}
        while tree.active:
            nodes: set[str] = set()
            for b in tree.active:
                total += tree.request.prompt_tokens + b.path_tokens
                nodes.update(b.path)
            distinct += sum(sizes[node] for node in nodes)
            sizes.update((b.beam_id, b.step_tokens) for b in tree.active)
            tree.select()
    return total / distinct if distinct else 1.0
