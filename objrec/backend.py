"""Backend selection and host<->device copies.

Backends: ``"cpu"``, ``"gpu"``, ``"auto"``, plus per-component extras (SIFT's ``"numba"``, the CPU twin of its
GPU code; the extractors' ``"cudasim"``, their CUDA build under Numba's simulator). A GPU is detected through
CuPy (``cupy.cuda.runtime.getDeviceCount()``), never through ``numba.cuda.is_available()``, which is True under
the CUDA simulator. CuPy is imported lazily, once.

Every copy between host and device made by the package goes through :func:`to_device`, :func:`to_numpy` or
:func:`to_scalar`, so a :class:`TransferCounter` sees all of them. Not counted: the sizes CuPy itself reads
back to shape a result (``flatnonzero``, ``unique``, boolean indexing), and Numba's implicit copies of host
arrays passed to a CUDA kernel, which the package avoids by passing device arrays only.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

__all__ = [
    "gpu_available",
    "resolve_backend",
    "get_array_module",
    "BackendError",
    "to_numpy",
    "to_device",
    "to_scalar",
    "is_device_array",
    "Transfer",
    "TransferCounter",
]

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


def _cudasim_enabled() -> bool:
    """True when Numba runs CUDA kernels in its simulator (``NUMBA_ENABLE_CUDASIM=1`` before Numba's import)."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        return False
    from numba import config

    return bool(config.ENABLE_CUDASIM)


def resolve_backend(backend: str, what: str = "objrec", extra: tuple[str, ...] = ()) -> str:
    """Turn a user's ``backend`` argument into ``"cpu"``, ``"gpu"`` or one of ``extra``.

    Parameters
    ----------
    backend : str
        ``"cpu"``, ``"gpu"``, ``"auto"`` or one of ``extra``.
    what : str
        The component's name, for messages.
    extra : tuple of str
        Further backends the component accepts, returned unchanged. ``"cudasim"`` among them runs the CUDA
        build in Numba's simulator on host arrays and is accepted only when the simulator is on.

    Returns
    -------
    str
        The backend to run.

    Raises
    ------
    ValueError
        ``backend`` is not one of the accepted names.
    BackendError
        ``"gpu"`` without a usable device, or ``"cudasim"`` without ``NUMBA_ENABLE_CUDASIM=1``.

    Notes
    -----
    ``"auto"`` falls back to the CPU without a device and logs that once per component.
    """
    allowed = BACKENDS + tuple(extra)
    if backend not in allowed:
        raise ValueError(f"backend: expected one of {', '.join(map(repr, allowed))}, got {backend!r}")
    if backend == "cudasim":
        if not _cudasim_enabled():
            raise BackendError(
                f"{what}: backend='cudasim' needs NUMBA_ENABLE_CUDASIM=1 in the environment before Numba is imported"
            )
        return backend
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


def is_device_array(a: Any) -> bool:
    """True for a device array: a CuPy array or a Numba CUDA device array (real or simulated)."""
    if isinstance(a, np.ndarray):
        return False
    return type(a).__module__.split(".")[0] == "cupy" or hasattr(a, "copy_to_host")


@dataclass(frozen=True)
class Transfer:
    """One host<->device copy: ``direction`` is ``"h2d"`` or ``"d2h"``, ``nbytes`` the bytes copied, ``shape`` that
    of the array copied."""

    direction: str
    nbytes: int
    shape: tuple[int, ...]


_local = threading.local()
_all_threads: list[TransferCounter] = []
_all_lock = threading.Lock()


@dataclass(eq=False)
class TransferCounter:
    """Counts the host<->device copies made through :func:`to_device`, :func:`to_numpy` and :func:`to_scalar`.

    Use it as a context manager; counters nest (each active counter sees every copy). Arrays already where
    they are asked for (NumPy to :func:`to_numpy`, a device array to :func:`to_device`) are not copied and
    not counted.

    Parameters
    ----------
    all_threads : bool
        Count copies made by every thread, not only by the thread that entered the counter.

    Attributes
    ----------
    transfers : list of Transfer
        Every copy, in order.

    Examples
    --------
    >>> import numpy as np
    >>> from objrec.backend import TransferCounter, to_numpy
    >>> with TransferCounter() as tc:
    ...     _ = to_numpy(np.zeros(3))
    >>> tc.uploads, tc.downloads
    (0, 0)
    """

    all_threads: bool = False
    transfers: list[Transfer] = field(default_factory=list)

    def __enter__(self) -> TransferCounter:
        if self.all_threads:
            with _all_lock:
                _all_threads.append(self)
        else:
            _local.__dict__.setdefault("stack", []).append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.all_threads:
            with _all_lock:
                _all_threads.remove(self)
        else:
            _local.stack.remove(self)

    def _of(self, direction: str) -> list[Transfer]:
        return [t for t in self.transfers if t.direction == direction]

    @property
    def uploads(self) -> int:
        """Number of host-to-device copies."""
        return len(self._of("h2d"))

    @property
    def downloads(self) -> int:
        """Number of device-to-host copies."""
        return len(self._of("d2h"))

    @property
    def upload_bytes(self) -> int:
        """Bytes copied from the host to the device."""
        return sum(t.nbytes for t in self._of("h2d"))

    @property
    def download_bytes(self) -> int:
        """Bytes copied from the device to the host."""
        return sum(t.nbytes for t in self._of("d2h"))


def _record(direction: str, a: Any) -> None:
    stack = _local.__dict__.get("stack")
    if not stack and not _all_threads:
        return
    t = Transfer(direction, int(a.nbytes), tuple(int(v) for v in a.shape))
    for c in stack or ():
        c.transfers.append(t)
    if _all_threads:
        with _all_lock:
            for c in _all_threads:
                if not any(c is own for own in stack or ()):
                    c.transfers.append(t)


def to_device(a: Any, xp: ModuleType | None = None) -> Any:
    """``a`` as an array of ``xp`` (default: CuPy), copied to the device when it is host data.

    Parameters
    ----------
    a : array_like
        Host data (a NumPy array, a list, a scalar) or an array of ``xp``.
    xp : module, optional
        The target array module: ``cupy`` (the default), or ``numpy``, for which nothing is copied (the
        CPU builds and the simulator share the code path of the GPU).

    Returns
    -------
    array
        An array of ``xp``; ``a`` itself when it is one already.
    """
    if xp is None:
        import cupy

        xp = cupy
    if xp is np:
        return np.asarray(a)
    if isinstance(a, xp.ndarray):
        return a
    host = np.asarray(a)
    _record("h2d", host)
    return xp.asarray(host)


def to_numpy(a: Any) -> np.ndarray:
    """A host copy of a device array (CuPy or Numba); NumPy arrays and other host data pass through."""
    if isinstance(a, np.ndarray):
        return a
    if is_device_array(a):
        _record("d2h", a)
        return a.get() if hasattr(a, "get") else a.copy_to_host()
    return np.asarray(a)


def to_scalar(a: Any) -> Any:
    """The Python value of a one-element array, read back from the device when it lives there.

    Control flow that depends on device data (a tie in the responses, a count) goes through here, so the
    read counts as the small download it is.
    """
    return to_numpy(a).item()
