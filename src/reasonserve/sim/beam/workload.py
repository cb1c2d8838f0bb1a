"""Beam-search workloads from recorded PRM beam search (``prm_beams/*.jsonl``).

A recorded beam is a trajectory of steps (its completion split at blank lines, which is
how search-and-learn cuts steps: the split matches the recorded per-step ``scores`` one
for one), each with a token count and its recorded PRM score. The file records tokens as 0,
so tokens are counted with one fixed rule, :func:`count_tokens`: words and single
punctuation marks (``\\w+|[^\\w\\s]``), close to a BPE count on LaTeX-heavy text.

Only the surviving beams are recorded, not the pruned candidates, so a simulated search
draws its candidates' steps from the pool: a beam at depth ``d`` follows a recorded
trajectory that reaches depth ``d`` (its step ``d`` has that trajectory's length and
score; the step is final if the trajectory ends there). A kept beam's first child
continues the parent's trajectory; the other children draw new ones. Every draw is a pure
function of (seed, beam id), so the search tree never depends on timing or policy.
"""

from __future__ import annotations

import json
import math
import pathlib
import random
import re
from dataclasses import dataclass

from reasonserve.core.checks import check_int
from reasonserve.core.errors import InvalidArgumentError

__all__ = [
    "BeamRequest",
    "BeamSearchSpec",
    "StepPool",
    "count_tokens",
    "load_step_pool",
    "one_at_a_time_requests",
    "poisson_beam_requests",
]

_TOKEN = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """The token-count rule for recorded text (words and single punctuation marks), >= 1."""
    return max(1, len(_TOKEN.findall(text)))


def _is_step(step: object) -> bool:
    if not isinstance(step, tuple) or len(step) != 2:
        return False
    tokens, score = step
    good_tokens = isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 1
    return good_tokens and isinstance(score, (int, float)) and math.isfinite(score)


@dataclass(frozen=True, slots=True)
class StepPool:
    """Recorded trajectories: per trajectory, (tokens, score) per step; prompt lengths."""

    trajectories: tuple[tuple[tuple[int, float], ...], ...]
    prompt_tokens: tuple[int, ...]
    source: str
    by_depth: tuple[tuple[int, ...], ...] = ()  # trajectory indices that reach depth d

    def __post_init__(self) -> None:
        if not self.trajectories or not self.prompt_tokens:
            raise InvalidArgumentError(f"StepPool {self.source!r} needs trajectories and prompts")
        for i, traj in enumerate(self.trajectories):
            if not traj or not all(_is_step(step) for step in traj):
                raise InvalidArgumentError(
                    f"StepPool {self.source!r}: trajectory {i} must be a non-empty tuple of "
                    f"(tokens >= 1, finite score) steps, got {traj!r:.80}"
                )
        depth = max(len(t) for t in self.trajectories)
        index = tuple(tuple(i for i, t in enumerate(self.trajectories) if len(t) > d) for d in range(depth))
        object.__setattr__(self, "by_depth", index)

    def draw(self, seed: int, key: str, depth: int) -> int:
        """A trajectory that reaches ``depth``, drawn from (seed, key) alone."""
        candidates = self.by_depth[min(depth, len(self.by_depth) - 1)]
        return candidates[random.Random(f"{seed}|{key}").randrange(len(candidates))]

    def mean_sequence_tokens(self) -> int:
        """Mean tokens a verifier or generator sequence holds: a prompt plus a recorded
        beam's steps up to a step, over every recorded step."""
        lengths = [sum(t for t, _ in traj[: d + 1]) for traj in self.trajectories for d in range(len(traj))]
        return round(sum(self.prompt_tokens) / len(self.prompt_tokens) + sum(lengths) / len(lengths))

    def mean_step_tokens(self) -> int:
        steps = [t for traj in self.trajectories for t, _ in traj]
        return max(1, round(sum(steps) / len(steps)))

    def mean_steps(self) -> float:
        return sum(len(t) for t in self.trajectories) / len(self.trajectories)

    def step(self, trajectory: int, depth: int) -> tuple[int, float, bool]:
        """(tokens, score, final) of ``trajectory`` at ``depth`` (its last step if shorter)."""
        traj = self.trajectories[trajectory]
        tokens, score = traj[min(depth, len(traj) - 1)]
        return tokens, score, depth >= len(traj) - 1


def load_step_pool(path: str | pathlib.Path, *, max_problems: int | None = None) -> StepPool:
    """Read a search-and-learn beam-search file; rows whose step split does not match
    their scores raise (nothing is dropped silently)."""
    trajectories: list[tuple[tuple[int, float], ...]] = []
    prompts: list[int] = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if max_problems is not None and len(prompts) >= max_problems:
                break
            row = json.loads(line)
            prompts.append(count_tokens(str(row["problem"])))
            for text, scores in zip(row["completions"], row["scores"], strict=True):
                steps = str(text).split("\n\n")
                if len(steps) != len(scores):
                    raise InvalidArgumentError(
                        f"{path}:{line_no}: {len(steps)} steps but {len(scores)} scores"
                    )
                trajectories.append(
                    tuple((count_tokens(s), float(x)) for s, x in zip(steps, scores, strict=True))
                )
    return StepPool(tuple(trajectories), tuple(prompts), str(path))


@dataclass(frozen=True, slots=True)
class BeamSearchSpec:
    """Beam search as in search-and-learn: ``width`` active beams (the paper's n) every
    iteration, the best ``width // branching`` kept and copied back to ``width``; at most
    ``max_steps`` steps, ``max_step_tokens`` tokens per step and ``max_model_len`` tokens
    (prompt included) per beam; the search of a request ends when ``width`` beams have
    finished."""

    width: int = 16
    branching: int = 4
    max_steps: int = 40  # search-and-learn's default number of iterations
    max_model_len: int = 4096  # Qwen2.5-Math's context: a beam that reaches it is final
    max_step_tokens: int = 2048  # search-and-learn's max_tokens per step: a step cut there is final

    def __post_init__(self) -> None:
        for fname in ("width", "branching", "max_steps", "max_model_len", "max_step_tokens"):
            check_int(f"BeamSearchSpec.{fname}", getattr(self, fname), 1)
        if self.branching > self.width:
            raise InvalidArgumentError(f"branching ({self.branching}) must be <= width ({self.width})")


@dataclass(frozen=True, slots=True)
class BeamRequest:
    request_id: str
    arrival_s: float
    prompt_tokens: int
    seed: int  # the search tree's draws


def _seeded_requests(pool: StepPool, num_requests: int, seed: int, gap) -> list[BeamRequest]:
    """``num_requests`` requests ``gap(rng)`` seconds apart, each with the prompt of a recorded
    problem drawn at random."""
    if isinstance(num_requests, bool) or not isinstance(num_requests, int) or num_requests < 1:
        raise InvalidArgumentError(f"num_requests must be an int >= 1, got {num_requests!r}")
    rng, t, out = random.Random(seed), 0.0, []
    for i in range(num_requests):
        t += gap(rng)
        prompt = pool.prompt_tokens[rng.randrange(len(pool.prompt_tokens))]
        out.append(BeamRequest(f"q{i}", t, prompt, seed * 1_000_003 + i))
    return out


def poisson_beam_requests(
    pool: StepPool, rate_per_s: float, num_requests: int, seed: int
) -> list[BeamRequest]:
    """Beam-search requests arriving as a seeded Poisson process, each with the prompt of a
    recorded problem drawn at random."""
    if isinstance(rate_per_s, bool) or not isinstance(rate_per_s, (int, float)) or not rate_per_s > 0:
        raise InvalidArgumentError(f"rate_per_s must be a number > 0, got {rate_per_s!r}")
    return _seeded_requests(pool, num_requests, seed, lambda rng: rng.expovariate(rate_per_s))


ONE_AT_A_TIME_GAP_S = 1e7  # far beyond any search's latency: no two requests overlap


def one_at_a_time_requests(pool: StepPool, num_requests: int, seed: int) -> list[BeamRequest]:
    """The paper's setting (§6.1, "batch size of 1"): problems served one at a time. Requests
    ``ONE_AT_A_TIME_GAP_S`` apart, each with a recorded prompt drawn as in
    :func:`poisson_beam_requests`; callers check that no latency reached the gap."""
    return _seeded_requests(pool, num_requests, seed, lambda rng: ONE_AT_A_TIME_GAP_S)
