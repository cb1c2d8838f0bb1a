"""Incremental detokenization and stop strings (no server needed)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.engine.choice_text import ChoiceText
from reasonserve.engine.tokenizer import ByteTokenizer, IncrementalDecoder, check_text

TOK = ByteTokenizer()


def _pieces(ids: list[int], cuts: list[int]) -> list[str]:
    dec, out, start = IncrementalDecoder(TOK), [], 0
    for cut in [*sorted(cuts), len(ids)]:
        out.append(dec.push(ids[start:cut]))
        start = max(start, cut)
    out.append(dec.flush())
    return out


def test_a_multibyte_character_is_never_split():
    ids = TOK.encode("aé€😀b")  # 1, 2, 3 and 4 bytes
    pieces = [IncrementalDecoder(TOK)]
    dec, emitted = pieces[0], []
    for i in ids:
        emitted.append(dec.push([i]))
    emitted.append(dec.flush())
    assert "".join(emitted) == "aé€😀b"
    assert all("\ufffd" not in p for p in emitted)  # no piece holds half a character
    assert emitted[1:3] == ["", "é"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 255), max_size=40), st.lists(st.integers(0, 40), max_size=6))
def test_pieces_concatenate_to_the_full_decode_for_any_bytes_and_any_cuts(ids, cuts):
    assert "".join(_pieces(ids, cuts)) == TOK.decode(ids)


# bytes that form 1- to 4-byte characters, and break them: "A", "é", "€", "😀" pieces
_NEAR_UTF8 = st.sampled_from([0x41, 0x80, 0xC3, 0xA9, 0xE2, 0x82, 0xAC, 0xF0, 0x9F, 0x98])


@settings(max_examples=300, deadline=None)
@given(st.lists(_NEAR_UTF8, max_size=60), st.lists(st.integers(0, 60), max_size=10))
def test_pieces_concatenate_to_the_full_decode_for_nearly_valid_bytes(ids, cuts):
    assert "".join(_pieces(ids, cuts)) == TOK.decode(ids)


class _ChunkTokenizer:
    """Tokens of several bytes each that end one character and begin the next, as
    byte-level BPE merges can (ByteTokenizer has one byte per token)."""

    CHUNKS = (b"A", b"\x80", b"\xe2\x82", b"\xac\xf0", b"\x9f\x98", b"\x80A", b"\xc3", b"\xa9\xe2", b"\xac")

    def decode(self, ids) -> str:
        return b"".join(self.CHUNKS[i] for i in ids).decode("utf-8", errors="replace")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, len(_ChunkTokenizer.CHUNKS) - 1), max_size=40))
def test_pieces_concatenate_to_the_full_decode_with_multibyte_tokens(ids):
    tok = _ChunkTokenizer()
    dec = IncrementalDecoder(tok)
    assert "".join([*(dec.push([i]) for i in ids), dec.flush()]) == tok.decode(ids)


def test_bytes_that_never_form_a_character_are_not_held_back():
    """A run of lone continuation bytes is emitted as it comes (one id behind), instead
    of being held and decoded again with every new id: that made a long run quadratic
    on the server's event loop (8,000 such tokens took 9 s)."""
    dec = IncrementalDecoder(TOK)
    pieces = [dec.push([0x80]) for _ in range(1000)]
    assert pieces[0] == "" and pieces[1:] == ["\ufffd"] * 999
    assert dec.flush() == "\ufffd"
    held = IncrementalDecoder(TOK)
    assert [held.push([b]) for b in (0x80, 0xF0, 0x9F, 0x98, 0x80)] == ["", "\ufffd", "", "", "😀"]


def test_lone_surrogates_are_a_typed_error():
    with pytest.raises(InvalidArgumentError, match="U\\+D800 at index 1"):
        TOK.encode("a\ud800")
    check_text("\U0001f600")  # a real pair is fine


@pytest.mark.parametrize("include", [False, True])
def test_stop_string_across_tokens_truncates_and_is_never_streamed(include):
    text = ChoiceText(TOK, ["END"], include_stop=include)
    sent = [text.push(TOK.encode(part)) for part in ("abc E", "N", "Dxyz")]
    assert text.stop_hit == "END"
    assert "".join(sent) + text.finish() == ("abc END" if include else "abc ")
    assert sent[:2] == ["abc", " "]  # "E", "EN" held back: they might start the stop string


def test_earliest_stop_string_wins_and_text_after_it_is_dropped():
    text = ChoiceText(TOK, ["zz", "b"])
    assert text.push(TOK.encode("azzb")) == "a" and text.stop_hit == "zz"
    assert text.push(TOK.encode("more")) == "" and text.finish() == ""


def test_without_stop_strings_nothing_is_held_back():
    text = ChoiceText(TOK)
    assert text.push(TOK.encode("hello")) == "hello" and text.finish() == ""
