"""Only the tracker changes a track: no module but ``realtime/tracker.py`` and ``realtime/solid_track.py``
assigns a field of a :class:`Track` or a :class:`SolidTrack` on anything but ``self``."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import objrec
from objrec.realtime.solid_track import SolidTrack
from objrec.realtime.tracker import Track

OWNERS = {"realtime/tracker.py", "realtime/solid_track.py"}


def _track_fields() -> set[str]:
    return {f.name for f in dataclasses.fields(Track)} | {f.name for f in dataclasses.fields(SolidTrack)}


def _assignments(tree: ast.AST, names: set[str]) -> list[tuple[int, str]]:
    """(line, target) of every assignment to ``<not self>.<name>`` and every ``setattr(x, "<name>", ...)``."""
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in names:
                found.append((node.lineno, ast.unparse(node)))
        for target in targets:
            for sub in ast.walk(target):
                if not (isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store)) or sub.attr not in names:
                    continue
                if not (isinstance(sub.value, ast.Name) and sub.value.id == "self"):
                    found.append((node.lineno, ast.unparse(sub)))
    return found


def test_the_scan_finds_an_assignment_to_a_track_field():
    tree = ast.parse(
        "def f(t, d):\n    t.rough = False\n    setattr(t, 'shown', True)\n    self.rough = 1\n"
        "    d[t.name] = 1\n    t.pts += 1\n    a, t.asked = 1, 2\n"
    )
    assert sorted(line for line, _ in _assignments(tree, _track_fields())) == [2, 3, 6, 7]


def test_no_module_but_the_trackers_assigns_a_track_field():
    root = Path(objrec.__file__).parent
    names = _track_fields()
    offenders = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in OWNERS:
            continue
        offenders += [f"{rel}:{line}: {what}" for line, what in _assignments(ast.parse(path.read_text()), names)]
    assert not offenders, "track fields assigned outside the tracker:\n" + "\n".join(offenders)
