"""Lists, tuples, intervals, unions and matrices of normalized answers.

* a tuple or interval ``(a,b]`` compares element by element, bracket kinds must agree;
* a bare list ``1, -2`` (a set, or the solutions of an equation) compares as a set: in
  any order, repeated elements counted once, never equal to a bracketed one (``2,4``
  is not ``(2,4)``);
* ``a \\pm b`` is the bare list ``a+b, a-b`` (``\\{1\\pm\\sqrt5,-2\\}`` has three elements);
* a union ``I_1 \\cup I_2`` compares its intervals in any order;
* matrices compare cell by cell with the same shape (``pmatrix`` = ``bmatrix``;
  ``vmatrix``/``Vmatrix``, determinants, only with their own kind).
"""

from __future__ import annotations

import re

from reasonserve.certainindex.answers._values import exact_value
from reasonserve.certainindex.answers._verdict import Compare, Verdict, all_equal
from reasonserve.certainindex.answers._work import Work

MAX_ITEMS = 256
MAX_PAIR_CHECKS = 400  # pairwise element comparisons per unordered list comparison
_BRACKETS = {"(": ")", "[": "]"}
_PM = re.compile(r"\\(?:pm|mp)(?![a-zA-Z])")
MATRIX = re.compile(r"^\\begin\{([pbBvV]?matrix)\}(.*)\\end\{\1\}$", re.DOTALL)
_PLAIN_MATRIX_KINDS = {"matrix", "pmatrix", "bmatrix", "Bmatrix"}

Items = tuple[str, str, list[str]]  # opener, closer, elements ("", "" for a bare list)


def top_level_split(body: str, separator: str | re.Pattern[str]) -> tuple[list[str], list[str]] | None:
    """Split at ``separator`` (a string or a pattern) outside brackets: (parts, separators).

    None when a bracket closes before it opens (``(1)+(2)`` is not a tuple).
    """
    find = separator.match if isinstance(separator, re.Pattern) else re.compile(re.escape(separator)).match
    parts, found, depth, start, i = [], [], 0, 0, 0
    while i < len(body):
        ch = body[i]
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
            if depth < 0:
                return None
        elif depth == 0 and (m := find(body, i)):
            parts.append(body[start:i])
            found.append(m.group(0))
            i = start = m.end()
            continue
        i += 1
    parts.append(body[start:])
    return parts, found


def split_parts(body: str, separator: str) -> list[str] | None:
    split = top_level_split(body, separator)
    return None if split is None else split[0]


def _expand_pm(part: str) -> list[str]:
    found = _PM.findall(part)
    if len(found) != 1:
        return [part]
    plus = _PM.sub("+" if found[0] == "\\pm" else "-", part)
    minus = _PM.sub("-" if found[0] == "\\pm" else "+", part)
    return [plus, minus]


def split_items(s: str) -> Items | None:
    """``(a,b]`` -> ("(", "]", [a, b]); ``a,b`` or ``a\\pm b`` -> ("", "", [...]); else None."""
    if "," not in s and ";" not in s and "\\pm" not in s and "\\mp" not in s and "\\cup" not in s:
        return None
    if "\\cup" in s:
        parts = split_parts(s, "\\cup")
        if parts and len(parts) > 1 and all(parts):
            return "cup", "cup", parts
    if len(s) >= 2 and s[0] in _BRACKETS and s[-1] in ")]":
        parts = split_parts(s[1:-1], "," if "," in s or ";" not in s else ";")
        if parts is not None:  # else "(1,2),(3,4)": a bare list of tuples
            return (s[0], s[-1], parts) if len(parts) > 1 and all(parts) and len(parts) <= MAX_ITEMS else None
    parts = split_parts(s, "," if "," in s or ";" not in s else ";")
    if parts is None or (len(parts) == 1 and not _PM.search(s)):
        return None
    parts = [x for p in parts for x in _expand_pm(p)]
    return ("", "", parts) if 1 < len(parts) <= MAX_ITEMS and all(parts) else None


def compare_items(la: Items | None, lb: Items | None, cmp: Compare, work: Work) -> Verdict:
    if la is None or lb is None:
        return Verdict.DIFFERENT
    (oa, ca, pa), (ob, cb, pb) = la, lb
    if (oa, ca) != (ob, cb) or (oa not in ("", "cup") and len(pa) != len(pb)):
        return Verdict.DIFFERENT
    if oa in ("", "cup"):
        pa, pb = list(dict.fromkeys(pa)), list(dict.fromkeys(pb))  # a set: repeats count once
    ordered = Verdict.DIFFERENT
    if len(pa) == len(pb):
        ordered = all_equal(cmp(x, y) for x, y in zip(pa, pb, strict=True))
    if ordered is Verdict.EQUAL or oa not in ("", "cup"):
        return ordered
    return _compare_unordered(pa, pb, cmp, work)


def _compare_unordered(pa: list[str], pb: list[str], cmp: Compare, work: Work) -> Verdict:
    """Every element of each side has an equal on the other side.

    Same strings, or (no decimals) the same exact values, settle it in linear time;
    otherwise elements are matched pairwise, at most :data:`MAX_PAIR_CHECKS` times.
    """
    if set(pa) == set(pb):  # same strings reordered: no pairwise checks needed
        return Verdict.EQUAL
    keys_a, keys_b = _exact_keys(pa), _exact_keys(pb)
    if keys_a is not None and keys_b is not None:
        return Verdict.EQUAL if keys_a == keys_b else Verdict.DIFFERENT
    budget = [MAX_PAIR_CHECKS]
    return all_equal((_covered(pa, pb, cmp, work, budget), _covered(pb, pa, cmp, work, budget)))


def _exact_keys(parts: list[str]) -> set | None:
    """The exact rational values of all parts, or None if one is not an exact constant."""
    if any("." in p for p in parts):
        return None  # a rounded decimal matches by its precision, not by its value
    keys = set()
    for p in parts:
        key = exact_value(p)
        if key is None:
            return None
        keys.add(key)
    return keys


def _covered(pa: list[str], pb: list[str], cmp: Compare, work: Work, budget: list[int]) -> Verdict:
    unknown = False
    for x in pa:
        if x in pb:
            continue
        for y in pb:
            budget[0] -= 1
            if work.left < 0 or budget[0] < 0:
                return Verdict.UNKNOWN
            verdict = cmp(x, y)
            if verdict is Verdict.EQUAL:
                break
            unknown = unknown or verdict is Verdict.UNKNOWN
        else:
            return Verdict.UNKNOWN if unknown else Verdict.DIFFERENT
    return Verdict.EQUAL


def _matrix_cells(body: str) -> list[list[str]]:
    rows = body.split("\\\\")
    if rows and rows[-1] == "":  # a trailing row break
        rows.pop()
    return [row.split("&") for row in rows]


def compare_matrices(xa: re.Match | None, xb: re.Match | None, cmp: Compare) -> Verdict:
    if xa is None or xb is None:
        return Verdict.DIFFERENT
    ka, kb = xa.group(1), xb.group(1)
    if ka != kb and not (ka in _PLAIN_MATRIX_KINDS and kb in _PLAIN_MATRIX_KINDS):
        return Verdict.DIFFERENT
    ca, cb = _matrix_cells(xa.group(2)), _matrix_cells(xb.group(2))
    if [len(r) for r in ca] != [len(r) for r in cb]:
        return Verdict.DIFFERENT
    return all_equal(
        cmp(x, y) if x and y else Verdict.UNKNOWN
        for ra, rb in zip(ca, cb, strict=True)
        for x, y in zip(ra, rb, strict=True)
    )
