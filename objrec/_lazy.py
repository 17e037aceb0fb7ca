"""Module attributes imported on first use.

A package lists the public names it re-exports from submodules in a name->module map and builds its
module-level ``__getattr__`` and ``__dir__`` with :func:`lazy_attributes`, so that importing the package
loads none of those submodules. This module imports only :mod:`importlib`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any


def lazy_attributes(
    namespace: MutableMapping[str, Any], lazy: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Build a module's ``__getattr__`` and ``__dir__`` from a map of attribute names to modules.

    Parameters
    ----------
    namespace : MutableMapping[str, Any]
        The ``globals()`` of the package module; its ``__name__`` names the module in errors, and its
        ``__all__`` (read when ``__dir__`` is called) is listed by ``__dir__``.
    lazy : Mapping[str, str]
        Attribute name -> absolute name of the module that defines it.

    Returns
    -------
    getattr_ : Callable[[str], Any]
        The module ``__getattr__``: imports the module of ``name``, stores the attribute in ``namespace``
        (so that later look-ups do not call it again) and returns it; raises :class:`AttributeError` for a
        name not in ``lazy``.
    dir_ : Callable[[], list[str]]
        The module ``__dir__``: the sorted names of ``namespace`` and of its ``__all__``.
    """

    def __getattr__(name: str) -> Any:
        module = lazy.get(name)
        if module is None:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(namespace.get("__all__", ())))

    return __getattr__, __dir__
