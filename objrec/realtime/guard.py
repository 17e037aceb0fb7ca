"""The per-frame guard: nothing unbudgeted runs inside a frame.

Inside a frame the garbage collector is off (a collection would be unbudgeted latency) and BLAS runs on
one thread (OpenBLAS's spinning workers would take the cores from the next stage's Numba threads); the
youngest generation is collected after the frame when the slack allows.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

from objrec._threads import one_blas_thread

__all__ = ["frame_guard", "collect_in_slack"]


@contextlib.contextmanager
def frame_guard() -> Iterator[None]:
    """Context for one frame's work: gc disabled and BLAS on one thread, both restored after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        with one_blas_thread():
            yield
    finally:
        if was_enabled:
            gc.enable()


def collect_in_slack(remaining_ms: float, need_ms: float = 5.0) -> bool:
    """Collect the youngest generation when more than ``need_ms`` of the frame's budget is left
    (``remaining_ms``); whether it collected."""
    if remaining_ms > need_ms:
        gc.collect(0)
        return True
    return False
