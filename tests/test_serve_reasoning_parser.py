"""The reasoning parser: vLLM's <think> split, streamed equal to non-streamed, bounded memory."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.engine.tokenizer import ByteTokenizer
from reasonserve.serve.reasoning_parser import (
    REASONING_PARSERS,
    ReasoningParser,
    ReasoningTokenCounter,
    get_reasoning_parser,
    tag_token_ids,
)

R1 = get_reasoning_parser("deepseek_r1")
QWEN3 = get_reasoning_parser("qwen3")

# pieces that make tags, partial tags and near-misses likely
_PIECES = ["<think>", "</think>", "<", "/", "think", ">", "<th", "</th", "ink>", "a", " ", "\n", "é", "😀"]
texts = st.lists(st.sampled_from(_PIECES), max_size=14).map("".join) | st.text(max_size=30)


def _stream(parser, deltas, *, in_answer=False):
    s = parser.stream(in_answer=in_answer)
    reasoning, content, held = [], [], 0
    for d in deltas:
        r, c = s.push(d)
        reasoning.append(r)
        content.append(c)
        held = max(held, len(s._held))
    r, c = s.finish()
    reasoning.append(r)
    content.append(c)
    return "".join(reasoning) or None, "".join(content) or None, held


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>\nplan</think>\n\nanswer", ("\nplan", "\n\nanswer")),
        ("plan</think>answer", ("plan", "answer")),  # template opened the block in the prompt
        ("plan only, cut off", ("plan only, cut off", None)),
        ("<think>plan", ("plan", None)),
        ("plan</think>", ("plan", None)),
        ("</think>answer", (None, "answer")),
        ("a</think>b</think>c", ("a", "b</think>c")),  # the first end tag ends the reasoning
        ("x<think>y</think>z", ("x<think>y", "z")),  # a start tag later on is text
        ("<think><think>y", ("<think>y", None)),
        ("<thi", ("<thi", None)),
        ("", (None, None)),
    ],
)
def test_split_examples(text, expected):
    assert R1.split(text) == expected
    assert QWEN3.split(text) == expected


def test_split_in_answer_is_all_content():
    assert R1.split("<think>a</think>b", in_answer=True) == (None, "<think>a</think>b")
    assert R1.split("", in_answer=True) == (None, None)


@settings(max_examples=400)
@given(text=texts, cuts=st.lists(st.integers(0, 60), max_size=12), in_answer=st.booleans())
def test_any_split_into_deltas_streams_to_split(text, cuts, in_answer):
    points = sorted({min(c, len(text)) for c in cuts})
    deltas = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    for parser in (R1, QWEN3):
        reasoning, content, held = _stream(parser, deltas, in_answer=in_answer)
        assert (reasoning, content) == parser.split(text, in_answer=in_answer)
        assert held < max(len(parser.start_tag), len(parser.end_tag))


@settings(max_examples=200)
@given(text=texts)
def test_one_character_deltas_emit_reasoning_as_soon_as_it_cannot_be_a_tag(text):
    s = R1.stream()
    emitted = ""
    for i, ch in enumerate(text):
        r, _ = s.push(ch)
        emitted += r
        if not s.in_answer and i >= len(R1.start_tag):  # past the start: only an end-tag prefix waits
            assert len(text[: i + 1]) - len(emitted) <= len(R1.start_tag) + len(R1.end_tag) - 1


def test_stream_emits_content_immediately_after_the_end_tag():
    s = R1.stream()
    assert s.push("<thi") == ("", "")
    assert s.push("nk>ab</th") == ("ab", "")
    assert s.push("ink>Hel") == ("", "Hel")
    assert s.in_answer
    assert s.push("</think>") == ("", "</think>")
    assert s.finish() == ("", "")


def test_starts_in_answer():
    assert R1.starts_in_answer("<|user|>hi<|assistant|><think>\n\n</think>\n\n")
    assert not R1.starts_in_answer("<|user|>hi<|assistant|><think>\n")
    assert not R1.starts_in_answer("a</think>b<think>\n")
    assert R1.starts_in_answer("<think>a</think>b<think>\n\n</think>\n\n")  # the last block closed
    assert not R1.starts_in_answer(None)
    assert QWEN3.starts_in_answer("hi", {"enable_thinking": False})
    assert not QWEN3.starts_in_answer("hi", {"enable_thinking": True})
    assert not R1.starts_in_answer("hi", {"enable_thinking": False})  # deepseek_r1 does not read it


def test_unknown_parser_and_bad_tags_are_errors():
    with pytest.raises(InvalidArgumentError, match="deepseek_r1, qwen3"):
        get_reasoning_parser("granite")
    with pytest.raises(InvalidArgumentError):
        ReasoningParser("x", start_tag="<t>", end_tag="<t>")
    assert set(REASONING_PARSERS) == {"deepseek_r1", "qwen3"}


# --- token counting ---------------------------------------------------------------

_BYTES = ByteTokenizer()


@settings(max_examples=300)
@given(text=texts, cuts=st.lists(st.integers(0, 200), max_size=8), in_answer=st.booleans())
def test_byte_token_count_equals_the_reasoning_texts_bytes(text, cuts, in_answer):
    """With one token per byte the reasoning text's UTF-8 length is the exact count."""
    ids = _BYTES.encode(text)
    counter = ReasoningTokenCounter(
        tag_token_ids(_BYTES, "<think>"), tag_token_ids(_BYTES, "</think>"), in_answer=in_answer
    )
    points = sorted({min(c, len(ids)) for c in cuts})
    for a, b in zip([0, *points], [*points, len(ids)], strict=True):
        counter.push(ids[a:b])
    reasoning, _ = R1.split(text, in_answer=in_answer)
    assert counter.finish() == len((reasoning or "").encode())
    assert counter.in_answer == (in_answer or "</think>" in text.removeprefix("<think>"))


_SINGLE = {"<think>": 1000, "</think>": 1001}


@settings(max_examples=300)
@given(pieces=st.lists(st.sampled_from(["<think>", "</think>", "a", "b", " "]), max_size=20))
def test_single_token_tags_count_tokens_between_them(pieces):
    ids = [_SINGLE.get(p, ord(p[0])) for p in pieces]
    counter = ReasoningTokenCounter([1000], [1001])
    counts = [counter.push([i]) for i in ids]
    body = ids[1:] if ids[:1] == [1000] else ids
    expected = body.index(1001) if 1001 in body else len(body)
    assert counter.finish() == expected
    assert counts == sorted(counts)  # never goes down with single-token tags


def test_counter_holds_a_possible_start_tag_until_decided():
    counter = ReasoningTokenCounter([7, 8], [9])
    assert counter.push([7]) == 0
    assert counter.push([5]) == 2  # not the start tag: both are reasoning
    assert counter.push([9, 4, 4]) == 2
    assert counter.in_answer
    counter = ReasoningTokenCounter([7, 8], [9])
    assert counter.push([7]) == 0
    assert counter.finish() == 1


def test_tag_token_ids_prefers_one_vocabulary_token():
    class Vocab:
        unk_token_id = 0

        def convert_tokens_to_ids(self, token):
            return {"</think>": 151668}.get(token, 0)

        def encode(self, text):
            return [ord(c) for c in text]

    assert tag_token_ids(Vocab(), "</think>") == (151668,)
    assert tag_token_ids(Vocab(), "<think>") == tuple(ord(c) for c in "<think>")
    assert tag_token_ids(_BYTES, "</think>") == tuple(b"</think>")
