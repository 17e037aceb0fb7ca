"""SURF's per-resolution tables: octave and layer geometry, scaled box filters, sampling weights.

:func:`surf_plan` lays out every octave of one image size for the kernels of
:mod:`objrec.features._surf_kernels` (one launch over all octaves); :func:`make_plan` puts those tables,
the orientation and descriptor weights and the buffers of the detector on an array module, as a
:class:`~objrec.features._plans.Plan` that :class:`~objrec.features.surf.SURF` keeps per frame size.
"""

from __future__ import annotations

import functools
from fractions import Fraction
from types import ModuleType
from typing import Any

import numpy as np

from objrec.backend import to_device
from objrec.features import _surf_kernels as K
from objrec.features._plans import Plan

__all__ = ["hessian_boxes", "surf_plan", "make_plan"]

# The 9x9 filters of Bay et al. as OpenCV writes them: (x1, y1, x2, y2, weight) boxes, x2/y2 exclusive.
_DXX = ((0, 2, 3, 7, 1), (3, 2, 6, 7, -2), (6, 2, 9, 7, 1))
_DYY = ((2, 0, 7, 3, 1), (2, 3, 7, 6, -2), (2, 6, 7, 9, 1))
_DXY = ((1, 1, 4, 4, 1), (5, 1, 8, 4, -1), (1, 5, 4, 8, -1), (5, 5, 8, 8, 1))

_ORI_RADIUS = 6
_ORI_SIGMA = 2.5
_DESC_SIGMA = 3.3
_HAAR_SIZE0 = 9
_HAAR_SIZE_INC = 6


@functools.lru_cache(maxsize=256)
def hessian_boxes(size: int) -> tuple[tuple[int, int, int, int, float], ...]:
    """The ten boxes (Dxx, Dyy, Dxy) of the ``size`` filter: ``(x1, y1, x2, y2, weight)`` relative to its top-left.

    Corners are the 9x9 ones scaled by ``size / 9`` and rounded; each weight is divided by its box's area
    (OpenCV's ``resizeHaarPattern``). With sizes ``(9 + 6 l) 2^o`` no corner falls on a rounding tie. The
    filter sizes are few, and every new image size needs them again, so each is computed once.
    """
    ratio = Fraction(size, _HAAR_SIZE0)
    out = []
    for x1, y1, x2, y2, w in _DXX + _DYY + _DXY:
        a, b, c, d = (round(ratio * v) for v in (x1, y1, x2, y2))
        out.append((a, b, c, d, w / float((c - a) * (d - b))))
    return tuple(out)


def _gaussian(n: int, sigma: float) -> np.ndarray:
    x = np.arange(n, dtype=np.float64) - (n - 1) / 2.0
    g = np.exp(-(x * x) / (2.0 * sigma * sigma))
    return g / g.sum()


def surf_plan(height: int, width: int, n_octaves: int, n_octave_layers: int, sample_step: int = 1) -> dict[str, Any]:
    """Tables for one resolution: octave and layer geometry, box offsets into the raveled integral image.

    Returns a dict with ``oinfo`` (n_oct, 6) int32, ``linfo`` (n_oct, L, 6) int32, ``boxes`` (n_oct, L, 10, 4)
    int32 flat corner offsets, ``wts`` (n_oct, L, 10) float32, ``det_len``, ``flag_len``, ``grid`` (rows, cols)
    of the single launch over all octaves, and ``n_oct``/``n_layers``.
    ``height``, ``width``: the image's size; ``n_octaves``, ``n_octave_layers``: the pyramid's octaves and layers per
    octave; ``sample_step``: the detector's sampling step.
    """
    H, W = int(height), int(width)
    L = n_octave_layers + 2
    Wp = W + 1
    oinfo, linfo, boxes, wts = [], [], [], []
    off = foff = row0 = 0
    for o in range(n_octaves):
        step = sample_step << o
        rows, cols = H // step, W // step
        if rows < 1 or cols < 1:
            break
        sizes = [(_HAAR_SIZE0 + _HAAR_SIZE_INC * l) << o for l in range(L)]
        lrow, brow, wrow = [], [], []
        for l, size in enumerate(sizes):
            fits = size <= H and size <= W  # OpenCV skips a layer whose filter exceeds the image
            ni = 1 + (H - size) // step if fits else 0
            nj = 1 + (W - size) // step if fits else 0
            reach = sizes[min(l + 1, L - 1)] // 2 + step + 1
            nms_margin = (sizes[l + 1] // 2) // step + 1 if 0 < l < L - 1 else 0
            lrow.append((size, (size // 2) // step, ni, nj, reach, nms_margin))
            bb = hessian_boxes(size)
            brow.append([(y1 * Wp + x1, y2 * Wp + x1, y1 * Wp + x2, y2 * Wp + x2) for x1, y1, x2, y2, _ in bb])
            wrow.append([w for *_, w in bb])
        oinfo.append((off, rows, cols, step, row0, foff))
        linfo.append(lrow)
        boxes.append(brow)
        wts.append(wrow)
        off += L * rows * cols
        foff += (L - 2) * rows * cols
        row0 += rows
    n_oct = len(oinfo)
    return {
        "oinfo": np.array(oinfo, np.int32).reshape(n_oct, K.OINFO),
        "linfo": np.array(linfo, np.int32).reshape(n_oct, L, K.LINFO),
        "boxes": np.array(boxes, np.int32).reshape(n_oct, L, 10, 4),
        "wts": np.array(wts, np.float32).reshape(n_oct, L, 10),
        "det_len": off,
        "det_samples": int(sum(int(r[K.NI]) * int(r[K.NJ]) for lrow in linfo for r in lrow)),
        "flag_len": foff,
        "grid": (row0, W),
        "n_oct": n_oct,
        "n_layers": L,
        "shape": (H, W),
    }


def _orientation_tables() -> tuple[np.ndarray, np.ndarray]:
    g = _gaussian(2 * _ORI_RADIUS + 1, _ORI_SIGMA).astype(np.float32)
    pts, w = [], []
    for i in range(-_ORI_RADIUS, _ORI_RADIUS + 1):
        for j in range(-_ORI_RADIUS, _ORI_RADIUS + 1):
            if i * i + j * j <= _ORI_RADIUS * _ORI_RADIUS:
                pts.append((i, j))  # (x, y) offsets in units of s
                w.append(g[i + _ORI_RADIUS] * g[j + _ORI_RADIUS])
    return np.array(pts, np.int32), np.array(w, np.float32)


_ORI_PTS, _ORI_W = _orientation_tables()
_DESC_W = np.outer(_gaussian(K.PATCH, _DESC_SIGMA), _gaussian(K.PATCH, _DESC_SIGMA)).astype(np.float32)


def make_plan(key: tuple, shape: tuple[int, int], params: tuple[int, int, int], xp: ModuleType) -> Plan:
    """The tables and buffers of one resolution on ``xp``.

    Parameters
    ----------
    key : tuple
        The key the plan is cached under (:func:`~objrec.features._plans.plan_key`).
    shape : (int, int)
        Image height and width.
    params : (int, int, int)
        ``(n_octaves, n_octave_layers, sample_step)``.
    xp : module
        ``numpy`` or ``cupy``.

    Returns
    -------
    Plan
        :func:`surf_plan`'s tables (on ``xp``), the detector's planes ``det`` and ``flags``, the per-row
        Hessian ``counts`` (host only), the orientation samples ``ori_pts`` / ``ori_w``, the descriptor
        weights ``desc_w``, and the placeholders ``no_mask`` and ``no_boxes``.
    """
    plan = Plan(key, xp)
    plan.update(surf_plan(shape[0], shape[1], *params))
    for name in ("oinfo", "linfo", "boxes", "wts"):
        plan[name] = to_device(plan[name], xp)
    plan["det"] = xp.empty(max(plan["det_len"], 1), np.float32)
    plan["flags"] = xp.empty(max(plan["flag_len"], 1), np.uint8)
    plan["counts"] = xp.zeros(2 * plan["grid"][0] + 2 if xp is np else 1, np.int64)
    plan["ori_pts"] = to_device(_ORI_PTS, xp)
    plan["ori_w"] = to_device(_ORI_W, xp)
    plan["desc_w"] = to_device(_DESC_W, xp)
    plan["no_mask"] = xp.zeros(1, np.int32)  # placeholders the kernels take when there is no mask / no box
    plan["no_boxes"] = xp.zeros((1, 4), np.int32)
    return plan
