"""The process the adapting prefilter's refits run in, on otherwise idle CPU.

A process, not a thread: compositing, fitting and calibrating hold the interpreter lock for long stretches,
which a thread would take from the frames. The process lowers its own scheduling class at start
(:func:`idle_priority`): on Linux ``SCHED_IDLE``, so it runs only on CPU time no other process wants and
frames are not slowed by it beyond shared caches; elsewhere the lowest priority the platform has.

It receives the base prefilter (as plain arrays and a manifest, the form a file holds) and the objects'
images once, at start; then each job carries only what changed in the adapting prefilter's stores since
the previous one, and each result is the new trees as flat arrays
(:class:`~objrec.prefilter.refit.RefitSession`). Nothing crosses as a pickled estimator.

On POSIX the worker is ``python -m objrec.prefilter.worker FD``, talking over a socket pair: unlike
:mod:`multiprocessing`'s spawn, it does not import the caller's main module, so a user's script needs no
``if __name__ == "__main__"`` guard. Elsewhere it is a :mod:`multiprocessing` spawn process.
"""

from __future__ import annotations

import os
import sys
import weakref
from pathlib import Path
from typing import Any

__all__ = ["RefitWorker", "idle_priority", "serve", "stop_worker"]


class RefitWorker:
    """One worker process running refits one at a time (:class:`~objrec.prefilter.refit.RefitSession`).

    Parameters
    ----------
    start : dict
        What the worker keeps for every refit: ``manifest``, ``arrays`` (the base prefilter), ``objects``,
        ``store_size``, ``live_frames``; sent once.
    """

    def __init__(self, start: dict[str, Any]) -> None:
        if os.name == "posix":
            self._conn, self._proc = _start_subprocess()
        else:  # pragma: no cover - not POSIX
            import multiprocessing

            ctx = multiprocessing.get_context("spawn")
            self._conn, child = ctx.Pipe()
            self._proc = ctx.Process(target=serve, args=(child,), daemon=True, name="objrec-prefilter-refit")
            self._proc.start()
            child.close()
        self.busy = False
        self._stop = weakref.finalize(self, stop_worker, self._proc, self._conn)
        self._send(("start", start))

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def alive(self) -> bool:
        return _alive(self._proc)

    def close(self) -> None:
        """End the process (once; also when the worker is garbage-collected or the interpreter exits)."""
        self._stop()

    def submit(self, job: dict[str, Any]) -> bool:
        """Send one refit job; :meth:`poll` gives its result. False if the worker is gone."""
        self.busy = self._send(("refit", job))
        return self.busy

    def poll(self, timeout: float | None = 0.0) -> tuple[str, Any] | None:
        """The finished job's ``("ok", result)``, ``("error", message)`` (the job failed, the worker lives on)
        or ``("crashed", message)`` (the worker is gone); None while it runs (after ``timeout`` seconds;
        ``None`` waits)."""
        if not self.busy:
            return None
        try:
            if not self._conn.poll(timeout):
                if self.alive:
                    return None
                raise EOFError
            msg = self._conn.recv()
        except (EOFError, OSError) as exc:
            msg = ("crashed", f"the refit worker stopped ({type(exc).__name__}, exit code {self._exit_code()})")
        self.busy = False
        return msg

    def _send(self, msg: tuple) -> bool:
        try:
            self._conn.send(msg)
        except (OSError, EOFError, ValueError):
            return False
        return True

    def _exit_code(self) -> Any:
        return self._proc.poll() if hasattr(self._proc, "poll") else self._proc.exitcode


def _start_subprocess() -> tuple[Any, Any]:
    import socket
    import subprocess
    from multiprocessing.connection import Connection

    ours, theirs = socket.socketpair()
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])  # the directory objrec is imported from
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    proc = subprocess.Popen(
        [sys.executable, "-m", "objrec.prefilter.worker", str(theirs.fileno())],
        pass_fds=(theirs.fileno(),),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        env=env,
    )
    theirs.close()
    return Connection(ours.detach()), proc


def _alive(proc: Any) -> bool:
    """Whether a :class:`subprocess.Popen` or :class:`multiprocessing.Process` is still running."""
    return proc.poll() is None if hasattr(proc, "poll") else proc.is_alive()


def stop_worker(proc: Any, conn: Any) -> None:
    """End a worker process and close its connection.
    ``proc``: the process; ``conn``: its end of the pipe."""
    for end in ("terminate", "kill"):  # a process on idle CPU may take a while to act on the first
        if not _alive(proc):
            break
        getattr(proc, end)()
        try:
            proc.wait(5) if hasattr(proc, "wait") else proc.join(5)
        except Exception:  # noqa: BLE001 - it is being ended; the next step or nothing
            pass
    conn.close()


def idle_priority() -> str:
    """Lower this process to the lowest scheduling class available: ``"idle"`` (Linux ``SCHED_IDLE``: runs
    only when a CPU has nothing else to run), ``"nice"`` (``nice 19``) or ``"none"``."""
    if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_IDLE"):
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            return "idle"
        except OSError:  # pragma: no cover - refused by the platform
            pass
    try:
        os.nice(19)
        return "nice"
    except (AttributeError, OSError):  # pragma: no cover - not POSIX
        return "none"


def serve(conn: Any) -> None:
    """The worker's loop: a ``("start", ...)`` message first, then each ``("refit", job)``, answered with
    ``("ok", result)`` or ``("error", message)``."""
    idle_priority()  # before any thread starts: threads inherit the scheduling class
    from objrec.prefilter.refit import RefitSession

    session = None
    while True:
        try:
            kind, payload = conn.recv()
        except (EOFError, OSError):
            return
        if kind == "start":  # a start that fails ends the process: the prefilter sees it stop
            session = RefitSession(**payload)
            continue
        try:
            if session is None:
                raise RuntimeError("a refit job before the start message")
            msg: tuple[str, Any] = ("ok", session.run(payload))
        except Exception as exc:  # noqa: BLE001 - reported to the prefilter, which keeps its model
            msg = ("error", f"{type(exc).__name__}: {exc}")
        conn.send(msg)


if __name__ == "__main__":
    from multiprocessing.connection import Connection

    serve(Connection(int(sys.argv[1])))
