"""Telling the user, once per command, that kernels were compiled for this machine and where they are kept."""

from __future__ import annotations

import logging
from typing import Any, TextIO

from objrec.kernel_cache.keys import usable_kernel_dir

__all__ = ["announce_compilation", "compile_started", "compile_finished", "finish_announcement"]

_log = logging.getLogger("objrec.kernel_cache")

_announce: TextIO | None = None
_compiling = {"count": 0, "seconds": 0.0, "said": False}


def announce_compilation(stream: TextIO | None) -> None:
    """Say on ``stream``, in one line when the command ends, that kernels were compiled and how long it took.

    The command line sets ``sys.stderr`` and calls :func:`finish_announcement` before it exits; a library
    caller gets log records at INFO level instead. The line comes at the end, not before the wait, so that a
    command's own output on the same terminal never splits it.
    """
    global _announce
    _announce = stream


def compile_started(py_func: Any) -> None:
    """Note that ``py_func`` is being compiled (logged for the first of a command's compilations)."""
    if not _compiling["said"]:
        _compiling["said"] = True
        _log.info("compiling kernels, starting with %s", getattr(py_func, "__qualname__", py_func))


def compile_finished(seconds: float) -> None:
    """Count one finished compilation of ``seconds`` towards :func:`finish_announcement`'s line."""
    _compiling["count"] += 1
    _compiling["seconds"] += seconds


def finish_announcement() -> None:
    """Report the kernels compiled so far (count, seconds, where they are kept); nothing if none were."""
    if not _compiling["said"]:
        return
    where = usable_kernel_dir()
    later = f"later runs load them from {where}" if where is not None else "not cached: cache directory unusable"
    n, sec = _compiling["count"], _compiling["seconds"]
    text = f"compiled {n} kernel{'s' if n != 1 else ''} for this machine in {sec:.1f} s, once: {later}"
    if _announce is not None:
        _announce.write(f"objrec: {text}\n")
        _announce.flush()
    else:
        _log.info("%s", text)
    _compiling.update(count=0, seconds=0.0, said=False)
