"""The report document: headings, paragraphs, tables, figures, rendered to Markdown and to HTML."""

from __future__ import annotations

import html
from typing import Any

__all__ = ["ReportDoc", "format_cell"]


def format_cell(x: Any, nd: int = 3) -> str:
    """A table cell: ``–`` for None, yes/no for booleans, ``nd`` decimals for floats.
    ``x``: the cell's value."""
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


class ReportDoc:
    """A list of blocks rendered to Markdown (:meth:`markdown`) and to HTML (:meth:`html`)."""

    def __init__(self) -> None:
        self.blocks: list[tuple] = []

    def h(self, level: int, text: str) -> None:
        """A heading of ``level`` (1 = title).
        ``text``: the heading's text."""
        self.blocks.append(("h", level, text))

    def p(self, text: str) -> None:
        """A paragraph."""
        self.blocks.append(("p", text))

    def pre(self, text: str) -> None:
        """Preformatted text."""
        self.blocks.append(("pre", text))

    def table(self, headers: list[str], rows: list[list[Any]]) -> None:
        """A table; cells are formatted by :func:`format_cell`.
        ``headers``: the column names; ``rows``: the rows' cells."""
        self.blocks.append(("table", headers, [[format_cell(c) for c in r] for r in rows]))

    def img(self, path: str, caption: str) -> None:
        """A figure: an image at ``path`` (relative to the report) with its caption.
        ``caption``: the caption's text."""
        self.blocks.append(("img", path, caption))

    def markdown(self) -> str:
        """The document as Markdown."""
        out = []
        for b in self.blocks:
            if b[0] == "h":
                out.append("#" * b[1] + " " + b[2])
            elif b[0] == "p":
                out.append(b[1])
            elif b[0] == "pre":
                out.append("```\n" + b[1].rstrip() + "\n```")
            elif b[0] == "table":
                lines = ["| " + " | ".join(b[1]) + " |", "|" + "---|" * len(b[1])]
                lines += ["| " + " | ".join(r) + " |" for r in b[2]]
                out.append("\n".join(lines))
            elif b[0] == "img":
                out.append(f"![{b[2]}]({b[1]})")
        return "\n\n".join(out) + "\n"

    def html(self, title: str) -> str:
        """The document as a standalone HTML page titled ``title``."""
        e = html.escape
        out = [
            "<!DOCTYPE html>",
            f"<html><head><meta charset='utf-8'><title>{e(title)}</title>",
            "<style>body{font-family:sans-serif;max-width:1200px;margin:2em auto}"
            "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:2px 8px;"
            "text-align:right}th{background:#eee}td:first-child{text-align:left}img{max-width:100%}"
            "pre{background:#f6f6f6;padding:1em;overflow:auto}</style></head><body>",
        ]
        for b in self.blocks:
            if b[0] == "h":
                out.append(f"<h{b[1]}>{e(b[2])}</h{b[1]}>")
            elif b[0] == "p":
                out.append(f"<p>{e(b[1])}</p>")
            elif b[0] == "pre":
                out.append(f"<pre>{e(b[1])}</pre>")
            elif b[0] == "table":
                out.append("<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in b[1]) + "</tr>")
                for r in b[2]:
                    out.append("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>")
                out.append("</table>")
            elif b[0] == "img":
                out.append(f"<figure><img src='{e(b[1])}' alt='{e(b[2])}'><figcaption>{e(b[2])}</figcaption></figure>")
        out.append("</body></html>")
        return "\n".join(out) + "\n"
