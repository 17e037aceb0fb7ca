"""The ``>>>`` examples of the package's docstrings run as written.

Every module under ``objrec/`` whose source holds an example is found here (a new example is tested without
being listed), imported, and its examples run with :mod:`doctest`. Examples marked ``# doctest: +SKIP`` are
illustrations that need files of the user's (a database, a frame).
"""

from __future__ import annotations

import doctest
import io
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "objrec"
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def modules_with_examples() -> list[str]:
    """The dotted names of the package's modules whose source holds a ``>>>`` example."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if ">>>" in path.read_text(encoding="utf-8"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


MODULES = modules_with_examples()


def test_examples_are_found():
    assert "objrec.features.surf" in MODULES and "objrec.metrics.alignment" in MODULES, MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name, tmp_path, monkeypatch):
    import importlib

    monkeypatch.chdir(tmp_path)  # an example that writes files writes them here
    module = importlib.import_module(name)
    tests = doctest.DocTestFinder().find(module, name)
    assert any(t.examples for t in tests), f"{name}: no examples found by doctest"
    out = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    for t in tests:
        runner.run(t, out=out.write)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed\n{out.getvalue()}"
