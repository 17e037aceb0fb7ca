"""Where compiled Numba kernels are kept between processes, and under which key.

Every ``objrec`` process would otherwise compile its kernels again (seconds per command). The CPU builds are
cached on disk instead, in one private directory per *key*::

    $OBJREC_CACHE_DIR            (or $XDG_CACHE_HOME/objrec, or ~/.cache/objrec; mode 0700)
    └── kernels-<key>/
        ├── key.json             what the key was computed from
        ├── launchers/           generated launcher sources (see :mod:`objrec.kernels`)
        └── numba/               Numba's index (.nbi) and object-code (.nbc) files

The key is a hash of the package's kernel sources (:func:`kernel_sources`), the
versions of Numba, llvmlite, NumPy and Python, and the CPU (target triple, name and features as Numba's code
generator sees them). Numba checks only the source file of each cached function, not the functions it
calls from other modules; the key covers those, so a changed kernel, a new Numba or another CPU gives a new
directory and a fresh compilation, never a stale load. Old directories stay until ``objrec cache clear``.

Numba's cache files are pickles (loading one runs code), the one exception to the package's pickle-free
file formats: the directory is created private to the user (0700), and a directory that another user owns
or can write to is not used (the kernels are then compiled in memory, as with caching off).

Functions opt in through :func:`njit` (module-level kernels) or :func:`enable_cache` (a dispatcher built
elsewhere); both wire Numba's cache to this directory lazily, on the first compilation, so importing a
module costs no hashing and no file system access.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "ENV_VAR",
    "CacheUnavailable",
    "cache_root",
    "kernel_dir",
    "cache_key",
    "key_info",
    "kernel_sources",
    "njit",
    "enable_cache",
    "write_source",
    "info",
    "clear",
    "announce_compilation",
    "finish_announcement",
]

ENV_VAR = "OBJREC_CACHE_DIR"
_PREFIX = "kernels-"
_PACKAGE_DIR = Path(__file__).resolve().parent
_log = logging.getLogger("objrec.kernel_cache")


class CacheUnavailable(OSError):
    """The cache directory cannot be used safely (not creatable, not ours, or writable by others)."""


# --------------------------------------------------------------------------------------------------
# Location and key
# --------------------------------------------------------------------------------------------------
def cache_root() -> Path:
    """The cache directory: ``$OBJREC_CACHE_DIR``, else ``$XDG_CACHE_HOME/objrec``, else ``~/.cache/objrec``.

    On Windows the fallback is ``%LOCALAPPDATA%\\objrec\\Cache``. Nothing is created here.
    """
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    if os.name == "nt" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "objrec" / "Cache"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "objrec"


def _private_dir(path: Path) -> Path:
    """Create ``path`` (mode 0700) or check that an existing one is ours and closed to others."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if os.name != "nt":
        if st.st_uid != os.getuid():
            raise CacheUnavailable(f"{path} belongs to another user")
        if st.st_mode & 0o077:
            # Ours but open to others (created by hand, or by a umask-blind tool): close it, since the
            # files inside are loaded as pickles.
            os.chmod(path, 0o700)
    return path


_IMPORTS_NUMBA = re.compile(r"^\s*(?:import numba\b|from numba\b)", re.MULTILINE)


def kernel_sources() -> list[Path]:
    """The sources the cache key hashes: ``kernels.py``, every ``*_kernels.py`` and every module importing Numba.

    Compiled code freezes what it reads from these modules (helpers, constants); kernel code therefore lives
    in them only.
    """
    out = []
    for p in sorted(_PACKAGE_DIR.rglob("*.py")):
        if p.name == "kernels.py" or p.name.endswith("_kernels.py"):
            out.append(p)
            continue
        try:
            if _IMPORTS_NUMBA.search(p.read_text(encoding="utf-8")):
                out.append(p)
        except OSError:
            continue
    return out


@functools.cache
def _sources_digest() -> str:
    h = hashlib.sha256()
    for p in kernel_sources():
        h.update(p.relative_to(_PACKAGE_DIR).as_posix().encode())
        h.update(b"\0")
        h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


@functools.cache
def key_info() -> dict[str, Any]:
    """What the cache key is computed from (also written to ``key.json`` beside the cached files)."""
    import llvmlite
    import numba
    import numpy as np
    from numba.core.registry import cpu_target

    triple, cpu, features = cpu_target.target_context.codegen().magic_tuple()
    return {
        "sources_sha256": _sources_digest(),
        "numba": numba.__version__,
        "llvmlite": llvmlite.__version__,
        "numpy": np.__version__,
        "python": sys.implementation.cache_tag,
        "target": triple,
        "cpu": cpu,
        "cpu_features_sha256": hashlib.sha256(features.encode()).hexdigest(),
    }


@functools.cache
def cache_key() -> str:
    """A short hash of :func:`key_info`: the name of this installation's cache directory."""
    text = json.dumps(key_info(), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@functools.cache
def kernel_dir() -> Path:
    """``cache_root() / "kernels-<key>"``, created private; raises :class:`CacheUnavailable` if it cannot be."""
    root = cache_root()
    try:
        _private_dir(root)
        d = _private_dir(root / f"{_PREFIX}{cache_key()}")
        key_file = d / "key.json"
        if not key_file.exists():
            _atomic_write(key_file, json.dumps(key_info(), indent=1, sort_keys=True) + "\n")
    except CacheUnavailable:
        raise
    except OSError as exc:
        raise CacheUnavailable(f"{root}: {exc.strerror or exc}") from exc
    return d


@functools.cache
def _usable_kernel_dir() -> Path | None:
    try:
        return kernel_dir()
    except CacheUnavailable as exc:
        _log.warning("kernel cache disabled (%s): kernels are compiled in memory in every process", exc)
        return None


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@functools.cache
def _scratch_dir() -> Path:
    # Launcher sources still need a real file when the cache is unusable (Numba reads functions from files).
    d = Path(tempfile.mkdtemp(prefix="objrec-kernels-"))
    import atexit

    atexit.register(shutil.rmtree, d, True)
    return d


def write_source(name: str, text: str) -> tuple[Path, bool]:
    """Write generated source where kernels are cached.

    Parameters
    ----------
    name : str
        File name (no directory) of the source.
    text : str
        Its content. An existing file with the same text is left alone: its content is part of what Numba
        checks before it loads compiled code.

    Returns
    -------
    path : pathlib.Path
        Where the file is: ``kernel_dir() / "launchers"``, or a private temporary directory when the cache
        directory is unusable.
    cacheable : bool
        False in the second case (functions read from it must not be cached).
    """
    base = _usable_kernel_dir()
    cacheable = base is not None
    folder = (base / "launchers") if cacheable else _scratch_dir()
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / name
    try:
        if path.read_text(encoding="utf-8") == text:
            return path, cacheable
    except OSError:
        pass
    _atomic_write(path, text)
    return path, cacheable


# --------------------------------------------------------------------------------------------------
# Numba glue
# --------------------------------------------------------------------------------------------------
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
            if path.is_relative_to(_PACKAGE_DIR):
                sub = path.parent.relative_to(_PACKAGE_DIR.parent)
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
            base = _usable_kernel_dir()
            if base is None:
                return None
            if not (path.is_relative_to(_PACKAGE_DIR) or path.is_relative_to(base / "launchers")):
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
                _compile_started(self._py_func)
            return data

        def save_overload(self, sig, data):
            try:
                self._get().save_overload(sig, data)
            except OSError as exc:
                # A full or vanished disk costs the next process a compilation, not this one its result.
                _log.warning("could not cache %s: %s", self._py_func.__qualname__, exc)
            if self._t_miss is not None:
                _compile_finished(time.perf_counter() - self._t_miss)
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


# --------------------------------------------------------------------------------------------------
# Telling the user about the one-time compilation
# --------------------------------------------------------------------------------------------------
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


def _compile_started(py_func: Any) -> None:
    if not _compiling["said"]:
        _compiling["said"] = True
        _log.info("compiling kernels, starting with %s", getattr(py_func, "__qualname__", py_func))


def _compile_finished(seconds: float) -> None:
    _compiling["count"] += 1
    _compiling["seconds"] += seconds


def finish_announcement() -> None:
    """Report the kernels compiled so far (count, seconds, where they are kept); nothing if none were."""
    if not _compiling["said"]:
        return
    where = _usable_kernel_dir()
    later = f"later runs load them from {where}" if where is not None else "not cached: cache directory unusable"
    n, sec = _compiling["count"], _compiling["seconds"]
    text = f"compiled {n} kernel{'s' if n != 1 else ''} for this machine in {sec:.1f} s, once: {later}"
    if _announce is not None:
        _announce.write(f"objrec: {text}\n")
        _announce.flush()
    else:
        _log.info("%s", text)
    _compiling.update(count=0, seconds=0.0, said=False)


# --------------------------------------------------------------------------------------------------
# Inspection and cleanup (objrec cache info|clear)
# --------------------------------------------------------------------------------------------------
def _tree_size(path: Path) -> tuple[int, int]:
    files = 0
    size = 0
    for p in path.rglob("*"):
        if p.is_file():
            files += 1
            size += p.stat().st_size
    return files, size


def info(current: bool = True) -> dict[str, Any]:
    """The cache root and its entries (one per key).

    Parameters
    ----------
    current : bool
        Compute this installation's key to mark its entry (imports Numba); False skips it.

    Returns
    -------
    dict
        ``root``, ``env_var``, ``current_key``, ``bytes`` and ``entries``: per key folder ``key``, ``path``,
        ``current``, ``files``, ``bytes``, ``numba`` and ``cpu`` (from its ``key.json``).
    """
    root = cache_root()
    key = cache_key() if current else None
    entries = []
    if root.is_dir():
        for d in sorted(root.glob(f"{_PREFIX}*")):
            if not d.is_dir():
                continue
            files, size = _tree_size(d)
            try:
                meta = json.loads((d / "key.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                meta = {}
            k = d.name[len(_PREFIX) :]
            entries.append(
                {
                    "key": k,
                    "path": str(d),
                    "current": key == k,
                    "files": files,
                    "bytes": size,
                    "numba": meta.get("numba"),
                    "cpu": meta.get("cpu"),
                }
            )
    return {
        "root": str(root),
        "env_var": ENV_VAR,
        "current_key": key,
        "entries": entries,
        "bytes": sum(e["bytes"] for e in entries),
    }


def clear(stale_only: bool = False) -> dict[str, Any]:
    """Remove cached kernels.

    Parameters
    ----------
    stale_only : bool
        Keep this installation's key folder; remove only the others.

    Returns
    -------
    dict
        ``root``, ``removed`` (the folders) and ``bytes`` freed. Only ``kernels-*`` folders under
        :func:`cache_root` are touched.
    """
    root = cache_root()
    keep = cache_key() if stale_only else None
    removed = []
    freed = 0
    if root.is_dir():
        for d in sorted(root.glob(f"{_PREFIX}*")):
            if not d.is_dir() or d.is_symlink() or d.name == f"{_PREFIX}{keep}":
                continue
            freed += _tree_size(d)[1]
            shutil.rmtree(d)
            removed.append(str(d))
    if keep is None:
        kernel_dir.cache_clear()
        _usable_kernel_dir.cache_clear()
    return {"root": str(root), "removed": removed, "bytes": freed}
