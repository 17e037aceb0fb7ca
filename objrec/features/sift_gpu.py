"""Our SIFT: one set of kernels (:mod:`objrec.features._sift_kernels`) built for CUDA and for the CPU.

``SIFT(backend="gpu")`` runs the CUDA build on CuPy arrays: the frame is uploaded once (or taken as the
CuPy array it is) and the keypoints and descriptors stay on the device, returned as CuPy :class:`Features`.
``SIFT(backend="numba")`` runs the same element functions built with ``numba.njit``, the CPU twin that CI
uses as the oracle for the GPU code (and compares with OpenCV); ``SIFT(backend="cudasim")`` runs the CUDA
build in Numba's simulator on host arrays (with ``NUMBA_ENABLE_CUDASIM=1`` only). Results follow
OpenCV's ``cv::SIFT`` conventions (octave -1 upsampled base, packed octave field, size, angle measured
clockwise as OpenCV reports it, descriptors scaled by 512 and saturated to uchar values, as float32).

A frame costs ``2 (n_layers + 2) n_octaves + 3`` pyramid launches (upsampling and two blur passes for the
base, then two per level; the horizontal pass of each new octave decimates the previous one on the fly, the
vertical pass writes the DoG plane), one extremum launch for every octave at once, one refinement +
orientation launch over the compacted candidates, and two descriptor launches; the compactions are CuPy
calls (``flatnonzero``, ``unique``). Per-resolution buffers (pyramid, DoG, flags, per-candidate scratch)
live in a plan of :mod:`objrec.features._plans`, allocated for the first frame of a size and reused.

Differences from OpenCV, on purpose: the mask is applied before ``n_features`` keeps the strongest (OpenCV
keeps the best of the whole image and then drops those outside the mask), and duplicate keypoints are
recognised by their refined integer location (OpenCV compares the floating-point fields).

References
----------
D. G. Lowe, "Distinctive image features from scale-invariant keypoints", IJCV 60(2), 2004.
doi:10.1023/B:VISI.0000029664.99615.94
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from objrec.backend import TransferCounter, to_device
from objrec.features import _sift_kernels as K
from objrec.features._frames import empty_features, place
from objrec.features._plans import Plan, PlanCache, plan_key
from objrec.types import Features

__all__ = ["implementation", "SiftRunner", "runner"]

SIFT_INIT_SIGMA = 0.5


def _gaussian_taps(sig: float) -> np.ndarray:
    """OpenCV's GaussianBlur kernel for a float image: ``ksize = cvRound(sig * 8 + 1) | 1``, normalised, float32."""
    ksize = int(round(sig * 8 + 1)) | 1
    x = np.arange(ksize, dtype=np.float64) - (ksize - 1) / 2
    w = np.exp(-(x * x) / (2 * sig * sig))
    return (w / w.sum()).astype(np.float32)


def _level_sigmas(n_layers: int, sigma: float) -> list[float]:
    """Incremental sigmas of levels 1 .. n_layers + 2 (level 0 is the octave base), as buildGaussianPyramid."""
    k = 2.0 ** (1.0 / n_layers)
    out = [float(sigma)]
    for i in range(1, n_layers + 3):
        prev = k ** (i - 1) * sigma
        total = prev * k
        out.append(math.sqrt(total * total - prev * prev))
    return out


def _numba_view(a: Any) -> Any:
    """A Numba device array sharing a CuPy array's memory (no copy, no stream synchronisation: CuPy and
    the kernels both use the default stream); NumPy arrays pass through (CPU build, simulator)."""
    if type(a).__module__.split(".")[0] != "cupy":
        return a
    from numba import cuda

    return cuda.as_cuda_array(a, sync=False)


class _Plan(Plan):
    """Per-resolution layout and buffers of the pyramid (kept and reused across frames of the same size)."""

    def __init__(self, key: tuple, H: int, W: int, n_layers: int, sigma: float, xp: Any, chunked: bool) -> None:
        super().__init__(key, xp)
        rows, cols = 2 * H, 2 * W
        self.H, self.W = H, W
        m = min(rows, cols)
        self.n_oct = int(round(math.log(m) / math.log(2.0) - 2)) + 1 if m > 0 else 0
        self.n_layers = n_layers
        dims = []
        for _ in range(max(self.n_oct, 0)):
            dims.append((rows, cols))
            rows, cols = rows // 2, cols // 2
        self.dims = dims
        oinfo = np.zeros((max(self.n_oct, 1), K.OINFO), np.int64)
        g = d = f = r0 = 0
        for o, (r, c) in enumerate(dims):
            oinfo[o] = (g, d, f, r, c, r0)
            g += (n_layers + 3) * r * c
            d += (n_layers + 2) * r * c
            f += n_layers * r * c
            r0 += r
        self.total_rows = r0
        self.oinfo_host = oinfo
        wts = self._taps(n_layers, sigma)
        c0 = dims[0][1] if dims else 1
        self.chunk = c0 if chunked else 1
        self.oinfo = to_device(oinfo, xp)
        self.wts = to_device(wts, xp)
        self.gauss = xp.empty(max(g, 1), np.float32)
        self.dog = xp.empty(max(d, 1), np.float32)
        self.flags = xp.empty(max(f, 1), np.uint8)
        self.tmp = xp.empty(max(dims[0][0] * dims[0][1], 1) if dims else 1, np.float32)
        self.no_mask = xp.zeros(1, np.uint8)
        # What the kernels get: Numba views of the persistent buffers, made once (a CuPy array passed to a
        # launch is re-imported, and its stream synchronised, at each of the ~60 launches of a frame).
        self.k = {n: _numba_view(getattr(self, n)) for n in ("oinfo", "wts", "gauss", "dog", "flags", "tmp", "no_mask")}

    def _taps(self, n_layers: int, sigma: float) -> np.ndarray:
        """Gaussian taps of every level, one row each, zero-padded; sets ``radius`` per level."""
        # Level 0 (the base) is blurred from the assumed 0.5 of the frame (x2 after upsampling); the others
        # incrementally from the level below.
        sig_base = math.sqrt(max(sigma * sigma - SIFT_INIT_SIGMA * SIFT_INIT_SIGMA * 4, 0.01))
        sigs = [sig_base] + _level_sigmas(n_layers, sigma)[1:]
        taps = [_gaussian_taps(s) for s in sigs]
        kmax = max(len(t) for t in taps)
        wts = np.zeros((len(taps), kmax), np.float32)
        for i, t in enumerate(taps):
            wts[i, : len(t)] = t
        self.radius = [(len(t) - 1) // 2 for t in taps]
        return wts

    def grid_w(self, cols: int) -> int:
        return (cols + self.chunk - 1) // self.chunk

    def gauss_at(self, off: int) -> Any:
        """The Gaussian buffer from ``off`` on (a cached view: the x2 frame's place)."""
        return self.memo(("gauss_at", off), lambda: _numba_view(self.gauss[off:]))


class SiftRunner:
    """The SIFT pipeline for one target (``"cpu"`` with NumPy, ``"cuda"`` with CuPy or the simulator).

    ``last_stats_`` after each call: ``candidates``, ``keypoints``, ``launches`` (our kernels; CuPy's
    compaction calls come on top); after :meth:`features` also ``h2d_bytes`` / ``d2h_bytes``, the bytes
    copied between host and device (:class:`objrec.backend.TransferCounter`), and ``wall_ms``.
    ``target`` and ``xp`` (the array module) are given to the constructor.
    """

    def __init__(self, target: str, xp: Any) -> None:
        self.target = target
        self.xp = xp
        self._plans: PlanCache[_Plan] = PlanCache()
        self.last_stats_: dict[str, Any] = {}

    @property
    def kernels(self) -> dict:
        """The launchers of this runner's target."""
        return K.kernels_for(self.target)

    def plan(self, H: int, W: int, n_layers: int, sigma: float) -> _Plan:
        """The buffers for ``H`` x ``W`` frames and these pyramid parameters (built on first use).
        ``H``, ``W``: the frame's size; ``n_layers``: the layers per octave; ``sigma``: the base blur."""
        key = plan_key((H, W), (int(n_layers), float(sigma)), self.xp)
        chunked = self.target == "cpu" or K._simulated()
        return self._plans.get(key, lambda: _Plan(key, H, W, n_layers, sigma, self.xp, chunked))

    # -- stages -------------------------------------------------------------------------------------
    def pyramid(self, img: Any, p: _Plan) -> None:
        """Gaussian levels and DoG planes of every octave into ``p.gauss`` / ``p.dog``.
        ``img``: the gray image on ``xp``; ``p``: the plan it fills."""
        k = p.k
        kern = self.kernels
        hblur, vblur = kern["hblur"], kern["vblur"]
        nl = p.n_layers
        r0, c0 = p.dims[0]
        # the x2 frame goes to level 1's place (free until level 1 is written)
        up = int(p.oinfo_host[0, K.GOFF]) + r0 * c0
        kern["up"](r0, p.grid_w(c0), _numba_view(img.reshape(-1)), p.H, p.W, p.gauss_at(up), c0, p.chunk)
        ch = p.chunk
        g, w, r = k["gauss"], k["wts"], p.radius[0]
        hblur(r0, p.grid_w(c0), g, up, r0, c0, 0.0, 0.0, 0, k["tmp"], c0, w, 0, r, g, 0, ch)
        vblur(r0, p.grid_w(c0), k["tmp"], g, 0, r0, c0, w, 0, r, k["dog"], 0, 0, 0, ch)
        oi = p.oinfo_host
        for o, (rows, cols) in enumerate(p.dims):
            plane = rows * cols
            g0 = int(oi[o, K.GOFF])
            d0 = int(oi[o, K.DOFF])
            for lv in range(1, nl + 3):
                if lv == 1 and o > 0:
                    pr, pc = p.dims[o - 1]
                    soff = int(oi[o - 1, K.GOFF]) + nl * pr * pc
                    # OpenCV's resize INTER_NEAREST: source index floor(x * ifx), ifx = 1 / (dst / src)
                    ifx = 1.0 / (cols / pc)
                    ify = 1.0 / (rows / pr)
                    args = (k["gauss"], soff, pr, pc, ifx, ify, 1)
                else:
                    args = (k["gauss"], g0 + (lv - 1) * plane, rows, cols, 0.0, 0.0, 0)
                hblur(rows, p.grid_w(cols), *args, k["tmp"], cols, k["wts"], lv, p.radius[lv], k["gauss"], g0, ch)
                vblur(
                    rows, p.grid_w(cols), k["tmp"], k["gauss"], g0 + lv * plane, rows, cols, k["wts"], lv, p.radius[lv],
                    k["dog"], d0 + (lv - 1) * plane, g0 + (lv - 1) * plane, 1, ch,
                )  # fmt: skip

    def detect(self, sift: Any, img: Any, mask: Any | None, p: _Plan) -> dict | None:
        """Extrema, refinement, orientation, selection: keypoint arrays on ``xp`` (None if there are none).
        ``sift``: the detector's settings (:class:`~objrec.features.sift.SIFT`); ``img``: the gray image on ``xp``;
        ``mask``: 0/1 mask (None: everywhere); ``p``: the frame's plan."""
        xp = self.xp
        kern = self.kernels
        k = p.k
        nl = p.n_layers
        # OpenCV's pre-threshold, in grey levels of the float pyramid
        thr = float(math.floor(0.5 * sift.contrast_threshold / nl * 255))
        c0 = p.dims[0][1]
        kern["extrema"](p.total_rows, p.grid_w(c0), k["dog"], k["flags"], k["oinfo"], p.n_oct, nl, thr, p.chunk)
        cand = xp.flatnonzero(p.flags)
        n = int(cand.size)
        self.last_stats_["candidates"] = n
        if n == 0:
            return None
        ok = p.scratch("ok", (n,), np.uint8)
        key = p.scratch("key", (n,), np.int64)
        xy = p.scratch("xy", (n, 2), np.float32)
        size = p.scratch("size", (n,), np.float32)
        resp = p.scratch("resp", (n,), np.float32)
        octv = p.scratch("octv", (n,), np.int32)
        ol = p.scratch("ol", (n, 2), np.int32)
        pf = p.scratch("pf", (n, 2), np.float32)
        nori = p.scratch("nori", (n,), np.int32)
        ang = p.scratch("ang", (n, K.MAX_ORI), np.float32)
        hist = p.scratch("hist", (n, K.HIST_SCRATCH), np.float64)
        if mask is None:
            m, use, mh, mw = k["no_mask"], 0, 1, 1
        else:
            m, use, (mh, mw) = _numba_view(mask.reshape(-1)), 1, mask.shape
        v = _numba_view
        kern["refine"](
            n, v(cand), k["dog"], k["gauss"], k["oinfo"], p.n_oct, nl, float(sift.contrast_threshold),
            float(sift.edge_threshold), float(sift.sigma), m, use, mh, mw,
            v(ok), v(key), v(xy), v(size), v(resp), v(octv), v(ol), v(pf), v(nori), v(ang), v(hist),
        )  # fmt: skip
        idx = xp.flatnonzero(ok)
        if int(idx.size) == 0:
            return None
        # Candidates that converged to the same sample give the same keypoint: keep one of each.
        _, first = xp.unique(key[idx], return_index=True)
        idx = idx[first]
        slots = xp.arange(K.MAX_ORI)[None, :] < nori[idx][:, None]
        sel = xp.flatnonzero(slots)
        rows = idx[sel // K.MAX_ORI]
        out = {
            "xy": xy[rows],
            "size": size[rows],
            "angle": ang[rows, sel % K.MAX_ORI],
            "response": resp[rows],
            "octave": octv[rows],
            "ol": ol[rows],
            "pf": pf[rows],
        }
        total = int(rows.size)
        nf = int(sift.n_features)
        if nf > 0 and total > nf:
            # KeyPointsFilter::retainBest: the n best, plus any tied with the n-th
            kth = -xp.partition(-out["response"], nf - 1)[nf - 1]
            keep = xp.flatnonzero(out["response"] >= kth)
            out = {name: a[keep] for name, a in out.items()}
        return out

    def describe(self, kp: dict, p: _Plan) -> Any:
        """128-d descriptors (uchar values as float32) of the keypoints in ``kp``.
        ``kp``: the keypoint arrays of :meth:`detect`; ``p``: the frame's plan."""
        xp = self.xp
        n = int(kp["xy"].shape[0])
        raw = p.scratch("raw", (n, K.DESC_DIM), np.float32)
        desc = xp.empty((n, K.DESC_DIM), np.float32)
        kern = self.kernels
        k = p.k
        v = _numba_view
        raw1, desc1 = v(raw.reshape(-1)), v(desc.reshape(-1))
        args = (v(kp["ol"]), v(kp["pf"]), v(kp["size"]), v(kp["angle"]), k["gauss"], k["oinfo"], raw1, desc1)
        if self.target == "cuda":  # a thread per cell, then a thread per keypoint to normalise
            kern["desc"](n * K.DESC_W * K.DESC_W, *args, 1)
            kern["finish"](n, raw1, desc1)
        else:
            kern["desc"](n, *args, K.DESC_W * K.DESC_W)
        return desc

    def run(self, sift: Any, img: Any, mask: Any | None = None) -> dict | None:
        """Everything on ``xp``: a dict of keypoint arrays and ``desc``, or None when nothing is found.
        ``sift``: the detector's settings; ``img``: the gray image on ``xp``; ``mask``: 0/1 mask (None: everywhere)."""
        t = K.target_for(self.target)
        before = t.launches
        H, W = (int(s) for s in img.shape)
        p = self.plan(H, W, int(sift.n_octave_layers), float(sift.sigma))
        self.last_stats_ = {"candidates": 0, "keypoints": 0, "n_octaves": p.n_oct}
        out = None
        if p.n_oct > 0:
            self.pyramid(img, p)
            out = self.detect(sift, img, mask, p)
            if out is not None:
                out["desc"] = self.describe(out, p)
                self.last_stats_["keypoints"] = int(out["xy"].shape[0])
        self.last_stats_["launches"] = t.launches - before if t.is_cuda else None
        return out

    def features(self, sift: Any, img: Any, mask: Any | None = None) -> Features:
        """:class:`Features` on this runner's array module from a gray uint8 image and 0/1 mask.

        Host inputs are uploaded once when the runner works on CuPy; device inputs are used where they are.
        The results are not copied back: on CuPy they stay on the device.
        ``sift``: the detector's settings; ``img``: the gray image; ``mask``: 0/1 mask (None: everywhere).
        """
        xp = self.xp
        t0 = time.perf_counter()
        with TransferCounter() as tc:
            d_img, d_mask = place(img, mask, xp)
            out = self.run(sift, d_img, d_mask)
        self.last_stats_["h2d_bytes"] = tc.upload_bytes
        self.last_stats_["d2h_bytes"] = tc.download_bytes
        self.last_stats_["wall_ms"] = (time.perf_counter() - t0) * 1e3
        if out is None:
            return empty_features(K.DESC_DIM, "sift", xp)
        n = int(out["xy"].shape[0])
        return Features(
            xy=out["xy"],
            size=out["size"],
            angle=out["angle"],
            response=out["response"],
            octave=out["octave"],
            laplacian=xp.zeros(n, np.int8),
            descriptors=out["desc"],
            kind="sift",
        )


_RUNNERS: dict[tuple[str, str], SiftRunner] = {}


def runner(target: str, xp: Any = None) -> SiftRunner:
    """The shared runner for ``target`` ("cpu" or "cuda") and array module (default: NumPy on the CPU, CuPy on
    a real GPU, NumPy under the simulator).
    ``xp``: the array module."""
    if xp is None:
        if target == "cuda" and not K._simulated():
            import cupy  # noqa: PLC0415 - optional dependency, imported on use

            xp = cupy
        else:
            xp = np
    key = (target, xp.__name__)
    r = _RUNNERS.get(key)
    if r is None:
        r = _RUNNERS[key] = SiftRunner(target, xp)
    return r


_TARGETS = {"numba": ("cpu", False), "gpu": ("cuda", True), "cudasim": ("cuda", False)}


def implementation(backend: str) -> Callable[[Any, Any, Any | None], Features]:
    """``impl(sift, gray_uint8, mask_or_None) -> Features`` for ``backend``.

    Parameters
    ----------
    backend : {"numba", "gpu", "cudasim"}
        ``"numba"``: the CPU twin on NumPy arrays; ``"gpu"``: the CUDA build on CuPy arrays; ``"cudasim"``:
        the CUDA build on NumPy arrays under Numba's simulator.
    """
    if backend not in _TARGETS:
        raise ValueError(f"backend: expected 'gpu', 'numba' or 'cudasim', got {backend!r}")
    target, on_device = _TARGETS[backend]

    def impl(sift: Any, gray: Any, mask: Any | None) -> Features:
        if on_device:
            import cupy as xp  # noqa: PLC0415 - optional dependency, imported on use
        else:
            xp = np
        r = runner(target, xp)
        feats = r.features(sift, gray, mask)
        sift.last_stats_ = dict(r.last_stats_)
        return feats

    return impl
