"""Every public function and method with two or more parameters documents each of them: the functions named in a
module's ``__all__`` and the public methods (and ``__init__``) of the classes named there, across the package
(compiled-kernel modules and ``__main__`` aside). A parameter counts as documented when its name stands as a word
in the docstring (a ``Parameters`` entry, or the prose naming it in double backquotes)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import objrec

SKIPPED = ("__main__", "_surf_kernels", "_sift_kernels", "track_kernels", "objrec.kernels")


def _public_callables() -> list[tuple[str, object, object]]:
    """``(qualified name, function, owner docstring source)`` of every public callable to check."""
    seen: set[int] = set()
    out = []
    for info in pkgutil.walk_packages(objrec.__path__, "objrec."):
        if any(s in info.name for s in SKIPPED):
            continue
        module = importlib.import_module(info.name)
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name, None)
            if obj is None or id(obj) in seen:
                continue
            seen.add(id(obj))
            if inspect.isfunction(obj):
                out.append((f"{info.name}.{name}", obj, None))
            elif inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if attr.startswith("_") and attr != "__init__":
                        continue
                    f = member.__func__ if isinstance(member, classmethod | staticmethod) else member
                    if inspect.isfunction(f):
                        out.append((f"{info.name}.{name}.{attr}", f, obj if attr == "__init__" else None))
    return out


def _named_parameters(f: object) -> list[str]:
    try:
        sig = inspect.signature(f)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return []
    plain = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return [n for n, p in sig.parameters.items() if n not in ("self", "cls") and p.kind not in plain]


def _missing(f: object, owner: object = None) -> list[str]:
    """The parameters of ``f`` (two or more) its docstring, and its class's for ``__init__``, does not name."""
    params = _named_parameters(f)
    if len(params) < 2:
        return []
    doc = ((inspect.getdoc(owner) or "") if owner is not None else "") + (inspect.getdoc(f) or "")
    return [p for p in params if not re.search(rf"(^|[\s,`(]){re.escape(p)}([\s,:`)]|$)", doc)]


def undocumented() -> list[str]:
    """``qualified name: [parameters]`` of each public callable of two or more parameters that leaves some out."""
    return [f"{qual}: {m}" for qual, f, owner in _public_callables() if (m := _missing(f, owner))]


def test_every_public_function_of_two_or_more_parameters_documents_them():
    assert len(_public_callables()) > 500  # the walk reaches the package
    missing = undocumented()
    assert not missing, "parameters not documented:\n" + "\n".join(missing)


def test_the_check_finds_an_undocumented_parameter():
    def f(a: int, b: int) -> int:
        """Uses ``a`` only."""
        return a + b

    class C:
        """Holds ``x``."""

        def __init__(self, x: int, y: int) -> None:
            self.x, self.y = x, y

    assert _missing(f) == ["b"]
    assert _missing(C.__init__, C) == ["y"]
