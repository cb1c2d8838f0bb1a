"""Self-consistency program workloads from the recorded samples in ``../shared/data``
(``sc_samples/*.jsonl``, read at run time, never copied into the repository).

Answers are grouped and graded by the SC replay's loader
(:func:`reasonserve.recordings.load_samples`: answer equivalence against ``gt``), so
the simulator's certainindex sees the same answer classes as the replay. Lengths:
the recorded ``tokens`` where the file has them; otherwise (the Qwen2.5-Math file)
``ceil(4/3 x whitespace words)`` of each response (the common 0.75 words-per-token rule;
no tokenizer of the recording model is available offline). The prompt is the system
prompt plus the question, counted the same way. A question's difficulty factor (SPEC
2.4) comes from its recorded samples' correctness: 1 when every sample is correct, 3
when none is, else 2.
"""

from __future__ import annotations

import math
import pathlib
import random
import zlib
from dataclasses import dataclass

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.recordings import SCQuestion, load_mcts, load_prm_beams, load_samples, read_jsonl

__all__ = ["SCProgram", "SCRecord", "difficulty", "load_sc_records", "load_search_records", "prompt_ids",
           "sc_program_workload"]  # fmt: skip

WORDS_TO_TOKENS = 4 / 3


@dataclass(frozen=True, slots=True)
class SCProgram:
    """One SC program: a recorded question, its samples' output tokens, when it arrives.
    Its prompt is :attr:`prompt` (``prompt_tokens`` ids, the same for every program of
    the question)."""

    program_id: str
    arrival_s: float
    prompt_tokens: int
    question: SCQuestion  # answer classes and their correctness, in recorded order
    sample_tokens: tuple[int, ...]  # output tokens of each recorded sample
    difficulty: int = 2  # 1 always correct, 2 variable, 3 always wrong (SPEC 2.4)

    def __post_init__(self) -> None:
        if len(self.sample_tokens) != len(self.question.classes) or not self.sample_tokens:
            raise InvalidArgumentError(f"program {self.program_id}: one length per recorded sample needed")
        if min(self.sample_tokens) < 1 or self.prompt_tokens < 1:
            raise InvalidArgumentError(f"program {self.program_id}: token counts must be >= 1")
        if self.difficulty not in (1, 2, 3):
            raise InvalidArgumentError(f"program {self.program_id}: difficulty must be 1, 2 or 3")

    @property
    def prompt(self) -> tuple[int, ...]:
        return prompt_ids(self.question.qid, self.prompt_tokens)


@dataclass(frozen=True, slots=True)
class SCRecord:
    """One recorded question: graded answers, per-sample output tokens, prompt tokens."""

    question: SCQuestion
    sample_tokens: tuple[int, ...]
    prompt_tokens: int
    tokens_recorded: bool  # False: lengths estimated from words


def difficulty(q: SCQuestion) -> int:
    """1 (every recorded sample correct), 3 (none), else 2."""
    correct = [c >= 0 and q.class_correct[c] for c in q.classes]
    return 1 if all(correct) else 3 if not any(correct) else 2


def _words_to_tokens(text: object) -> int:
    return max(1, math.ceil(len(str(text or "").split()) * WORDS_TO_TOKENS))


def load_sc_records(path: str | pathlib.Path) -> list[SCRecord]:
    """Every question of a ``sc_samples`` file with its lengths (see the module docstring)."""
    questions = load_samples(path)
    rows = [row for _, row in read_jsonl(path)]
    out = []
    for q, row in zip(questions, rows, strict=True):
        n = len(q.classes)
        recorded = isinstance(row.get("tokens"), list) and len(row["tokens"]) == n
        if recorded:
            tokens = tuple(max(1, int(t)) if isinstance(t, (int, float)) and math.isfinite(t) else 1
                           for t in row["tokens"])  # fmt: skip
        elif isinstance(row.get("response"), list) and len(row["response"]) == n:
            tokens = tuple(_words_to_tokens(r) for r in row["response"])
        else:
            why = "has neither 'tokens' nor 'response' per sample"
            raise InvalidArgumentError(f"{path}: question {q.qid} {why}")
        prompt = _words_to_tokens(f"{row.get('system') or ''} {row.get('question') or ''}")
        out.append(SCRecord(q, tokens, prompt, recorded))
    if not out:
        raise InvalidArgumentError(f"{path}: no questions")
    return out


def load_search_records(kind: str, path: str | pathlib.Path) -> list[SCRecord]:
    """Search recordings as programs of independent samples, graded by the replay's loaders
    (:mod:`reasonserve.recordings.search`, rewards included): ``"prm"`` — each beam of a
    ``prm_beams`` file is a sample, its length its completion's words; ``"mcts"`` — each
    rollout of an rStar folder is a sample, its length the words of every node's text but
    the question (shared tree prefixes are counted once per rollout: an upper bound)."""
    if kind == "prm":
        questions = load_prm_beams(path)
        lengths = [[_words_to_tokens(c) for c in row["completions"]] for _, row in read_jsonl(path)]
        prompts = [_words_to_tokens(row.get("problem")) for _, row in read_jsonl(path)]
    elif kind == "mcts":
        questions = load_mcts(path)
        lengths, prompts = _mcts_lengths(pathlib.Path(path) / "answer_sheets")
    else:
        raise InvalidArgumentError(f"kind must be 'prm' or 'mcts', got {kind!r}")
    out = [
        SCRecord(q, tuple(n), prompt, False) for q, n, prompt in zip(questions, lengths, prompts, strict=True)
    ]
    if not out:
        raise InvalidArgumentError(f"{path}: no questions")
    return out


def _mcts_lengths(root: pathlib.Path) -> tuple[list[list[int]], list[int]]:
    import json

    lengths, prompts = [], []
    for answer_file in sorted(root.glob("Question * - Answer.json")):  # load_mcts's order
        qid = answer_file.name.split(" - ")[0]
        rollouts = json.loads((root / f"{qid} - Rollout Solutions.json").read_text())
        rollouts.sort(key=lambda r: int(r.get("rollout_id", 0)))
        per, prompt = [], 1
        for r in rollouts:
            nodes = list((r.get("trace") or {}).values())
            prompt = max(prompt, _words_to_tokens(nodes[0].get("user_question")) if nodes else 1)
            per.append(_words_to_tokens(" ".join(str(v) for n in nodes for k, v in n.items()
                                                 if k != "user_question")))  # fmt: skip
        lengths.append(per)
        prompts.append(prompt)
    return lengths, prompts


def prompt_ids(key: str, prompt_tokens: int) -> tuple[int, ...]:
    """A stand-in prompt of ``prompt_tokens`` token ids for question ``key``: programs of
    one question share it (and its prefix blocks, as a prefix cache would see them),
    programs of two questions differ from their first token on."""
    base = zlib.crc32(key.encode())
    return tuple((base + i) % 2**31 for i in range(prompt_tokens))


def sc_program_workload(
    records: list[SCRecord], rate_per_s: float, num_programs: int, seed: int
) -> list[SCProgram]:
    """``num_programs`` programs arriving as a Poisson process of rate ``rate_per_s``, each
    a question drawn uniformly (with replacement). Questions and unit gaps come from two
    streams seeded by ``seed`` alone, so every rate sees the same questions in the same
    order at arrival times scaled by ``1 / rate`` (common random numbers across rates)."""
    number = isinstance(rate_per_s, (int, float)) and not isinstance(rate_per_s, bool)
    if not number or not 0 < rate_per_s < float("inf"):
        raise InvalidArgumentError(f"rate_per_s must be a finite number > 0, got {rate_per_s!r}")
    if isinstance(num_programs, bool) or not isinstance(num_programs, int) or num_programs < 1:
        raise InvalidArgumentError(f"num_programs must be an int >= 1, got {num_programs!r}")
    if not records:
        raise InvalidArgumentError("records must not be empty")
    picks, gaps = random.Random(f"questions-{seed}"), random.Random(f"gaps-{seed}")
    out, t = [], 0.0
    for i in range(num_programs):
        t += gaps.expovariate(1.0) / rate_per_s
        rec = records[picks.randrange(len(records))]
        q = rec.question
        out.append(SCProgram(f"p{i:06d}", t, rec.prompt_tokens, q, rec.sample_tokens, difficulty(q)))
    return out
