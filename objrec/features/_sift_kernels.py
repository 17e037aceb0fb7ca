"""SIFT element functions, written once and built for the CPU and for CUDA by :mod:`objrec.kernels`.

Each stage is a plain Python *element function* (one image row segment, one candidate, one descriptor
cell); :func:`build` turns them into launchers for a :class:`~objrec.kernels.Target`. Stages of a frame:

``hblur``    horizontal pass of a separable Gaussian; its source is the 8-bit frame upsampled 2x on the fly
             (octave -1 base), the previous level, or the previous octave's level ``n_layers`` decimated
             by nearest neighbour (each new octave's base, written as level 0 on the way).
``vblur``    vertical pass; writes the level and, fused, the DoG plane ``level - previous level``.
``extrema``  3x3x3 extrema of the middle DoG planes of every octave with OpenCV's pre-threshold; writes
             one flag per middle-plane sample (compacted on the device afterwards).
``refine``   one candidate: up to five Newton steps (OpenCV's ``adjustLocalExtrema``), Lowe's contrast and
             edge tests, the mask, the 36-bin orientation histogram and its peaks (up to ``MAX_ORI``).
``desc``     one 4x4 cell of one keypoint's descriptor: the samples whose trilinear weights reach the cell
             (a gather, so no thread writes another's bins).
``finish``   one keypoint: normalise, clip at 0.2, renormalise, scale by 512 and saturate to uchar values.

The element functions and their helpers are closures over the helpers they call, built for the target:
one builder per phase, each taking the helpers built so far (a dict by name).

- :func:`base_helpers`: ``rint``, ``reflect101`` and the shared helpers of :mod:`._common_kernels`
- :func:`pyramid_bodies`: ``up``, ``hblur``, ``vblur``
- :func:`extrema_body`: ``extrema``
- :func:`interpolation_helpers`: the DoG's derivatives and the Newton steps that locate an extremum
- :func:`orientation_helpers`: the orientation histogram and its peaks
- :func:`refine_body`: ``refine``: locate, contrast and edge tests, mask, keypoint, orientation
- :func:`descriptor_helpers`: one descriptor cell
- :func:`descriptor_bodies`: ``desc`` and ``finish``

Buffers are flat so one array holds every octave: Gaussian levels (``n_layers + 3`` planes per octave
from ``oinfo[o, GOFF]``), DoG planes (``n_layers + 2`` from ``oinfo[o, DOFF]``) and extremum flags
(``n_layers`` from ``oinfo[o, FOFF]``). The 2-D stages run over the octaves' rows stacked
(``oinfo[o, ROW0]``) or over one octave's rows; ``chunk`` columns per grid point: 1 on a GPU (a
thread per pixel), a whole row on the CPU and under the simulator (where a thread costs ~0.25 ms).

Conventions are OpenCV's (``modules/features2d/src/sift.dispatch.cpp`` and ``sift.simd.hpp``, float
pyramid): INTER_LINEAR 2x upsampling, BORDER_REFLECT_101 Gaussians with ``ksize = round(8 sigma + 1) | 1``,
INTER_NEAREST decimation, ``fastAtan2``'s polynomial for gradient angles, ``cvRound`` (half to even).
Arithmetic is float64 inside the kernels (array reads go through ``float()`` so NumPy 2's float32
promotion in the simulator does not differ from Numba's); stored planes are float32 as OpenCV's.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable

from objrec.features import _common_kernels as common
from objrec.kernels import Target, get_target

__all__ = [
    "build",
    "kernels_for",
    "target_for",
    "base_helpers",
    "pyramid_bodies",
    "extrema_body",
    "interpolation_helpers",
    "orientation_helpers",
    "refine_body",
    "descriptor_helpers",
    "descriptor_bodies",
    "OINFO",
    "MAX_ORI",
    "N_ORI_BINS",
    "DESC_DIM",
    "HIST_SCRATCH",
]

# Columns of oinfo (one row per octave).
GOFF, DOFF, FOFF, ROWS, COLS, ROW0 = 0, 1, 2, 3, 4, 5
OINFO = 6

IMG_BORDER = 5  # SIFT_IMG_BORDER
MAX_INTERP = 5  # SIFT_MAX_INTERP_STEPS
N_ORI_BINS = 36  # SIFT_ORI_HIST_BINS
ORI_SIG_FCTR = 1.5
ORI_RADIUS = 4.5
ORI_PEAK_RATIO = 0.8
DESC_W = 4  # SIFT_DESCR_WIDTH
DESC_BINS = 8  # SIFT_DESCR_HIST_BINS
DESC_DIM = DESC_W * DESC_W * DESC_BINS
DESC_SCL_FCTR = 3.0
DESC_MAG_THR = 0.2
INT_DESCR_FCTR = 512.0
MAX_ORI = 8  # orientation peaks kept per location (OpenCV has no cap; more than 4 is not seen in practice)
HIST_SCRATCH = 2 * N_ORI_BINS + 8  # raw histogram with 2+2 wrap bins, then the smoothed one
FLT_EPSILON = 1.1920928955078125e-07
# DoG derivatives on the image scaled to [0, 1] (SIFT_FIXPT_SCALE 1: float pyramid), central differences.
IMG_SCALE = 1.0 / 255.0
DERIV_SCALE = IMG_SCALE * 0.5
CROSS_SCALE = IMG_SCALE * 0.25


def build(t: Target) -> dict:
    """The SIFT launchers for ``t``: ``up``, ``hblur``, ``vblur``, ``extrema``, ``refine``, ``desc``, ``finish``."""
    h = base_helpers(t)
    pyramid = pyramid_bodies(t, h)
    for helpers in (interpolation_helpers, orientation_helpers, descriptor_helpers):
        h.update(helpers(t, h))
    desc_body, finish_body = descriptor_bodies(t, h)
    return {
        "up": t.grid2d(pyramid["up"], 6),
        "hblur": t.grid2d(pyramid["hblur"], 15),
        "vblur": t.grid2d(pyramid["vblur"], 13),
        "extrema": t.grid2d(extrema_body(h), 7),
        "refine": t.grid1d(refine_body(h), 24),
        "desc": t.grid1d(desc_body, 9),
        "finish": t.grid1d(finish_body, 2),
    }


def base_helpers(t: Target) -> dict:
    """``rint`` (cvRound), ``reflect101`` (BORDER_REFLECT_101) and the shared helpers, built for ``t``."""
    dev = t.device

    def rint(v):
        # cvRound: round half to even (the FPU default OpenCV relies on).
        f = math.floor(v)
        i = int(f)
        d = v - f
        if d > 0.5 or (d == 0.5 and (i & 1) != 0):
            i += 1
        return i

    def reflect101(p, n):
        # BORDER_REFLECT_101 (gfedcb|abcdefgh|gfedcba), repeated for kernels wider than the image.
        if n == 1:
            return 0
        while p < 0 or p >= n:
            if p < 0:
                p = -p
            else:
                p = 2 * n - 2 - p
        return p

    h = common.build(t)
    h.update(rint=dev(rint), reflect101=dev(reflect101))
    return h


def pyramid_bodies(t: Target, h: dict) -> dict:
    """The element functions of the Gaussian and DoG pyramid: ``up``, ``hblur`` and ``vblur`` (a dict).

    Each covers one row segment ``[xc * chunk, xc * chunk + chunk)`` of row ``y`` of its plane.
    """
    reflect101, segment = h["reflect101"], h["segment"]

    def up_body(y, xc, img, H, W, dst, cols, chunk):
        # The frame upsampled x2 (resize INTER_LINEAR, exact for a factor 2): source (X + 0.5) / 2 - 0.5,
        # clamped at the borders; weights 1/4 and 3/4, so the float32 result is exact.
        fy = (y + 0.5) * 0.5 - 0.5
        sy = int(math.floor(fy))
        wy = fy - sy
        if sy < 0:
            sy = 0
            wy = 0.0
        if sy >= H - 1:
            sy = H - 1
            wy = 0.0
        sy1 = min(sy + 1, H - 1)
        j0, j1 = segment(xc, chunk, cols)
        for j in range(j0, j1):
            fx = (j + 0.5) * 0.5 - 0.5
            sx = int(math.floor(fx))
            wx = fx - sx
            if sx < 0:
                sx = 0
                wx = 0.0
            if sx >= W - 1:
                sx = W - 1
                wx = 0.0
            sx1 = min(sx + 1, W - 1)
            v0 = float(img[sy * W + sx]) * (1.0 - wx) + float(img[sy * W + sx1]) * wx
            v1 = float(img[sy1 * W + sx]) * (1.0 - wx) + float(img[sy1 * W + sx1]) * wx
            dst[y * cols + j] = v0 * (1.0 - wy) + v1 * wy

    def hblur_body(y, xc, src, soff, srows, scols, ifx, ify, down, dst, cols, wts, wrow, radius, lvl0, l0off, chunk):
        # down == 0: blur the plane at soff (same size); down == 1: the source is the previous octave's level
        # n_layers, decimated on the fly as resize INTER_NEAREST (index floor(x * src / dst)); the decimated
        # sample at the centre is written to lvl0 (the new octave's base). The per-pixel loop serves both
        # devices: on the CPU it is not slower than a tap-outer loop over the row.
        j0, j1 = segment(xc, chunk, cols)
        out = y * cols
        srow = soff + y * scols
        if down != 0:
            srow = soff + min(int(math.floor(y * ify)), srows - 1) * scols
        for j in range(j0, j1):
            acc = 0.0
            if down == 0 and j >= radius and j + radius < cols:
                p = srow + j - radius
                for k in range(2 * radius + 1):
                    acc += float(wts[wrow, k]) * float(src[p + k])
            else:
                for k in range(2 * radius + 1):
                    jj = j + k - radius
                    if jj < 0 or jj >= cols:
                        jj = reflect101(jj, cols)
                    if down != 0:
                        jj = min(int(math.floor(jj * ifx)), scols - 1)
                    acc += float(wts[wrow, k]) * float(src[srow + jj])
            dst[out + j] = acc
            if down != 0:
                lvl0[l0off + out + j] = src[srow + min(int(math.floor(j * ifx)), scols - 1)]

    def vblur_body(y, xc, src, dst, doff, rows, cols, wts, wrow, radius, dog, dogoff, prevoff, write_dog, chunk):
        j0, j1 = segment(xc, chunk, cols)
        inside = y >= radius and y + radius < rows
        for j in range(j0, j1):
            acc = 0.0
            if inside:
                p = (y - radius) * cols + j
                for k in range(2 * radius + 1):
                    acc += float(wts[wrow, k]) * float(src[p + k * cols])
            else:
                for k in range(2 * radius + 1):
                    yy = y + k - radius
                    if yy < 0 or yy >= rows:
                        yy = reflect101(yy, rows)
                    acc += float(wts[wrow, k]) * float(src[yy * cols + j])
            q = y * cols + j
            dst[doff + q] = acc
            if write_dog != 0:
                # float32 level minus float32 level, as OpenCV's subtract() into the DoG plane
                dog[dogoff + q] = float(dst[doff + q]) - float(dst[prevoff + q])

    return {"up": up_body, "hblur": hblur_body, "vblur": vblur_body}


def extrema_body(h: dict) -> Callable:
    """``extrema``'s element function: 3x3x3 extrema of the middle DoG planes in one row segment, every octave."""
    row_segment, extremum26 = h["row_segment"], h["extremum26"]

    def extrema_body(y, xc, dog, flags, oinfo, n_oct, n_layers, thr, chunk):
        o, i, rows, cols, j0, j1 = row_segment(y, xc, chunk, oinfo, n_oct, ROW0, ROWS, COLS)
        if j0 >= cols or i >= rows:
            return
        plane = rows * cols
        row_ok = i >= IMG_BORDER and i < rows - IMG_BORDER
        for lm in range(n_layers):
            fb = oinfo[o, FOFF] + lm * plane + i * cols
            cb = oinfo[o, DOFF] + (lm + 1) * plane + i * cols
            for j in range(j0, j1):
                f = 0
                if row_ok and j >= IMG_BORDER and j < cols - IMG_BORDER:
                    v = float(dog[cb + j])
                    if abs(v) > thr:
                        # ties count as extrema, as OpenCV's >= / <= tests
                        f = 1 if extremum26(dog, cb + j, cols, plane, v, False) else 0
                flags[fb + j] = f

    return extrema_body


def interpolation_helpers(t: Target, h: dict) -> dict:
    """The location of an extremum to sub-pixel and sub-scale precision (OpenCV's ``adjustLocalExtrema``).

    ``dog_gradient`` and ``dog_hessian`` are the DoG's first and second derivatives at flat index ``p``
    (central differences, image scale 1/255); ``locate`` runs up to ``MAX_INTERP`` Newton steps from a flag
    index and returns ``(ok, octave, layer, row, col, offset in scale, in y, in x)``.
    """
    dev = t.device
    rint, find_octave = h["rint"], h["find_octave"]

    def solve3(a00, a01, a02, a11, a12, a22, b0, b1, b2):
        # Cramer's rule on the symmetric 3x3 system (OpenCV's Matx fast solve); singular: zero step.
        c00 = a11 * a22 - a12 * a12
        c01 = a02 * a12 - a01 * a22
        c02 = a01 * a12 - a02 * a11
        det = a00 * c00 + a01 * c01 + a02 * c02
        if det == 0.0:
            return 0.0, 0.0, 0.0
        c11 = a00 * a22 - a02 * a02
        c12 = a01 * a02 - a00 * a12
        c22 = a00 * a11 - a01 * a01
        x0 = (c00 * b0 + c01 * b1 + c02 * b2) / det
        x1 = (c01 * b0 + c11 * b1 + c12 * b2) / det
        x2 = (c02 * b0 + c12 * b1 + c22 * b2) / det
        return x0, x1, x2

    solve3 = dev(solve3)

    def dog_gradient(dog, p, cols, plane):
        # (value, dx, dy, ds)
        v = float(dog[p])
        dx = (float(dog[p + 1]) - float(dog[p - 1])) * DERIV_SCALE
        dy = (float(dog[p + cols]) - float(dog[p - cols])) * DERIV_SCALE
        ds = (float(dog[p + plane]) - float(dog[p - plane])) * DERIV_SCALE
        return v, dx, dy, ds

    dog_gradient = dev(dog_gradient)

    def dog_hessian(dog, p, cols, plane, v):
        # (dxx, dyy, dss, dxy, dxs, dys)
        dxx = (float(dog[p + 1]) + float(dog[p - 1]) - 2.0 * v) * IMG_SCALE
        dyy = (float(dog[p + cols]) + float(dog[p - cols]) - 2.0 * v) * IMG_SCALE
        dss = (float(dog[p + plane]) + float(dog[p - plane]) - 2.0 * v) * IMG_SCALE
        dxy = (
            float(dog[p + cols + 1]) - float(dog[p + cols - 1]) - float(dog[p - cols + 1]) + float(dog[p - cols - 1])
        ) * CROSS_SCALE
        dxs = (
            float(dog[p + plane + 1])
            - float(dog[p + plane - 1])
            - float(dog[p - plane + 1])
            + float(dog[p - plane - 1])
        ) * CROSS_SCALE
        dys = (
            float(dog[p + plane + cols])
            - float(dog[p + plane - cols])
            - float(dog[p - plane + cols])
            + float(dog[p - plane - cols])
        ) * CROSS_SCALE
        return dxx, dyy, dss, dxy, dxs, dys

    dog_hessian = dev(dog_hessian)

    def locate(f, dog, oinfo, n_oct, n_layers):
        o = find_octave(f, oinfo, n_oct, FOFF)
        rows = oinfo[o, ROWS]
        cols = oinfo[o, COLS]
        plane = rows * cols
        rem = f - oinfo[o, FOFF]
        layer = rem // plane + 1
        rem = rem - (layer - 1) * plane
        r = rem // cols
        c = rem - r * cols
        xi = 0.0
        xr = 0.0
        xc = 0.0
        it = 0
        while it < MAX_INTERP:
            p = oinfo[o, DOFF] + layer * plane + r * cols + c
            v, dx, dy, dsg = dog_gradient(dog, p, cols, plane)
            dxx, dyy, dss, dxy, dxs, dys = dog_hessian(dog, p, cols, plane, v)
            x0, x1, x2 = solve3(dxx, dxy, dxs, dyy, dys, dss, dx, dy, dsg)
            xi = -x2
            xr = -x1
            xc = -x0
            if abs(xi) < 0.5 and abs(xr) < 0.5 and abs(xc) < 0.5:
                break
            big = 715827882.0  # INT_MAX / 3
            if abs(xi) > big or abs(xr) > big or abs(xc) > big:
                return 0, o, layer, r, c, xi, xr, xc
            c += rint(xc)
            r += rint(xr)
            layer += rint(xi)
            if (
                layer < 1
                or layer > n_layers
                or c < IMG_BORDER
                or c >= cols - IMG_BORDER
                or r < IMG_BORDER
                or r >= rows - IMG_BORDER
            ):
                return 0, o, layer, r, c, xi, xr, xc
            it += 1
        return (1 if it < MAX_INTERP else 0), o, layer, r, c, xi, xr, xc

    return {"dog_gradient": dog_gradient, "dog_hessian": dog_hessian, "locate": dev(locate)}


def orientation_helpers(t: Target, h: dict) -> dict:
    """The orientation histogram of a keypoint (OpenCV's ``calcOrientationHist``) and its peaks.

    ``ori_hist`` adds the Gaussian-weighted gradients around ``(r, c)`` of a Gaussian level into row ``k`` of
    ``hist`` (36 bins with two wrap bins on each side); ``ori_peaks`` smooths it, writes the angles of the
    peaks within 80% of the highest (parabola-interpolated, at most ``MAX_ORI``) and returns their count.
    """
    dev = t.device
    rint, fast_atan2 = h["rint"], h["fast_atan2"]

    def ori_hist(k, hist, gauss, g, r, c, rows, cols, scl_octv):
        radius = rint(ORI_RADIUS * scl_octv)
        sig = ORI_SIG_FCTR * scl_octv
        expf_scale = -1.0 / (2.0 * sig * sig)
        for b in range(HIST_SCRATCH):
            hist[k, b] = 0.0
        for i in range(-radius, radius + 1):
            y = r + i
            if y <= 0 or y >= rows - 1:
                continue
            for j in range(-radius, radius + 1):
                x = c + j
                if x <= 0 or x >= cols - 1:
                    continue
                q = g + y * cols + x
                gx = float(gauss[q + 1]) - float(gauss[q - 1])
                gy = float(gauss[q - cols]) - float(gauss[q + cols])
                w = math.exp((i * i + j * j) * expf_scale)
                ori = fast_atan2(gy, gx)
                mag = math.sqrt(gx * gx + gy * gy)
                b = rint(N_ORI_BINS / 360.0 * ori)
                if b >= N_ORI_BINS:
                    b -= N_ORI_BINS
                if b < 0:
                    b += N_ORI_BINS
                hist[k, 2 + b] += w * mag
        n = N_ORI_BINS
        hist[k, 1] = hist[k, 1 + n]
        hist[k, 0] = hist[k, n]
        hist[k, 2 + n] = hist[k, 2]
        hist[k, 3 + n] = hist[k, 3]

    def ori_peaks(k, hist, out_ang):
        n = N_ORI_BINS
        sm = n + 4  # smoothed histogram after the raw one
        omax = 0.0
        for b in range(n):
            hv = (hist[k, b] + hist[k, b + 4]) * (1.0 / 16.0) + (hist[k, b + 1] + hist[k, b + 3]) * (4.0 / 16.0)
            hv += hist[k, b + 2] * (6.0 / 16.0)
            hist[k, sm + b] = hv
            if b == 0 or hv > omax:
                omax = hv
        mag_thr = omax * ORI_PEAK_RATIO
        nori = 0
        for b in range(n):
            bl = b - 1 if b > 0 else n - 1
            br = b + 1 if b < n - 1 else 0
            hc = hist[k, sm + b]
            hl = hist[k, sm + bl]
            hr = hist[k, sm + br]
            if hc > hl and hc > hr and hc >= mag_thr and nori < MAX_ORI:
                fb = b + 0.5 * (hl - hr) / (hl - 2.0 * hc + hr)
                if fb < 0.0:
                    fb += n
                elif fb >= n:
                    fb -= n
                ang = 360.0 - (360.0 / n) * fb
                if abs(ang - 360.0) < FLT_EPSILON:
                    ang = 0.0
                out_ang[k, nori] = ang
                nori += 1
        return nori

    return {"ori_hist": dev(ori_hist), "ori_peaks": dev(ori_peaks)}


def refine_body(h: dict) -> Callable:
    """``refine``'s element function: one candidate located, tested, written as a keypoint, and oriented.

    ``out_ok[k]`` is 0 when the candidate's location does not converge, its contrast is below
    ``contrast_thr / n_layers``, it lies on an edge (Lowe's ratio of principal curvatures, ``edge_thr``) or
    outside the mask.
    """
    rint, locate, dog_gradient, dog_hessian = h["rint"], h["locate"], h["dog_gradient"], h["dog_hessian"]
    ori_hist, ori_peaks = h["ori_hist"], h["ori_peaks"]

    def refine_body(
        k, cand, dog, gauss, oinfo, n_oct, n_layers, contrast_thr, edge_thr, sigma, mask, use_mask, mask_h, mask_w,
        out_ok, out_key, out_xy, out_size, out_resp, out_oct, out_ol, out_pf, out_nori, out_ang, hist,
    ):  # fmt: skip
        out_ok[k] = 0
        out_nori[k] = 0
        ok, o, layer, r, c, xi, xr, xc = locate(cand[k], dog, oinfo, n_oct, n_layers)
        if ok == 0:
            return
        rows = oinfo[o, ROWS]
        cols = oinfo[o, COLS]
        plane = rows * cols
        p = oinfo[o, DOFF] + layer * plane + r * cols + c
        v, dx, dy, dsg = dog_gradient(dog, p, cols, plane)
        contr = v * IMG_SCALE + (dx * xc + dy * xr + dsg * xi) * 0.5
        if abs(contr) * n_layers < contrast_thr:
            return
        dxx, dyy, _, dxy, _, _ = dog_hessian(dog, p, cols, plane, v)
        tr = dxx + dyy
        det = dxx * dyy - dxy * dxy
        if det <= 0.0 or tr * tr * edge_thr >= (edge_thr + 1.0) * (edge_thr + 1.0) * det:
            return
        # Keypoint in OpenCV's conventions: octave -1 is the upsampled base, so image coordinates are
        # (c + xc) * 2**o / 2, the size sigma * 2**((layer + xi) / s) * 2**o (already halved).
        so = float(1 << o)
        px = (c + xc) * so * 0.5
        py = (r + xr) * so * 0.5
        if use_mask != 0:
            my = min(int(py + 0.5), mask_h - 1)
            mx = min(int(px + 0.5), mask_w - 1)
            if mask[my * mask_w + mx] == 0:
                return
        scl_octv = sigma * 2.0 ** ((layer + xi) / n_layers)
        out_xy[k, 0] = px
        out_xy[k, 1] = py
        out_size[k] = scl_octv * so
        out_resp[k] = abs(contr)
        out_oct[k] = ((o - 1) & 255) | (layer << 8) | (rint((xi + 0.5) * 255.0) << 16)
        out_ol[k, 0] = o
        out_ol[k, 1] = layer
        out_pf[k, 0] = c + xc
        out_pf[k, 1] = r + xr
        out_key[k] = oinfo[o, FOFF] + (layer - 1) * plane + r * cols + c
        out_ok[k] = 1
        ori_hist(k, hist, gauss, oinfo[o, GOFF] + layer * plane, r, c, rows, cols, scl_octv)
        out_nori[k] = ori_peaks(k, hist, out_ang)

    return refine_body


def descriptor_helpers(t: Target, h: dict) -> dict:
    """One 4x4 cell of a keypoint's descriptor (OpenCV's ``calcSIFTDescriptor``, restricted to one cell).

    ``desc_cell`` gathers the samples whose trilinear weights reach the cell into its 8 orientation bins of
    ``raw``, so no thread writes another's bins.
    """
    dev = t.device
    rint, fast_atan2 = h["rint"], h["fast_atan2"]

    def desc_cell(k, cell, kp_ol, kp_pf, kp_size, kp_angle, gauss, oinfo, raw):
        # One cell (ci, cj) of keypoint k: calcSIFTDescriptor's samples, restricted to those whose trilinear
        # weights reach this cell; the cell's 8 bins are written by this call only.
        ci = cell // DESC_W
        cj = cell - ci * DESC_W
        o = kp_ol[k, 0]
        layer = kp_ol[k, 1]
        rows = oinfo[o, ROWS]
        cols = oinfo[o, COLS]
        g = oinfo[o, GOFF] + layer * rows * cols
        ptx = rint(float(kp_pf[k, 0]))
        pty = rint(float(kp_pf[k, 1]))
        # scale back to the octave: size * 2**(1 - o) / 2 (OpenCV's unpackOctave scale, then size * 0.5)
        scl = float(kp_size[k]) * (2.0 ** (1 - o)) * 0.5
        ori = 360.0 - float(kp_angle[k])
        if abs(ori - 360.0) < FLT_EPSILON:
            ori = 0.0
        cos0 = math.cos(ori * (math.pi / 180.0))
        sin0 = math.sin(ori * (math.pi / 180.0))
        hw = DESC_SCL_FCTR * scl
        radius = rint(hw * 1.4142135623730951 * (DESC_W + 1) * 0.5)
        radius = min(radius, int(math.sqrt(float(cols) * cols + float(rows) * rows)))
        ct = cos0 / hw
        st = sin0 / hw
        half = DESC_W * 0.5 - 0.5
        # bounding box of this cell's support (bins (ci-1, ci+1) x (cj-1, cj+1)) in pixel offsets
        rc = ci - half
        cc = cj - half
        jc = hw * (cc * cos0 + rc * sin0)
        ic = hw * (-cc * sin0 + rc * cos0)
        ext = hw * (abs(cos0) + abs(sin0)) + 1.0
        ilo = max(-radius, int(math.floor(ic - ext)))
        ihi = min(radius, int(math.ceil(ic + ext)))
        jlo = max(-radius, int(math.floor(jc - ext)))
        jhi = min(radius, int(math.ceil(jc + ext)))
        base = k * DESC_DIM + cell * DESC_BINS
        for b in range(DESC_BINS):
            raw[base + b] = 0.0
        bins_per_deg = DESC_BINS / 360.0
        exp_scale = -1.0 / (DESC_W * DESC_W * 0.5)
        for i in range(ilo, ihi + 1):
            rr = pty + i
            if rr <= 0 or rr >= rows - 1:
                continue
            for j in range(jlo, jhi + 1):
                cc2 = ptx + j
                if cc2 <= 0 or cc2 >= cols - 1:
                    continue
                c_rot = j * ct - i * st
                r_rot = j * st + i * ct
                rbin = r_rot + half
                cbin = c_rot + half
                if rbin <= -1.0 or rbin >= DESC_W or cbin <= -1.0 or cbin >= DESC_W:
                    continue
                r0 = int(math.floor(rbin))
                c0 = int(math.floor(cbin))
                if r0 != ci and r0 + 1 != ci:
                    continue
                if c0 != cj and c0 + 1 != cj:
                    continue
                fr = rbin - r0
                fc = cbin - c0
                wr = fr if r0 + 1 == ci else 1.0 - fr
                wc = fc if c0 + 1 == cj else 1.0 - fc
                p = g + rr * cols + cc2
                gx = float(gauss[p + 1]) - float(gauss[p - 1])
                gy = float(gauss[p - cols]) - float(gauss[p + cols])
                mag = math.sqrt(gx * gx + gy * gy) * math.exp((c_rot * c_rot + r_rot * r_rot) * exp_scale)
                obin = (fast_atan2(gy, gx) - ori) * bins_per_deg
                o0 = int(math.floor(obin))
                fo = obin - o0
                if o0 < 0:
                    o0 += DESC_BINS
                if o0 >= DESC_BINS:
                    o0 -= DESC_BINS
                o1 = o0 + 1
                if o1 >= DESC_BINS:
                    o1 = 0
                v = mag * wr * wc
                raw[base + o0] += v * (1.0 - fo)
                raw[base + o1] += v * fo

    return {"desc_cell": dev(desc_cell)}


def descriptor_bodies(t: Target, h: dict) -> tuple[Callable, Callable]:
    """``desc``'s and ``finish``'s element functions: cells of keypoints, then each keypoint's normalisation.

    ``finish_one`` normalises, clips at 0.2, renormalises, scales by 512 and saturates to uchar values.
    """
    dev = t.device
    rint, desc_cell = h["rint"], h["desc_cell"]

    def finish_one(k, raw, desc):
        b = k * DESC_DIM
        nrm2 = 0.0
        for d in range(DESC_DIM):
            v = float(raw[b + d])
            nrm2 += v * v
        thr = math.sqrt(nrm2) * DESC_MAG_THR
        nrm2 = 0.0
        for d in range(DESC_DIM):
            v = min(float(raw[b + d]), thr)
            raw[b + d] = v
            nrm2 += v * v
        scale = INT_DESCR_FCTR / max(math.sqrt(nrm2), FLT_EPSILON)
        for d in range(DESC_DIM):
            # saturate_cast<uchar>: round half to even, clamp to [0, 255]; returned as float like OpenCV
            u = rint(float(raw[b + d]) * scale)
            desc[b + d] = min(max(u, 0), 255)

    finish_one = dev(finish_one)

    def desc_body(q, kp_ol, kp_pf, kp_size, kp_angle, gauss, oinfo, raw, desc, per_item):
        # per_item == 1: item q is one cell (GPU: 16 threads per keypoint, then ``finish``); per_item == 16:
        # item q is a whole keypoint, finished in place (CPU: one compiled kernel less).
        div = DESC_W * DESC_W if per_item == 1 else 1
        k = q // div
        c0 = q - k * div
        for cell in range(c0, c0 + per_item):
            desc_cell(k, cell, kp_ol, kp_pf, kp_size, kp_angle, gauss, oinfo, raw)
        if per_item != 1:
            finish_one(k, raw, desc)

    def finish_body(k, raw, desc):
        finish_one(k, raw, desc)

    return desc_body, finish_body


def _simulated() -> bool:
    return os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


@functools.cache
def target_for(name: str) -> Target:
    """The target the SIFT kernels are built for.

    The shared :func:`~objrec.kernels.get_target` one, except under the CUDA simulator: there every thread
    is a Python thread (~0.25 ms each, idle or not), so the 2-D stages run one row per thread in blocks of
    32 x 1 instead of the default 8 x 32 (which would start 32 idle threads per row).
    """
    if name == "cuda" and _simulated():
        return Target("cuda", block1d=32, block2d=(32, 1), row_threads=True)
    return get_target(name)


@functools.cache
def kernels_for(name: str) -> dict:
    """Launchers for ``"cpu"`` or ``"cuda"``, built once per process (Numba compiles on first call)."""
    return build(target_for(name))
