"""Beam-search step pools from recorded long chain-of-thought texts (no PRM scores recorded).

A recorded reasoning text (``full_text`` of ``reasoning_traces/qwen3-8b_fulltext_*.jsonl.gz``:
one JSON object a line, gzip or plain) becomes one trajectory of steps with
search-and-learn's step rule: a step ends at a blank line (``"\\n\\n"``), tokens counted
with :func:`reasonserve.sim.beam.workload.count_tokens` (the rule of the PRM-beam pool).
Only the first ``max_steps`` steps are kept: a search of at most that many iterations never
reads further, and the pool's mean sequence and step lengths (what the roofline allocator
plans with) then describe the steps a search can use. A step longer than a search's
``max_step_tokens`` is kept whole here; :class:`~reasonserve.sim.beam.tree.SearchTree`
cuts it there and ends its beam (search-and-learn's ``max_tokens``).

The texts carry no step scores, so each step's score is a seeded draw, uniform in [0, 1),
keyed by (``score_seed``, the row's line number, the step's depth): a pure function of
the file and the seed, so every serving configuration selects the same beams.
"""

from __future__ import annotations

import gzip
import json
import pathlib
import random
import zlib
from collections.abc import Iterator

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.sim.beam.workload import StepPool, count_tokens

__all__ = ["LONGCOT_DATASETS", "load_longcot_pool", "split_steps"]

LONGCOT_DATASETS = ("aime24", "amc23")  # the FlashTTS paper's test sets (§6.1)


def split_steps(text: str) -> list[str]:
    """search-and-learn's steps of ``text``: the pieces between blank lines."""
    return text.split("\n\n")


MAX_LINE_CHARS = 16 * 2**20  # one recorded text a line; a longer line is not a recording


def _lines(f) -> Iterator[str]:
    """``f``'s lines, each read with a bound: a line over :data:`MAX_LINE_CHARS` raises."""
    while line := f.readline(MAX_LINE_CHARS + 1):
        if len(line) > MAX_LINE_CHARS:
            raise InvalidArgumentError(f"a line longer than {MAX_LINE_CHARS} characters")
        yield line


def _rows(path: pathlib.Path) -> Iterator[tuple[int, dict]]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for line_no, line in enumerate(_lines(f), 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except (json.JSONDecodeError, RecursionError) as exc:  # RecursionError: "[[[[..."
                    msg = getattr(exc, "msg", "nested too deeply")
                    raise InvalidArgumentError(f"{path}:{line_no}: not a JSON object ({msg})") from None
                if not isinstance(row, dict):
                    raise InvalidArgumentError(f"{path}:{line_no}: not a JSON object")
                yield line_no, row
    except (OSError, EOFError, UnicodeDecodeError, zlib.error) as exc:  # truncated, corrupt or non-gzip
        raise InvalidArgumentError(f"{path}: unreadable ({exc})") from None


def _text(row: dict, key: str, where: str) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"{where}: field {key!r} must be a non-empty string, got {value!r:.60}")
    return value


def _check_args(datasets: tuple[str, ...], max_steps: int, score_seed: int) -> None:
    if not isinstance(datasets, tuple) or not datasets or not all(isinstance(d, str) for d in datasets):
        raise InvalidArgumentError(f"datasets must be a non-empty tuple of names, got {datasets!r}")
    for name, value in (("max_steps", max_steps), ("score_seed", score_seed)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "max_steps" else 0):
            raise InvalidArgumentError(f"{name} must be an int >= {int(name == 'max_steps')}, got {value!r}")


def load_longcot_pool(
    path: str | pathlib.Path,
    *,
    datasets: tuple[str, ...] = LONGCOT_DATASETS,
    max_steps: int = 40,
    score_seed: int = 0,
) -> StepPool:
    """The rows of ``datasets`` in ``path`` as a :class:`StepPool` (prompt: the row's
    ``problem``); a missing or unreadable file, a malformed row or no row of ``datasets``
    raises :class:`~reasonserve.core.errors.InvalidArgumentError` (nothing is dropped
    silently; rows of other datasets are skipped by design)."""
    _check_args(datasets, max_steps, score_seed)
    path = pathlib.Path(path)
    if not path.is_file():
        raise InvalidArgumentError(f"long-CoT text file {path} does not exist")
    trajectories, prompts = [], []
    for line_no, row in _rows(path):
        where = f"{path}:{line_no}"
        if _text(row, "dataset", where) not in datasets:
            continue
        prompts.append(count_tokens(_text(row, "problem", where)))
        steps = split_steps(_text(row, "full_text", where))[:max_steps]
        scores = [random.Random(f"{score_seed}|{line_no}|{d}").random() for d in range(len(steps))]
        trajectories.append(tuple((count_tokens(s), x) for s, x in zip(steps, scores, strict=True)))
    if not trajectories:
        raise InvalidArgumentError(f"{path}: no row of datasets {datasets!r}")
    return StepPool(tuple(trajectories), tuple(prompts), str(path))
