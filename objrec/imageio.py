"""Validation of frames and images at the library boundary; errors name what was wrong."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np

__all__ = [
    "InputError",
    "check_frame",
    "to_gray",
    "to_bgr",
    "read_image",
    "decode_image",
    "MAX_PIXELS",
    "check_mask",
    "video_frames",
]

#: Frames above this many pixels are refused (a 16k x 16k image would stall a real-time loop for minutes).
MAX_PIXELS = 8192 * 8192


class InputError(ValueError):
    """Bad user input (frame, image file, argument); the message says what and where."""


def check_frame(frame: Any, name: str = "frame") -> np.ndarray:
    """Validate ``frame``, a gray (H, W) or BGR/BGRA (H, W, 3|4) uint8 image, and return it as an array.

    Raises :class:`InputError` naming ``name`` for None, empty, wrong dtype (16-bit, float), wrong
    channel counts and images above :data:`MAX_PIXELS`.
    """
    if frame is None:
        raise InputError(f"{name}: got None (a camera or cv2.imread that failed returns None)")
    if not isinstance(frame, np.ndarray):
        raise InputError(f"{name}: expected a numpy array, got {type(frame).__name__}")
    return check_frame_layout(frame, name)


def check_frame_layout(frame: Any, name: str = "frame") -> Any:
    """The checks of :func:`check_frame` that read only an array's shape and dtype, so they apply to device
    (CuPy) arrays as well; a (H, W, 1) image comes back as (H, W)."""
    if frame.size == 0:
        raise InputError(f"{name}: empty image (shape {frame.shape})")
    if frame.dtype != np.uint8:
        hint = " (16-bit: scale to 8 bit, e.g. (img >> 8).astype(np.uint8))" if frame.dtype == np.uint16 else ""
        raise InputError(f"{name}: expected dtype uint8, got {frame.dtype}{hint}")
    if frame.ndim == 3 and frame.shape[2] == 1:
        frame = frame[:, :, 0]
    if not (frame.ndim == 2 or (frame.ndim == 3 and frame.shape[2] in (3, 4))):
        raise InputError(f"{name}: expected shape (H, W) gray or (H, W, 3|4) BGR(A), got {frame.shape}")
    h, w = frame.shape[:2]
    if h < 16 or w < 16:
        raise InputError(f"{name}: image {w}x{h} is too small (need at least 16x16)")
    if h * w > MAX_PIXELS:
        raise InputError(f"{name}: image {w}x{h} exceeds the limit of {MAX_PIXELS} pixels; downscale it first")
    return frame


def to_gray(frame: np.ndarray) -> np.ndarray:
    """Gray uint8 view or conversion of a validated frame."""
    if frame.ndim == 2:
        return frame
    code = cv2.COLOR_BGRA2GRAY if frame.shape[2] == 4 else cv2.COLOR_BGR2GRAY
    return cv2.cvtColor(frame, code)


def to_bgr(frame: np.ndarray) -> np.ndarray:
    if frame.ndim == 2:
        return cv2.cvtColor(frame, cv2.COLOR_GRAY2BGR)
    if frame.shape[2] == 4:
        return cv2.cvtColor(frame, cv2.COLOR_BGRA2BGR)
    return frame


def check_mask(mask: Any, shape: tuple[int, int]) -> np.ndarray | None:
    """Validate an optional mask: (H, W) of bool or uint8 matching the image's ``shape``; nonzero = use."""
    if mask is None:
        return None
    if not isinstance(mask, np.ndarray):
        raise InputError(f"mask: expected a numpy array or None, got {type(mask).__name__}")
    if mask.shape != tuple(shape):
        raise InputError(f"mask: expected shape {tuple(shape)} (same as the image), got {mask.shape}")
    if mask.dtype not in (np.uint8, np.bool_):
        raise InputError(f"mask: expected dtype uint8 or bool, got {mask.dtype}")
    return (mask != 0).view(np.uint8) if mask.dtype == np.bool_ else mask


def read_image(path: str | os.PathLike, name: str | None = None) -> np.ndarray:
    """Read the image file at ``path`` as BGR uint8 (8-bit gray files come back gray); errors name the file
    (or ``name`` when given)."""
    p = Path(path)
    label = name or str(p)
    if not p.exists():
        raise InputError(f"{label}: no such file")
    if p.is_dir():
        raise InputError(f"{label}: is a directory, expected an image file")
    return decode_image(np.fromfile(str(p), dtype=np.uint8), label)


def decode_image(data: np.ndarray | bytes, label: str) -> np.ndarray:
    """Decode ``data``, the encoded bytes of an image file, as :func:`read_image` does; errors name ``label``."""
    data = np.frombuffer(data, np.uint8) if isinstance(data, bytes | bytearray | memoryview) else data
    if data.size == 0:
        raise InputError(f"{label}: file is empty")
    img = cv2.imdecode(data, cv2.IMREAD_UNCHANGED)
    if img is None:
        raise InputError(f"{label}: not a readable image (unknown format or truncated)")
    if img.dtype != np.uint8:
        raise InputError(f"{label}: {img.dtype} image; objrec expects 8-bit images (convert to 8 bit first)")
    return check_frame(img, label)


def video_frames(cap: Any, fps: float | None) -> Iterator[tuple[np.ndarray, float]]:
    """The frames of an opened ``cv2.VideoCapture`` with their timestamps in the file, in ms.

    Parameters
    ----------
    cap : cv2.VideoCapture
        An opened capture of a video file.
    fps : float or None
        The file's frame rate, for a container that gives no timestamp that advances (30 when None).

    Yields
    ------
    (image, t_ms)
        Each frame as decoded and its time: ``CAP_PROP_POS_MSEC`` read after the frame (the decoded frame's
        own timestamp), or the frame's index over ``fps`` where that does not advance.
    """
    i, last = 0, -1.0
    while True:
        ok, img = cap.read()
        if not ok:
            return
        t = float(cap.get(cv2.CAP_PROP_POS_MSEC))
        if not (np.isfinite(t) and t > last):
            t = 1000.0 * i / (fps or 30.0)
        last = t
        yield img, t
        i += 1
