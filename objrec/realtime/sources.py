"""Frame sources: camera, video file, image folder, arrays.

Every source yields :class:`Frame` items: index, image, the time it was handed over (``t_capture``, ms on
``time.perf_counter``'s clock, where latency starts) and its time on the footage's own timeline
(``t_footage``, ms: a video file's timestamps, an image folder's index over its frame rate, a camera's capture
clock). Files are delivered frame by frame with nothing dropped, unless paced like a camera
(``realtime=True``). A camera (or a paced file) runs a reader thread that keeps only the newest frame
(one in flight, newest wins) and counts what it drops.

Whatever reasons about the motion in the footage (corner smoothing) uses ``t_footage``, so a file gives the
same result on a fast and on a slow machine; latency and budgets use ``t_capture``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from objrec.imageio import InputError, read_image, video_frames

__all__ = ["Frame", "open_source", "ArraySource", "VideoSource", "ImageDirSource", "CameraSource", "LatestFrameSlot"]

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".ppm", ".pgm", ".webp"}


def now_ms() -> float:
    return time.perf_counter() * 1e3


@dataclass(frozen=True)
class Frame:
    """One frame of a source.

    Attributes
    ----------
    index : int
        Its place in the source, from 0.
    image : ndarray
        The frame (BGR or gray, uint8).
    t_capture : float
        When it was handed over, in ms on ``time.perf_counter``'s clock: where its latency starts.
    t_footage : float or None
        Its time on the footage's timeline, in ms (None: the same as ``t_capture``).
    """

    index: int
    image: np.ndarray
    t_capture: float
    t_footage: float | None = None

    @property
    def footage_ms(self) -> float:
        """``t_footage``, or ``t_capture`` for a source without a timeline of its own."""
        return self.t_capture if self.t_footage is None else self.t_footage


class LatestFrameSlot:
    """A one-frame mailbox: the producer overwrites, the consumer takes the newest; drops are counted."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._frame: Frame | None = None
        self._closed = False
        self.dropped = 0

    def put(self, frame: Frame) -> None:
        with self._cond:
            if self._frame is not None:
                self.dropped += 1
            self._frame = frame
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def get(self, timeout: float | None = None) -> Frame | None:
        """The newest frame, waiting for one; None once closed and empty."""
        with self._cond:
            while self._frame is None and not self._closed:
                if not self._cond.wait(timeout):
                    return None
            f, self._frame = self._frame, None
            return f

    def frames(self) -> Iterator[Frame]:
        """The newest frame each time the consumer asks, until the producer closes the slot."""
        while (f := self.get()) is not None:
            yield f


class _Source:
    fps: float | None = None

    @property
    def dropped(self) -> int:
        """Frames dropped so far: none, for a source that delivers every frame."""
        return 0

    def __iter__(self) -> Iterator[Frame]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class ArraySource(_Source):
    """Frames from an iterable of arrays (processed one by one, nothing dropped); with ``fps``, frame ``i`` is
    at ``1000 i / fps`` ms of footage time, without, at the time it is handed over.

    Parameters
    ----------
    frames : iterable of np.ndarray
        The frames, gray or BGR uint8.
    fps : float, optional
        The frames' rate, for their footage times.
    """

    def __init__(self, frames: Iterable[np.ndarray], fps: float | None = None) -> None:
        if fps is not None and not fps > 0:
            raise ValueError(f"fps: expected a positive number or None, got {fps}")
        self._frames = frames
        self.fps = fps

    def __iter__(self) -> Iterator[Frame]:
        for i, img in enumerate(self._frames):
            yield Frame(i, img, now_ms(), None if self.fps is None else 1000.0 * i / self.fps)


class VideoSource(_Source):
    """A video file, frame by frame, each at its timestamp in the file (``CAP_PROP_POS_MSEC``; where the
    container gives none that advances, the frame index over the file's frame rate, 30 fps when unknown)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise InputError(f"{self.path}: no such video file")
        self._cap = cv2.VideoCapture(str(self.path))
        if not self._cap.isOpened():
            raise InputError(f"{self.path}: cannot be opened as a video")
        fps = self._cap.get(cv2.CAP_PROP_FPS)
        self.fps = float(fps) if fps and fps > 0 else None
        self.frame_shape = (int(self._cap.get(cv2.CAP_PROP_FRAME_HEIGHT)), int(self._cap.get(cv2.CAP_PROP_FRAME_WIDTH)))

    def __iter__(self) -> Iterator[Frame]:
        try:
            for i, (img, t) in enumerate(video_frames(self._cap, self.fps)):
                yield Frame(i, img, now_ms(), t)
        finally:
            self.close()

    def close(self) -> None:
        self._cap.release()


class ImageDirSource(_Source):
    """Images of a folder in name order, image ``i`` at ``1000 i / fps`` ms of footage time; an unreadable file
    is an error naming it.

    Parameters
    ----------
    path : str or Path
        The folder.
    fps : float
        The rate the images were taken at.
    """

    fps: float

    def __init__(self, path: str | Path, fps: float = 30.0) -> None:
        if not fps > 0:
            raise ValueError(f"fps: expected a positive number, got {fps}")
        self.fps = float(fps)
        self.path = Path(path)
        self.files = sorted(p for p in self.path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not self.files:
            raise InputError(f"{self.path}: no images ({', '.join(sorted(IMAGE_SUFFIXES))}) in this folder")
        self.frame_shape = read_image(self.files[0]).shape[:2]

    def __iter__(self) -> Iterator[Frame]:
        for i, p in enumerate(self.files):
            yield Frame(i, read_image(p), now_ms(), 1000.0 * i / self.fps)


class PacedSource(_Source):
    """Delivers another source's frames at ``fps`` like a camera: newest wins, late frames are dropped."""

    fps: float

    def __init__(self, inner: _Source, fps: float) -> None:
        if not fps > 0:
            raise ValueError(f"fps: expected a positive number, got {fps}")
        self.inner = inner
        self.fps = fps
        self._slot = LatestFrameSlot()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.frame_shape = getattr(inner, "frame_shape", None)

    @property
    def dropped(self) -> int:
        return self._slot.dropped

    def _run(self) -> None:
        period = 1000.0 / self.fps
        t_next = now_ms()
        try:
            for f in self.inner:
                if self._stop.is_set():
                    break
                wait = t_next - now_ms()
                if wait > 0:
                    time.sleep(wait / 1e3)
                self._slot.put(Frame(f.index, f.image, now_ms(), f.t_footage))
                t_next += period
        finally:
            self._slot.close()  # the end-of-stream marker, also after an error

    def __iter__(self) -> Iterator[Frame]:
        self._thread = threading.Thread(target=self._run, name="objrec-paced-source", daemon=True)
        self._thread.start()
        try:
            yield from self._slot.frames()
        finally:
            self.close()

    def close(self) -> None:
        self._stop.set()
        self.inner.close()


class CameraSource(_Source):
    """A camera by index; a reader thread keeps the newest frame. Lost camera: retry with back-off, then end.

    Parameters
    ----------
    index : int
        The camera's index (OpenCV's ``VideoCapture``).
    width, height : int, optional
        The frame size asked of the camera (default: the camera's own).
    retries : int
        Reconnection attempts after a failed read before the stream ends cleanly.
    """

    def __init__(self, index: int, width: int | None = None, height: int | None = None, retries: int = 5) -> None:
        self.index = index
        self.retries = retries
        self._size = (width, height)
        self._cap = self._open()
        fps = self._cap.get(cv2.CAP_PROP_FPS)
        self.fps = float(fps) if fps and fps > 0 else 30.0
        self.frame_shape = (int(self._cap.get(cv2.CAP_PROP_FRAME_HEIGHT)), int(self._cap.get(cv2.CAP_PROP_FRAME_WIDTH)))
        self._slot = LatestFrameSlot()
        self._stop = threading.Event()
        self.reconnects = 0

    def _open(self) -> Any:
        # OpenCV logs each capture backend's failed probe (V4L2, FFMPEG, obsensor ...) on stderr; the one
        # message a user needs is the InputError below, so its log is silenced while the camera opens.
        level = cv2.utils.logging.getLogLevel()
        cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_SILENT)
        try:
            cap = cv2.VideoCapture(self.index)
        finally:
            cv2.utils.logging.setLogLevel(level)
        if not cap.isOpened():
            raise InputError(f"camera {self.index}: cannot be opened (no such device or it is busy)")
        w, h = self._size
        if w:
            cap.set(cv2.CAP_PROP_FRAME_WIDTH, w)
        if h:
            cap.set(cv2.CAP_PROP_FRAME_HEIGHT, h)
        return cap

    @property
    def dropped(self) -> int:
        return self._slot.dropped

    def _run(self) -> None:
        i = 0
        failures = 0
        try:
            while not self._stop.is_set():
                ok, img = self._cap.read()
                t = now_ms()
                if ok:
                    failures = 0
                    self._slot.put(Frame(i, img, t))
                    i += 1
                    continue
                failures += 1
                if failures > self.retries:
                    break
                time.sleep(min(2.0, 0.1 * 2**failures))  # back-off, then reconnect
                self._cap.release()
                try:
                    self._cap = self._open()
                    self.reconnects += 1
                except InputError:
                    pass
        finally:
            self._slot.close()

    def __iter__(self) -> Iterator[Frame]:
        t = threading.Thread(target=self._run, name=f"objrec-camera-{self.index}", daemon=True)
        t.start()
        try:
            yield from self._slot.frames()
        finally:
            self.close()
            t.join(timeout=2.0)

    def close(self) -> None:
        self._stop.set()
        self._cap.release()


def open_source(spec: str | int, realtime: bool = False, fps: float | None = None) -> _Source:
    """A source from a CLI argument ``spec``: camera index, video file or image folder.

    ``fps`` is an image folder's frame rate (30 when None) and the pace of a file played with ``realtime``
    (default: the file's own rate).
    """
    if isinstance(spec, int) or (isinstance(spec, str) and spec.isdigit()):
        return CameraSource(int(spec))
    p = Path(spec)
    if p.is_dir():
        src: _Source = ImageDirSource(p, fps or 30.0)
    elif p.is_file():
        src = VideoSource(p)
    else:
        raise InputError(f"{spec}: no such camera index, video file or image folder")
    if realtime:
        return PacedSource(src, fps or src.fps or 30.0)
    return src
