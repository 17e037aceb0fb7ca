"""A Dask client for work spread over processes or machines: a local cluster, a running scheduler, or a client
the caller already holds.

Dask is an optional extra (``pip install "objrec[dask]"``); without it, asking for a cluster is a
``ValueError`` that says how to install it, so a command line reports it as bad input in one line.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["dask_client", "cluster_threads", "check_workers"]


def _distributed() -> Any:
    try:
        import dask.distributed as dd
    except ImportError as exc:
        raise ValueError(f"a Dask cluster needs Dask: pip install 'objrec[dask]' (dask[distributed]) ({exc})") from None
    return dd


def _connect(dd: Any, scheduler: str, timeout: str) -> Any:
    try:
        return dd.Client(scheduler, timeout=timeout)
    except (OSError, TimeoutError, ValueError, TypeError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise ValueError(f"--scheduler: cannot connect to {scheduler} ({reason})") from None


@contextmanager
def _quiet(level: int) -> Iterator[None]:
    """Dask's and Tornado's loggers at ``level`` at least for the block (restored after)."""
    quiet = [logging.getLogger(n) for n in ("distributed", "tornado")]
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(max(level, q.getEffectiveLevel()))
    try:
        yield
    finally:
        for q, lv in zip(quiet, levels, strict=True):
            q.setLevel(lv)


@contextmanager
def dask_client(workers: int | None = None, scheduler: Any = None, timeout: str = "10s") -> Iterator[tuple[Any, str]]:
    """A ``dask.distributed`` client for the block, and a phrase naming where it runs.

    Parameters
    ----------
    workers : int, optional
        With no ``scheduler``: start a local cluster of this many single-threaded worker processes, closed
        when the block ends.
    scheduler : str or Client or cluster, optional
        The address of a running scheduler (``tcp://host:8786``; the client is closed when the block ends),
        or a ``Client`` or cluster object (``LocalCluster``, ...) the caller made and keeps open.
    timeout : str
        How long connecting to an address may take.

    Yields
    ------
    client : dask.distributed.Client
    mode : str
        ``"dask local cluster"``, ``"dask scheduler ADDRESS"`` or ``"dask client"``.

    Raises
    ------
    ValueError
        Dask missing, both or neither of ``workers`` and ``scheduler``, a non-positive ``workers``, or a
        scheduler that cannot be reached (the message names the address and the reason).
    """
    if (workers is None) == (scheduler is None):
        raise ValueError("a Dask cluster: give either a number of local workers or a scheduler, not both or neither")
    if workers is not None and workers < 1:
        raise ValueError(f"--workers: expected a positive integer, got {workers}")
    dd = _distributed()
    if isinstance(scheduler, dd.Client):
        yield scheduler, "dask client"
        return
    if scheduler is not None and not isinstance(scheduler, str):
        with dd.Client(scheduler) as client:  # a cluster object: the caller owns and closes it
            yield client, f"dask scheduler {client.scheduler.address}"
        return
    if scheduler is not None:
        with _connect(dd, scheduler, timeout) as client:
            yield client, f"dask scheduler {scheduler}"
        return
    # A scheduler and workers in this process log connections at INFO level and, at shutdown, the
    # closed-connection races of the workers' last heartbeats: none of it means anything to the caller.
    with _quiet(logging.ERROR):
        cluster = dd.LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=logging.ERROR
        )
        client = None
        try:
            client = dd.Client(cluster)
            yield client, "dask local cluster"
        finally:
            with _quiet(logging.CRITICAL):
                if client is not None:
                    client.close()
                cluster.close()


def check_workers(workers: int | None, scheduler: Any) -> None:
    """The checks of a command line's ``--workers N`` (``workers``, None when not given) beside ``--scheduler
    ADDRESS`` (``scheduler``, None when not given): a ``ValueError`` naming the option, made before anything is
    started or written."""
    if workers is not None and workers < 1:
        raise ValueError(f"--workers: expected a positive integer, got {workers}")
    if scheduler is not None and workers is not None:
        raise ValueError("--workers: a cluster at --scheduler has its own workers (start them with dask worker)")


def cluster_threads(client: Any) -> int:
    """The number of task threads over every worker the client's scheduler knows now (at least 1)."""
    return max(1, sum(client.nthreads().values()))
