"""The documentation site: it builds with ``mkdocs build --strict``, its command-line reference names every
command and option of the parser, its checked examples run, and the README's links and test command hold."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _reference_module():
    """``docs/gen_reference.py``, the MkDocs hook that renders the generated parts."""
    spec = importlib.util.spec_from_file_location("objrec_docs_gen_reference", DOCS / "gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _env() -> dict[str, str]:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def test_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install -e '.[docs]')")
    site = tmp_path / "site"
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(site)]
    run = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stdout}\n{run.stderr}"
    cli = (site / "cli" / "index.html").read_text(encoding="utf-8")
    for words, _ in _reference_module().commands():
        assert f'id="{"-".join(words)}"' in cli, f"{' '.join(words)}: no section in the built CLI reference"
    assert "<!-- objrec-" not in "".join(p.read_text(encoding="utf-8") for p in site.rglob("*.html"))
    assert (site / "api" / "recognizer" / "index.html").is_file()


def test_cli_reference_names_every_command_and_option():
    from objrec.cli import build_parser

    text = _reference_module().render_cli()
    seen = 0

    def walk(words: list[str], p: argparse.ArgumentParser) -> None:
        nonlocal seen
        assert f"## {' '.join(words)} {{ #{'-'.join(words)} }}" in text, f"{' '.join(words)}: no section"
        section = text.split(f"## {' '.join(words)} ", 1)[1].split("\n## ", 1)[0]
        seen += 1
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk([*words, name], sub)
            elif action.help != argparse.SUPPRESS and not isinstance(action, argparse._HelpAction):
                for option in action.option_strings:
                    assert f"`{option}" in section, f"{' '.join(words)}: {option} missing from its section"

    walk(["objrec"], build_parser())
    assert seen >= 10  # objrec, its commands and the db subcommands


@pytest.mark.parametrize("marker", sorted(_reference_module().MARKERS))
def test_generated_parts_render(marker):
    out = _reference_module().MARKERS[marker]()
    assert out.strip() and marker not in out


def _checked_examples() -> list[tuple[str, str]]:
    """(page, code) of every Python block marked ``<!-- checked -->`` in the documentation."""
    out = []
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        for code in re.findall(r"<!-- checked -->\n```python\n(.*?)\n```", text, flags=re.S):
            out.append((str(page.relative_to(ROOT)), code))
    return out


def test_checked_examples_are_found():
    assert any(page == "docs/getting-started.md" for page, _ in _checked_examples())


@pytest.mark.parametrize("page,code", _checked_examples(), ids=lambda x: x if x.startswith("docs") else "")
def test_checked_example_runs(page, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"{page} (checked example)", "exec"), {"__name__": "__docs__"})


def test_readme_links_resolve():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    assert targets
    for t in targets:
        if "://" not in t:
            assert (ROOT / t).exists(), f"README.md links to {t}, which does not exist"


def test_readme_gives_the_command_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    command = next(line for line in ci if "scripts/test" in line)
    assert command in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
