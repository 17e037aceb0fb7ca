"""Frame sources: camera, video file, image folder, arrays.

Every source yields :class:`Frame` items (index, image, capture time in ms on ``time.perf_counter``'s
clock). Files are delivered frame by frame with nothing dropped, unless paced like a camera
(``realtime=True``). A camera (or a paced file) runs a reader thread that keeps only the newest frame
(one in flight, newest wins) and counts what it drops.
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

from objrec.imageio import InputError, read_image

__all__ = ["Frame", "open_source", "ArraySource", "VideoSource", "ImageDirSource", "CameraSource", "LatestFrameSlot"]

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".ppm", ".pgm", ".webp"}


def now_ms() -> float:
    return time.perf_counter() * 1e3


@dataclass(frozen=True)
class Frame:
    index: int
    image: np.ndarray
    t_capture: float  # ms, perf_counter clock


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
    dropped = 0
    fps: float | None = None

    def __iter__(self) -> Iterator[Frame]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class ArraySource(_Source):
    """Frames from an iterable of arrays (processed one by one, nothing dropped)."""

    def __init__(self, frames: Iterable[np.ndarray], fps: float | None = None) -> None:
        self._frames = frames
        self.fps = fps

    def __iter__(self) -> Iterator[Frame]:
        for i, img in enumerate(self._frames):
            yield Frame(i, img, now_ms())


class VideoSource(_Source):
    """A video file, frame by frame."""

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
        i = 0
        try:
            while True:
                ok, img = self._cap.read()
                if not ok:
                    break
                yield Frame(i, img, now_ms())
                i += 1
        finally:
            self.close()

    def close(self) -> None:
        self._cap.release()


class ImageDirSource(_Source):
    """Images of a folder in name order; an unreadable file is an error naming it."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.files = sorted(p for p in self.path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not self.files:
            raise InputError(f"{self.path}: no images ({', '.join(sorted(IMAGE_SUFFIXES))}) in this folder")
        self.frame_shape = read_image(self.files[0]).shape[:2]

    def __iter__(self) -> Iterator[Frame]:
        for i, p in enumerate(self.files):
            yield Frame(i, read_image(p), now_ms())


class PacedSource(_Source):
    """Delivers another source's frames at ``fps`` like a camera: newest wins, late frames are dropped."""

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
    def dropped(self) -> int:  # type: ignore[override]
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
                self._slot.put(Frame(f.index, f.image, now_ms()))
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
    def dropped(self) -> int:  # type: ignore[override]
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
    """A source from a CLI argument: camera index, video file or image folder."""
    if isinstance(spec, int) or (isinstance(spec, str) and spec.isdigit()):
        return CameraSource(int(spec))
    p = Path(spec)
    if p.is_dir():
        src: _Source = ImageDirSource(p)
    elif p.is_file():
        src = VideoSource(p)
    else:
        raise InputError(f"{spec}: no such camera index, video file or image folder")
    if realtime:
        return PacedSource(src, fps or src.fps or 30.0)
    return src
