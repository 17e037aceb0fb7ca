"""Input images of the extractors, on the host or on the device, and empty results on either.

A NumPy frame is checked by :mod:`objrec.imageio`. A CuPy frame (uploaded once by the caller, or a slice of
such a frame) is checked from its metadata only and converted to gray on the device, so nothing is read
back. :func:`place` then puts image and mask where the chosen backend runs, counting any copy.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from objrec.backend import get_array_module, is_device_array, to_device, to_numpy
from objrec.imageio import InputError, check_frame, check_frame_layout, check_mask, to_gray
from objrec.types import Features

__all__ = ["check_image", "place", "empty_features", "gray_on_device"]

# OpenCV's fixed-point BGR->gray for 8-bit images: 0.114, 0.587, 0.299 in units of 2^-15, rounded.
_B2Y, _G2Y, _R2Y, _SHIFT = 3735, 19235, 9798, 15


def gray_on_device(frame: Any, xp: ModuleType) -> Any:
    """Gray uint8 of a validated BGR(A) frame with array code, bit-exact with ``cv2.cvtColor(..., BGR2GRAY)``.
    ``frame``: the validated frame; ``xp``: its array module."""
    if frame.ndim == 2:
        return frame
    f = frame.astype(np.int32)
    y = f[..., 0] * _B2Y + f[..., 1] * _G2Y + f[..., 2] * _R2Y + (1 << (_SHIFT - 1))
    return (y >> _SHIFT).astype(np.uint8)


def _check_device_mask(mask: Any, shape: tuple[int, int]) -> Any:
    if mask.shape != tuple(shape):
        raise InputError(f"mask: expected shape {tuple(shape)} (same as the image), got {mask.shape}")
    if mask.dtype not in (np.uint8, np.bool_):
        raise InputError(f"mask: expected dtype uint8 or bool, got {mask.dtype}")
    return mask


def check_image(gray: Any, mask: Any, name: str = "gray") -> tuple[Any, Any]:
    """Validate a gray or BGR(A) uint8 image and an optional mask, on the host or the device.

    Returns the gray image (C-contiguous, on the image's device) and the mask as 0/1 uint8 (on its own
    device; :func:`place` moves it), or None.
    ``gray``: the image; ``mask``: the optional mask; ``name``: what errors call the image.
    """
    if is_device_array(gray):
        xp = get_array_module(gray)
        img = xp.ascontiguousarray(gray_on_device(check_frame_layout(gray, name), xp))
    else:
        img = np.ascontiguousarray(to_gray(check_frame(gray, name)))
    if mask is None:
        return img, None
    if is_device_array(mask):
        m = _check_device_mask(mask, img.shape)
    else:
        m = check_mask(mask, img.shape)
    mx = get_array_module(m)
    return img, mx.ascontiguousarray(mx.minimum(m, 1).astype(np.uint8, copy=False))


def place(img: Any, mask: Any, xp: ModuleType) -> tuple[Any, Any]:
    """Image and mask as arrays of ``xp``: uploaded once when ``xp`` is CuPy and they are on the host,
    downloaded when a host backend is given device arrays; each copy goes through :mod:`objrec.backend`.
    ``img``, ``mask``: the validated image and mask (or None); ``xp``: the array module to place them on."""
    if xp is np:
        return to_numpy(img), None if mask is None else to_numpy(mask)
    return to_device(img, xp), None if mask is None else to_device(mask, xp)


def empty_features(descriptor_size: int, kind: str, xp: ModuleType) -> Features:
    """``Features.empty`` with arrays of ``xp``, so a device run returns device arrays even when it finds nothing.
    ``descriptor_size``: the descriptors' length; ``kind``: the detector kind; ``xp``: the array module."""
    if xp is np:
        return Features.empty(descriptor_size, kind)
    z = xp.zeros(0, np.float32)
    return Features(
        xp.zeros((0, 2), np.float32),
        z,
        z,
        z,
        xp.zeros(0, np.int32),
        xp.zeros(0, np.int8),
        xp.zeros((0, descriptor_size), np.float32),
        kind,
    )
