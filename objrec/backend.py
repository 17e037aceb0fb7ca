"""Backend selection: ``"cpu"``, ``"gpu"``, ``"auto"`` (and ``"numba"`` for SIFT's CPU twin of the GPU code).

A GPU is detected through CuPy (``cupy.cuda.runtime.getDeviceCount()``), never through
``numba.cuda.is_available()``, which is True under the CUDA simulator. CuPy is imported lazily, once.
"""

from __future__ import annotations

import functools
import logging
import os
from types import ModuleType
from typing import Any

import numpy as np

__all__ = ["gpu_available", "resolve_backend", "get_array_module", "BackendError", "to_numpy"]

log = logging.getLogger("objrec")

BACKENDS = ("cpu", "gpu", "auto")


class BackendError(RuntimeError):
    """The requested backend cannot run here (e.g. ``"gpu"`` without a CUDA device)."""


@functools.cache
def _gpu_probe() -> tuple[bool, str]:
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return False, "NUMBA_ENABLE_CUDASIM=1 is set (simulator, not a device)"
    try:
        import cupy  # noqa: F401
    except Exception as exc:  # ImportError, or a CUDA library that fails to load
        return False, f"CuPy is not importable ({type(exc).__name__}: {exc}); install objrec[gpu]"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return False, f"CuPy found no usable CUDA driver ({type(exc).__name__}: {exc})"
    if n < 1:
        return False, "CuPy reports no CUDA device"
    return True, f"{n} CUDA device(s)"


def gpu_available() -> bool:
    """True when CuPy can see at least one CUDA device."""
    return _gpu_probe()[0]


_warned_fallback: set[str] = set()


def resolve_backend(backend: str, what: str = "objrec", extra: tuple[str, ...] = ()) -> str:
    """Turn a user's ``backend`` argument into ``"cpu"``, ``"gpu"`` or one of ``extra``.

    ``"gpu"`` without a device raises :class:`BackendError`; ``"auto"`` falls back to the CPU and logs
    that once per component.
    """
    allowed = BACKENDS + tuple(extra)
    if backend not in allowed:
        raise ValueError(f"backend: expected one of {', '.join(map(repr, allowed))}, got {backend!r}")
    if backend in ("cpu",) + tuple(extra):
        return backend
    ok, why = _gpu_probe()
    if backend == "gpu":
        if not ok:
            raise BackendError(f"{what}: backend='gpu' requested but no GPU is usable: {why}")
        return "gpu"
    if ok:
        return "gpu"
    if what not in _warned_fallback:
        _warned_fallback.add(what)
        log.info("%s: backend='auto' runs on the CPU (%s)", what, why)
    return "cpu"


def get_array_module(*arrays: Any) -> ModuleType:
    """``cupy`` if any argument is a CuPy array, else ``numpy`` (cupyx's ``get_array_module`` idea)."""
    for a in arrays:
        if type(a).__module__.split(".")[0] == "cupy":
            import cupy

            return cupy
    return np


def to_numpy(a: Any) -> np.ndarray:
    """A host copy of a NumPy or CuPy array."""
    if type(a).__module__.split(".")[0] == "cupy":
        return a.get()
    return np.asarray(a)
