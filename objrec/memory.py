"""Memory use of this process, for the reports of ``objrec detect`` and ``objrec run``.

Peak resident set size from ``getrusage`` (the high-water mark the kernel keeps: kibibytes on Linux, bytes on
macOS) and the current resident size from ``/proc/self/statm`` where there is one. Memory-mapped database
arrays count once their pages are touched, as they cost real memory then.
"""

from __future__ import annotations

import os
import sys


def peak_rss_bytes() -> int | None:
    """The process's peak resident set size in bytes, or None where the platform does not report it."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def rss_bytes() -> int | None:
    """The current resident set size in bytes (Linux), else None."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def report() -> dict[str, float | None]:
    """``{"peak_rss_mb": float | None, "rss_mb": float | None}`` in MiB, rounded to 0.1."""
    mib = 1 << 20
    now, peak = rss_bytes(), peak_rss_bytes()
    if peak is not None and now is not None:
        # Linux records the high-water mark only when the resident set is about to shrink, so a process whose
        # memory has grown since can be above it: the peak is at least the current size.
        peak = max(peak, now)
    return {
        "peak_rss_mb": round(peak / mib, 1) if peak is not None else None,
        "rss_mb": round(now / mib, 1) if now is not None else None,
    }
