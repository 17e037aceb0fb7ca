"""SURF element functions, written once and built for the CPU and for CUDA by :mod:`objrec.kernels`.

Each stage is a plain Python *element function* (one grid point, or one keypoint); :func:`build` turns them
into launchers for a :class:`~objrec.kernels.Target`. Stages, in order of a frame:

``det``      fast-Hessian: all layers of every octave at one grid point of the concatenated octave rows.
``nms``      threshold, mask test and 3x3x3 non-maximum suppression; writes one flag per middle-layer sample.
``interp``   one candidate (a flat flag index): quadratic sub-pixel/sub-scale fit, Laplacian sign.
``describe`` one keypoint: orientation (sliding 60 degree window over Haar responses) and the 4x4 descriptor.
           The CPU composes its phases on one thread per keypoint (chunks of keypoints over ``prange``, loops
           that gather from the integral image split from the arithmetic so the latter vectorises); the CUDA
           kernel runs one block of ``DESC_THREADS`` per keypoint, threads over the samples, bins and sums in
           shared memory.

``det`` can visit only the columns that prefilter boxes reach (``DET_BOXES``), and counts on the CPU the
Hessians it evaluates and the samples it visits.

The element functions and their helpers are closures over the helpers they call, built for the target
(:meth:`~objrec.kernels.Target.device`): one builder per phase, each taking the helpers built so far (a dict
by name) and returning its own.

- :func:`base_helpers`: per-target primitives (``hadd``, ``ux``, ``box4``) and the shared helpers
- :func:`hessian_helpers`: the box-filter Hessian of one sample (``hess``) and its parts (``hessian_parts``)
- :func:`detector_run_helpers`: the samples of a row the detector evaluates under a mask or boxes
- :func:`detector_body`: ``det``: the detector response of a row segment, every layer
- :func:`nms_body`: ``nms``: non-maximum suppression of a row segment
- :func:`refinement_body`: ``interp``: the sub-pixel/sub-scale fit of one candidate
- :func:`box_mean_helpers`: means of fractional boxes read from the integral image
- :func:`window_helpers`: the descriptor window: its samples, rotated by the keypoint's angle
- :func:`orientation_helpers`: orientation responses and their 5-degree groups
- :func:`angle_helpers`: the sliding 60-degree window and the CPU orientation of one keypoint
- :func:`descriptor_helpers`: the 4x4 sub-region sums and the descriptor's norm
- :func:`describe_cpu_body`: ``describe`` on the CPU: one keypoint, every phase, on one thread
- :func:`describe_cuda_body`: ``describe`` on CUDA: one keypoint per block

Arrays are flat where that lets one buffer hold every octave (one launch for all of them): ``S`` and ``M``
are the raveled integral images of the frame and of the mask (row stride ``Wp = W + 1``), ``det`` holds
``n_layers`` planes of ``rows x cols`` per octave from ``oinfo[o, OFF]``, ``flags`` ``n_layers - 2``
planes per octave from ``oinfo[o, FOFF]``. The tables (``oinfo``, ``linfo``, ``boxes``, ``wts``) are built on
the host by :mod:`objrec.features.surf_tables`.

The conventions are OpenCV's (``modules/xfeatures2d/src/surf.cpp``): box filters scaled from the 9x9 ones
with per-box weights normalised by area, centres at ``top_left + (size - 1) / 2``, keypoint size equal to
the interpolated filter size, the orientation binned by rounded degrees, and the angle reported as
``atan2`` of the winning window's sum in image coordinates (y down).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from objrec.features import _common_kernels as common
from objrec.kernels import Target, get_target

__all__ = [
    "build",
    "kernels_for",
    "target_for",
    "base_helpers",
    "hessian_helpers",
    "detector_run_helpers",
    "detector_body",
    "nms_body",
    "refinement_body",
    "box_mean_helpers",
    "window_helpers",
    "orientation_helpers",
    "angle_helpers",
    "descriptor_helpers",
    "describe_cpu_body",
    "describe_cuda_body",
    "OINFO",
    "LINFO",
    "N_ORI",
    "PATCH",
    "SH_LEN",
    "T_LEN",
    "DESC_THREADS",
]

# Columns of oinfo (per octave) and linfo (per octave and layer).
OFF, ROWS, COLS, STEP, ROW0, FOFF = 0, 1, 2, 3, 4, 5
OINFO = 6
SIZE, MARGIN, NI, NJ, REACH, NMS_MARGIN = 0, 1, 2, 3, 4, 5
LINFO = 6

PATCH = 20  # descriptor samples per side (each s wide), as in the paper and OpenCV
N_PATCH = (PATCH + 1) * (PATCH + 1)  # window samples: PATCH + 1 per side (Haar responses are their differences)
N_ORI = 360  # orientation angles are rounded to whole degrees: OpenCV's window test works on cvRound(angle)
N_GRP = N_ORI // 5  # 5-degree groups of rounded angles, one per position of the sliding window

# Per-keypoint scratch of ``describe`` (float32): shared memory of a block on the GPU, a slice per chunk of
# keypoints on the CPU. Orientation groups (x, y sums), the edge bins (angles that are multiples of 5), the
# sample count, the winning angle, the 16 sub-region norms and the descriptor window samples.
SH_GX, SH_GY, SH_EX, SH_EY = 0, N_GRP, 2 * N_GRP, 3 * N_GRP + 8  # edge bins: 8 spares each
SH_NORI = 4 * N_GRP + 16
SH_ORI = SH_NORI + 1  # what is zeroed before the orientation samples are added
SH_ANGLE = SH_ORI
SH_SQ = SH_ANGLE + 2
SH_PATCH = SH_SQ + 16
SH_LEN = SH_PATCH + N_PATCH
# LLVM may reassociate and contract in the CPU describe (no nnan/ninf: NaN and inf keep their meaning): the
# sums vectorise, and descriptors change only at float32 rounding level (the tests compare with OpenCV's).
DESC_FASTMATH = frozenset({"contract", "reassoc", "nsz", "arcp"})
DESC_THREADS = 64  # threads per keypoint on the GPU: two warps over 109 orientation and 441 window samples
# CPU-only float64 scratch of ``describe`` (per chunk): orientation responses, one row of window boxes.
N_ORI_MAX = 128  # orientation samples: 109 for radius 6
T_VX, T_VY, T_AI = 0, N_ORI_MAX, 2 * N_ORI_MAX
T_XA, T_XB, T_YA, T_YB, T_FA, T_FB, T_GA, T_GB = (3 * N_ORI_MAX + 32 * i for i in range(8))
T_LEN = 3 * N_ORI_MAX + 32 * 8

# Detector modes (``det``): every sample; samples with mask pixels under their filters; only the columns
# that boxes (prefilter regions) reach; both.
DET_ALL, DET_MASK, DET_BOXES, DET_BOXES_MASK = 0, 1, 2, 3


cuda: Any = None  # numba.cuda, bound on the first CUDA build (a module global: the simulator swaps those in kernels)


def _bind_cuda() -> None:
    global cuda
    if cuda is None:
        from numba import cuda as _cuda

        cuda = _cuda


def _atomic_add(a, i, v):
    # Threads of a block add into the same shared bins (or rows of a counter).
    cuda.atomic.add(a, i, v)


def build(t: Target) -> dict:
    """Build the SURF launchers for target ``t``; returns a dict of ``det``, ``nms``, ``interp``, ``describe``."""
    h = base_helpers(t)
    h.update(hessian_helpers(t, h))
    h.update(detector_run_helpers(t, h))
    det = t.grid2d(detector_body(t, h), nargs=16)
    nms = t.grid2d(nms_body(t, h), nargs=11)
    interp = t.grid1d(refinement_body(t, h), nargs=15)
    for helpers in (box_mean_helpers, window_helpers, orientation_helpers, angle_helpers, descriptor_helpers):
        h.update(helpers(t, h))
    if t.is_cuda:
        describe = t.blocks(describe_cuda_body(h), nargs=14, threads=DESC_THREADS)
    else:
        describe = t.blocks(describe_cpu_body(h), nargs=16, threads=1, fastmath=DESC_FASTMATH)
    return {"det": det, "nms": nms, "interp": interp, "describe": describe}


def base_helpers(t: Target) -> dict:
    """Primitives every phase uses, built for ``t``, and the shared helpers of :mod:`._common_kernels`.

    ``hadd(a, i, v)`` adds ``v`` to ``a[i]`` (atomically on CUDA, where threads of a block share bins),
    ``ux(v)`` makes an unsigned index, ``box4(A, p, o0, o1, o2, o3)`` is a box sum from four corner offsets.
    """
    dev = t.device

    if t.is_cuda:
        _bind_cuda()
        hadd = _atomic_add
    else:

        def hadd(a, i, v):
            a[i] += v

    def ux(v):
        # Index with an unsigned integer: Numba then drops its negative-index wraparound, which on the CPU
        # turns the row loops of box sums into plain vector loads.
        return np.uint64(v)

    def box4(A, p, o0, o1, o2, o3):
        # Box sum from four corner offsets around flat index p (OpenCV's p0 + p3 - p1 - p2).
        return A[p + o0] + A[p + o3] - A[p + o1] - A[p + o2]

    h = common.build(t)
    h.update(hadd=dev(hadd), ux=dev(ux), box4=dev(box4))
    return h


def hessian_helpers(t: Target, h: dict) -> dict:
    """The box-filter Hessian (Bay et al. 2008, eq. 4) at one sample, built for ``t``.

    ``layer_filters(boxes, wts, o, l)`` reads a layer's 32 corner offsets and 10 weights into tuples (held
    in registers across a row), ``hess(S, p, off, wt)`` is ``det(H)`` at flat index ``p`` from them, and
    ``hessian_parts(S, p, boxes, wts, o, l)`` is ``(Dxx, Dyy, Dxy)`` read straight from the tables.
    """
    dev = t.device
    ux, box4 = h["ux"], h["box4"]

    def hessian_parts(S, p, boxes, wts, o, l):
        dxx = 0.0
        dyy = 0.0
        dxy = 0.0
        for k in range(3):
            dxx += box4(S, p, boxes[o, l, k, 0], boxes[o, l, k, 1], boxes[o, l, k, 2], boxes[o, l, k, 3]) * wts[o, l, k]
        for k in range(3, 6):
            dyy += box4(S, p, boxes[o, l, k, 0], boxes[o, l, k, 1], boxes[o, l, k, 2], boxes[o, l, k, 3]) * wts[o, l, k]
        for k in range(6, 10):
            dxy += box4(S, p, boxes[o, l, k, 0], boxes[o, l, k, 1], boxes[o, l, k, 2], boxes[o, l, k, 3]) * wts[o, l, k]
        return dxx, dyy, dxy

    def layer_filters(boxes, wts, o, l):
        # The corners ``hess`` reads (a0 a1 a2 a3 b2 b3 c2 c3 | d0 d1 d2 d3 e1 e3 f1 f3 | g.. h.. k.. n..: boxes
        # 0-2 are Dxx, 3-5 Dyy, 6-9 Dxy) and the ten weights, widened to float.
        b = boxes
        off = (
            b[o, l, 0, 0], b[o, l, 0, 1], b[o, l, 0, 2], b[o, l, 0, 3], b[o, l, 1, 2], b[o, l, 1, 3], b[o, l, 2, 2],
            b[o, l, 2, 3], b[o, l, 3, 0], b[o, l, 3, 1], b[o, l, 3, 2], b[o, l, 3, 3], b[o, l, 4, 1], b[o, l, 4, 3],
            b[o, l, 5, 1], b[o, l, 5, 3], b[o, l, 6, 0], b[o, l, 6, 1], b[o, l, 6, 2], b[o, l, 6, 3], b[o, l, 7, 0],
            b[o, l, 7, 1], b[o, l, 7, 2], b[o, l, 7, 3], b[o, l, 8, 0], b[o, l, 8, 1], b[o, l, 8, 2], b[o, l, 8, 3],
            b[o, l, 9, 0], b[o, l, 9, 1], b[o, l, 9, 2], b[o, l, 9, 3],
        )  # fmt: skip
        w = wts
        wt = (
            float(w[o, l, 0]), float(w[o, l, 1]), float(w[o, l, 2]), float(w[o, l, 3]), float(w[o, l, 4]),
            float(w[o, l, 5]), float(w[o, l, 6]), float(w[o, l, 7]), float(w[o, l, 8]), float(w[o, l, 9]),
        )  # fmt: skip
        return off, wt

    def hess(S, p, off, wt):
        # det(H) = Dxx Dyy - (0.9 Dxy)^2 from the box table of one layer. The three Dxx (Dyy) boxes share their
        # inner edges, so 8 corners serve them; Dxy has four separate boxes.
        a0, a1, a2, a3, b2, b3, c2, c3 = off[0], off[1], off[2], off[3], off[4], off[5], off[6], off[7]
        d0, d1, d2, d3, e1, e3, f1, f3 = off[8], off[9], off[10], off[11], off[12], off[13], off[14], off[15]
        g0, g1, g2, g3, h0, h1, h2, h3 = off[16], off[17], off[18], off[19], off[20], off[21], off[22], off[23]
        k0, k1, k2, k3, n0, n1, n2, n3 = off[24], off[25], off[26], off[27], off[28], off[29], off[30], off[31]
        wa, wb, wc, wd, we, wf, wg, wh, wk, wn = wt[0], wt[1], wt[2], wt[3], wt[4], wt[5], wt[6], wt[7], wt[8], wt[9]
        x0 = S[ux(p + a0)]
        x1 = S[ux(p + a2)]
        x2 = S[ux(p + b2)]
        x3 = S[ux(p + c2)]
        x4 = S[ux(p + a1)]
        x5 = S[ux(p + a3)]
        x6 = S[ux(p + b3)]
        x7 = S[ux(p + c3)]
        dxx = (x5 - x1 - x4 + x0) * wa + (x6 - x2 - x5 + x1) * wb + (x7 - x3 - x6 + x2) * wc
        y0 = S[ux(p + d0)]
        y1 = S[ux(p + d1)]
        y2 = S[ux(p + e1)]
        y3 = S[ux(p + f1)]
        y4 = S[ux(p + d2)]
        y5 = S[ux(p + d3)]
        y6 = S[ux(p + e3)]
        y7 = S[ux(p + f3)]
        dyy = (y5 - y4 - y1 + y0) * wd + (y6 - y5 - y2 + y1) * we + (y7 - y6 - y3 + y2) * wf
        dxy = (
            (S[ux(p + g0)] + S[ux(p + g3)] - S[ux(p + g1)] - S[ux(p + g2)]) * wg
            + (S[ux(p + h0)] + S[ux(p + h3)] - S[ux(p + h1)] - S[ux(p + h2)]) * wh
            + (S[ux(p + k0)] + S[ux(p + k3)] - S[ux(p + k1)] - S[ux(p + k2)]) * wk
            + (S[ux(p + n0)] + S[ux(p + n3)] - S[ux(p + n1)] - S[ux(p + n2)]) * wn
        )
        return dxx * dyy - 0.81 * dxy * dxy

    return {"hessian_parts": dev(hessian_parts), "layer_filters": dev(layer_filters), "hess": dev(hess)}


def detector_run_helpers(t: Target, h: dict) -> dict:
    """The samples of one layer's row that the detector evaluates, when a mask or boxes restrict it.

    ``hess_runs`` evaluates the runs of samples with some mask pixel under the filters of the candidates they
    neighbour (``mask_hit``), ``box_columns`` the columns whose filters reach a prefilter box; both set the
    other samples to zero.
    """
    dev = t.device
    ux, hess = h["ux"], h["hess"]

    def hess_row(S, det, out, pb, off, wt, ja, jb, step):
        # Samples [ja, jb) of one layer's row. At step 1 the loop reads each corner's run of the integral image
        # contiguously, which LLVM vectorises on the CPU (the integral image is float64 there); a strided loop
        # it would vectorise with scalar loads only, so the two are kept apart.
        if step == 1:
            for j in range(ja, jb):
                det[ux(out + j)] = hess(S, pb + j, off, wt)
        else:
            for j in range(ja, jb):
                det[ux(out + j)] = hess(S, pb + j * step, off, wt)

    hess_row = dev(hess_row)

    def mask_hit(M, ya, yb, x, step, r, W):
        xa = max(x - r, 0)
        xb = min(x + step + r, W)
        return (M[ux(yb + xb)] - M[ux(ya + xb)] - M[ux(yb + xa)] + M[ux(ya + xa)]) > 0

    mask_hit = dev(mask_hit)

    def hess_runs(S, M, det, out, pb, off, wt, ja, jb, ya, yb, step, r, W):
        # Runs of samples that pass ``mask_hit`` are computed in the same tight loop as without a mask. Returns
        # the samples computed.
        n = 0
        j = ja
        while j < jb:
            while j < jb and not mask_hit(M, ya, yb, step * j, step, r, W):
                det[out + j] = 0.0
                j += 1
            j1 = j
            while j1 < jb and mask_hit(M, ya, yb, step * j1, step, r, W):
                j1 += 1
            hess_row(S, det, out, pb, off, wt, j, j1, step)
            n += j1 - j
            j = j1
        return n

    hess_runs = dev(hess_runs)

    def box_columns(S, M, det, out, pb, off, wt, ja, jb, ya, yb, i, step, r, W, mode, rbox, nbox):
        # Prefilter boxes (sorted by x0 on the host): visit only the union of the columns whose filters reach a
        # box, so the work follows the boxes' area, not the frame's. A sample is visited here exactly when the
        # mask of the union of the boxes would pass ``mask_hit``. Returns (evaluated, visited).
        n_eval = 0
        n_visit = 0
        j = ja
        for b in range(nbox):
            if rbox[b, 1] >= step * i + step + r or rbox[b, 3] <= step * i - r:
                continue
            e = rbox[b, 0] - step - r
            lo = 0 if e < 0 else e // step + 1
            hi = (rbox[b, 2] + r + step - 1) // step
            lo = max(lo, j)
            hi = min(hi, jb)
            if hi <= lo:
                continue
            for jj in range(j, lo):
                det[out + jj] = 0.0
            if mode == DET_BOXES_MASK:
                n_eval += hess_runs(S, M, det, out, pb, off, wt, lo, hi, ya, yb, step, r, W)
            else:
                hess_row(S, det, out, pb, off, wt, lo, hi, step)
                n_eval += hi - lo
            n_visit += hi - lo
            j = hi
        for jj in range(j, jb):
            det[out + jj] = 0.0
        return n_eval, n_visit

    return {"hess_row": hess_row, "hess_runs": hess_runs, "box_columns": dev(box_columns)}


def detector_body(t: Target, h: dict) -> Callable:
    """``det``'s element function: the detector response (the Hessian's determinant) of one row segment.

    ``det_body(y, xc, ...)`` covers columns ``[xc * chunk, xc * chunk + chunk)`` of grid row ``y``, every
    layer: ``chunk`` is 1 on the GPU (a thread per sample), a whole row on the CPU (the box offsets stay in
    registers across the row).
    """
    dev = t.device
    hadd, layer_filters, hess_row = h["hadd"], h["layer_filters"], h["hess_row"]
    row_segment, hess_runs, box_columns = h["row_segment"], h["hess_runs"], h["box_columns"]

    def det_layer(S, M, det, oinfo, linfo, boxes, wts, mode, o, l, i, jlo, jhi, H, W, rbox, nbox):
        # Layer l of octave row i, columns [jlo, jhi): zero outside the layer's samples, and inside the samples
        # the mode leaves out. Returns (Hessians evaluated, samples visited).
        cols = oinfo[o, COLS]
        step = oinfo[o, STEP]
        plane = oinfo[o, ROWS] * cols
        m = linfo[o, l, MARGIN]
        nj = linfo[o, l, NJ]
        i0 = i - m
        out = oinfo[o, OFF] + l * plane + i * cols
        ja = jlo
        jb = jlo
        if i0 >= 0 and i0 < linfo[o, l, NI]:
            ja = min(max(jlo, m), jhi)
            jb = max(min(jhi, m + nj), ja)
        for j in range(jlo, ja):
            det[out + j] = 0.0
        for j in range(jb, jhi):
            det[out + j] = 0.0
        if jb <= ja:
            return 0, 0
        off, wt = layer_filters(boxes, wts, o, l)
        r = linfo[o, l, REACH]
        Wp = W + 1
        ya = max(step * i - r, 0) * Wp
        yb = min(step * i + step + r, H) * Wp
        pb = i0 * step * Wp - m * step
        if mode == DET_ALL:
            hess_row(S, det, out, pb, off, wt, ja, jb, step)
            return jb - ja, jb - ja
        if mode == DET_MASK:
            return hess_runs(S, M, det, out, pb, off, wt, ja, jb, ya, yb, step, r, W), jb - ja
        return box_columns(S, M, det, out, pb, off, wt, ja, jb, ya, yb, i, step, r, W, mode, rbox, nbox)

    det_layer = dev(det_layer)

    def det_body(y, xc, S, M, det, oinfo, linfo, boxes, wts, mode, n_oct, n_layers, H, W, chunk, rbox, nbox, counts):
        o, i, rows, cols, jlo, jhi = row_segment(y, xc, chunk, oinfo, n_oct, ROW0, ROWS, COLS)
        if jlo >= cols or i >= rows:
            return
        n_eval = 0
        n_visit = 0
        for l in range(n_layers):
            e, v = det_layer(S, M, det, oinfo, linfo, boxes, wts, mode, o, l, i, jlo, jhi, H, W, rbox, nbox)
            n_eval += e
            n_visit += v
        if counts.shape[0] > 1:
            # counts: Hessians evaluated per grid row, then samples visited (mask tests included) per row
            hadd(counts, y, n_eval)
            hadd(counts, counts.shape[0] // 2 + y, n_visit)

    return det_body


def nms_body(t: Target, h: dict) -> Callable:
    """``nms``'s element function: threshold, mask test and 3x3x3 non-maximum suppression of a row segment.

    Writes one flag per sample of the middle layers (``n_mid`` of them) for columns ``[xc * chunk, xc * chunk
    + chunk)`` of grid row ``y``.
    """
    dev = t.device
    ux, row_segment, extremum26 = h["ux"], h["row_segment"], h["extremum26"]

    def above_row(det, c, v, cols):
        # v = det[c] above its 8 neighbours in its own layer: every comparison made, no early exit, so that the
        # CPU loop over a row vectorises instead of mispredicting a branch per sample.
        return (
            (v > det[ux(c - 1)])
            & (v > det[ux(c + 1)])
            & (v > det[ux(c - cols - 1)])
            & (v > det[ux(c - cols)])
            & (v > det[ux(c - cols + 1)])
            & (v > det[ux(c + cols - 1)])
            & (v > det[ux(c + cols)])
            & (v > det[ux(c + cols + 1)])
        )

    above_row = dev(above_row)

    def nms_body(y, xc, det, flags, oinfo, linfo, M, use_mask, n_oct, n_mid, thr, W, chunk):
        o, i, rows, cols, jlo, jhi = row_segment(y, xc, chunk, oinfo, n_oct, ROW0, ROWS, COLS)
        if jlo >= cols or i >= rows:
            return
        step = oinfo[o, STEP]
        plane = rows * cols
        Wp = W + 1
        for lm in range(n_mid):
            l = lm + 1
            fb = oinfo[o, FOFF] + lm * plane + i * cols
            for j in range(jlo, jhi):
                flags[ux(fb + j)] = 0
            mg = linfo[o, l, NMS_MARGIN]
            if i < mg or i >= rows - mg:
                continue
            cb = oinfo[o, OFF] + l * plane + i * cols
            size = linfo[o, l, SIZE]
            m = linfo[o, l, MARGIN]
            ja = max(jlo, mg)
            jb = min(jhi, cols - mg)
            # Pass 1 (vectorised on the CPU): threshold and the 8 neighbours in the layer.
            for j in range(ja, jb):
                c = cb + j
                v = det[ux(c)]
                flags[ux(fb + j)] = (v > thr) & above_row(det, c, v, cols)
            # Pass 2 (the few survivors): mask test, then the layers below and above.
            for j in range(ja, jb):
                if flags[ux(fb + j)] != 0:
                    c = cb + j
                    v = det[ux(c)]
                    ok = True
                    if use_mask != 0:
                        # OpenCV: the mean of the mask over the filter footprint must reach 0.5.
                        q = (i - m) * step * Wp + (j - m) * step
                        e = size * Wp
                        s = M[q + e + size] - M[q + size] - M[q + e] + M[q]
                        ok = 2 * s >= size * size
                    # v > thr >= 0: a strict maximum over all 26 neighbours (the 8 in the layer again: few
                    # samples get here).
                    if not ok or not extremum26(det, c, cols, plane, v, True):
                        flags[ux(fb + j)] = 0

    return nms_body


def refinement_body(t: Target, h: dict) -> Callable:
    """``interp``'s element function: the sub-pixel/sub-scale fit and the Laplacian sign of one candidate.

    ``interp_body(k, cand, ...)`` refines the maximum at flat flag index ``cand[k]`` (Brown & Lowe, BMVC 2002:
    one Newton step on the 3x3x3 neighbourhood, central differences) and writes keypoint ``k``; ``out_ok[k]``
    is 0 when the step leaves the neighbourhood or the system is singular.
    """
    dev = t.device
    find_octave, hessian_parts = h["find_octave"], h["hessian_parts"]

    def newton_step(det, c, cols, plane):
        # The offset (x, y, scale) of the quadratic's extremum around det[c], and whether it lies within one
        # sample in every direction (and is not zero).
        v = float(det[c])
        b0 = -(float(det[c + 1]) - float(det[c - 1])) * 0.5
        b1 = -(float(det[c + cols]) - float(det[c - cols])) * 0.5
        b2 = -(float(det[c + plane]) - float(det[c - plane])) * 0.5
        a00 = float(det[c - 1]) - 2.0 * v + float(det[c + 1])
        a11 = float(det[c - cols]) - 2.0 * v + float(det[c + cols])
        a22 = float(det[c - plane]) - 2.0 * v + float(det[c + plane])
        a01 = (
            float(det[c + cols + 1]) - float(det[c + cols - 1]) - float(det[c - cols + 1]) + float(det[c - cols - 1])
        ) * 0.25
        a02 = (
            float(det[c + plane + 1])
            - float(det[c + plane - 1])
            - float(det[c - plane + 1])
            + float(det[c - plane - 1])
        ) * 0.25
        a12 = (
            float(det[c + plane + cols])
            - float(det[c + plane - cols])
            - float(det[c - plane + cols])
            + float(det[c - plane - cols])
        ) * 0.25
        # Cramer's rule on the symmetric 3x3 system.
        c00 = a11 * a22 - a12 * a12
        c01 = a02 * a12 - a01 * a22
        c02 = a01 * a12 - a02 * a11
        dd = a00 * c00 + a01 * c01 + a02 * c02
        ok = 0
        x0 = 0.0
        x1 = 0.0
        x2 = 0.0
        if dd != 0.0:
            c11 = a00 * a22 - a02 * a02
            c12 = a01 * a02 - a00 * a12
            c22 = a00 * a11 - a01 * a01
            x0 = (c00 * b0 + c01 * b1 + c02 * b2) / dd
            x1 = (c01 * b0 + c11 * b1 + c12 * b2) / dd
            x2 = (c02 * b0 + c12 * b1 + c22 * b2) / dd
            if (x0 != 0.0 or x1 != 0.0 or x2 != 0.0) and abs(x0) <= 1.0 and abs(x1) <= 1.0 and abs(x2) <= 1.0:
                ok = 1
        return ok, x0, x1, x2

    newton_step = dev(newton_step)

    def interp_body(
        k, cand, det, oinfo, linfo, boxes, wts, S, n_oct, W, out_xy, out_size, out_resp, out_lap, out_oct, out_ok
    ):
        f = cand[k]
        o = find_octave(f, oinfo, n_oct, FOFF)
        rows = oinfo[o, ROWS]
        cols = oinfo[o, COLS]
        step = oinfo[o, STEP]
        plane = rows * cols
        rem = f - oinfo[o, FOFF]
        lm = rem // plane
        rem = rem - lm * plane
        i = rem // cols
        j = rem - i * cols
        l = lm + 1
        c = oinfo[o, OFF] + l * plane + i * cols + j
        ok, x0, x1, x2 = newton_step(det, c, cols, plane)
        size = linfo[o, l, SIZE]
        m = linfo[o, l, MARGIN]
        ty = (i - m) * step
        tx = (j - m) * step
        half = (size - 1) * 0.5
        out_xy[k, 0] = tx + half + x0 * step
        out_xy[k, 1] = ty + half + x1 * step
        out_size[k] = math.floor(size + x2 * (size - linfo[o, l - 1, SIZE]) + 0.5)
        out_resp[k] = float(det[c])
        dxx, dyy, dxy = hessian_parts(S, ty * (W + 1) + tx, boxes, wts, o, l)
        tr = dxx + dyy
        lap = 0
        if tr > 0:
            lap = 1
        elif tr < 0:
            lap = -1
        out_lap[k] = lap
        out_oct[k] = o
        out_ok[k] = ok

    return interp_body


def box_mean_helpers(t: Target, h: dict) -> dict:
    """Means of fractional boxes ``[xa, xb) x [ya, yb)`` read from the integral image, built for ``t``.

    The integral image is bilinear inside each cell, so four rows of four reads give a box's mean at any
    position and scale: ``box_mean`` for a box inside ``[0, W] x [0, H]``, ``box_mean_inside`` (and
    ``box_from_floors``, from the floors of the box's edges) for one known to lie inside ``[0, W-1) x
    [0, H-1)``; ``clamp_span`` clips a span to the image as OpenCV's window extraction does.
    """
    dev = t.device
    ux = h["ux"]

    def row_span(S, p, ixa, fxa, ixb, fxb):
        # Integral-image row p (flat start) read at fractional columns xb and xa, differenced: integer
        # differences first, so float64 keeps every digit of the small result.
        d = float(S[ux(p + ixb)] - S[ux(p + ixa)])
        d += fxb * float(S[ux(p + ixb + 1)] - S[ux(p + ixb)])
        d -= fxa * float(S[ux(p + ixa + 1)] - S[ux(p + ixa)])
        return d

    row_span = dev(row_span)

    def row_span_u(S, p, ixa, fxa, ixb, fxb):
        # row_span with unsigned flat indices (p, ixa, ixb are np.uint64).
        one = np.uint64(1)
        sa = S[p + ixa]
        sb = S[p + ixb]
        d = float(sb - sa)
        d += fxb * float(S[p + ixb + one] - sb)
        d -= fxa * float(S[p + ixa + one] - sa)
        return d

    row_span_u = dev(row_span_u)

    def box_mean(S, W, H, xa, xb, ya, yb):
        Wp = W + 1
        ixa = min(int(math.floor(xa)), W - 1)
        ixb = min(int(math.floor(xb)), W - 1)
        iya = min(int(math.floor(ya)), H - 1)
        iyb = min(int(math.floor(yb)), H - 1)
        fxa = xa - ixa
        fxb = xb - ixb
        fya = ya - iya
        fyb = yb - iyb
        top = row_span(S, iya * Wp, ixa, fxa, ixb, fxb)
        top += fya * (row_span(S, (iya + 1) * Wp, ixa, fxa, ixb, fxb) - top)
        bot = row_span(S, iyb * Wp, ixa, fxa, ixb, fxb)
        bot += fyb * (row_span(S, (iyb + 1) * Wp, ixa, fxa, ixb, fxb) - bot)
        return (bot - top) / ((xb - xa) * (yb - ya))

    def clamp_span(a, b, n):
        # Clip [a, b) to [0, n) but keep at least one pixel (replicated border, as OpenCV's window extraction).
        a0 = min(max(a, 0.0), n - 1.0)
        b0 = max(min(b, float(n)), a0 + 1.0)
        return a0, b0

    def box_from_floors(S, Wp, fa, fb, ga, gb, xa, xb, ya, yb, inv_area):
        # fa = floor(xa), fb = floor(xb), ga = floor(ya), gb = floor(yb). Unsigned indices and fractions taken
        # in floating point avoid int() round trips with signed indices.
        ixa = np.uint64(fa)
        ixb = np.uint64(fb)
        wp = np.uint64(Wp)
        p0 = np.uint64(ga) * wp
        p2 = np.uint64(gb) * wp
        top = row_span_u(S, p0, ixa, xa - fa, ixb, xb - fb)
        top += (ya - ga) * (row_span_u(S, p0 + wp, ixa, xa - fa, ixb, xb - fb) - top)
        bot = row_span_u(S, p2, ixa, xa - fa, ixb, xb - fb)
        bot += (yb - gb) * (row_span_u(S, p2 + wp, ixa, xa - fa, ixb, xb - fb) - bot)
        return (bot - top) * inv_area

    box_from_floors = dev(box_from_floors)

    def box_mean_inside(S, Wp, xa, xb, ya, yb, inv_area):
        # No clamping, and the area is the keypoint's s * s (checked once per keypoint by ``window_inside``).
        return box_from_floors(
            S, Wp, math.floor(xa), math.floor(xb), math.floor(ya), math.floor(yb), xa, xb, ya, yb, inv_area
        )

    return {
        "box_mean": dev(box_mean),
        "clamp_span": dev(clamp_span),
        "box_from_floors": box_from_floors,
        "box_mean_inside": dev(box_mean_inside),
    }


def window_helpers(t: Target, h: dict) -> dict:
    """The descriptor window of a keypoint: ``PATCH + 1`` samples per side, ``s`` apart, rotated by its angle.

    Each sample is the mean of an ``s x s`` box read from the integral image: what OpenCV's bilinear window
    and INTER_AREA resize compute, at a cost that does not grow with the scale. ``window_inside`` tells
    whether no sample needs clamping, ``patch_sample`` computes one sample (the CUDA build: a thread per
    sample), ``window_cpu`` all of them into ``sh`` (gathers split from the arithmetic through ``tmp``).
    """
    dev = t.device
    ux, box_mean, clamp_span = h["ux"], h["box_mean"], h["clamp_span"]
    box_from_floors, box_mean_inside = h["box_from_floors"], h["box_mean_inside"]

    def window_inside(cx, cy, s, ct, st, H, W):
        # Whether every descriptor sample box lies inside [0, W-1) x [0, H-1) (then no sample needs clamping).
        r = 0.5 * PATCH * s * (abs(ct) + abs(st)) + 0.5 * s + 1.0
        return cx + 0.5 - r >= 0.0 and cx + 0.5 + r < W - 1.0 and cy + 0.5 - r >= 0.0 and cy + 0.5 + r < H - 1.0

    def patch_box(pr, pc, cx, cy, s, ct, st):
        # Box of window sample (pr, pc), in integral-image coordinates.
        v = (pr - PATCH * 0.5) * s
        u = (pc - PATCH * 0.5) * s
        px = cx + u * ct - v * st + 0.5
        py = cy + u * st + v * ct + 0.5
        hs = 0.5 * s
        return px - hs, px + hs, py - hs, py + hs

    patch_box = dev(patch_box)

    def patch_sample(q, cx, cy, s, ct, st, inside, S, H, W):
        pr = q // (PATCH + 1)
        xa, xb, ya, yb = patch_box(pr, q - pr * (PATCH + 1), cx, cy, s, ct, st)
        if inside:
            return box_mean_inside(S, W + 1, xa, xb, ya, yb, 1.0 / (s * s))
        xa, xb = clamp_span(xa, xb, W)
        ya, yb = clamp_span(ya, yb, H)
        return box_mean(S, W, H, xa, xb, ya, yb)

    patch_sample = dev(patch_sample)
    window_inside = dev(window_inside)

    def window_cpu(sh, pb, tmp, tb, cx, cy, s, ct, st, S, H, W):
        # Every window sample into sh[pb:], a row at a time: the boxes of a row (and their floors) into tmp
        # first, then the integral-image reads.
        npx = PATCH + 1
        if window_inside(cx, cy, s, ct, st, H, W):
            inv_area = 1.0 / (s * s)
            Wp = W + 1
            for pr in range(npx):
                for pc in range(npx):
                    xa, xb, ya, yb = patch_box(pr, pc, cx, cy, s, ct, st)
                    tmp[ux(tb + T_XA + pc)] = xa
                    tmp[ux(tb + T_XB + pc)] = xb
                    tmp[ux(tb + T_YA + pc)] = ya
                    tmp[ux(tb + T_YB + pc)] = yb
                    tmp[ux(tb + T_FA + pc)] = math.floor(xa)
                    tmp[ux(tb + T_FB + pc)] = math.floor(xb)
                    tmp[ux(tb + T_GA + pc)] = math.floor(ya)
                    tmp[ux(tb + T_GB + pc)] = math.floor(yb)
                for pc in range(npx):
                    sh[ux(pb + pr * npx + pc)] = box_from_floors(
                        S,
                        Wp,
                        tmp[ux(tb + T_FA + pc)],
                        tmp[ux(tb + T_FB + pc)],
                        tmp[ux(tb + T_GA + pc)],
                        tmp[ux(tb + T_GB + pc)],
                        tmp[ux(tb + T_XA + pc)],
                        tmp[ux(tb + T_XB + pc)],
                        tmp[ux(tb + T_YA + pc)],
                        tmp[ux(tb + T_YB + pc)],
                        inv_area,
                    )
        else:
            for q in range(N_PATCH):
                sh[ux(pb + q)] = patch_sample(q, cx, cy, s, ct, st, False, S, H, W)

    return {"window_inside": window_inside, "patch_sample": patch_sample, "window_cpu": dev(window_cpu)}


def orientation_helpers(t: Target, h: dict) -> dict:
    """Orientation samples of a keypoint: Haar responses of side ``4s`` at the points within ``6s``.

    ``kp_scale`` gives a keypoint's centre and scale ``s``, ``ori_geometry`` the wavelet's side (0 when it
    cannot be sampled), ``ori_response`` the Gaussian-weighted response at one point, ``ori_angle`` its
    rounded angle and ``ori_bin`` adds it to its 5-degree group; ``ori_sample`` does all of it for one point.
    """
    dev = t.device
    ux, hadd, atan2_deg = h["ux"], h["hadd"], h["fast_atan2"]

    def kp_scale(k, kxy, ksize):
        # float(): NumPy 2 keeps float32 * float in float32 (the simulator); Numba and CUDA widen to float64.
        return float(kxy[k, 0]), float(kxy[k, 1]), float(ksize[k]) * 1.2 / 9.0

    def ori_geometry(s, H, W):
        # Haar wavelet of side 4s (even, OpenCV's 2 * round(2s)); gws = 0 when it cannot be sampled.
        gws = 2 * int(math.floor(2.0 * s + 0.5))
        if gws > H + 1 or gws > W + 1 or gws < 2:
            return 0
        return gws

    def ori_response(q, cx, cy, s, gws, inv, S, H, W, ori_pts, ori_w):
        # Gaussian-weighted Haar responses (dx, dy) of side gws at orientation sample q; valid = 0 when the
        # wavelet leaves the image (OpenCV skips those samples).
        h = gws // 2
        off = (gws - 1) * 0.5
        x = int(math.floor(cx + ori_pts[q, 0] * s - off + 0.5))
        y = int(math.floor(cy + ori_pts[q, 1] * s - off + 0.5))
        if y < 0 or y >= H + 1 - gws or x < 0 or x >= W + 1 - gws:
            return 0, 0.0, 0.0
        Wp = W + 1
        p = y * Wp + x
        t0 = S[ux(p)]
        t1 = S[ux(p + h)]
        t2 = S[ux(p + gws)]
        m0 = S[ux(p + h * Wp)]
        m2 = S[ux(p + h * Wp + gws)]
        b0 = S[ux(p + gws * Wp)]
        b1 = S[ux(p + gws * Wp + h)]
        b2 = S[ux(p + gws * Wp + gws)]
        left = float(b1 - t1 - b0 + t0)
        right = float(b2 - t2 - b1 + t1)
        top = float(m2 - t2 - m0 + t0)
        bottom = float(b2 - m2 - b0 + m0)
        w = float(ori_w[q]) * inv
        return 1, (right - left) * w, (top - bottom) * w  # OpenCV's dy wavelet: +1 on top, -1 below

    ori_response = dev(ori_response)

    def ori_angle(vx, vy):
        # The response's angle rounded to a whole degree, in [0, 360).
        ai = int(math.floor(atan2_deg(vy, vx) + 0.5))
        return ai - N_ORI if ai >= N_ORI else ai

    ori_angle = dev(ori_angle)

    def ori_bin(q, ai, vx, vy, sh, sb):
        # Adds a response to its 5-degree group (and to its edge bin when the rounded angle is a multiple of 5):
        # a window of rounded angles [5m - 29, 5m + 29] is then twelve groups less one edge bin, the same set of
        # samples as OpenCV's test |angle - 5m| < 30 on cvRound(angle).
        g = (ai + 4) // 5
        g = g - N_GRP if g >= N_GRP else g
        e = ai // 5
        # Not a multiple of 5: into one of 8 spare edge bins, never read (a select, not a branch the predictor
        # misses one time in five; rotating spares keep successive samples off one memory dependency chain).
        e = e if ai == 5 * e else N_GRP + (q & 7)
        hadd(sh, sb + SH_GX + g, vx)
        hadd(sh, sb + SH_GY + g, vy)
        hadd(sh, sb + SH_EX + e, vx)
        hadd(sh, sb + SH_EY + e, vy)

    ori_bin = dev(ori_bin)

    def ori_sample(q, cx, cy, s, gws, inv, S, H, W, ori_pts, ori_w, sh, sb):
        valid, vx, vy = ori_response(q, cx, cy, s, gws, inv, S, H, W, ori_pts, ori_w)
        if valid != 0:
            ori_bin(q, ori_angle(vx, vy), vx, vy, sh, sb)
        return valid

    return {
        "kp_scale": dev(kp_scale),
        "ori_geometry": dev(ori_geometry),
        "ori_response": ori_response,
        "ori_angle": ori_angle,
        "ori_bin": ori_bin,
        "ori_sample": dev(ori_sample),
    }


def angle_helpers(t: Target, h: dict) -> dict:
    """A keypoint's angle from its orientation samples: the strongest sliding 60-degree window.

    ``best_angle`` slides the window over the 5-degree groups in ``sh``; ``orient_cpu`` runs the whole phase
    for one keypoint on one thread (responses into ``tmp``, then angles, then bins, so the gathers and the
    arithmetic vectorise apart) and returns -1 when no sample can be taken.
    """
    dev = t.device
    ux, atan2_deg, ori_geometry = h["ux"], h["fast_atan2"], h["ori_geometry"]
    ori_response, ori_angle, ori_bin = h["ori_response"], h["ori_angle"], h["ori_bin"]

    def best_angle(sh, sb):
        # Sliding 60 degree window in 5 degree steps, first strongest wins (OpenCV's strict '>'); -1 when no
        # orientation sample fell inside the image. The window moves by one group per step (float64 running
        # sums of float32 groups); its edge bin is subtracted per window.
        if sh[sb + SH_NORI] == 0.0:
            return -1.0
        rx = 0.0
        ry = 0.0
        for d in range(-5, 7):
            g = d + N_GRP if d < 0 else d
            rx += sh[sb + SH_GX + g]
            ry += sh[sb + SH_GY + g]
        best = 0.0
        bx = 0.0
        by = 0.0
        for m in range(N_GRP):
            e = m + 6
            e = e - N_GRP if e >= N_GRP else e
            sx = rx - sh[sb + SH_EX + e]
            sy = ry - sh[sb + SH_EY + e]
            mod = sx * sx + sy * sy
            if mod > best:
                best = mod
                bx = sx
                by = sy
            gi = m + 7
            gi = gi - N_GRP if gi >= N_GRP else gi
            go = m - 5
            go = go + N_GRP if go < 0 else go
            rx += float(sh[sb + SH_GX + gi]) - float(sh[sb + SH_GX + go])
            ry += float(sh[sb + SH_GY + gi]) - float(sh[sb + SH_GY + go])
        angle = atan2_deg(-by, bx)
        if angle >= 360.0:
            angle -= 360.0
        return angle

    best_angle = dev(best_angle)

    def orient_cpu(sh, sb, tmp, tb, cx, cy, s, S, H, W, ori_pts, ori_w, n_ori):
        gws = ori_geometry(s, H, W)
        if gws == 0:
            return -1.0
        for b in range(SH_ORI):
            sh[sb + b] = 0.0
        inv = 1.0 / ((gws // 2) * gws)
        n_in = 0
        for q in range(n_ori):
            valid, vx, vy = ori_response(q, cx, cy, s, gws, inv, S, H, W, ori_pts, ori_w)
            tmp[ux(tb + T_VX + q)] = vx
            tmp[ux(tb + T_VY + q)] = vy
            tmp[ux(tb + T_AI + q)] = valid
            n_in += valid
        for q in range(n_ori):
            vx = tmp[ux(tb + T_VX + q)]
            vy = tmp[ux(tb + T_VY + q)]
            tmp[ux(tb + T_AI + q)] = ori_angle(vx, vy) if tmp[ux(tb + T_AI + q)] else -1
        for q in range(n_ori):
            ai = int(tmp[ux(tb + T_AI + q)])
            if ai >= 0:
                ori_bin(q, ai, tmp[ux(tb + T_VX + q)], tmp[ux(tb + T_VY + q)], sh, sb)
        sh[sb + SH_NORI] = n_in
        return best_angle(sh, sb)

    return {"best_angle": best_angle, "orient_cpu": dev(orient_cpu)}


def descriptor_helpers(t: Target, h: dict) -> dict:
    """The descriptor from the window samples: 4x4 sub-regions of Haar responses, then the L2 norm.

    ``cell_desc`` sums one sub-region into the descriptor and returns its squared norm; ``desc_scale`` is the
    normalisation factor from the 16 norms.
    """
    dev = t.device
    ux = h["ux"]

    def cell_desc(c, extended, desc_w, sh, pb, out_desc, kd):
        # Sub-region c (4x4, row-major) of the descriptor: Gaussian-weighted Haar responses of size 2s (differences
        # of neighbouring samples) summed over its 5x5 samples; writes 4 (or 8) sums, returns their squared norm.
        npx = PATCH + 1
        r0 = (c // 4) * 5
        c0 = (c - (c // 4) * 4) * 5
        a0 = 0.0
        a1 = 0.0
        a2 = 0.0
        a3 = 0.0
        a4 = 0.0
        a5 = 0.0
        a6 = 0.0
        a7 = 0.0
        for pr in range(r0, r0 + 5):
            for pc in range(c0, c0 + 5):
                dw = float(desc_w[pr, pc])
                q = pb + pr * npx + pc
                p00 = float(sh[ux(q)])
                p01 = float(sh[ux(q + 1)])
                p10 = float(sh[ux(q + npx)])
                p11 = float(sh[ux(q + npx + 1)])
                tx = (p01 - p00 + p11 - p10) * dw
                ty = (p10 - p00 + p11 - p01) * dw
                if extended != 0:
                    if ty >= 0.0:
                        a0 += tx
                        a1 += abs(tx)
                    else:
                        a2 += tx
                        a3 += abs(tx)
                    if tx >= 0.0:
                        a4 += ty
                        a5 += abs(ty)
                    else:
                        a6 += ty
                        a7 += abs(ty)
                else:
                    a0 += tx
                    a1 += ty
                    a2 += abs(tx)
                    a3 += abs(ty)
        if extended != 0:
            b = kd + c * 8
            out_desc[ux(b)] = a0
            out_desc[ux(b + 1)] = a1
            out_desc[ux(b + 2)] = a2
            out_desc[ux(b + 3)] = a3
            out_desc[ux(b + 4)] = a4
            out_desc[ux(b + 5)] = a5
            out_desc[ux(b + 6)] = a6
            out_desc[ux(b + 7)] = a7
            return a0 * a0 + a1 * a1 + a2 * a2 + a3 * a3 + a4 * a4 + a5 * a5 + a6 * a6 + a7 * a7
        b = kd + c * 4
        out_desc[ux(b)] = a0
        out_desc[ux(b + 1)] = a1
        out_desc[ux(b + 2)] = a2
        out_desc[ux(b + 3)] = a3
        return a0 * a0 + a1 * a1 + a2 * a2 + a3 * a3

    def desc_scale(sh, sb):
        # L2 normalisation factor from the 16 sub-region norms (summed in a fixed order on every target).
        sq = 0.0
        for c in range(16):
            sq += float(sh[sb + SH_SQ + c])
        return 1.0 / (math.sqrt(sq) + 1.1920929e-07)  # FLT_EPSILON, as OpenCV

    return {"cell_desc": dev(cell_desc), "desc_scale": dev(desc_scale)}


def describe_cpu_body(h: dict) -> Callable:
    """``describe``'s element function on the CPU: one keypoint, start to end, on one thread.

    ``describe_one(k, slot, ...)`` composes the phases; ``slot`` is the keypoint's chunk, whose slices of the
    scratch buffers ``sh`` (float32, ``SH_LEN``) and ``tmp`` (float64, ``T_LEN``) it uses.
    """
    ux, kp_scale, orient_cpu, window_cpu = h["ux"], h["kp_scale"], h["orient_cpu"], h["window_cpu"]
    cell_desc, desc_scale = h["cell_desc"], h["desc_scale"]

    def describe_one(
        k, slot, S, H, W, kxy, ksize, upright, extended, ori_pts, ori_w, n_ori, desc_w, sh, tmp, out_angle, out_desc,
        out_ok,
    ):  # fmt: skip
        sb = slot * SH_LEN
        tb = slot * T_LEN
        cx, cy, s = kp_scale(k, kxy, ksize)
        out_ok[k] = 0
        angle = 270.0  # OpenCV's upright convention: the window's x axis points up the image
        if upright == 0:
            angle = orient_cpu(sh, sb, tmp, tb, cx, cy, s, S, H, W, ori_pts, ori_w, n_ori)
            if angle < 0.0:
                return
        out_angle[k] = angle
        rad = angle * (math.pi / 180.0)
        pb = sb + SH_PATCH
        window_cpu(sh, pb, tmp, tb, cx, cy, s, math.cos(rad), math.sin(rad), S, H, W)
        dim = 128 if extended != 0 else 64
        kd = k * dim
        for c in range(16):
            sh[sb + SH_SQ + c] = cell_desc(c, extended, desc_w, sh, pb, out_desc, kd)
        scale = desc_scale(sh, sb)
        for d in range(dim):
            out_desc[ux(kd + d)] = out_desc[ux(kd + d)] * scale
        out_ok[k] = 1

    return describe_one


def describe_cuda_body(h: dict) -> Callable:
    """``describe``'s block body on CUDA: one block of ``DESC_THREADS`` per keypoint.

    The threads share the orientation samples, the 72 windows, the 441 window samples and the 16 sub-regions;
    the histogram, window sums, samples and norms live in shared memory. Every ``syncthreads`` is reached by
    all threads of the block (decisions are broadcast through shared memory).
    """
    from numba import float32

    _bind_cuda()  # the body reads the module global ``cuda`` (the simulator swaps it for its own)
    kp_scale, ori_geometry, ori_sample, hadd = h["kp_scale"], h["ori_geometry"], h["ori_sample"], h["hadd"]
    best_angle, window_inside, patch_sample = h["best_angle"], h["window_inside"], h["patch_sample"]
    cell_desc, desc_scale = h["cell_desc"], h["desc_scale"]

    def describe_block(
        k, S, H, W, kxy, ksize, upright, extended, ori_pts, ori_w, n_ori, desc_w, out_angle, out_desc, out_ok
    ):
        tid = cuda.threadIdx.x
        nt = cuda.blockDim.x
        sh = cuda.shared.array(SH_LEN, float32)
        cx, cy, s = kp_scale(k, kxy, ksize)
        gws = ori_geometry(s, H, W)
        for b in range(tid, SH_ORI, nt):
            sh[b] = 0.0
        cuda.syncthreads()
        if upright == 0 and gws > 0:
            inv = 1.0 / ((gws // 2) * gws)
            n_in = 0
            for q in range(tid, n_ori, nt):
                n_in += ori_sample(q, cx, cy, s, gws, inv, S, H, W, ori_pts, ori_w, sh, 0)
            if n_in > 0:
                hadd(sh, SH_NORI, float(n_in))
        cuda.syncthreads()
        if tid == 0:
            a = 270.0  # OpenCV's upright convention
            if upright == 0:
                a = best_angle(sh, 0) if gws > 0 else -1.0
            # float64 through float32 shared memory: the value and its remainder, so every thread (and the CPU
            # build) rotates the window by the same angle
            sh[SH_ANGLE] = a
            sh[SH_ANGLE + 1] = a - float(sh[SH_ANGLE])
        cuda.syncthreads()
        angle = float(sh[SH_ANGLE]) + float(sh[SH_ANGLE + 1])
        if angle < 0.0:
            if tid == 0:
                out_ok[k] = 0
            return  # every thread read the same flag after the barrier
        rad = angle * (math.pi / 180.0)
        ct = math.cos(rad)
        st = math.sin(rad)
        inside = window_inside(cx, cy, s, ct, st, H, W)
        for q in range(tid, N_PATCH, nt):
            sh[SH_PATCH + q] = patch_sample(q, cx, cy, s, ct, st, inside, S, H, W)
        cuda.syncthreads()
        dim = 128 if extended != 0 else 64
        kd = k * dim
        for c in range(tid, 16, nt):
            sh[SH_SQ + c] = cell_desc(c, extended, desc_w, sh, SH_PATCH, out_desc, kd)
        cuda.syncthreads()
        scale = desc_scale(sh, 0)
        for d in range(tid, dim, nt):
            out_desc[kd + d] = out_desc[kd + d] * scale
        if tid == 0:
            out_angle[k] = angle
            out_ok[k] = 1

    return describe_block


def target_for(name: str) -> Target:
    """The target the SURF kernels are built for: the shared :func:`~objrec.kernels.get_target` one."""
    return get_target(name)


@functools.cache
def kernels_for(name: str) -> dict:
    """Launchers for ``"cpu"`` or ``"cuda"``, built once per process (compiled, or loaded from the kernel cache,
    on first call)."""
    return build(target_for(name))
