"""Size limits of the package's code: a class longer than :data:`MAX_CLASS_LINES` or a function (or method)
longer than :data:`MAX_FUNCTION_LINES` (about a screen) holds more than one idea and is split along its seams.
Lengths count every line from the ``def`` or ``class`` line to the last one, docstrings included. The modules
of compiled kernels (:data:`KERNEL_MODULES`), one loop nest per kernel, are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "objrec"
MAX_CLASS_LINES = 300
MAX_FUNCTION_LINES = 80
#: Modules of compiled kernels (Numba), exempt from the limits.
KERNEL_MODULES = frozenset(
    {
        "features/_surf_kernels.py",
        "features/_sift_kernels.py",
        "kernels.py",
        "realtime/track_kernels.py",
    }
)


def _sizes(tree: ast.AST, prefix: str = "") -> list[tuple[str, str, int]]:
    """``(kind, qualified name, lines)`` of every class and function in ``tree``, nested ones included."""
    out = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            name = f"{prefix}{node.name}"
            kind = "class" if isinstance(node, ast.ClassDef) else "function"
            out.append((kind, name, node.end_lineno - node.lineno + 1))
            out += _sizes(node, f"{name}.")
        else:
            out += _sizes(node, prefix)
    return out


def oversized() -> list[str]:
    """Every class and function of the package over its limit, as ``module:name (kind, lines > limit)``."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        if module in KERNEL_MODULES:
            continue
        for kind, name, lines in _sizes(ast.parse(path.read_text(encoding="utf-8"))):
            limit = MAX_CLASS_LINES if kind == "class" else MAX_FUNCTION_LINES
            if lines > limit:
                found.append(f"{module}:{name} ({kind}, {lines} lines > {limit})")
    return found


def test_no_class_or_function_is_over_its_size_limit():
    offenders = oversized()
    assert not offenders, "over the size limits:\n" + "\n".join(offenders)


def test_the_sizes_are_measured_from_the_def_line_to_the_last_docstrings_included():
    source = 'class A:\n    """Doc\n    string."""\n\n    def f(self):\n        """Doc."""\n        return 1\n'
    assert _sizes(ast.parse(source)) == [("class", "A", 7), ("function", "A.f", 3)]
