"""SURF's kernel phases built and checked on their own (the whole detector is tested in ``test_surf.py``)."""

from __future__ import annotations

import numpy as np

from objrec.features import _surf_kernels as K
from objrec.features._surf_stages import integral_image
from objrec.kernels import Target


def test_box_mean_phase_alone_matches_pixel_coverage():
    """The descriptor window's box means, built on their own: the mean of the piecewise-constant image over a
    fractional box, from the integral image, equals the pixels weighted by the box's coverage of each."""
    rng = np.random.default_rng(5)
    img = rng.integers(0, 256, (40, 48)).astype(np.uint8)
    H, W = img.shape
    t = Target("cpu", parallel=False)
    h = K.base_helpers(t)
    h.update(K.box_mean_helpers(t, h))
    box_mean, box_mean_inside = h["box_mean"], h["box_mean_inside"]

    def body(i, S, H, W, boxes, out):
        xa, xb, ya, yb = boxes[i, 0], boxes[i, 1], boxes[i, 2], boxes[i, 3]
        out[i, 0] = box_mean(S, W, H, xa, xb, ya, yb)
        out[i, 1] = box_mean_inside(S, W + 1, xa, xb, ya, yb, 1.0 / ((xb - xa) * (yb - ya)))

    n = 200
    lo = rng.uniform(0.0, [W - 6.0, H - 6.0], (n, 2))
    hi = lo + rng.uniform(0.3, 4.5, (n, 2))
    boxes = np.stack([lo[:, 0], hi[:, 0], lo[:, 1], hi[:, 1]], axis=1)
    out = np.zeros((n, 2))
    t.grid1d(body, nargs=5)(n, integral_image(img, np), H, W, boxes, out)

    def coverage(a, b, m):
        edges = np.arange(m, dtype=np.float64)
        return np.clip(np.minimum(edges + 1, b) - np.maximum(edges, a), 0.0, None)

    want = [
        coverage(ya, yb, H) @ img.astype(np.float64) @ coverage(xa, xb, W) / ((xb - xa) * (yb - ya))
        for xa, xb, ya, yb in boxes
    ]
    np.testing.assert_allclose(out[:, 0], want, rtol=1e-9)
    np.testing.assert_allclose(out[:, 1], want, rtol=1e-9)


def test_hessian_phase_alone_matches_box_sums():
    """``hess`` (shared corners, tables read into registers) equals ``Dxx Dyy - 0.81 Dxy^2`` from the box sums
    of ``hessian_parts``, and both equal the sums of the scaled 9x9 pattern over the pixels."""
    from objrec.features.surf_tables import hessian_boxes, surf_plan

    rng = np.random.default_rng(6)
    img = rng.integers(0, 256, (72, 80)).astype(np.uint8)
    H, W = img.shape
    plan = surf_plan(H, W, 2, 2)
    t = Target("cpu", parallel=False)
    h = K.base_helpers(t)
    h.update(K.hessian_helpers(t, h))
    hess, hessian_parts, layer_filters = h["hess"], h["hessian_parts"], h["layer_filters"]

    def body(i, S, boxes, wts, probes, out):
        o, l, p = probes[i, 0], probes[i, 1], probes[i, 2]
        off, wt = layer_filters(boxes, wts, o, l)
        out[i, 0] = hess(S, p, off, wt)
        dxx, dyy, dxy = hessian_parts(S, p, boxes, wts, o, l)
        out[i, 1] = dxx * dyy - 0.81 * dxy * dxy

    probes, want = [], []
    for o in range(plan["n_oct"]):
        for l in range(plan["n_layers"]):
            size = int(plan["linfo"][o, l, 0])
            for y, x in rng.integers(0, [H - size + 1, W - size + 1], (20, 2)):
                probes.append((o, l, y * (W + 1) + x))
                d = [
                    w * img[y + y1 : y + y2, x + x1 : x + x2].astype(np.float64).sum()
                    for x1, y1, x2, y2, w in hessian_boxes(size)
                ]
                want.append(sum(d[0:3]) * sum(d[3:6]) - 0.81 * sum(d[6:10]) ** 2)
    probes = np.array(probes, np.int64)
    out = np.zeros((len(probes), 2))
    t.grid1d(body, nargs=5)(len(probes), integral_image(img, np), plan["boxes"], plan["wts"], probes, out)
    np.testing.assert_allclose(out[:, 0], out[:, 1], rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(out[:, 0], want, rtol=1e-4, atol=1e-3)
