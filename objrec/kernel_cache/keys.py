"""Where compiled kernels are kept and under which key: the cache directory, its privacy checks, the key and
the generated launcher sources written beside the cached code (see :mod:`objrec.kernel_cache`)."""

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
from pathlib import Path
from typing import Any

__all__ = [
    "ENV_VAR",
    "PREFIX",
    "PACKAGE_DIR",
    "CacheUnavailable",
    "cache_root",
    "kernel_sources",
    "sources_digest",
    "key_info",
    "cache_key",
    "kernel_dir",
    "usable_kernel_dir",
    "scratch_dir",
    "write_source",
]

ENV_VAR = "OBJREC_CACHE_DIR"
#: Name prefix of the key folders under :func:`cache_root`.
PREFIX = "kernels-"
#: The ``objrec`` package directory, whose kernel sources the key hashes.
PACKAGE_DIR = Path(__file__).resolve().parents[1]
_log = logging.getLogger("objrec.kernel_cache")


class CacheUnavailable(OSError):
    """The cache directory cannot be used safely (not creatable, not ours, or writable by others)."""


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
    for p in sorted(PACKAGE_DIR.rglob("*.py")):
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
def sources_digest() -> str:
    """sha256 over the relative path and content hash of each of :func:`kernel_sources` (once per process)."""
    h = hashlib.sha256()
    for p in kernel_sources():
        h.update(p.relative_to(PACKAGE_DIR).as_posix().encode())
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
        "sources_sha256": sources_digest(),
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
        d = _private_dir(root / f"{PREFIX}{cache_key()}")
        key_file = d / "key.json"
        if not key_file.exists():
            _atomic_write(key_file, json.dumps(key_info(), indent=1, sort_keys=True) + "\n")
    except CacheUnavailable:
        raise
    except OSError as exc:
        raise CacheUnavailable(f"{root}: {exc.strerror or exc}") from exc
    return d


@functools.cache
def usable_kernel_dir() -> Path | None:
    """:func:`kernel_dir`, or None (with one warning) when the cache directory cannot be used."""
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
def scratch_dir() -> Path:
    """A private temporary directory, removed at exit, for launcher sources that are not cached (the cache
    directory unusable, or a kernel from outside the package): Numba reads a function's source from a file."""
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
    base = usable_kernel_dir()
    cacheable = base is not None
    folder = (base / "launchers") if base is not None else scratch_dir()
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / name
    try:
        if path.read_text(encoding="utf-8") == text:
            return path, cacheable
    except OSError:
        pass
    _atomic_write(path, text)
    return path, cacheable
