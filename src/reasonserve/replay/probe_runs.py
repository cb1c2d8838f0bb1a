"""Read probe-in-the-middle recordings and precompute what replay needs.

A run folder holds ``probes.csv.gz`` (dataset, problem_id, rollout_id, token_position,
probe_answer, probe_text, is_certain; hosts that return log-probabilities may add
``answer_logprobs``, a JSON list, and ``think_end_logprob``), ``labels.jsonl`` (target, final_answer,
final_correct, tokens_used, finished_naturally per trajectory) and ``meta.json``.
Each trajectory becomes a :class:`Trajectory` whose probe answers are already
grouped into equivalence classes and graded against the target once, so that
stopping rules can be replayed many times cheaply.

Where the raw ``probe_text`` is recorded, the probe answer is ours
(:func:`extract_probe_answer`: the text up to the first unmatched ``}``), not the
recorder's ``probe_answer``, which drops single letters (``a + b + p`` -> ``p``) and
cuts ``12^{\\text{th}}`` to ``12^{``; elsewhere the recorded ``probe_answer`` is all there is.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import json
import math
import pathlib
from collections.abc import Callable
from dataclasses import dataclass

from reasonserve.certainindex.answers import AnswerClasses, equivalent, extract_probe_answer
from reasonserve.certainindex.estimators import ProbeConsistency
from reasonserve.certainindex.stopping import ProbeObservation
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.recordings.jsonl import read_jsonl

Grade = Callable[[str, str], bool]  # grade(answer, target), shaped like equivalent()

__all__ = ["Trajectory", "load_run"]

_MAX_FIELD_CHARS = 10_000_000  # a recorded probe_text can pass csv's default 131,072


@contextlib.contextmanager
def _field_limit(limit: int):
    """csv's field limit is process-wide: raise it while a probe file is read, then put
    back what was there (other readers keep their own bound)."""
    previous = csv.field_size_limit(limit)
    try:
        yield
    finally:
        csv.field_size_limit(previous)


@dataclass(frozen=True, slots=True)
class Trajectory:
    """One recorded reasoning trajectory with its probes, graded."""

    key: tuple[str, str, str]  # dataset, problem_id, rollout_id
    run: str
    target: str
    tokens_used: int
    final_class: int  # class of the final answer among the probe classes (-1: none)
    final_correct: bool  # our grading of the final answer
    recorded_correct: bool  # the recorder's grading, for reference
    positions: tuple[int, ...]  # token position of each probe
    classes: tuple[int, ...]  # class id per probe (-1: empty or unconfident)
    raw_classes: tuple[int, ...]  # class id per probe ignoring hesitation (-1: empty)
    class_correct: tuple[bool, ...]  # per class id: does it match the target?
    run_at: tuple[int, ...]  # after probe i: length of the run of the latest counted answer
    current_at: tuple[int, ...]  # after probe i: class of the latest counted answer (-1: none)
    finished: bool | None = None  # ended on its own (False: hit the token budget; None: not recorded)
    interval: int = 0  # tokens between probes (0: not recorded; see probe_interval())
    answers: tuple[str | None, ...] = ()  # raw probe answer per probe (empty: not kept)
    texts: tuple[str, ...] = ()  # raw probe text per probe ("" where not recorded)
    tails: tuple[str, ...] = ()  # reasoning text since the previous probe (empty: not kept)
    budget: int = 0  # the run's max reasoning tokens (meta.json budget_tokens; 0: not recorded)
    answer_logprobs: tuple[tuple[float, ...] | None, ...] = ()  # per probe (empty: none recorded)
    think_end_logprobs: tuple[float | None, ...] = ()  # log P(</think>) per probe (empty: none recorded)

    def observations(self) -> list[ProbeObservation]:
        """The probes as a host would hand them to a stopping rule, in order."""
        if len(self.answers) != len(self.positions):
            raise InvalidArgumentError(f"{self.run} {self.key}: raw probe answers were not kept")
        n = len(self.positions)
        texts = self.texts or ("",) * n
        tails = self.tails or ("",) * n
        lps = self.answer_logprobs or (None,) * n
        ends = self.think_end_logprobs or (None,) * n
        rows = zip(self.positions, self.answers, texts, tails, lps, ends, strict=True)
        budget = self.budget or None
        return [ProbeObservation(p, a, t, r, lp, e, budget) for p, a, t, r, lp, e in rows]

    def class_of(self, answer: str | None) -> int:
        """Class id of a raw probe answer of this trajectory (-1: not one of them)."""
        for a, c in zip(self.answers, self.raw_classes, strict=False):
            if a == answer and c >= 0:
                return c
        return -1

    def probe_interval(self) -> int:
        """Tokens between probes: recorded, else the smallest gap between probe positions."""
        if self.interval > 0:
            return self.interval
        gaps = [b - a for a, b in zip(self.positions, self.positions[1:], strict=False) if b > a]
        return min(gaps) if gaps else (self.positions[0] if self.positions and self.positions[0] > 0 else 1)


_PROBE_COLUMNS = ("dataset", "problem_id", "rollout_id", "token_position")
_LABEL_FIELDS = ("dataset", "problem_id", "rollout_id", "target", "tokens_used")


def _read_probes(path: pathlib.Path) -> dict[tuple[str, str, str], list[dict]]:
    """Probe rows by trajectory key, in token order; ``token_position`` parsed to int."""
    rows: dict[tuple[str, str, str], list[dict]] = {}
    try:
        with _field_limit(_MAX_FIELD_CHARS), gzip.open(path, "rt", encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            columns = set(reader.fieldnames or [])
            missing = [c for c in _PROBE_COLUMNS if c not in columns]
            if missing or not {"probe_answer", "probe_text"} & columns:
                missing = missing or ["probe_answer or probe_text"]
                raise InvalidArgumentError(f"{path}: probe columns missing: {missing}")
            for row in reader:
                if None in row or None in row.values():  # more, or fewer, fields than the header
                    raise InvalidArgumentError(f"{path}:{reader.line_num}: {len(row) - (None in row)} "
                                               f"fields named, the header has {len(columns)}")  # fmt: skip
                where = f"{path}:{reader.line_num}"
                row["token_position"] = _count(row["token_position"], f"{where}: token_position")
                _parse_logprobs(row, where)
                rows.setdefault((row["dataset"], row["problem_id"], row["rollout_id"]), []).append(row)
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError, csv.Error) as exc:
        raise InvalidArgumentError(f"{path}: unreadable ({type(exc).__name__}: {exc})") from None
    for probes in rows.values():
        probes.sort(key=lambda r: r["token_position"])
    return rows


def _count(value, where: str) -> int:
    """A non-negative whole number (``64``, ``"64"``, ``"64.0"``), else a typed error."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not math.isfinite(number) or number < 0 or number != int(number):
        raise InvalidArgumentError(f"{where}: expected a whole number >= 0, got {value!r}")
    return int(number)


def _parse_logprobs(row: dict, where: str) -> None:
    """The optional columns of hosts that return log-probabilities, parsed in place: ``answer_logprobs``
    (a JSON list of the answer tokens' log-probabilities) and ``think_end_logprob`` (a number); an empty
    field is "not recorded" (``None``). A malformed value is a typed error naming ``where``."""
    for key in ("answer_logprobs", "think_end_logprob"):
        value = row.get(key)
        if value is None or value.strip() == "":
            row[key] = None
            continue
        try:  # each parsed, then given the same checks a host's observation gets
            parsed: tuple[float, ...] | float
            if key == "answer_logprobs":
                listed = json.loads(value)
                if not isinstance(listed, list) or not all(isinstance(v, (int, float)) for v in listed):
                    raise ValueError("expected a JSON list of numbers")
                parsed = tuple(float(v) for v in listed)
                ProbeObservation(0, None, answer_logprobs=parsed)
            else:
                parsed = float(value)
                ProbeObservation(0, None, think_end_logprob=parsed)
        except (ValueError, RecursionError, InvalidArgumentError) as exc:
            raise InvalidArgumentError(f"{where}: {key}: {exc} (got {value[:80]!r})") from None
        row[key] = parsed


def _checked_label(label: dict, where: str) -> dict:
    missing = [f for f in _LABEL_FIELDS if label.get(f) is None]
    if missing:
        raise InvalidArgumentError(f"{where}: label needs {list(_LABEL_FIELDS)}; missing {missing}")
    final = label.get("final_answer")
    return {**label, "tokens_used": _count(label["tokens_used"], f"{where}: tokens_used"),
            "final_answer": None if final is None else str(final)}  # fmt: skip


def _trajectory(
    run: str, label: dict, probes: list[dict], gate: ProbeConsistency, meta: tuple[int, ...], grade: Grade
) -> Trajectory:
    classes = AnswerClasses()
    raw, counted, positions, answers, texts, lps, ends = [], [], [], [], [], [], []
    for row in probes:
        text = row.get("probe_text")
        answer = (extract_probe_answer(text) if text else row.get("probe_answer")) or None
        cid = classes.add(answer)
        answers.append(answer)
        texts.append(text or "")
        lps.append(row.get("answer_logprobs"))
        ends.append(row.get("think_end_logprob"))
        raw.append(cid)
        counted.append(cid if gate.is_confident(text) else -1)
        positions.append(row["token_position"])
    target = str(label["target"])
    final = label.get("final_answer")
    final_cid = classes.add(final) if final else -1
    correct = tuple(grade(classes.representative(c), target) for c in range(len(classes)))
    run_at, current_at = _runs(counted)
    key = (str(label["dataset"]), str(label["problem_id"]), str(label["rollout_id"]))
    return Trajectory(
        key=key,
        run=run,
        target=target,
        tokens_used=label["tokens_used"],
        final_class=final_cid,
        final_correct=bool(final and grade(final, target)),
        recorded_correct=bool(label.get("final_correct")),
        positions=tuple(positions),
        classes=tuple(counted),
        raw_classes=tuple(raw),
        class_correct=correct,
        run_at=run_at,
        current_at=current_at,
        finished=None if label.get("finished_naturally") is None else bool(label["finished_naturally"]),
        interval=meta[0],
        answers=tuple(answers),
        texts=tuple(texts),
        budget=meta[1],
        answer_logprobs=tuple(lps) if any(x is not None for x in lps) else (),
        think_end_logprobs=tuple(ends) if any(x is not None for x in ends) else (),
    )


def _runs(counted: list[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Run length and class of the latest counted answer after each probe."""
    run, last, runs, currents = 0, -1, [], []
    for cid in counted:
        if cid >= 0:
            run = run + 1 if cid == last else 1
            last = cid
        runs.append(run)
        currents.append(last)
    return tuple(runs), tuple(currents)


def load_run(
    folder: str | pathlib.Path,
    *,
    gate: ProbeConsistency | None = None,
    grade: Grade = equivalent,
    skipped: dict[str, int] | None = None,
) -> list[Trajectory]:
    """All trajectories of one run folder, graded with ``grade(answer, target)``.

    ``grade`` is :func:`equivalent` by default; offline, a
    :class:`~reasonserve.certainindex.answers.grading.ReferenceGrader` grades with Math-Verify.

    Probes after ``tokens_used`` are dropped (they cannot be reached), and so are probe
    rows of no labelled trajectory; both are counted in ``skipped`` (when given) under
    ``"probes after tokens_used"`` and ``"probe rows without a label"``. A trajectory
    without probes is kept: every rule runs it to the end. Typed errors naming the file
    (and row): a probe row with more or fewer fields than the header, a bad
    ``token_position``, a label missing a field or labelling a trajectory twice, a
    ``meta.json`` that is not a JSON object or whose ``probe_interval_tokens`` /
    ``budget_tokens`` is not a whole number >= 1 (absent: not recorded).
    """
    root = pathlib.Path(folder)
    for name in ("probes.csv.gz", "labels.jsonl"):
        if not (root / name).is_file():
            raise InvalidArgumentError(f"{root} is not a probe run: {name} is missing")
    gate = gate or ProbeConsistency()
    recorded = _read_meta(root / "meta.json")
    keys = ("probe_interval_tokens", "budget_tokens")
    meta = tuple(_recorded(root / "meta.json", recorded, k) for k in keys)
    probes = _read_probes(root / "probes.csv.gz")
    out, seen, late = [], set(), 0
    for line_no, raw in read_jsonl(root / "labels.jsonl"):
        label = _checked_label(raw, f"{root / 'labels.jsonl'}:{line_no}")
        key = (str(label["dataset"]), str(label["problem_id"]), str(label["rollout_id"]))
        if key in seen:  # a second label would replay the same probes twice
            raise InvalidArgumentError(f"{root / 'labels.jsonl'}:{line_no}: {key} is labelled twice")
        seen.add(key)
        rows = [r for r in probes.get(key, []) if r["token_position"] <= label["tokens_used"]]
        late += len(probes.get(key, [])) - len(rows)
        out.append(_trajectory(root.name, label, rows, gate, meta, grade))
    if skipped is not None:
        skipped["probes after tokens_used"] = skipped.get("probes after tokens_used", 0) + late
        orphans = sum(len(rows) for key, rows in probes.items() if key not in seen)
        skipped["probe rows without a label"] = skipped.get("probe rows without a label", 0) + orphans
    return out


def _read_meta(meta: pathlib.Path) -> dict:
    """``meta.json`` as a dict (``{}``: no file); unreadable or not an object: a typed error."""
    if not meta.is_file():
        return {}
    try:
        payload = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InvalidArgumentError(f"{meta}: unreadable ({type(exc).__name__}: {exc})") from None
    if not isinstance(payload, dict):
        raise InvalidArgumentError(f"{meta}: expected a JSON object, got {type(payload).__name__}")
    return payload


def _recorded(meta: pathlib.Path, payload: dict, key: str) -> int:
    """The positive whole number ``key`` of ``meta.json`` (0: not recorded); anything else is a typed
    error naming the file and key (a budget silently read as "not recorded" would switch the shipped
    rule's budget exit off)."""
    value = payload.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(f"{meta}: {key} must be a whole number >= 1, got {value!r}")
    return value
