"""The docs render as written: docstrings through scripts/mkdocs_docstrings.py, pages
without stray emphasis, every page in the site's navigation."""

import importlib.util
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("mkdocs_docstrings", ROOT / "scripts" / "mkdocs_docstrings.py")
docstrings = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docstrings)


def test_sphinx_roles_become_code():
    text = "Uses :func:`equivalent` and :class:`~reasonserve.certainindex.Verdict`, see :mod:`.stopping`."
    assert docstrings.render(text) == "Uses `equivalent` and `Verdict`, see `.stopping`."
    assert ":func:" not in docstrings.render(":func:`a <b.c>` and :py:meth:`x.y`")


def test_doctests_become_fenced_code_under_any_title():
    text = "Example\n-------\n>>> x = 1\n>>> x + 1\n2\n\nAfter."
    assert docstrings.render(text) == "Example\n-------\n```pycon\n>>> x = 1\n>>> x + 1\n2\n```\n\nAfter."


def test_powers_are_not_emphasis_but_code_and_types_stay_as_written():
    assert docstrings.render("``max_tokens`` 1..2**31-1; ``seed`` 0..2**63-1") == (
        r"``max_tokens`` 1..2\*\*31-1; ``seed`` 0..2\*\*63-1"
    )
    assert docstrings.render("positions : int tensor (< 2**32)") == "positions : int tensor (< 2**32)"
    assert docstrings.render("```\nx = 2**3\n```") == "```\nx = 2**3\n```"


def _outside_code(page: str) -> str:
    page = re.sub(r"```.*?```", "", page, flags=re.S)
    return re.sub(r"`[^`\n]*`", "", page)


def test_no_page_reads_a_power_as_bold():
    """``2**31-1`` outside code renders as bold "231-1"."""
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        found = re.findall(r"\w\*\*\w", _outside_code(page.read_text(encoding="utf-8")))
        assert found == [], f"{page.name}: {found} (put powers in code)"


def test_the_site_shows_every_page_and_reads_numpy_docstrings():
    config = (ROOT / "mkdocs.yml").read_text()
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages == set(re.findall(r":\s*([\w_]+\.md)\s*$", config, flags=re.M))
    assert "docstring_style: numpy" in config and "scripts/mkdocs_docstrings.py:ReadableDocstrings" in config
