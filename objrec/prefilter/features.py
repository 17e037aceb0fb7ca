"""Cell features for the prefilter, for a whole frame at once, from integral images.

The frame is reduced to a working resolution (longer side ``work_size``), per-pixel maps are computed in
one pass (gray level, its square, gradient energy, edge and corner indicators, colour, and two
back-projections that relate a pixel to the enrolled objects), summed into one integral image per map,
and every cell's features come from four integral-image look-ups (Viola & Jones 2001) over the cell and
over its 3x3-cell neighbourhood.

Two implementations compute the same numbers: Numba for the CPU (:func:`cell_features`) and array code
that runs with NumPy or CuPy (:func:`cell_features_xp`). ``tests/prefilter/test_features.py`` checks both
against a brute-force per-cell computation.

The back-projections follow Swain & Ballard's colour indexing (IJCV 7(1), 1991,
doi:10.1007/BF00130487): a pixel's colour (16x16x16 BGR bins) and texture code (rotation-invariant uniform
LBP, Ojala et al., TPAMI 24(7), 2002, doi:10.1109/TPAMI.2002.1017623, times 4 contrast levels) look up
``log(p(code | object) / p(code | background))``, learned from training scenes by
:func:`appearance_luts`; the cell mean is then a log-likelihood ratio of the cell holding an object.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cv2
import numba
import numpy as np

from objrec.kernel_cache import njit as cached_njit

__all__ = [
    "FEATURE_NAMES",
    "N_MAPS",
    "N_COLOR_CODES",
    "N_TEXTURE_CODES",
    "FeatureParams",
    "CellGrid",
    "cell_grid",
    "pixel_maps",
    "cell_features",
    "cell_features_xp",
    "pixel_maps_xp",
    "appearance_luts",
    "work_shape",
    "work_image",
    "check_luts",
]

#: Per-pixel maps, summed in integral images (channel order of ``pixel_maps``).
MAP_NAMES = (
    "gray",
    "gray2",
    "grad_energy",
    "edge",
    "corner",
    "tensor_xx",
    "tensor_yy",
    "tensor_xy",
    "b",
    "g",
    "r",
    "saturation",
    "color_bp",
    "texture_bp",
)
N_MAPS = len(MAP_NAMES)
#: Features of each cell, in column order.
FEATURE_NAMES = (
    "mean",
    "std",
    "grad_rms",
    "edge_density",
    "corner_density",
    "tensor_min_eig",
    "mean_b",
    "mean_g",
    "mean_r",
    "saturation",
    "color_similarity",
    "texture_similarity",
    "ctx_std",
    "ctx_grad_rms",
    "ctx_edge_density",
    "ctx_color_similarity",
    "ctx_texture_similarity",
    "rel_std",
    "rel_grad_rms",
    "rel_edge_density",
    "rel_corner_density",
    "rel_saturation",
    "rel_color_similarity",
    "rel_texture_similarity",
)
#: Columns whose difference from the frame's median cell form the ``rel_*`` features: an object is
#: what stands out from the rest of the frame, which a textured background as a whole does not.
RELATIVE_COLUMNS = (1, 2, 3, 4, 9, 10, 11)
N_COLOR_CODES = 4096
N_TEXTURE_CODES = 40


@dataclass(frozen=True)
class FeatureParams:
    """Parameters of the per-pixel maps (stored with a trained prefilter).

    Attributes
    ----------
    edge_threshold : float
        A pixel is an edge when its gradient magnitude (gray levels per working pixel) exceeds this.
    corner_threshold : float
        A pixel is a corner when the smaller eigenvalue of its 3x3 mean structure tensor exceeds this
        (Shi & Tomasi 1994).
    lbp_threshold : float
        LBP bit set when a neighbour is at least this much brighter than the centre (noise tolerance).
    contrast_levels : tuple of 3 floats
        Gradient-magnitude boundaries of the 4 contrast levels of the texture code.
    """

    edge_threshold: float = 8.0
    corner_threshold: float = 20.0
    lbp_threshold: float = 2.0
    contrast_levels: tuple[float, float, float] = (2.0, 8.0, 24.0)

    def as_array(self) -> np.ndarray:
        return np.array(
            [self.edge_threshold, self.corner_threshold, self.lbp_threshold, *self.contrast_levels], np.float32
        )


def _riu2_table() -> np.ndarray:
    """Rotation-invariant uniform LBP: number of set bits if at most 2 circular transitions, else 9."""
    t = np.empty(256, np.int32)
    for c in range(256):
        bits = [(c >> k) & 1 for k in range(8)]
        trans = sum(bits[k] != bits[(k + 1) % 8] for k in range(8))
        t[c] = sum(bits) if trans <= 2 else 9
    return t


RIU2 = _riu2_table()
# Neighbour offsets (dy, dx) in circular order, for LBP.
_NB_DY = np.array([-1, -1, -1, 0, 1, 1, 1, 0], np.int64)
_NB_DX = np.array([-1, 0, 1, 1, 1, 0, -1, -1], np.int64)


def work_shape(height: int, width: int, work_size: int) -> tuple[int, int]:
    """(h, w) of the working resolution: longer side ``work_size`` (never upscaled).
    ``height``, ``width``: the frame's size in pixels."""
    s = min(1.0, work_size / max(height, width))
    return max(1, round(height * s)), max(1, round(width * s))


def work_image(bgr: Any, work_size: int, xp: Any = np) -> Any:
    """A BGR uint8 frame reduced to the working resolution (:func:`work_shape`) by area averaging.

    NumPy frames go through ``cv2.resize`` (``INTER_AREA``). CuPy frames stay on the device: they are
    averaged over whole blocks of ``f x f`` pixels (``f`` the integer scale factor) after cropping the
    frame to a multiple of the working size, which differs from OpenCV at fractional scales.
    ``bgr``: the frame; ``work_size``: the working resolution's longer side; ``xp``: the frame's array module.
    """
    fh, fw = bgr.shape[:2]
    wh, ww = work_shape(fh, fw, work_size)
    if (wh, ww) == (fh, fw):
        return bgr
    if xp is np:
        return cv2.resize(bgr, (ww, wh), interpolation=cv2.INTER_AREA)
    f = max(1, min(fh // wh, fw // ww))
    crop = bgr[: wh * f, : ww * f].astype(xp.float32)
    small = crop.reshape(wh, f, ww, f, 3).mean(axis=(1, 3))
    return (small + 0.5).astype(xp.uint8)


@dataclass(frozen=True)
class CellGrid:
    """Cell edges at working resolution (``ys``: ny+1 row edges, ``xs``: nx+1 column edges)."""

    ys: np.ndarray
    xs: np.ndarray

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.ys) - 1, len(self.xs) - 1


def cell_grid(height: int, width: int, cell_size: int) -> CellGrid:
    """Near-square cells of about ``cell_size`` px covering the image exactly (edges ``i * n // count``).
    ``height``, ``width``: the image's size in pixels."""
    ny = max(1, round(height / cell_size))
    nx = max(1, round(width / cell_size))
    ys = (np.arange(ny + 1) * height) // ny
    xs = (np.arange(nx + 1) * width) // nx
    return CellGrid(ys.astype(np.int64), xs.astype(np.int64))


# --------------------------------------------------------------------------------------------------
# CPU: Numba
# --------------------------------------------------------------------------------------------------
@cached_njit
def _gray_gradients_nb(bgr):  # pragma: no cover
    # Gray level padded by one replicated pixel (clamped borders without branches), its central-difference
    # gradient, and the horizontal 3-sums of the gradient products (padded the same way, for the 3x3 mean
    # structure tensor).
    h, w = bgr.shape[0], bgr.shape[1]
    half = np.float32(0.5)
    gp = np.empty((h + 2, w + 2), np.float32)
    for y in range(h):
        for x in range(w):
            gp[y + 1, x + 1] = (
                np.float32(0.114) * np.float32(bgr[y, x, 0])
                + np.float32(0.587) * np.float32(bgr[y, x, 1])
                + np.float32(0.299) * np.float32(bgr[y, x, 2])
            )
        gp[y + 1, 0] = gp[y + 1, 1]
        gp[y + 1, w + 1] = gp[y + 1, w]
    gp[0, :] = gp[1, :]
    gp[h + 1, :] = gp[h, :]
    gx = np.empty((h, w), np.float32)
    gy = np.empty((h, w), np.float32)
    P = np.empty((3, h + 2, w + 2), np.float32)
    for y in range(h):
        for x in range(w):
            u = (gp[y + 1, x + 2] - gp[y + 1, x]) * half
            t = (gp[y + 2, x + 1] - gp[y, x + 1]) * half
            gx[y, x] = u
            gy[y, x] = t
            P[0, y + 1, x + 1] = u * u
            P[1, y + 1, x + 1] = t * t
            P[2, y + 1, x + 1] = u * t
        for k in range(3):
            P[k, y + 1, 0] = P[k, y + 1, 1]
            P[k, y + 1, w + 1] = P[k, y + 1, w]
    for k in range(3):
        P[k, 0, :] = P[k, 1, :]
        P[k, h + 1, :] = P[k, h, :]
    Hs = np.empty((3, h + 2, w), np.float32)
    for k in range(3):
        for y in range(h + 2):
            for x in range(w):
                Hs[k, y, x] = P[k, y, x] + P[k, y, x + 1] + P[k, y, x + 2]
    return gp, gx, gy, Hs


@cached_njit
def _grid_sums_nb(bgr, color_lut, tex_lut, fp, riu2, ys, xs, acc):  # pragma: no cover
    # One serial pass: per-pixel maps for a row, summed into per-column totals over the current cell
    # row, reduced to cell sums at the end of the row of cells. Serial on purpose: a working-resolution
    # frame is small enough that waking and waiting for threads costs more than the pass itself.
    h, w = bgr.shape[0], bgr.shape[1]
    nx = xs.shape[0] - 1
    nc = acc.shape[2]
    edge_t2 = fp[0] * fp[0]
    corner_t = fp[1]
    lbp_t = fp[2]
    c1, c2, c3 = fp[3], fp[4], fp[5]
    f9 = np.float32(9.0)
    half = np.float32(0.5)
    gp, gx, gy, Hs = _gray_gradients_nb(bgr)
    row = np.empty((nc, w), np.float32)
    colsum = np.zeros((nc, w), np.float64)
    i = 0
    for y in range(h):
        for x in range(w):
            v = gp[y + 1, x + 1]
            u = gx[y, x]
            t = gy[y, x]
            e2 = u * u + t * t
            a = (Hs[0, y, x] + Hs[0, y + 1, x] + Hs[0, y + 2, x]) / f9
            c = (Hs[1, y, x] + Hs[1, y + 1, x] + Hs[1, y + 2, x]) / f9
            bb = (Hs[2, y, x] + Hs[2, y + 1, x] + Hs[2, y + 2, x]) / f9
            lmin = half * (a + c - np.sqrt((a - c) * (a - c) + np.float32(4.0) * bb * bb))
            th = v + lbp_t
            # LBP bits in circular order (_NB_DY, _NB_DX), unrolled: padded coordinates are y+1, x+1.
            code = (
                np.int32(gp[y, x] >= th)
                | (np.int32(gp[y, x + 1] >= th) << 1)
                | (np.int32(gp[y, x + 2] >= th) << 2)
                | (np.int32(gp[y + 1, x + 2] >= th) << 3)
                | (np.int32(gp[y + 2, x + 2] >= th) << 4)
                | (np.int32(gp[y + 2, x + 1] >= th) << 5)
                | (np.int32(gp[y + 2, x] >= th) << 6)
                | (np.int32(gp[y + 1, x] >= th) << 7)
            )
            mag = np.sqrt(e2)
            level = np.int32(mag > c1) + np.int32(mag > c2) + np.int32(mag > c3)
            b = np.int32(bgr[y, x, 0])
            g = np.int32(bgr[y, x, 1])
            r = np.int32(bgr[y, x, 2])
            row[0, x] = v
            row[1, x] = v * v
            row[2, x] = e2
            row[3, x] = np.float32(e2 > edge_t2)
            row[4, x] = np.float32(lmin > corner_t)
            row[5, x] = a
            row[6, x] = c
            row[7, x] = bb
            row[8, x] = np.float32(b)
            row[9, x] = np.float32(g)
            row[10, x] = np.float32(r)
            row[11, x] = np.float32(max(b, max(g, r)) - min(b, min(g, r)))
            row[12, x] = color_lut[(b >> 4) * 256 + (g >> 4) * 16 + (r >> 4)]
            row[13, x] = tex_lut[riu2[code] * 4 + level]
        for ch in range(nc):
            for x in range(w):
                colsum[ch, x] += row[ch, x]
        if y + 1 == ys[i + 1]:
            for ch in range(nc):
                for j in range(nx):
                    s = 0.0
                    for x in range(xs[j], xs[j + 1]):
                        s += colsum[ch, x]
                    acc[i, j, ch] = s
                for x in range(w):
                    colsum[ch, x] = 0.0
            i += 1


@cached_njit
def _grid_integral_nb(acc, G):  # pragma: no cover
    # The integral image sampled at the cell corners: G[i, j] = sum of the pixels above row ys[i] and
    # left of column xs[j]. Any union of whole cells is then four look-ups.
    ny, nx, nc = acc.shape
    G[0, :, :] = 0.0
    G[:, 0, :] = 0.0
    for i in range(ny):
        for j in range(nx):
            for c in range(nc):
                G[i + 1, j + 1, c] = acc[i, j, c] + G[i, j + 1, c] + G[i + 1, j, c] - G[i, j, c]


@numba.njit(inline="always")
def _box(S, y0, y1, x0, x1, c):  # pragma: no cover
    return S[y1, x1, c] - S[y0, x1, c] - S[y1, x0, c] + S[y0, x0, c]


@cached_njit
def _cell_features_nb(G, ys, xs, rel_cols, out):  # pragma: no cover
    # G is indexed by cell corners (i, j); areas come from the pixel edges ys, xs.
    ny = ys.shape[0] - 1
    nx = xs.shape[0] - 1
    for k in range(ny * nx):
        i = k // nx
        j = k % nx
        n = float((ys[i + 1] - ys[i]) * (xs[j + 1] - xs[j]))
        i0, i1, j0, j1 = i, i + 1, j, j + 1
        m = _box(G, i0, i1, j0, j1, 0) / n
        out[k, 0] = m
        out[k, 1] = np.sqrt(max(_box(G, i0, i1, j0, j1, 1) / n - m * m, 0.0))
        out[k, 2] = np.sqrt(max(_box(G, i0, i1, j0, j1, 2) / n, 0.0))
        out[k, 3] = _box(G, i0, i1, j0, j1, 3) / n
        out[k, 4] = _box(G, i0, i1, j0, j1, 4) / n
        a = _box(G, i0, i1, j0, j1, 5) / n
        c = _box(G, i0, i1, j0, j1, 6) / n
        b = _box(G, i0, i1, j0, j1, 7) / n
        out[k, 5] = 0.5 * (a + c - np.sqrt((a - c) * (a - c) + 4.0 * b * b))
        out[k, 6] = _box(G, i0, i1, j0, j1, 8) / n
        out[k, 7] = _box(G, i0, i1, j0, j1, 9) / n
        out[k, 8] = _box(G, i0, i1, j0, j1, 10) / n
        out[k, 9] = _box(G, i0, i1, j0, j1, 11) / n
        out[k, 10] = _box(G, i0, i1, j0, j1, 12) / n
        out[k, 11] = _box(G, i0, i1, j0, j1, 13) / n
        # Context: the 3x3-cell neighbourhood, clipped at the frame border.
        I0, I1 = max(i - 1, 0), min(i + 2, ny)
        J0, J1 = max(j - 1, 0), min(j + 2, nx)
        N = float((ys[I1] - ys[I0]) * (xs[J1] - xs[J0]))
        M = _box(G, I0, I1, J0, J1, 0) / N
        out[k, 12] = np.sqrt(max(_box(G, I0, I1, J0, J1, 1) / N - M * M, 0.0))
        out[k, 13] = np.sqrt(max(_box(G, I0, I1, J0, J1, 2) / N, 0.0))
        out[k, 14] = _box(G, I0, I1, J0, J1, 3) / N
        out[k, 15] = _box(G, I0, I1, J0, J1, 12) / N
        out[k, 16] = _box(G, I0, I1, J0, J1, 13) / N
    n = ny * nx
    col = np.empty(n, np.float32)
    for r in range(rel_cols.shape[0]):
        for k in range(n):
            col[k] = out[k, rel_cols[r]]
        med = np.median(col)
        for k in range(n):
            out[k, 17 + r] = out[k, rel_cols[r]] - med


def _check_small(bgr: np.ndarray) -> np.ndarray:
    if not (isinstance(bgr, np.ndarray) and bgr.dtype == np.uint8 and bgr.ndim == 3 and bgr.shape[2] == 3):
        raise ValueError(
            f"bgr: expected an (H, W, 3) uint8 array, got {getattr(bgr, 'shape', None)} "
            f"{getattr(bgr, 'dtype', type(bgr).__name__)}"
        )
    return np.ascontiguousarray(bgr)


def check_luts(color_lut: Any, texture_lut: Any) -> tuple[np.ndarray, np.ndarray]:
    """The back-projection tables as contiguous float32 (zero tables for None), shapes checked.
    ``color_lut``, ``texture_lut``: the tables, or None."""
    cl = np.zeros(N_COLOR_CODES, np.float32) if color_lut is None else np.ascontiguousarray(color_lut, np.float32)
    tl = np.zeros(N_TEXTURE_CODES, np.float32) if texture_lut is None else np.ascontiguousarray(texture_lut, np.float32)
    if cl.shape != (N_COLOR_CODES,) or tl.shape != (N_TEXTURE_CODES,):
        raise ValueError(
            f"color_lut/texture_lut: expected shapes ({N_COLOR_CODES},) and ({N_TEXTURE_CODES},), "
            f"got {cl.shape} and {tl.shape}"
        )
    return cl, tl


def pixel_maps(
    bgr: np.ndarray,
    color_lut: np.ndarray | None = None,
    texture_lut: np.ndarray | None = None,
    params: FeatureParams | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-pixel maps (H, W, N_MAPS) float32, colour codes and texture codes (H, W) int32 (NumPy).

    ``bgr`` is the image at working resolution (uint8, 3 channels). Used for training (code
    histograms) and as the reference the cell features are checked against.
    ``color_lut``, ``texture_lut``: the appearance tables (None: zero tables); ``params``: the features' settings.
    """
    bgr = _check_small(bgr)
    return pixel_maps_xp(bgr, *check_luts(color_lut, texture_lut), params, np)


def cell_features(
    bgr: np.ndarray,
    cell_size: int,
    color_lut: np.ndarray | None = None,
    texture_lut: np.ndarray | None = None,
    params: FeatureParams | None = None,
) -> tuple[np.ndarray, CellGrid]:
    """Features of every cell of an image at working resolution (CPU, Numba, one pass over the pixels).
    ``bgr``: the image at working resolution (uint8, 3 channels); ``cell_size``: a cell's side in pixels; ``color_lut``,
    ``texture_lut``: the appearance tables (None: zero tables); ``params``: the features' settings (default:
    :class:`FeatureParams`'s).

    Returns
    -------
    X : (ny * nx, len(FEATURE_NAMES)) float32
        Row ``i * nx + j`` is the cell in grid row ``i``, column ``j``.
    grid : CellGrid
    """
    bgr = _check_small(bgr)
    cl, tl = check_luts(color_lut, texture_lut)
    fp = (params or FeatureParams()).as_array()
    h, w = bgr.shape[:2]
    grid = cell_grid(h, w, cell_size)
    ny, nx = grid.shape
    acc = np.empty((ny, nx, N_MAPS), np.float64)
    _grid_sums_nb(bgr, cl, tl, fp, RIU2, grid.ys, grid.xs, acc)
    G = np.empty((ny + 1, nx + 1, N_MAPS), np.float64)
    _grid_integral_nb(acc, G)
    out = np.empty((ny * nx, len(FEATURE_NAMES)), np.float32)
    _cell_features_nb(G, grid.ys, grid.xs, np.asarray(RELATIVE_COLUMNS, np.int64), out)
    return out, grid


# --------------------------------------------------------------------------------------------------
# Array code (NumPy or CuPy)
# --------------------------------------------------------------------------------------------------
def _clamped(a: Any, dy: int, dx: int, xp: Any) -> Any:
    """``a[clamp(y + dy), clamp(x + dx)]`` for every pixel."""
    h, w = a.shape[:2]
    iy = xp.clip(xp.arange(h) + dy, 0, h - 1)
    ix = xp.clip(xp.arange(w) + dx, 0, w - 1)
    return a[iy][:, ix]


def pixel_maps_xp(
    bgr: Any, color_lut: Any, texture_lut: Any, params: FeatureParams | None = None, xp: Any = np
) -> tuple[Any, Any, Any]:
    """Array-code twin of :func:`pixel_maps` (NumPy or CuPy arrays, ``xp`` their module).
    ``bgr``, ``color_lut``, ``texture_lut``, ``params`` as there."""
    fp = params or FeatureParams()
    f32 = xp.float32
    bgr = xp.asarray(bgr)
    b, g, r = (bgr[:, :, k].astype(f32) for k in range(3))
    gray = f32(0.114) * b + f32(0.587) * g + f32(0.299) * r
    gx = (_clamped(gray, 0, 1, xp) - _clamped(gray, 0, -1, xp)) * f32(0.5)
    gy = (_clamped(gray, 1, 0, xp) - _clamped(gray, -1, 0, xp)) * f32(0.5)
    e2 = gx * gx + gy * gy
    # 3x3 mean structure tensor, summed as the CPU kernel does: horizontal 3-sums, then vertical.
    sums = []
    for p in (gx * gx, gy * gy, gx * gy):
        hs = _clamped(p, 0, -1, xp) + _clamped(p, 0, 0, xp) + _clamped(p, 0, 1, xp)
        sums.append((_clamped(hs, -1, 0, xp) + hs + _clamped(hs, 1, 0, xp)) / f32(9))
    a, c, bb = sums
    lmin = f32(0.5) * (a + c - xp.sqrt((a - c) * (a - c) + f32(4) * bb * bb))
    code = xp.zeros(gray.shape, xp.int32)
    for k in range(8):
        nb = _clamped(gray, int(_NB_DY[k]), int(_NB_DX[k]), xp)
        code |= (nb >= gray + f32(fp.lbp_threshold)).astype(xp.int32) << k
    mag = xp.sqrt(e2)
    c1, c2, c3 = fp.contrast_levels
    level = (mag > f32(c1)).astype(xp.int32) + (mag > f32(c2)) + (mag > f32(c3))
    tcode = xp.asarray(RIU2)[code] * 4 + level
    bi = bgr.astype(xp.int32)
    ccode = (bi[:, :, 0] >> 4) * 256 + (bi[:, :, 1] >> 4) * 16 + (bi[:, :, 2] >> 4)
    sat = (bgr.max(axis=2).astype(xp.int32) - bgr.min(axis=2)).astype(f32)
    cl, tl = (xp.asarray(v, dtype=f32) for v in check_luts(color_lut, texture_lut))
    maps = xp.stack(
        [
            gray,
            gray * gray,
            e2,
            (e2 > f32(fp.edge_threshold) ** 2).astype(f32),
            (lmin > f32(fp.corner_threshold)).astype(f32),
            a,
            c,
            bb,
            b,
            g,
            r,
            sat,
            cl[ccode],
            tl[tcode],
        ],
        axis=2,
    )
    return maps, ccode, tcode


def cell_features_xp(
    bgr: Any,
    cell_size: int,
    color_lut: Any = None,
    texture_lut: Any = None,
    params: FeatureParams | None = None,
    xp: Any = np,
) -> tuple[Any, CellGrid]:
    """Array-code twin of :func:`cell_features`: integral images by ``cumsum``, cells by fancy indexing.
    ``bgr``, ``cell_size``, ``color_lut``, ``texture_lut``, ``params`` as there; ``xp``: the arrays' module (NumPy or
    CuPy)."""
    maps, _, _ = pixel_maps_xp(bgr, color_lut, texture_lut, params, xp)
    h, w = maps.shape[:2]
    S = xp.zeros((h + 1, w + 1, N_MAPS), xp.float64)
    S[1:, 1:] = xp.cumsum(xp.cumsum(maps.astype(xp.float64), axis=0), axis=1)
    grid = cell_grid(h, w, cell_size)
    ny, nx = grid.shape
    ys, xs = grid.ys, grid.xs

    def boxes(y0, y1, x0, x1):
        Y0, Y1 = xp.asarray(np.repeat(y0, nx)), xp.asarray(np.repeat(y1, nx))
        X0, X1 = xp.asarray(np.tile(x0, ny)), xp.asarray(np.tile(x1, ny))
        n = ((Y1 - Y0) * (X1 - X0)).astype(xp.float64)[:, None]
        return (S[Y1, X1] - S[Y0, X1] - S[Y1, X0] + S[Y0, X0]) / n

    i, j = np.arange(ny), np.arange(nx)
    m = boxes(ys[:-1], ys[1:], xs[:-1], xs[1:])
    ctx = boxes(
        ys[np.maximum(i - 1, 0)], ys[np.minimum(i + 2, ny)], xs[np.maximum(j - 1, 0)], xs[np.minimum(j + 2, nx)]
    )
    a, c, b = m[:, 5], m[:, 6], m[:, 7]
    cols = [
        m[:, 0],
        xp.sqrt(xp.maximum(m[:, 1] - m[:, 0] ** 2, 0)),
        xp.sqrt(xp.maximum(m[:, 2], 0)),
        m[:, 3],
        m[:, 4],
        0.5 * (a + c - xp.sqrt((a - c) ** 2 + 4 * b * b)),
        m[:, 8],
        m[:, 9],
        m[:, 10],
        m[:, 11],
        m[:, 12],
        m[:, 13],
        xp.sqrt(xp.maximum(ctx[:, 1] - ctx[:, 0] ** 2, 0)),
        xp.sqrt(xp.maximum(ctx[:, 2], 0)),
        ctx[:, 3],
        ctx[:, 12],
        ctx[:, 13],
    ]
    X = xp.stack(cols, axis=1).astype(xp.float32)
    rel = X[:, list(RELATIVE_COLUMNS)]
    X = xp.concatenate([X, rel - xp.median(rel, axis=0)[None, :]], axis=1)
    return X, grid


# --------------------------------------------------------------------------------------------------
# Appearance model: back-projection tables
# --------------------------------------------------------------------------------------------------
def appearance_luts(
    color_hist_object: np.ndarray,
    color_hist_background: np.ndarray,
    texture_hist_object: np.ndarray,
    texture_hist_background: np.ndarray,
    prior: float = 1e-3,
) -> tuple[np.ndarray, np.ndarray]:
    """Log-likelihood-ratio tables ``log((p_obj + prior) / (p_bg + prior))`` from code histograms.
    ``color_hist_object``, ``color_hist_background``: colour-code histograms of object and background pixels;
    ``texture_hist_object``, ``texture_hist_background``: the same for texture codes; ``prior``: added to both
    probabilities."""

    def lut(ho: np.ndarray, hb: np.ndarray) -> np.ndarray:
        po = ho / max(float(ho.sum()), 1.0)
        pb = hb / max(float(hb.sum()), 1.0)
        return np.log((po + prior) / (pb + prior)).astype(np.float32)

    return lut(np.asarray(color_hist_object, np.float64), np.asarray(color_hist_background, np.float64)), lut(
        np.asarray(texture_hist_object, np.float64), np.asarray(texture_hist_background, np.float64)
    )
