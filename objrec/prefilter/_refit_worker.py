"""The process prefilter refits run in: started at the first refit, stopped while frames run.

A process, not a thread: compositing, fitting and calibrating hold the interpreter lock for long stretches,
which a thread would take from the frames. Even at the lowest priority a running worker competes with a
frame's kernels for the cores and their caches, so :meth:`RefitWorker.pause` stops it (``SIGSTOP``) for the
duration of each frame and :meth:`RefitWorker.resume` lets it continue (``SIGCONT``) between frames.

On POSIX the worker is ``python -m objrec.prefilter._refit_worker FD``, talking over a socket pair: unlike
:mod:`multiprocessing`'s spawn, it does not import the caller's main module, so a user's script needs no
``if __name__ == "__main__"`` guard. Elsewhere it is a :mod:`multiprocessing` spawn process that only runs at
the lowest priority (no stop signals). Jobs and results cross the connection pickled; nothing is read from a
file. Results are read only while the worker runs, so a half-written result never blocks the reader.
"""

from __future__ import annotations

import os
import signal
import sys
import weakref
from pathlib import Path
from typing import Any

__all__ = ["RefitWorker"]

_SIGNALS = hasattr(signal, "SIGSTOP") and hasattr(signal, "SIGCONT")


class RefitWorker:
    """One worker process running :func:`objrec.prefilter.online.refit_job`, one job at a time."""

    def __init__(self) -> None:
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
        self._paused = False
        self._stop = weakref.finalize(self, stop_worker, self._proc, self._conn)

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def alive(self) -> bool:
        return _alive(self._proc)

    def close(self) -> None:
        """End the process (once; also when the worker is garbage-collected or the interpreter exits)."""
        self._stop()

    def submit(self, job: tuple) -> None:
        """Send the arguments of one refit; :meth:`poll` gives its result."""
        self.resume()
        self._conn.send(job)
        self.busy = True

    def pause(self) -> None:
        """Stop a job in progress (a frame starts)."""
        if self.busy and _SIGNALS and not self._paused:
            self._paused = _signal(self._proc, "SIGSTOP")

    def resume(self) -> None:
        """Let a stopped job continue (the frame is done)."""
        if self._paused:
            self._paused = False
            _signal(self._proc, "SIGCONT")

    def poll(self, timeout: float | None = 0.0) -> tuple[str, Any] | None:
        """The finished job's ``("ok", result)`` or ``("error", message)``; None while it runs (after
        ``timeout`` seconds; ``None`` waits)."""
        if not self.busy:
            return None
        self.resume()
        try:
            if not self._conn.poll(timeout):
                return None
            msg = self._conn.recv()
        except (EOFError, OSError) as exc:
            msg = ("error", f"the refit worker stopped ({type(exc).__name__})")
        self.busy = False
        return msg


def _start_subprocess() -> tuple[Any, Any]:
    import socket
    import subprocess
    from multiprocessing.connection import Connection

    ours, theirs = socket.socketpair()
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])  # the directory objrec is imported from
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    proc = subprocess.Popen(
        [sys.executable, "-m", "objrec.prefilter._refit_worker", str(theirs.fileno())],
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


def _signal(proc: Any, name: str) -> bool:
    """Send signal ``name`` to the process; False if it could not be sent (gone, or not POSIX)."""
    try:
        os.kill(proc.pid, getattr(signal, name))
    except (OSError, AttributeError):
        return False
    return True


def stop_worker(proc: Any, conn: Any) -> None:
    """Let a stopped worker continue, then end it (a stopped process would not act on a plain terminate)."""
    if _alive(proc):
        _signal(proc, "SIGCONT")
        proc.terminate()
        try:
            proc.wait(5) if hasattr(proc, "wait") else proc.join(5)
        except Exception:  # noqa: BLE001 - it is being ended; nothing more to do
            pass
    conn.close()


def serve(conn: Any) -> None:
    """The worker's loop: run each job it is sent and send back its result or its error."""
    from objrec.prefilter.online import refit_job

    try:
        os.nice(19)
    except (AttributeError, OSError):  # pragma: no cover - not POSIX
        pass
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        try:
            msg = ("ok", refit_job(*job))
        except Exception as exc:  # noqa: BLE001 - reported to the recognizer, which keeps its model
            msg = ("error", f"{type(exc).__name__}: {exc}")
        conn.send(msg)


if __name__ == "__main__":
    from multiprocessing.connection import Connection

    serve(Connection(int(sys.argv[1])))
