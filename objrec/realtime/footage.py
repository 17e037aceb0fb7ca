"""The footage's frame rate, from its frames' times, so that settings given in milliseconds of footage time
(:class:`~objrec.realtime.tracker.TrackParams`) become frame counts that mean the same time at any rate.

A video file gives its frames the file's timestamps and an image folder its index over ``--fps``; a camera's
frames carry its capture clock. The same file then gives the same frame counts, and so the same tracks, on a
fast machine and a slow one. Without frame times (frames given one by one with no ``t_frame``) the footage is
taken to run at :data:`NOMINAL_FPS`.
"""

from __future__ import annotations

from collections import deque

import numpy as np

__all__ = ["NOMINAL_FPS", "FrameRate"]

#: The frame rate assumed for footage whose frames carry no time.
NOMINAL_FPS = 30.0


class FrameRate:
    """The footage's frame interval: the median of the last ``window`` intervals between frame times.

    Parameters
    ----------
    window : int
        Intervals the median is taken over (a camera's dropped frame or a late timestamp moves it little).

    Attributes
    ----------
    interval_ms : float
        The frame interval in milliseconds; ``1000 / NOMINAL_FPS`` until two timed frames are seen.

    Examples
    --------
    >>> rate = FrameRate()
    >>> rate.frames(500.0)  # at the nominal 30 frames a second
    15
    >>> for i in range(10):
    ...     rate.update(40.0 * i)  # footage at 25 frames a second
    >>> rate.interval_ms, rate.frames(500.0), rate.frames(0.0)
    (40.0, 13, 0)
    """

    def __init__(self, window: int = 15) -> None:
        self.window = int(window)
        self._times: deque[float] = deque(maxlen=self.window + 1)
        self.interval_ms = 1000.0 / NOMINAL_FPS

    def update(self, t_ms: float | None) -> None:
        """Take the next frame's footage time (ms; None: the frame has none). A time that does not move
        forward starts the estimate again (a new sequence, or a seek back)."""
        if t_ms is None:
            return
        t = float(t_ms)
        if self._times and t <= self._times[-1]:
            self._times.clear()
        self._times.append(t)
        if len(self._times) >= 2:
            self.interval_ms = float(np.median(np.diff(np.asarray(self._times))))

    def frames(self, ms: float) -> int:
        """``ms`` of footage as a whole number of frames (rounded half up); at least 1 for a positive time,
        0 for 0 (a setting that is off)."""
        if ms <= 0:
            return 0
        return max(1, int(ms / self.interval_ms + 0.5))

    def reset(self) -> None:
        """Forget the frame times (a new, unrelated sequence of frames follows)."""
        self._times.clear()
        self.interval_ms = 1000.0 / NOMINAL_FPS
