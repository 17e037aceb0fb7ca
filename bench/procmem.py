"""Process measurements for the benchmarks: anonymous memory sampled from ``/proc``, page-cache drops, disk use.

``RssAnon`` (``/proc/PID/status``) counts a process's anonymous resident pages only: its heap, stacks and
private copies, not the pages of files it has memory-mapped, so a database read through ``numpy.load(...,
mmap_mode="r")`` does not count however much of it is resident. It is the figure that grows with what a process
copies out of its files, and it cannot be read from ``getrusage`` (whose ``ru_maxrss`` includes mapped pages).
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["rss_anon_kb", "Sampled", "run_sampled", "drop_page_cache", "tree_files", "disk_bytes", "thread_report"]


def rss_anon_kb(pid: int | str = "self") -> int:
    """``RssAnon`` of a process in kB, read from ``/proc/PID/status`` (0 once it has exited or on a system
    without ``/proc``)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


@dataclass
class Sampled:
    """A child process run to its end while its ``RssAnon`` was sampled.

    Attributes
    ----------
    returncode : int
        The child's exit status.
    wall_s : float
        Seconds from its start to its exit.
    peak_rss_anon_kb : int
        The largest ``RssAnon`` seen, in kB.
    samples : int
        How many times ``RssAnon`` was read while the child ran.
    cpu_s : float
        The child's CPU time, user plus system, all its threads (``wait4``'s resource usage): on a machine
        shared with other work, the figure that does not depend on how much of a core the child got.
    """

    returncode: int
    wall_s: float
    peak_rss_anon_kb: int
    samples: int
    cpu_s: float

    @property
    def peak_rss_anon_mb(self) -> float:
        """The peak in MiB."""
        return self.peak_rss_anon_kb / 1024


def run_sampled(
    cmd: list[str], log: Path | None = None, interval_s: float = 0.05, cwd: Path | None = None, env=None
) -> Sampled:
    """Run ``cmd`` to its end, reading the child's ``RssAnon`` every ``interval_s`` seconds (20 Hz by default).

    Parameters
    ----------
    cmd : list of str
        The child's command line.
    log : Path, optional
        File the child's stdout and stderr are appended to (discarded without one).
    interval_s : float
        Seconds between two readings of ``/proc/PID/status``.
    cwd : Path, optional
        The child's working directory.
    env : dict, optional
        The child's environment (default: this process's).

    Returns
    -------
    Sampled
        Exit status, wall and CPU seconds, the peak ``RssAnon`` and the number of readings.

    Notes
    -----
    The child's stdout and stderr go to ``log`` (appended), or are discarded. A peak shorter than one interval
    can be missed; allocations that matter for a bound on memory last longer than that. When this process is
    interrupted while it waits, the child is terminated before the exception goes on, so no stage keeps
    running after its benchmark has stopped.
    """
    out = open(log, "a") if log else subprocess.DEVNULL  # noqa: SIM115 - closed below
    try:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=env)
        peak = n = 0
        try:
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                peak = max(peak, rss_anon_kb(proc.pid))
                n += 1
                time.sleep(interval_s)
        except BaseException:  # interrupted (Ctrl-C, a SIGTERM turned into SystemExit): the child goes too
            proc.terminate()
            proc.wait()
            raise
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        return Sampled(proc.returncode, wall, peak, n, usage.ru_utime + usage.ru_stime)
    finally:
        if log:
            out.close()


def tree_files(path: Path) -> list[Path]:
    """Every regular file under ``path`` (links not followed), sorted."""
    return sorted(p for p in Path(path).rglob("*") if p.is_file() and not p.is_symlink())


def drop_page_cache(paths: list[Path]) -> int:
    """Drop each file's pages from the page cache (``posix_fadvise(POSIX_FADV_DONTNEED)``).

    Parameters
    ----------
    paths : list of Path
        Regular files (every file of a database, :func:`tree_files`).

    Returns
    -------
    int
        The files' total size in bytes.

    Notes
    -----
    Only these files are dropped, not the machine's whole cache. Dirty pages are written first (``fsync``),
    since the kernel drops only clean ones. Pages that a running process has mapped stay resident, so a process
    that is to read the files cold opens them after this call.
    """
    total = 0
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            total += os.fstat(fd).st_size
        finally:
            os.close(fd)
    return total


def disk_bytes(path: Path) -> dict[str, int]:
    """Bytes on disk under ``path`` (file sizes, every file counted) in all (``"total"``) and per file suffix."""
    out: dict[str, int] = {"total": 0}
    for f in tree_files(path):
        size = f.stat().st_size
        key = "".join(f.suffixes[-1:]) or f.name
        out[key] = out.get(key, 0) + size
        out["total"] += size
    return out


def thread_report() -> dict[str, object]:
    """What sets the threads of a run: the cores this process may use, OpenCV's and Numba's thread counts and the
    thread variables of the environment."""
    import cv2

    info: dict[str, object] = {"affinity_cores": len(os.sched_getaffinity(0)), "cv2": cv2.getNumThreads()}
    try:
        import numba

        info["numba"] = numba.get_num_threads()
    except ImportError:
        pass
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
        info[var] = os.environ.get(var)
    return info
