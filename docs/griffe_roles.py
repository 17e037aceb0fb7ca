"""A Griffe extension that turns the Sphinx roles of objrec's docstrings into cross-references.

objrec's docstrings are numpydoc with Sphinx roles (``:class:`~objrec.pose.Camera```); mkdocstrings renders
them as Markdown, where a role would show as literal text. Each role becomes an optional cross-reference
(``<autoref identifier=... optional>``, resolved by mkdocs-autorefs): a link where the target is documented
on the site, plain code where it is not. An unqualified name is resolved in the scope of the object whose
docstring holds it (its members, its module's names and imports). ``~`` keeps only the last component as the
title, as in Sphinx.

Loaded by ``mkdocs.yml`` (``extensions`` of the python handler).
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|meth|func|data|attr|mod|exc|obj|const):`(?P<tilde>~?)(?P<target>[^`<>]+)`")
#: reStructuredText's ``::`` before a literal block: Markdown takes the indented block for code as it is, so
#: ``text::`` becomes ``text:`` and a lone ``::`` goes.
LITERAL = re.compile(r"(?P<text>\S)?[ \t]*::(?P<end>[ \t]*\n[ \t]*\n)")


def _resolve(obj: griffe.Object, target: str) -> str:
    if target.startswith("objrec."):
        return target
    first, _, rest = target.partition(".")
    try:
        path = obj.resolve(first)
    except Exception:  # noqa: BLE001 - any failure to resolve leaves the name as written (rendered as code)
        return target
    return f"{path}.{rest}" if rest else path


def convert(text: str, obj: griffe.Object) -> str:
    """``text`` with every Sphinx role replaced by an optional cross-reference, and literal-block markers
    (``::``) made Markdown."""

    def ref(m: re.Match[str]) -> str:
        target = m["target"].strip()
        title = target.rsplit(".", 1)[-1] if m["tilde"] else target
        ident = html.escape(_resolve(obj, target), quote=True)
        return f'<autoref identifier="{ident}" optional><code>{html.escape(title)}</code></autoref>'

    text = ROLE.sub(ref, text)
    return LITERAL.sub(lambda m: (m["text"] + ":" if m["text"] else "") + m["end"], text)


class SphinxRoles(griffe.Extension):
    """Rewrites the docstrings of every object once the tree is built (before mkdocstrings parses them)."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None and ":" in obj.docstring.value:
            obj.docstring.value = convert(obj.docstring.value, obj)
