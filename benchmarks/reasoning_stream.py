"""Per-chunk cost of a streamed reasoning reply: detokenizer + stop strings + reasoning split.

Usage: ``python benchmarks/reasoning_stream.py [--streams 32] [--reasoning-tokens 4096] [--repeats 3]``.

32 streams, each 4096 reasoning tokens (random ASCII words, byte tokenizer), ``</think>``
and 256 answer tokens, one token per chunk, interleaved as an engine step would deliver
them. Candidate: the server's own per-choice pipeline (``serve.generation.ChoiceState``:
incremental detokenizer, a stop string, the ``deepseek_r1`` stream and the reasoning
token counter). Baseline, in the same process and alternated: the same stream handled
by re-splitting the whole text so far at every chunk (what a parser without incremental
state does). Reported per window of positions: microseconds per chunk (medians over
repeats) and, for each, late/early: flat (about 1) means O(new tokens) per chunk.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

sys.path.insert(0, __file__.rsplit("/", 1)[0])

from _harness import RESULTS, Row, machine, report
from reasonserve.engine.sampling_params import SamplingParams
from reasonserve.engine.tokenizer import ByteTokenizer, IncrementalDecoder
from reasonserve.serve.generation import ChoiceState
from reasonserve.serve.reasoning_parser import get_reasoning_parser, tag_token_ids
from reasonserve.serve.runner import Event
from reasonserve.serve.sampling import Capacity, Job, Plan, ReasoningSetup

TOK = ByteTokenizer()
PARSER = get_reasoning_parser("deepseek_r1")
STOP = ("\n\nUSER:",)
WINDOW = 512


def _tokens(rng: random.Random, reasoning: int, answer: int) -> list[int]:
    words = ["so", "then", "wait", "let", "x", "equals", "we", "check", "the", "sum", "is", "7,"]
    text = ""
    while len(text) < reasoning:
        text += rng.choice(words) + rng.choice([" ", " ", "\n"])
    ids = TOK.encode(text[:reasoning]) + TOK.encode("</think>")
    return ids + TOK.encode(("The answer is 42. " * answer)[:answer])


def _plan() -> Plan:
    tags = (tag_token_ids(TOK, PARSER.start_tag), tag_token_ids(TOK, PARSER.end_tag))
    setup = ReasoningSetup(PARSER, False, tags, True)
    jobs = [Job(0, [1], SamplingParams())]
    return Plan("chatcmpl-b", True, jobs, True, False, False, STOP, False, False, frozenset(), None, setup)


class Resplit:
    """The baseline: decode incrementally, but split the whole text again every chunk."""

    def __init__(self) -> None:
        self.decoder, self.text, self.sent = IncrementalDecoder(TOK), "", (0, 0)

    def apply(self, event: Event) -> tuple[str, str]:
        self.text += self.decoder.push(event.tokens)
        cut = self.text.find(STOP[0])
        reasoning, content = PARSER.split(self.text if cut < 0 else self.text[:cut])
        r, c = reasoning or "", content or ""
        delta = r[self.sent[0] :], c[self.sent[1] :]
        self.sent = len(r), len(c)
        return delta


def _run(make, streams: list[list[int]]) -> list[float]:
    """Microseconds per chunk in each window of positions."""
    states = [make() for _ in streams]
    length = len(streams[0])
    out = []
    for start in range(0, length - WINDOW + 1, WINDOW):
        t0 = time.perf_counter()
        for pos in range(start, start + WINDOW):
            for state, ids in zip(states, streams, strict=True):
                state.apply(Event("r", [ids[pos]]))
        out.append(1e6 * (time.perf_counter() - t0) / (WINDOW * len(streams)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--reasoning-tokens", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rng = random.Random(0)
    streams = [_tokens(rng, args.reasoning_tokens, 256) for _ in range(args.streams)]
    cap, plan = Capacity(TOK, 10**6, 10**6, frozenset()), _plan()
    ours, theirs = [], []
    for _ in range(args.repeats):  # alternate
        theirs.append(_run(Resplit, streams))
        ours.append(_run(lambda: ChoiceState(plan.jobs[0], plan, cap, "r"), streams))
    rows = []
    for w in range(len(ours[0])):
        base, cand = statistics.median(t[w] for t in theirs), statistics.median(o[w] for o in ours)
        span = f"tokens {w * WINDOW}-{(w + 1) * WINDOW}"
        rows.append(Row("us per chunk", span, "re-split all text", base / 1e3, cand / 1e3, cand / base))
    growth = {
        k: statistics.median(r[-1] / r[0] for r in runs) for k, runs in (("ours", ours), ("resplit", theirs))
    }
    meta = machine("cpu") | {"streams": args.streams, "reasoning_tokens": args.reasoning_tokens,
                             "repeats": args.repeats, "late_over_early_ours": round(growth["ours"], 2),
                             "late_over_early_resplit": round(growth["resplit"], 2)}  # fmt: skip
    report("reasoning_stream", rows, meta, RESULTS)
    print("(ms columns are microseconds per chunk / 1000)")


if __name__ == "__main__":
    main()
