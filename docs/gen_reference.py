"""Parts of the documentation rendered from objrec itself when the site is built.

Used by ``mkdocs.yml`` as a hook: in a page, each marker line of :data:`MARKERS` is replaced by markdown
generated from the code, so none of it is written by hand and none can drift:

- ``<!-- objrec-cli-reference -->``: every command's usage, description and options (:func:`render_cli`),
  from :func:`objrec.cli.build_parser`;
- ``<!-- objrec-reject-reasons -->``: the verification's rejection reasons, from
  :data:`objrec.matching.verify.REASONS`;
- ``<!-- objrec-eval-sweeps -->``: the synthetic sweeps and their levels, from
  :data:`objrec.evaluation._help.SWEEPS`;
- ``<!-- objrec-eval-schema -->``: the files and ``report.json`` schema of ``objrec eval``, from the
  documentation of :mod:`objrec.evaluation` (the text every report carries).

``python docs/gen_reference.py`` prints the command-line reference.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

#: Usage lines are wrapped at this width whatever the terminal (a build gives the same page everywhere).
WIDTH = 100


def _importable() -> None:
    if importlib.util.find_spec("objrec") is None:  # building from a checkout that is not installed
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _parser() -> argparse.ArgumentParser:
    _importable()
    from objrec.cli import build_parser

    return build_parser()


def commands(parser: argparse.ArgumentParser | None = None) -> Iterator[tuple[list[str], argparse.ArgumentParser]]:
    """Every command of ``parser`` (default: objrec's), depth first: its words (``["objrec", "db", "list"]``)
    and its parser, the top-level command first."""
    parser = parser or _parser()

    def walk(words: list[str], p: argparse.ArgumentParser) -> Iterator[tuple[list[str], argparse.ArgumentParser]]:
        yield words, p
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk([*words, name], sub)

    yield from walk([parser.prog], parser)


def _formatter(p: argparse.ArgumentParser) -> argparse.HelpFormatter:
    return argparse.HelpFormatter(p.prog, width=WIDTH)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _invocation(action: argparse.Action, f: argparse.HelpFormatter) -> str:
    if not action.option_strings:
        return f"`{f._metavar_formatter(action, action.dest)(1)[0]}`"
    if action.nargs == 0:
        return ", ".join(f"`{o}`" for o in action.option_strings)
    value = f._format_args(action, action.dest.upper())
    return ", ".join(f"`{o} {value}`" for o in action.option_strings)


def _help(action: argparse.Action, f: argparse.HelpFormatter) -> str:
    text = f._expand_help(action) if action.help else ""
    if action.choices is not None and action.metavar is not None:  # a metavar hides the choices
        text += f" (one of: {', '.join(str(c) for c in action.choices)})"
    if action.required and action.option_strings:
        text += " (required)"
    return _cell(text) or "&nbsp;"


def render_command(words: list[str], p: argparse.ArgumentParser) -> str:
    """One command's section: heading, usage, description, options and epilog."""
    f = _formatter(p)
    f.add_usage(p.usage, p._actions, p._mutually_exclusive_groups, prefix="")
    usage = f.format_help().strip()
    # The heading's anchor is the command's words joined by dashes (``objrec-db-list``): the tables of
    # subcommands link to it.
    out = [f"## {' '.join(words)} {{ #{'-'.join(words)} }}", "", "```text", usage, "```", ""]
    if p.description:
        out += [" ".join(p.description.split()), ""]
    rows = []
    subcommands = []
    for action in p._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            helps = {c.dest: c.help for c in action._choices_actions}
            for name in action.choices:
                link = "-".join([*words, name])
                subcommands.append(f"| [`{name}`](#{link}) | {_cell(helps.get(name) or '')} |")
            continue
        rows.append(f"| {_invocation(action, f)} | {_help(action, f)} |")
    if subcommands:
        out += ["| command | what it does |", "| --- | --- |", *subcommands, ""]
    if rows:
        out += ["| argument | meaning |", "| --- | --- |", *rows, ""]
    if p.epilog:
        out += [" ".join(p.epilog.split()), ""]
    return "\n".join(out)


def render_cli(parser: argparse.ArgumentParser | None = None) -> str:
    """The markdown of every command of ``parser`` (default: objrec's)."""
    return "\n".join(render_command(words, p) for words, p in commands(parser))


def render_reasons() -> str:
    """The rejection reasons of verification as a table."""
    _importable()
    from objrec.matching.verify import REASONS

    rows = [f"| `{code}` | {_cell(text)} |" for code, text in REASONS.items()]
    return "\n".join(["| reason | the candidate was rejected because |", "| --- | --- |", *rows])


def render_sweeps() -> str:
    """The synthetic sweeps of ``objrec eval synthetic:`` and their levels as a table."""
    _importable()
    from objrec.evaluation._help import SWEEPS

    rows = [f"| `{name}` | {', '.join(f'{v:g}' for v in levels)} |" for name, levels in SWEEPS.items()]
    return "\n".join(["| sweep | levels |", "| --- | --- |", *rows])


def render_eval_schema() -> str:
    """The files and ``report.json`` schema section of :mod:`objrec.evaluation`'s documentation, verbatim."""
    _importable()
    import objrec.evaluation as ev

    text = (ev.__doc__ or "").split("report.json schema", 1)[-1]
    body = text.split("\n", 2)[-1].strip("\n")  # past the heading's underline
    return "```text\n" + body.replace("::\n", ":\n") + "\n```"


#: Marker line -> what replaces it.
MARKERS = {
    "<!-- objrec-cli-reference -->": render_cli,
    "<!-- objrec-reject-reasons -->": render_reasons,
    "<!-- objrec-eval-sweeps -->": render_sweeps,
    "<!-- objrec-eval-schema -->": render_eval_schema,
}


def on_page_markdown(markdown: str, page, config, files) -> str:  # the MkDocs hook signature
    """MkDocs hook: each marker of :data:`MARKERS` replaced by its rendering."""
    for marker, render in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, render())
    return markdown


if __name__ == "__main__":
    print(render_cli())
