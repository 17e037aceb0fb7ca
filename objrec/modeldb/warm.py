"""Warming the page cache with a database's files in the background.

A recognizer over a large catalogue reads each shortlisted object's rows from the database's memory-mapped shard
files when a frame first needs them. On a cold page cache (after a reboot, or once other work has pushed the
files out) each such read waits on the disk: an object's image and every kind's keypoints and descriptors lie
in separate files, several random reads, which together take more than a frame's budget allows. Asking the
kernel to read whole files ahead (``posix_fadvise(POSIX_FADV_WILLNEED)``) turns those waits into sequential
reads at the disk's full rate, done while the first frames run: the reads a frame still makes then find their
pages in memory.

Only what the page cache can hold is asked for: by default up to half of the memory the kernel reports
available (``MemAvailable`` in ``/proc/meminfo``), the files in the order given (the retrieval index, then the
shards' rows). A catalogue larger than that is warmed in part, and its other reads wait on the disk as before.
Nothing is done where the platform has no ``posix_fadvise`` or no ``/proc/meminfo``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from pathlib import Path

__all__ = ["mem_available", "files_within", "warm_files", "warm_in_background", "WARM_SHARE"]

#: The share of the available memory the files asked for may take.
WARM_SHARE = 0.5


def mem_available(meminfo: str | os.PathLike = "/proc/meminfo") -> int | None:
    """Bytes of memory the kernel reports available for new work (``MemAvailable``), or None where unknown."""
    try:
        with open(meminfo, encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def files_within(paths: Iterable[str | os.PathLike], max_bytes: int) -> list[Path]:
    """The leading files of ``paths`` whose sizes add up to at most ``max_bytes``: the first file that would pass
    it ends the list. Files that have gone (a database changed since) are passed over. These are the files
    :func:`warm_files` asks the kernel for."""
    out, total = [], 0
    for p in paths:
        try:
            size = os.stat(p).st_size
        except OSError:
            continue
        if total + size > max_bytes:
            break
        out.append(Path(p))
        total += size
    return out


def warm_files(paths: Iterable[str | os.PathLike], max_bytes: int) -> int:
    """Ask the kernel to read each file of ``paths`` into the page cache, in order, while their sizes add up to
    at most ``max_bytes`` (:func:`files_within`). Returns the bytes asked for. Files that have gone are passed
    over; nothing is read here, the kernel reads."""
    if not hasattr(os, "posix_fadvise"):
        return 0
    total = 0
    for p in files_within(paths, max_bytes):
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            size = os.fstat(fd).st_size
            os.posix_fadvise(fd, 0, size, os.POSIX_FADV_WILLNEED)
            total += size
        finally:
            os.close(fd)
    return total


def warm_in_background(paths: Iterable[str | os.PathLike], max_bytes: int | None = None) -> threading.Thread | None:
    """:func:`warm_files` in a daemon thread, started here (the kernel may block a caller while it queues the
    reads of a large file); ``max_bytes`` defaults to :data:`WARM_SHARE` of :func:`mem_available`. Returns the
    thread, or None where nothing can be asked for.
    ``paths``: the files to read into the page cache."""
    if max_bytes is None:
        avail = mem_available()
        if avail is None:
            return None
        max_bytes = int(avail * WARM_SHARE)
    if max_bytes <= 0 or not hasattr(os, "posix_fadvise"):
        return None
    files = [Path(p) for p in paths]
    t = threading.Thread(target=warm_files, args=(files, max_bytes), name="objrec-warm-cache", daemon=True)
    t.start()
    return t
