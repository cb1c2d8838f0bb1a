"""PhaseBook.rank: the queue order the vLLM / SGLang adapters sort by (PASCAL's ranking,
round robin by rotation, demotion by generated tokens), with its cached keys."""

from hypothesis import given, settings
from hypothesis import strategies as st

from reasonserve.adapters.phase_book import PhaseAwareConfig, PhaseBook

END = 99
THRESHOLD, QUANTUM = 50, 8


def _book():
    return PhaseBook(PhaseAwareConfig(think_end_token_ids=(END,), quantum=QUANTUM, demote_threshold_tokens=THRESHOLD))


class _Req:
    def __init__(self, rid, prompt, arrival):
        self.rid, self.prompt, self.arrival, self.computed, self.output = rid, prompt, arrival, 0, []


def _rank(book, r, running, now, fresh=False):
    if fresh and r.rid in book._entries:
        book._entries[r.rid].signature = None  # force the key to be computed from scratch
    return book.rank(r.rid, arrival_s=r.arrival, num_prompt_tokens=r.prompt, num_computed_tokens=r.computed,
                     output_ids=r.output, running=running, now_s=now)  # fmt: skip


@st.composite
def _runs(draw):
    n = draw(st.integers(1, 6))
    prompts = draw(st.lists(st.sampled_from([3, 20, THRESHOLD + 30, 400]), min_size=n, max_size=n))
    steps = draw(st.lists(st.tuples(st.integers(0, n - 1), st.sampled_from(["run", "token", "end", "preempt"])),
                          max_size=60))  # fmt: skip
    return prompts, steps


@settings(max_examples=150, deadline=None)
@given(_runs())
def test_cached_keys_equal_keys_computed_from_scratch(run):
    """Two books fed the same steps, one never reusing a key: every key agrees. A break
    point missing from the cache's signature (phase, demotion, quantum) fails this."""
    prompts, steps = run
    cached, fresh = _book(), _book()
    reqs = [_Req(f"r{i}", p, float(i)) for i, p in enumerate(prompts)]
    running: set[str] = set()
    for t, (i, action) in enumerate(steps):
        r, now = reqs[i], 100.0 + t
        if action == "run":
            running.add(r.rid)
            r.computed = max(r.computed, r.prompt)
        elif action == "preempt":
            running.discard(r.rid)
            r.computed = 0
        elif r.rid in running:  # a token, or the end of thinking
            r.output.append(END if action == "end" else 7)
            r.computed += 1
        for q in reqs:
            on = q.rid in running
            assert _rank(cached, q, on, now) == _rank(fresh, q, on, now, fresh=True), (q.rid, t)


def test_a_running_request_that_used_its_quantum_goes_behind_the_others():
    book = _book()
    a, b = _Req("a", 4, 1.0), _Req("b", 4, 2.0)
    for r in (a, b):
        _rank(book, r, False, 5.0)  # waiting, then admitted: its prompt counts towards its quantum
        r.computed = 4
    now = 10.0
    order = []
    for _ in range(3 * QUANTUM):
        first = min((a, b), key=lambda r: _rank(book, r, True, now))
        order.append(first.rid)
        first.output.append(7)
        first.computed += 1
        now += 1.0
    # a serves the rest of its first quantum, then b, then a full quantum each: round robin
    first = QUANTUM - 4
    assert order == ["a"] * first + ["b"] * first + ["a"] * QUANTUM + ["b"] * QUANTUM


@settings(max_examples=100, deadline=None)
@given(prompts=st.lists(st.sampled_from([5, THRESHOLD + 1, 3000]), min_size=2, max_size=12),
       answering=st.sets(st.integers(0, 11)))  # fmt: skip
def test_a_long_prompt_waits_only_for_requests_that_came_before_it(prompts, answering):
    """No starvation of long prompts: among waiting requests that are not answering and
    have not generated past the threshold, the order is the enqueue order, whatever
    the prompt lengths (PASCAL's own length test would demote a long prompt on arrival,
    behind every later arrival)."""
    book = _book()
    reqs = [_Req(f"w{i:02d}", p, float(i)) for i, p in enumerate(prompts)]
    for i in answering & set(range(len(reqs))):
        reqs[i].output = [END]
    ordered = sorted(reqs, key=lambda r: _rank(book, r, False, 50.0))
    fresh = [r.rid for r in ordered if not r.output]
    assert fresh == sorted(fresh)  # enqueue (= arrival) order
    last_fresh = max((k for k, r in enumerate(ordered) if not r.output), default=-1)
    assert all(r.output for r in ordered[last_fresh + 1 :])  # answering ones after them
