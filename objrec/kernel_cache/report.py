"""Inspection and cleanup of the kernel cache, as ``objrec cache info|clear`` reports them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from objrec.kernel_cache.keys import ENV_VAR, PREFIX, cache_key, cache_root, kernel_dir, usable_kernel_dir

__all__ = ["info", "clear"]


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
        for d in sorted(root.glob(f"{PREFIX}*")):
            if not d.is_dir():
                continue
            files, size = _tree_size(d)
            try:
                meta = json.loads((d / "key.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                meta = {}
            k = d.name[len(PREFIX) :]
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
        for d in sorted(root.glob(f"{PREFIX}*")):
            if not d.is_dir() or d.is_symlink() or d.name == f"{PREFIX}{keep}":
                continue
            freed += _tree_size(d)[1]
            shutil.rmtree(d)
            removed.append(str(d))
    if keep is None:
        kernel_dir.cache_clear()
        usable_kernel_dir.cache_clear()
    return {"root": str(root), "removed": removed, "bytes": freed}
