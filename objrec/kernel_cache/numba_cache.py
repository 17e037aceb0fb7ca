"""Numba's on-disk cache routed to :func:`~objrec.kernel_cache.keys.kernel_dir`: subclasses of Numba's caching
classes (which are not a public API: if they move, kernels are compiled in memory instead), set up lazily on a
function's first compilation, and the decorator that package kernels use."""

from __future__ import annotations

import functools
import logging
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from objrec.kernel_cache.announce import compile_finished, compile_started
from objrec.kernel_cache.keys import PACKAGE_DIR, kernel_dir, usable_kernel_dir

__all__ = ["enable_cache", "njit"]

_log = logging.getLogger("objrec.kernel_cache")


@functools.cache
def _locator_class():
    """Numba's cache locator for this package's files and launchers (built on first use: imports Numba)."""
    from numba.core import caching

    class Locator(caching._SourceFileBackedLocatorMixin, caching._CacheLocator):
        # Files of this package and generated launchers, cached under the key directory; the sub-folder
        # keeps the package layout so that same-named modules of different sub-packages stay apart.
        def __init__(self, py_func, py_file):
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            path = Path(py_file).resolve()
            base = kernel_dir()
            if path.is_relative_to(PACKAGE_DIR):
                sub = path.parent.relative_to(PACKAGE_DIR.parent)
            else:
                sub = Path("launchers")
            self._cache_path = str(base / "numba" / sub)

        def get_cache_path(self):
            return self._cache_path

        def ensure_cache_path(self):
            Path(self._cache_path).mkdir(mode=0o700, parents=True, exist_ok=True)
            tempfile.TemporaryFile(dir=self._cache_path).close()  # writable, as Numba's own locators check

        @classmethod
        def from_function(cls, py_func, py_file):
            path = Path(py_file).resolve()
            base = usable_kernel_dir()
            if base is None:
                return None
            if not (path.is_relative_to(PACKAGE_DIR) or path.is_relative_to(base / "launchers")):
                return None
            return super().from_function(py_func, py_file)

    return Locator


def _load_light(cache: Any, sig: Any, target_context: Any) -> Any:
    """Load a cached overload without first installing every Numba registry in the target context.

    Numba's own ``load_overload`` refreshes the target context before it looks in the cache, which imports and
    installs all of Numba's typing and lowering registries: most of a process's first kernel call when the
    kernel is cached. Rebuilding a cached result needs only the code generator and Numba's runtime (for kernels
    that allocate arrays), so this initialises the runtime and loads; a miss returns ``None`` and the compiler
    that runs next refreshes the context itself. Caches of another shape (no cache, an unusable directory) go
    through their own ``load_overload``.
    """
    load = getattr(cache, "_load_overload", None)
    guard = getattr(cache, "_guard_against_spurious_io_errors", None)
    if load is None or guard is None:
        return cache.load_overload(sig, target_context)
    from numba.core.runtime import rtsys

    rtsys.initialize(target_context)
    with guard():
        return load(sig, target_context)
    return None  # the guard swallowed a spurious I/O error: compile instead


@functools.cache
def _lazy_cache_class():
    """A Numba cache that stores under :func:`kernel_dir`, set up on the first compilation."""
    from numba.core import caching

    Locator = _locator_class()

    class Impl(caching.CompileResultCacheImpl):
        _locator_classes = [Locator]

    class FunctionCache(caching.FunctionCache):
        _impl_class = Impl

    class LazyCache(caching._Cache):
        """Numba's per-function cache, created on the first compilation (key, directory) and announcing it."""

        def __init__(self, py_func):
            self._py_func = py_func
            self._real = None
            self._t_miss: float | None = None

        def _get(self):
            if self._real is None:
                try:
                    self._real = FunctionCache(self._py_func)
                except (RuntimeError, OSError) as exc:
                    # No locator (cache unusable): compile in memory, as Numba without caching.
                    _log.debug("not caching %s: %s", self._py_func.__qualname__, exc)
                    self._real = caching.NullCache()
            return self._real

        @property
        def cache_path(self):
            return self._get().cache_path

        def load_overload(self, sig, target_context):
            data = _load_light(self._get(), sig, target_context)
            if data is None:
                self._t_miss = time.perf_counter()
                compile_started(self._py_func)
            return data

        def save_overload(self, sig, data):
            try:
                self._get().save_overload(sig, data)
            except OSError as exc:
                # A full or vanished disk costs the next process a compilation, not this one its result.
                _log.warning("could not cache %s: %s", self._py_func.__qualname__, exc)
            if self._t_miss is not None:
                compile_finished(time.perf_counter() - self._t_miss)
                self._t_miss = None

        def enable(self):
            self._get().enable()

        def disable(self):
            self._get().disable()

        def flush(self):
            self._get().flush()

    return LazyCache


@functools.cache
def _cache_factory():
    try:
        return _lazy_cache_class()
    except (ImportError, AttributeError) as exc:
        # Numba's cache classes are not a public API: if they move, compile in memory rather than fail.
        _log.warning("kernel cache disabled (this Numba's cache internals differ: %s)", exc)
        return None


def enable_cache(dispatcher: Any) -> Any:
    """Route a CPU dispatcher's Numba cache to :func:`kernel_dir`, set up lazily on its first compilation.

    Parameters
    ----------
    dispatcher : numba.core.registry.CPUDispatcher
        A ``numba.njit`` function defined in this package or in a generated launcher (their code is covered
        by the cache key); for a function defined elsewhere the cache finds no location and stays off.

    Returns
    -------
    numba.core.registry.CPUDispatcher
        The same dispatcher.
    """
    lazy = _cache_factory()
    if lazy is not None:
        dispatcher._cache = lazy(dispatcher.py_func)
    return dispatcher


def njit(*args: Any, **options: Any) -> Callable:
    """``numba.njit`` with this package's kernel cache, for module-level kernels of the package.

    Parameters
    ----------
    *args
        The function, when used bare as ``@njit``.
    **options
        ``numba.njit`` options (``parallel``, ``fastmath``, ...), except ``cache``: caching is what this
        decorator adds.

    Returns
    -------
    callable
        The dispatcher (``@njit``) or a decorator (``@njit(parallel=True)``).

    Examples
    --------
    >>> from objrec.kernel_cache import njit
    >>> @njit
    ... def twice(x):
    ...     return 2 * x
    """
    if "cache" in options:
        raise TypeError("njit: caching is always on here; drop the 'cache' option")

    def wrap(fn: Callable) -> Any:
        import numba

        return enable_cache(numba.njit(**options)(fn))

    if args and callable(args[0]) and len(args) == 1 and not options:
        return wrap(args[0])
    if args:
        raise TypeError("njit: pass options by keyword")
    return wrap
