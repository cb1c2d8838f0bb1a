"""Every ```python block in README.md and docs/*.md runs (our own docs, not model output)."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def _blocks():
    for page in PAGES:
        for i, code in enumerate(BLOCK.findall(page.read_text(encoding="utf-8"))):
            yield pytest.param(code, id=f"{page.name}#{i}")


@pytest.mark.parametrize("code", list(_blocks()))
def test_docs_example_runs(code):
    namespace: dict = {"__name__": "__docs__"}
    exec(compile(code, "<docs>", "exec"), namespace)  # our own documentation examples


def test_there_are_examples_to_run():
    assert len(list(_blocks())) >= 3
