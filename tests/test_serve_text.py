"""Incremental detokenization and stop strings (no server needed)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.engine.tokenizer import ByteTokenizer, IncrementalDecoder, check_text
from reasonserve.serve.text import ChoiceText

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
