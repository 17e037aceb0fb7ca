"""One algorithm, two devices: build plain-Python kernels for ``numba.njit`` and ``numba.cuda.jit``.

Kernels are written once as *element functions* ``body(i, a0, a1, ...)`` (1-D) or ``body(y, x, a0, ...)``
(2-D) that read and write arrays; helpers they call are built for the same target through
:meth:`Target.device`, because an njit function cannot call a plain Python function and a CUDA kernel
cannot call an njit function. :meth:`Target.grid1d` / :meth:`Target.grid2d` turn an element function
into a launcher: a ``prange`` loop on the CPU, a ``cuda.jit`` kernel with bounds checks on the GPU (or
under ``NUMBA_ENABLE_CUDASIM=1``, where each thread runs in Python, float64).

Example
-------
>>> from objrec.kernels import Target
>>> import numpy as np
>>> def build(t):
...     twice = t.device(lambda v: 2 * v)
...     def body(i, src, dst):
...         dst[i] = twice(src[i])
...     return t.grid1d(body, nargs=2)
>>> out = np.zeros(4)
>>> build(Target("cpu"))(4, np.arange(4.0), out)
>>> out.tolist()
[0.0, 2.0, 4.0, 6.0]
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

__all__ = ["Target", "get_target"]


class Target:
    """A compilation target: ``"cpu"`` (numba.njit) or ``"cuda"`` (numba.cuda.jit, real or simulated)."""

    def __init__(self, name: str, parallel: bool = True, block1d: int = 128, block2d: tuple[int, int] = (8, 32)):
        if name not in ("cpu", "cuda"):
            raise ValueError(f"target: expected 'cpu' or 'cuda', got {name!r}")
        self.name = name
        self.parallel = parallel
        self.block1d = block1d
        self.block2d = block2d
        self.launches = 0  # kernel launches so far: a budget of its own on the GPU

    @property
    def is_cuda(self) -> bool:
        return self.name == "cuda"

    def device(self, fn: Callable) -> Callable:
        """Build a helper callable from kernels of this target."""
        if self.is_cuda:
            from numba import cuda

            return cuda.jit(device=True)(fn)
        import numba

        return numba.njit(inline="always", fastmath=False, cache=False)(fn)

    def _launcher(self, body: Callable, nargs: int, ndim: int) -> Callable:
        args = ", ".join(f"a{i}" for i in range(nargs))
        sep = ", " if nargs else ""
        ns: dict[str, Any] = {"body": body}
        if self.is_cuda:
            from numba import cuda

            ns["cuda"] = cuda
            if ndim == 1:
                src = f"def kernel(n{sep}{args}):\n    i = cuda.grid(1)\n    if i < n:\n        body(i{sep}{args})\n"
            else:
                src = (
                    f"def kernel(h, w{sep}{args}):\n"
                    f"    x, y = cuda.grid(2)\n"
                    f"    if y < h and x < w:\n"
                    f"        body(y, x{sep}{args})\n"
                )
            exec(src, ns)  # noqa: S102 - generated from a fixed template, no user input
            kernel = cuda.jit(ns["kernel"])
            target = self

            if ndim == 1:

                def launch(n: int, *a: Any, stream: Any = 0) -> None:
                    if n <= 0:
                        return
                    bs = target.block1d
                    target.launches += 1
                    kernel[(n + bs - 1) // bs, bs, stream](n, *a)
            else:

                def launch(h: int, w: int, *a: Any, stream: Any = 0) -> None:
                    if h <= 0 or w <= 0:
                        return
                    by, bx = target.block2d
                    target.launches += 1
                    kernel[((w + bx - 1) // bx, (h + by - 1) // by), (bx, by), stream](h, w, *a)

            launch.kernel = kernel  # type: ignore[attr-defined]
            return launch

        import numba

        ns["prange"] = numba.prange
        if ndim == 1:
            src = f"def launch(n{sep}{args}):\n    for i in prange(n):\n        body(i{sep}{args})\n"
        else:
            src = (
                f"def launch(h, w{sep}{args}):\n"
                f"    for y in prange(h):\n"
                f"        for x in range(w):\n"
                f"            body(y, x{sep}{args})\n"
            )
        exec(src, ns)  # noqa: S102 - generated from a fixed template, no user input
        body_jit = numba.njit(cache=False)(body) if not hasattr(body, "py_func") else body
        ns["body"] = body_jit
        return numba.njit(parallel=self.parallel, cache=False)(ns["launch"])

    def grid1d(self, body: Callable, nargs: int) -> Callable:
        """``launch(n, *args)`` runs ``body(i, *args)`` for ``i`` in ``range(n)``."""
        return self._launcher(body, nargs, 1)

    def grid2d(self, body: Callable, nargs: int) -> Callable:
        """``launch(h, w, *args)`` runs ``body(y, x, *args)`` over an ``h`` x ``w`` grid."""
        return self._launcher(body, nargs, 2)


@functools.cache
def get_target(name: str) -> Target:
    """The shared target object for ``"cpu"`` or ``"cuda"`` (kernel builders cache on it)."""
    return Target(name)
