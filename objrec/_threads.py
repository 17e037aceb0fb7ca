"""Threads shared by the CPU paths: a worker pool sized to the usable cores, and one-thread BLAS sections."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["usable_cores", "worker_pool", "one_blas_thread", "on_worker_thread", "WORKER_THREAD_PREFIXES"]

#: Name prefixes of objrec's worker threads: :func:`worker_pool`'s (``objrec_0``, ...) and enrolment's
#: (``objrec-enrol_0``, ..., each kept to one core). Code that would spread its work over the worker pool keeps it
#: on its own thread there (:func:`on_worker_thread`).
WORKER_THREAD_PREFIXES = ("objrec_", "objrec-enrol_")

_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def worker_pool() -> ThreadPoolExecutor:
    """A process-wide pool of ``usable_cores()`` threads, made on first use (again after a fork)."""
    global _pool
    with _lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(usable_cores(), thread_name_prefix="objrec"))
        return _pool[1]


def on_worker_thread() -> bool:
    """Whether the calling thread is one of objrec's worker threads (:data:`WORKER_THREAD_PREFIXES`): a task
    there that waited on the worker pool's other threads could wait behind its own caller."""
    return threading.current_thread().name.startswith(WORKER_THREAD_PREFIXES)


_controller: tuple[int, Any] | None = None


def _blas_controller() -> Any:
    """A ``ThreadpoolController`` of the loaded libraries, made again once imports may have loaded more (a
    module that ships its own BLAS, such as FAISS's): a controller only sees what was loaded when it was made."""
    global _controller
    n = len(sys.modules)
    if _controller is None or _controller[0] != n:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:  # pragma: no cover - a dependency of scikit-learn
            return None
        _controller = (len(sys.modules), ThreadpoolController())
    return _controller[1]


@contextlib.contextmanager
def one_blas_thread() -> Any:
    """Context: BLAS on one thread inside, the previous setting restored after (process-wide, ~2 us a library).

    OpenBLAS's worker threads spin for a while after each product; on a machine with few cores they take the
    cores from the Numba threads of the next stage, and threads of our own that each run a one-thread product
    on part of the rows beat one product on two BLAS threads.

    Only BLAS libraries with their own thread pool are limited. One built on OpenMP (FAISS ships one) sets its
    thread count through ``omp_set_num_threads``, which would also put FAISS's own OpenMP searches on one
    thread.
    """
    c = _blas_controller()
    libs = [] if c is None else [lib for lib in c.lib_controllers if _own_pool_blas(lib)]
    before = [lib.num_threads for lib in libs]
    for lib in libs:
        lib.set_num_threads(1)
    try:
        yield
    finally:
        for lib, n in zip(libs, before, strict=True):
            lib.set_num_threads(n)


def _own_pool_blas(lib: Any) -> bool:
    return lib.user_api == "blas" and getattr(lib, "threading_layer", None) != "openmp"
