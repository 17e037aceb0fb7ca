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

Modules
-------
keys
    The cache directory, its privacy checks, the key, and generated launcher sources.
numba_cache
    Numba's caching classes pointed at the key directory (:func:`njit`, :func:`enable_cache`).
announce
    The one line a command prints when it compiled kernels.
report
    ``objrec cache info|clear``: the key folders, their sizes, their removal.
"""

from objrec.kernel_cache.announce import announce_compilation, finish_announcement
from objrec.kernel_cache.keys import (
    ENV_VAR,
    CacheUnavailable,
    cache_key,
    cache_root,
    kernel_dir,
    kernel_sources,
    key_info,
    scratch_dir,
    write_source,
)
from objrec.kernel_cache.numba_cache import enable_cache, njit
from objrec.kernel_cache.report import clear, info

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
    "scratch_dir",
    "info",
    "clear",
    "announce_compilation",
    "finish_announcement",
]
