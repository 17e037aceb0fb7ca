"""Cell features: Numba (whole frame, grid integral images) vs array code vs a brute-force per-cell loop."""

from __future__ import annotations

import numpy as np
import pytest

from objrec.data import sample_background, sample_objects
from objrec.prefilter.features import (
    FEATURE_NAMES,
    N_COLOR_CODES,
    N_TEXTURE_CODES,
    RELATIVE_COLUMNS,
    RIU2,
    FeatureParams,
    cell_features,
    cell_features_xp,
    cell_grid,
)
from objrec.scenes import compose_scene


def _brute_force(bgr, cell, cl, tl, p: FeatureParams):
    """Definitions written out per cell with plain NumPy (edge-padded neighbourhoods, loops over cells)."""
    f = bgr.astype(np.float32)
    gray = np.float32(0.114) * f[..., 0] + np.float32(0.587) * f[..., 1] + np.float32(0.299) * f[..., 2]
    g = np.pad(gray, 1, mode="edge")
    gx = (g[1:-1, 2:] - g[1:-1, :-2]) * np.float32(0.5)
    gy = (g[2:, 1:-1] - g[:-2, 1:-1]) * np.float32(0.5)
    e2 = gx * gx + gy * gy

    def box3(a):
        q = np.pad(a, 1, mode="edge")
        hs = q[:, :-2] + q[:, 1:-1] + q[:, 2:]
        return (hs[:-2] + hs[1:-1] + hs[2:]) / np.float32(9)

    a, c, b = box3(gx * gx), box3(gy * gy), box3(gx * gy)
    lmin = np.float32(0.5) * (a + c - np.sqrt((a - c) ** 2 + np.float32(4) * b * b))
    offs = [(-1, -1), (-1, 0), (-1, 1), (0, 1), (1, 1), (1, 0), (1, -1), (0, -1)]
    code = np.zeros(gray.shape, np.int64)
    h, w = gray.shape
    for k, (dy, dx) in enumerate(offs):
        code |= (g[1 + dy : 1 + dy + h, 1 + dx : 1 + dx + w] >= gray + np.float32(p.lbp_threshold)).astype(int) << k
    mag = np.sqrt(e2)
    level = sum((mag > np.float32(t)).astype(int) for t in p.contrast_levels)
    tex = tl[RIU2[code] * 4 + level]
    bi = bgr.astype(int)
    col = cl[(bi[..., 0] >> 4) * 256 + (bi[..., 1] >> 4) * 16 + (bi[..., 2] >> 4)]
    sat = (bgr.max(axis=2).astype(int) - bgr.min(axis=2)).astype(np.float64)
    edge = e2 > np.float32(p.edge_threshold) ** 2
    corner = lmin > np.float32(p.corner_threshold)
    grid = cell_grid(h, w, cell)
    ny, nx = grid.shape
    out = np.zeros((ny * nx, len(FEATURE_NAMES)))
    for i in range(ny):
        for j in range(nx):
            ys = slice(grid.ys[i], grid.ys[i + 1])
            xs = slice(grid.xs[j], grid.xs[j + 1])
            Y = slice(grid.ys[max(i - 1, 0)], grid.ys[min(i + 2, ny)])
            X = slice(grid.xs[max(j - 1, 0)], grid.xs[min(j + 2, nx)])
            A, C, B = a[ys, xs].astype(float).mean(), c[ys, xs].astype(float).mean(), b[ys, xs].astype(float).mean()
            out[i * nx + j, :17] = [
                gray[ys, xs].astype(float).mean(),
                gray[ys, xs].astype(float).std(),
                np.sqrt(e2[ys, xs].astype(float).mean()),
                edge[ys, xs].mean(),
                corner[ys, xs].mean(),
                0.5 * (A + C - np.sqrt((A - C) ** 2 + 4 * B * B)),
                f[ys, xs, 0].mean(),
                f[ys, xs, 1].mean(),
                f[ys, xs, 2].mean(),
                sat[ys, xs].mean(),
                col[ys, xs].astype(float).mean(),
                tex[ys, xs].astype(float).mean(),
                gray[Y, X].astype(float).std(),
                np.sqrt(e2[Y, X].astype(float).mean()),
                edge[Y, X].mean(),
                col[Y, X].astype(float).mean(),
                tex[Y, X].astype(float).mean(),
            ]
    for r, k in enumerate(RELATIVE_COLUMNS):
        v = out[:, k].astype(np.float32)
        out[:, 17 + r] = v - np.median(v)
    return out


@pytest.fixture(scope="module")
def frames():
    scene = compose_scene(sample_background((480, 360), seed=3), sample_objects(), rng=5, frame_size=(330, 250))
    rng = np.random.default_rng(0)
    noise = rng.integers(0, 256, (97, 131, 3)).astype(np.uint8)
    flat = np.full((64, 80, 3), 77, np.uint8)
    return [scene.image, noise, flat]


@pytest.mark.parametrize("cell", [16, 11])
def test_cell_features_match_brute_force(frames, cell):
    rng = np.random.default_rng(cell)
    cl = rng.normal(size=N_COLOR_CODES).astype(np.float32)
    tl = rng.normal(size=N_TEXTURE_CODES).astype(np.float32)
    p = FeatureParams()
    for img in frames:
        X, grid = cell_features(img, cell, cl, tl, p)
        assert X.dtype == np.float32 and X.shape == (grid.shape[0] * grid.shape[1], len(FEATURE_NAMES))
        ref = _brute_force(img, cell, cl, tl, p)
        # float32 per-pixel maps summed in float64 in a different order: agree to float32 rounding.
        np.testing.assert_allclose(X, ref, rtol=2e-5, atol=2e-3)
        Xx, gx = cell_features_xp(img, cell, cl, tl, p, np)
        np.testing.assert_array_equal(gx.ys, grid.ys)
        np.testing.assert_allclose(Xx, X, rtol=1e-5, atol=1e-4)


def test_grid_covers_image_exactly():
    for h, w, c in [(240, 320, 16), (97, 131, 11), (16, 16, 32)]:
        g = cell_grid(h, w, c)
        assert g.ys[0] == 0 and g.ys[-1] == h and g.xs[0] == 0 and g.xs[-1] == w
        assert np.all(np.diff(g.ys) > 0) and np.all(np.diff(g.xs) > 0)


def test_bad_input_named():
    with pytest.raises(ValueError, match="bgr"):
        cell_features(np.zeros((20, 20), np.uint8), 8)
    with pytest.raises(ValueError, match="color_lut"):
        cell_features(np.zeros((20, 20, 3), np.uint8), 8, color_lut=np.zeros(3))
