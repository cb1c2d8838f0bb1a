"""A griffe extension for the API page: the package's docstrings, written for reading in
source, rendered right by mkdocstrings (numpy style).

* Sphinx roles (``:func:`x```, ``:class:`~a.b.C```) become code: ``x``, ``C``.
* Doctest blocks (``>>>`` lines and their output) become fenced ``pycon`` code, under
  any section title (numpy's parser only knows ``Examples``).
* ``**`` outside code is escaped, so ``2**31-1`` is not read as bold (not on a numpy
  ``name : type`` line: the type is shown as code).

Loaded by ``mkdocs.yml`` (``plugins.mkdocstrings.handlers.python.options.extensions``).
"""

from __future__ import annotations

import re

try:
    from griffe import Extension
except ImportError:  # tests/test_docs_render.py checks render() without the docs extras
    Extension = object  # type: ignore[assignment,misc]

_ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|attr|data|exc|obj|const):`~?([^`<]*?)(?:\s*<[^>]*>)?`")
_CODE = re.compile(r"(``.*?``|`[^`]*`)")
_PARAMETER = re.compile(r"^\s*[\w*][\w*, ]* : ")  # numpy "name : type" (the type renders as code)


def _role(match: re.Match[str]) -> str:
    name = match.group(1).strip()
    tilde = match.group(0).split("`", 1)[1].startswith("~")
    return f"`{name.rsplit('.', 1)[-1] if tilde else name}`"


def _outside_code(text: str) -> str:
    """Roles to code and ``**`` escaped, in the parts of ``text`` that are not code spans."""
    text = _ROLE.sub(_role, text)
    if _PARAMETER.match(text):
        return text
    parts = _CODE.split(text)
    return "".join(p if i % 2 else p.replace("**", r"\*\*") for i, p in enumerate(parts))


def _fence_doctests(lines: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.lstrip().startswith(">>>"):
            out.append(line)
            i += 1
            continue
        indent = line[: len(line) - len(line.lstrip())]
        block = []
        while i < len(lines) and lines[i].strip():
            block.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        out += [f"{indent}```pycon", *(f"{indent}{b}" for b in block), f"{indent}```"]
    return out


def render(docstring: str) -> str:
    """The markdown mkdocstrings should see for ``docstring``."""
    out, fenced = [], False
    for line in _fence_doctests(docstring.splitlines()):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        out.append(line if fenced or line.lstrip().startswith("```") else _outside_code(line))
    return "\n".join(out)


class ReadableDocstrings(Extension):
    """Rewrites every docstring with :func:`render` as griffe loads it."""

    def on_instance(self, *, node, obj, agent, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = render(obj.docstring.value)
