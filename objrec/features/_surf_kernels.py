"""SURF element functions, written once and built for the CPU and for CUDA by :mod:`objrec.kernels`.

Each stage is a plain Python *element function* (one grid point, or one keypoint); :func:`build` turns them
into launchers for a :class:`~objrec.kernels.Target`. Stages, in order of a frame:

``det``      fast-Hessian: all layers of every octave at one grid point of the concatenated octave rows.
``nms``      threshold, mask test and 3x3x3 non-maximum suppression; writes one flag per middle-layer sample.
``interp``   one candidate (a flat flag index): quadratic sub-pixel/sub-scale fit, Laplacian sign.
``describe`` one keypoint: orientation (sliding 60 degree window over Haar responses) and the 4x4 descriptor.

Arrays are flat where that lets one buffer hold every octave (one launch for all of them): ``S`` and ``M``
are the raveled integral images of the frame and of the mask (row stride ``Wp = W + 1``), ``det`` holds
``n_layers`` planes of ``rows x cols`` per octave from ``oinfo[o, OFF]``, ``flags`` ``n_layers - 2``
planes per octave from ``oinfo[o, FOFF]``. The tables (``oinfo``, ``linfo``, ``boxes``, ``wts``) are built on
the host by :mod:`objrec.features.surf`.

The conventions are OpenCV's (``modules/xfeatures2d/src/surf.cpp``): box filters scaled from the 9x9 ones
with per-box weights normalised by area, centres at ``top_left + (size - 1) / 2``, keypoint size equal to
the interpolated filter size, the orientation binned by rounded degrees, and the angle reported as
``atan2`` of the winning window's sum in image coordinates (y down).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from objrec.kernels import Target, get_target

__all__ = ["build", "kernels_for", "OINFO", "LINFO", "N_ORI", "PATCH"]

# Columns of oinfo (per octave) and linfo (per octave and layer).
OFF, ROWS, COLS, STEP, ROW0, FOFF = 0, 1, 2, 3, 4, 5
OINFO = 6
SIZE, MARGIN, NI, NJ, REACH, NMS_MARGIN = 0, 1, 2, 3, 4, 5
LINFO = 6

PATCH = 20  # descriptor samples per side (each s wide), as in the paper and OpenCV
N_ORI = 360  # one orientation bin per rounded degree: OpenCV's window test works on cvRound(angle)


def build(t: Target):
    """Build the SURF launchers for target ``t``; returns a dict of ``det``, ``nms``, ``interp``, ``describe``."""
    dev = t.device

    def box4(A, p, o0, o1, o2, o3):
        # Box sum from four corner offsets around flat index p (OpenCV's p0 + p3 - p1 - p2).
        return A[p + o0] + A[p + o3] - A[p + o1] - A[p + o2]

    box4 = dev(box4)

    def find_octave(y, oinfo, n_oct, col):
        o = 0
        while o + 1 < n_oct and y >= oinfo[o + 1, col]:
            o += 1
        return o

    find_octave = dev(find_octave)

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

    hessian_parts = dev(hessian_parts)

    def ux(v):
        # Index with an unsigned integer: Numba then drops its negative-index wraparound, which on the CPU
        # turns the row loops of box sums into plain vector loads (measured 4x on the Hessian stage).
        return np.uint64(v)

    ux = dev(ux)

    def hess(S, p, off, wt):
        # det(H) = Dxx Dyy - (0.9 Dxy)^2 from the box table of one layer. The three Dxx (Dyy) boxes share their
        # inner edges, so 8 corners serve them; Dxy has four separate boxes. ``off`` and ``wt`` are tuples (held in
        # registers across a row): corners a0 a1 a2 a3 b2 b3 c2 c3 | d0 d1 d2 d3 e1 e3 f1 f3 | g.. h.. k.. n..
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

    hess = dev(hess)

    def mask_hit(M, ya, yb, x, step, r, W):
        xa = max(x - r, 0)
        xb = min(x + step + r, W)
        return (M[ux(yb + xb)] - M[ux(ya + xb)] - M[ux(yb + xa)] + M[ux(ya + xa)]) > 0

    mask_hit = dev(mask_hit)

    def det_body(y, xc, S, M, det, oinfo, linfo, boxes, wts, use_mask, n_oct, n_layers, H, W, chunk):
        # One row segment [xc * chunk, xc * chunk + chunk) of one octave, every layer: chunk = 1 on the GPU (a
        # thread per sample), a whole row on the CPU (the box offsets stay in registers across the row).
        o = find_octave(y, oinfo, n_oct, ROW0)
        i = y - oinfo[o, ROW0]
        rows = oinfo[o, ROWS]
        cols = oinfo[o, COLS]
        jlo = xc * chunk
        jhi = min(jlo + chunk, cols)
        if jlo >= cols or i >= rows:
            return
        step = oinfo[o, STEP]
        plane = rows * cols
        Wp = W + 1
        for l in range(n_layers):
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
                continue
            a0 = boxes[o, l, 0, 0]
            a1 = boxes[o, l, 0, 1]
            a2 = boxes[o, l, 0, 2]
            a3 = boxes[o, l, 0, 3]
            b2 = boxes[o, l, 1, 2]
            b3 = boxes[o, l, 1, 3]
            c2 = boxes[o, l, 2, 2]
            c3 = boxes[o, l, 2, 3]
            d0 = boxes[o, l, 3, 0]
            d1 = boxes[o, l, 3, 1]
            d2 = boxes[o, l, 3, 2]
            d3 = boxes[o, l, 3, 3]
            e1 = boxes[o, l, 4, 1]
            e3 = boxes[o, l, 4, 3]
            f1 = boxes[o, l, 5, 1]
            f3 = boxes[o, l, 5, 3]
            g0 = boxes[o, l, 6, 0]
            g1 = boxes[o, l, 6, 1]
            g2 = boxes[o, l, 6, 2]
            g3 = boxes[o, l, 6, 3]
            h0 = boxes[o, l, 7, 0]
            h1 = boxes[o, l, 7, 1]
            h2 = boxes[o, l, 7, 2]
            h3 = boxes[o, l, 7, 3]
            k0 = boxes[o, l, 8, 0]
            k1 = boxes[o, l, 8, 1]
            k2 = boxes[o, l, 8, 2]
            k3 = boxes[o, l, 8, 3]
            n0 = boxes[o, l, 9, 0]
            n1 = boxes[o, l, 9, 1]
            n2 = boxes[o, l, 9, 2]
            n3 = boxes[o, l, 9, 3]
            wa = float(wts[o, l, 0])
            wb = float(wts[o, l, 1])
            wc = float(wts[o, l, 2])
            wd = float(wts[o, l, 3])
            we = float(wts[o, l, 4])
            wf = float(wts[o, l, 5])
            wg = float(wts[o, l, 6])
            wh = float(wts[o, l, 7])
            wk = float(wts[o, l, 8])
            wn = float(wts[o, l, 9])
            off = (
                a0,
                a1,
                a2,
                a3,
                b2,
                b3,
                c2,
                c3,
                d0,
                d1,
                d2,
                d3,
                e1,
                e3,
                f1,
                f3,
                g0,
                g1,
                g2,
                g3,
                h0,
                h1,
                h2,
                h3,
                k0,
                k1,
                k2,
                k3,
                n0,
                n1,
                n2,
                n3,
            )
            wt = (wa, wb, wc, wd, we, wf, wg, wh, wk, wn)
            r = linfo[o, l, REACH]
            ya = max(step * i - r, 0) * Wp
            yb = min(step * i + step + r, H) * Wp
            pb = i0 * step * Wp - m * step
            if use_mask == 0:
                for j in range(ja, jb):
                    det[ux(out + j)] = hess(S, pb + j * step, off, wt)
            else:
                # Runs of samples with some mask pixel under the filters of the candidates they neighbour are
                # computed in the same tight loop as without a mask; the others are set to zero.
                j = ja
                while j < jb:
                    while j < jb and not mask_hit(M, ya, yb, step * j, step, r, W):
                        det[out + j] = 0.0
                        j += 1
                    j1 = j
                    while j1 < jb and mask_hit(M, ya, yb, step * j1, step, r, W):
                        j1 += 1
                    for jj in range(j, j1):
                        det[ux(out + jj)] = hess(S, pb + jj * step, off, wt)
                    j = j1

    def nms_body(y, xc, det, flags, oinfo, linfo, M, use_mask, n_oct, n_mid, thr, W, chunk):
        o = find_octave(y, oinfo, n_oct, ROW0)
        i = y - oinfo[o, ROW0]
        rows = oinfo[o, ROWS]
        cols = oinfo[o, COLS]
        jlo = xc * chunk
        jhi = min(jlo + chunk, cols)
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
            for j in range(max(jlo, mg), min(jhi, cols - mg)):
                c = cb + j
                v = det[ux(c)]
                if v > thr:
                    ok = True
                    if use_mask != 0:
                        # OpenCV: the mean of the mask over the filter footprint must reach 0.5.
                        q = (i - m) * step * Wp + (j - m) * step
                        e = size * Wp
                        s = M[q + e + size] - M[q + size] - M[q + e] + M[q]
                        ok = 2 * s >= size * size
                    if ok:
                        for dl in range(-1, 2):
                            for dy in range(-1, 2):
                                for dx in range(-1, 2):
                                    if dl != 0 or dy != 0 or dx != 0:
                                        if det[ux(c + dl * plane + dy * cols + dx)] >= v:
                                            ok = False
                    if ok:
                        flags[ux(fb + j)] = 1

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
        v = float(det[c])
        # Brown & Lowe (BMVC 2002): one Newton step on the 3x3x3 neighbourhood (central differences).
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
        size = linfo[o, l, SIZE]
        m = linfo[o, l, MARGIN]
        ty = (i - m) * step
        tx = (j - m) * step
        half = (size - 1) * 0.5
        out_xy[k, 0] = tx + half + x0 * step
        out_xy[k, 1] = ty + half + x1 * step
        out_size[k] = math.floor(size + x2 * (size - linfo[o, l - 1, SIZE]) + 0.5)
        out_resp[k] = v
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

    def row_span(S, p, ixa, fxa, ixb, fxb):
        # Integral-image row p (flat start) read at fractional columns xb and xa, differenced: integer
        # differences first, so float64 keeps every digit of the small result.
        d = float(S[ux(p + ixb)] - S[ux(p + ixa)])
        d += fxb * float(S[ux(p + ixb + 1)] - S[ux(p + ixb)])
        d -= fxa * float(S[ux(p + ixa + 1)] - S[ux(p + ixa)])
        return d

    row_span = dev(row_span)

    def box_mean(S, W, H, xa, xb, ya, yb):
        # Mean of the piecewise-constant image over [xa, xb) x [ya, yb) (integral-image coordinates, inside
        # [0, W] x [0, H]): the integral image is bilinear inside each cell, so four rows of four reads suffice.
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

    box_mean = dev(box_mean)

    def atan2_deg(y, x):
        # OpenCV's fastAtan2 polynomial (degrees in [0, 360), error about 0.01 degree): cheaper than libm's atan2,
        # and the same rounding of angles to whole degrees as OpenCV's orientation histogram.
        ax = abs(x)
        ay = abs(y)
        if ax >= ay:
            c = ay / (ax + 2.220446049250313e-16)
            c2 = c * c
            a = (
                ((-2.5397245532480937 * c2 + 8.914000133129813) * c2 - 18.66744610461362) * c2 + 57.283623713809675
            ) * c
        else:
            c = ax / (ay + 2.220446049250313e-16)
            c2 = c * c
            a = (
                90.0
                - (((-2.5397245532480937 * c2 + 8.914000133129813) * c2 - 18.66744610461362) * c2 + 57.283623713809675)
                * c
            )
        if x < 0.0:
            a = 180.0 - a
        if y < 0.0:
            a = 360.0 - a
        return a

    atan2_deg = dev(atan2_deg)

    def clamp_span(a, b, n):
        # Clip [a, b) to [0, n) but keep at least one pixel (replicated border, as OpenCV's window extraction).
        a0 = min(max(a, 0.0), n - 1.0)
        b0 = max(min(b, float(n)), a0 + 1.0)
        return a0, b0

    clamp_span = dev(clamp_span)

    def describe_body(
        k,
        S,
        H,
        W,
        kxy,
        ksize,
        upright,
        extended,
        ori_pts,
        ori_w,
        n_ori,
        desc_w,
        bins,
        patch,
        out_angle,
        out_desc,
        out_ok,
    ):
        Wp = W + 1
        dim = 128 if extended != 0 else 64
        kb = k * (2 * (N_ORI + 1))  # bins, patch and out_desc are flat (n * row) buffers
        kp = k * ((PATCH + 1) * (PATCH + 1))
        kd = k * dim
        # float(): NumPy 2 keeps float32 * float in float32 (the simulator); Numba and CUDA widen to float64.
        cx = float(kxy[k, 0])
        cy = float(kxy[k, 1])
        s = float(ksize[k]) * 1.2 / 9.0
        out_ok[k] = 0
        angle = 270.0  # OpenCV's upright convention: the window's x axis points up the image
        if upright == 0:
            gws = 2 * int(math.floor(2.0 * s + 0.5))
            if gws > H + 1 or gws > W + 1 or gws < 2:
                return
            h = gws // 2
            inv = 1.0 / (h * gws)
            for b in range(2 * (N_ORI + 1)):
                bins[ux(kb + b)] = 0.0
            off = (gws - 1) * 0.5
            n = 0
            for q in range(n_ori):
                x = int(math.floor(cx + ori_pts[q, 0] * s - off + 0.5))
                y = int(math.floor(cy + ori_pts[q, 1] * s - off + 0.5))
                if y < 0 or y >= H + 1 - gws or x < 0 or x >= W + 1 - gws:
                    continue
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
                w = float(ori_w[q])
                vx = (right - left) * inv * w
                vy = (top - bottom) * inv * w  # OpenCV's dy wavelet: +1 on top, -1 below
                ai = int(math.floor(atan2_deg(vy, vx) + 0.5))
                if ai >= N_ORI:
                    ai -= N_ORI
                bins[ux(kb + ai + 1)] += vx
                bins[ux(kb + N_ORI + 1 + ai + 1)] += vy
                n += 1
            if n == 0:
                return
            for b in range(1, N_ORI + 1):
                bins[ux(kb + b)] += bins[ux(kb + b - 1)]
                bins[ux(kb + N_ORI + 1 + b)] += bins[ux(kb + N_ORI + 1 + b - 1)]
            best = 0.0
            bx = 0.0
            by = 0.0
            for wi in range(0, N_ORI, 5):
                # rounded angles within 29 degrees of wi (OpenCV: |a - wi| < 30 or > 330)
                lo = wi - 29
                hi = wi + 29
                if lo < 0:
                    sx = bins[ux(kb + hi + 1)] + bins[ux(kb + N_ORI)] - bins[ux(kb + lo + N_ORI)]
                    sy = (
                        bins[ux(kb + N_ORI + 1 + hi + 1)]
                        + bins[ux(kb + N_ORI + 1 + N_ORI)]
                        - bins[ux(kb + N_ORI + 1 + lo + N_ORI)]
                    )
                elif hi >= N_ORI:
                    sx = bins[ux(kb + N_ORI)] - bins[ux(kb + lo)] + bins[ux(kb + hi - N_ORI + 1)]
                    sy = (
                        bins[ux(kb + N_ORI + 1 + N_ORI)]
                        - bins[ux(kb + N_ORI + 1 + lo)]
                        + bins[ux(kb + N_ORI + 1 + hi - N_ORI + 1)]
                    )
                else:
                    sx = bins[ux(kb + hi + 1)] - bins[ux(kb + lo)]
                    sy = bins[ux(kb + N_ORI + 1 + hi + 1)] - bins[ux(kb + N_ORI + 1 + lo)]
                mod = sx * sx + sy * sy
                if mod > best:
                    best = mod
                    bx = sx
                    by = sy
            angle = atan2_deg(-float(by), float(bx))
            if angle >= 360.0:
                angle -= 360.0
        out_angle[k] = angle
        # Descriptor window: PATCH+1 samples per side, s apart, rotated by the keypoint angle; each sample is the
        # mean over an s x s box (what OpenCV's bilinear window + INTER_AREA resize computes, read from the
        # integral image so the cost does not grow with the scale).
        t = angle * (math.pi / 180.0)
        ct = math.cos(t)
        st = math.sin(t)
        hs = 0.5 * s
        npx = PATCH + 1
        for pr in range(npx):
            v = (pr - PATCH * 0.5) * s
            for pc in range(npx):
                u = (pc - PATCH * 0.5) * s
                px = cx + u * ct - v * st + 0.5
                py = cy + u * st + v * ct + 0.5
                xa, xb = clamp_span(px - hs, px + hs, W)
                ya, yb = clamp_span(py - hs, py + hs, H)
                patch[ux(kp + pr * npx + pc)] = box_mean(S, W, H, xa, xb, ya, yb)
        for d in range(dim):
            out_desc[ux(kd + d)] = 0.0
        for pr in range(PATCH):
            for pc in range(PATCH):
                dw = float(desc_w[pr, pc])
                q = pr * npx + pc
                p00 = patch[ux(kp + q)]
                p01 = patch[ux(kp + q + 1)]
                p10 = patch[ux(kp + q + npx)]
                p11 = patch[ux(kp + q + npx + 1)]
                tx = (p01 - p00 + p11 - p10) * dw
                ty = (p10 - p00 + p11 - p01) * dw
                cell = (pr // 5) * 4 + pc // 5
                if extended != 0:
                    base = cell * 8
                    if ty >= 0.0:
                        out_desc[ux(kd + base)] += tx
                        out_desc[ux(kd + base + 1)] += abs(tx)
                    else:
                        out_desc[ux(kd + base + 2)] += tx
                        out_desc[ux(kd + base + 3)] += abs(tx)
                    if tx >= 0.0:
                        out_desc[ux(kd + base + 4)] += ty
                        out_desc[ux(kd + base + 5)] += abs(ty)
                    else:
                        out_desc[ux(kd + base + 6)] += ty
                        out_desc[ux(kd + base + 7)] += abs(ty)
                else:
                    base = cell * 4
                    out_desc[ux(kd + base)] += tx
                    out_desc[ux(kd + base + 1)] += ty
                    out_desc[ux(kd + base + 2)] += abs(tx)
                    out_desc[ux(kd + base + 3)] += abs(ty)
        sq = 0.0
        for d in range(dim):
            sq += out_desc[ux(kd + d)] * out_desc[ux(kd + d)]
        scale = 1.0 / (math.sqrt(sq) + 1.1920929e-07)  # FLT_EPSILON, as OpenCV
        for d in range(dim):
            out_desc[ux(kd + d)] = out_desc[ux(kd + d)] * scale
        out_ok[k] = 1

    return {
        "det": t.grid2d(det_body, nargs=13),
        "nms": t.grid2d(nms_body, nargs=11),
        "interp": t.grid1d(interp_body, nargs=15),
        "describe": t.grid1d(describe_body, nargs=16),
    }


@functools.cache
def kernels_for(target_name: str) -> dict:
    """Launchers for ``"cpu"`` or ``"cuda"``, built once per process (Numba compiles on first call)."""
    return build(get_target(target_name))
