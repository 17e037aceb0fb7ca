"""SURF (Bay et al. 2008) of our own, on the CPU (Numba) and the GPU (Numba CUDA), in OpenCV's conventions.

The element functions live in :mod:`objrec.features._surf_kernels`; this module builds the per-resolution
tables (layer sizes, sampling steps, scaled box filters), owns the buffers, and runs the stages:

1. integral image of the frame (and of the mask, or of the union of the prefilter's boxes);
2. ``det``: determinant of the box-filter Hessian for every layer of every octave, one launch (with boxes,
   only the columns whose filters reach one);
3. ``nms``: threshold, mask and 3x3x3 non-maximum suppression into a flag plane, one launch;
4. compaction of the flags (on the device when ``xp`` is CuPy);
5. ``interp``: sub-pixel/sub-scale refinement and Laplacian sign per candidate, one launch;
6. ordering (OpenCV's ``KeypointGreater``), ``max_features`` (before description, so fewer cost less);
7. ``describe``: orientation and descriptor per keypoint, one launch (one block per keypoint on the GPU).
"""

from __future__ import annotations

import os
from fractions import Fraction
from types import ModuleType
from typing import Any

import numpy as np

from objrec.backend import TransferCounter, resolve_backend, to_device, to_numpy, to_scalar
from objrec.features import _surf_kernels as K
from objrec.features._frames import check_image, empty_features, place
from objrec.features._plans import Plan, PlanCache, plan_key
from objrec.imageio import InputError
from objrec.types import Features, Regions

__all__ = ["SURF", "surf_plan", "hessian_boxes"]

# Numba's OpenMP workers spin between parallel regions by default. Where cores are shared, the spinning takes
# the time that other workers and the Python glue between stages need; waiting passively costs nothing on an
# idle machine. Read once, when libgomp loads (the first parallel launch); a value set by the user wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# The 9x9 filters of Bay et al. as OpenCV writes them: (x1, y1, x2, y2, weight) boxes, x2/y2 exclusive.
_DXX = ((0, 2, 3, 7, 1), (3, 2, 6, 7, -2), (6, 2, 9, 7, 1))
_DYY = ((2, 0, 7, 3, 1), (2, 3, 7, 6, -2), (2, 6, 7, 9, 1))
_DXY = ((1, 1, 4, 4, 1), (5, 1, 8, 4, -1), (1, 5, 4, 8, -1), (5, 5, 8, 8, 1))

_ORI_RADIUS = 6
_ORI_SIGMA = 2.5
_DESC_SIGMA = 3.3
_HAAR_SIZE0 = 9
_HAAR_SIZE_INC = 6
_DESC_CHUNK = 16  # keypoints per work item of the CPU describe launch
NI_, NJ_ = K.NI, K.NJ


def hessian_boxes(size: int) -> list[tuple[int, int, int, int, float]]:
    """The ten boxes (Dxx, Dyy, Dxy) of the ``size`` filter: ``(x1, y1, x2, y2, weight)`` relative to its top-left.

    Corners are the 9x9 ones scaled by ``size / 9`` and rounded; each weight is divided by its box's area
    (OpenCV's ``resizeHaarPattern``). With sizes ``(9 + 6 l) 2^o`` no corner falls on a rounding tie.
    """
    ratio = Fraction(size, _HAAR_SIZE0)
    out = []
    for x1, y1, x2, y2, w in _DXX + _DYY + _DXY:
        a, b, c, d = (round(ratio * v) for v in (x1, y1, x2, y2))
        out.append((a, b, c, d, w / float((c - a) * (d - b))))
    return out


def _gaussian(n: int, sigma: float) -> np.ndarray:
    x = np.arange(n, dtype=np.float64) - (n - 1) / 2.0
    g = np.exp(-(x * x) / (2.0 * sigma * sigma))
    return g / g.sum()


def surf_plan(height: int, width: int, n_octaves: int, n_octave_layers: int, sample_step: int = 1) -> dict[str, Any]:
    """Tables for one resolution: octave and layer geometry, box offsets into the raveled integral image.

    Returns a dict with ``oinfo`` (n_oct, 6) int32, ``linfo`` (n_oct, L, 6) int32, ``boxes`` (n_oct, L, 10, 4)
    int32 flat corner offsets, ``wts`` (n_oct, L, 10) float32, ``det_len``, ``flag_len``, ``grid`` (rows, cols)
    of the single launch over all octaves, and ``n_oct``/``n_layers``.
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
        "det_samples": int(sum(int(r[NI_]) * int(r[NJ_]) for lrow in linfo for r in lrow)),
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


def _integral(img: Any, xp: ModuleType) -> Any:
    """Raveled (H+1) x (W+1) integral image: int32 when the total fits, else int64 (exact either way)."""
    H, W = img.shape
    dtype = np.int32 if H * W * 255 < 2**31 - 1 else np.int64
    if xp is np:
        import cv2

        if dtype == np.int32:
            return cv2.integral(np.ascontiguousarray(img), sdepth=cv2.CV_32S).reshape(-1)
    S = xp.zeros((H + 1, W + 1), dtype)
    S[1:, 1:] = xp.cumsum(xp.cumsum(img, axis=0, dtype=dtype), axis=1, dtype=dtype)
    return S.reshape(-1)


def _flag_indices(flags: Any, xp: ModuleType) -> Any:
    """``flatnonzero`` of a sparse uint8 flag plane: on the host, nonzero 8-byte words first (8x fewer elements
    to scan), then the bytes inside them; on the device, CuPy's own."""
    if xp is not np:
        return xp.flatnonzero(flags)
    n8 = flags.shape[0] // 8 * 8
    words = np.flatnonzero(flags[:n8].view(np.uint64))
    r, c = np.nonzero(flags[:n8].reshape(-1, 8)[words])
    head = words[r] * 8 + c
    return np.concatenate([head, np.flatnonzero(flags[n8:]) + n8]) if n8 < flags.shape[0] else head


def _check_regions(regions: Any, shape: tuple[int, int]) -> np.ndarray | None:
    """Boxes of ``regions`` clipped to the frame, empty ones dropped, sorted by x0 (host int32 (N, 4))."""
    if regions is None:
        return None
    if not isinstance(regions, Regions):
        raise InputError(f"regions: expected objrec.types.Regions or None, got {type(regions).__name__}")
    H, W = shape
    b = regions.boxes.astype(np.int64).reshape(-1, 4).copy()
    b[:, [0, 2]] = np.clip(b[:, [0, 2]], 0, W)
    b[:, [1, 3]] = np.clip(b[:, [1, 3]], 0, H)
    b = b[(b[:, 2] > b[:, 0]) & (b[:, 3] > b[:, 1])]
    return np.ascontiguousarray(b[np.argsort(b[:, 0], kind="stable")], np.int32)


class SURF:
    """Speeded-Up Robust Features: fast-Hessian detector and Haar-wavelet descriptor.

    Follows Bay et al. (2008) with OpenCV's parameterisation (``cv2.xfeatures2d.SURF_create``), so settings
    and results carry over: box filters of size ``(9 + 6 l) 2^o`` for ``l < n_octave_layers + 2``, sampling
    step ``2^o`` (``sample_step 2^o``), ``det = Dxx Dyy - (0.9 Dxy)^2`` with area-normalised box weights,
    3x3x3 non-maximum suppression, quadratic interpolation of position and scale, orientation from Haar
    responses of size ``4s`` within ``6s`` (Gaussian ``2.5s``, sliding 60 degree window), and a descriptor
    over a ``20s`` window of 4x4 sub-regions (Haar size ``2s``, Gaussian ``3.3s``), with ``s = 1.2 size / 9``.

    Parameters
    ----------
    hessian_threshold : float
        Keep maxima whose Hessian determinant exceeds this (OpenCV's scale: 100 gives many, 400 fewer).
    n_octaves : int
        Number of octaves (the filter sizes double from one to the next).
    n_octave_layers : int
        Layers per octave in which maxima are searched (two more are computed for the 3x3x3 test).
    extended : bool
        128-d descriptors (sums split by the sign of the other derivative) instead of 64-d.
    upright : bool
        Skip orientation (U-SURF): angles are reported as 270, OpenCV's convention.
    max_features : int or None
        Keep only the strongest ``max_features`` keypoints (by response).
    backend : {"auto", "cpu", "gpu", "cudasim"}
        ``"cpu"`` runs the Numba build, ``"gpu"`` the Numba CUDA build on CuPy arrays; ``"auto"`` picks the GPU
        when CuPy sees one. ``"cudasim"`` runs the CUDA build in Numba's simulator on host arrays (only with
        ``NUMBA_ENABLE_CUDASIM=1``, set before Numba is imported): how the GPU kernels are tested without one.
    sample_step : {1, 2}
        Sampling step of the first octave (each further octave doubles it). 1 is OpenCV's layout. 2 samples
        every octave twice as coarsely in each direction, as the default initial sampling step of OpenSURF
        (C. Evans, "Notes on the OpenSURF Library", 2009) does: the detector costs about half as much, the
        interpolation still places keypoints below the grid step, and a few of the weakest and smallest
        maxima fall between samples.

    Attributes
    ----------
    descriptor_size : int
        64, or 128 when ``extended``.
    last_stats_ : dict
        After a call: ``candidates`` (maxima before interpolation), ``keypoints``, ``backend``,
        ``described`` (keypoints oriented and described, after ``max_features``),
        ``det_samples_frame`` (Hessian samples of the whole frame, all layers); on the CPU ``det_samples``
        (Hessians evaluated) and ``det_visited`` (samples the detector looked at, mask tests included: with
        ``regions`` only those whose filters reach a box); for the CUDA build ``launches`` (Numba kernel
        launches); ``h2d_bytes`` / ``d2h_bytes`` copied between host and device (see
        :class:`objrec.backend.TransferCounter`).

    Notes
    -----
    Differences from OpenCV's CPU implementation: each descriptor sample is the mean of an ``s x s`` box read
    from the integral image (OpenCV resamples a ``21s`` window bilinearly and shrinks it with ``INTER_AREA``;
    the two agree closely, and ours costs the same at every scale), the orientation histogram uses rounded
    degrees exactly as OpenCV's window test does but from 5-degree groups instead of 72 passes, and ``mask``
    restricts where the Hessian is evaluated, not only where maxima are kept. Keypoints whose orientation
    cannot be sampled (filters larger than the image) are dropped, as OpenCV does.

    References
    ----------
    H. Bay, A. Ess, T. Tuytelaars, L. Van Gool, "Speeded-Up Robust Features (SURF)", Computer Vision and Image
    Understanding 110(3), 346-359, 2008. doi:10.1016/j.cviu.2007.09.014

    M. Brown, D. Lowe, "Invariant features from interest point groups", BMVC 2002 (the interpolation step).

    Examples
    --------
    >>> import numpy as np
    >>> from objrec.features import SURF
    >>> img = np.zeros((96, 96), np.uint8)
    >>> img[30:60, 30:60] = 255
    >>> f = SURF(hessian_threshold=400, backend="cpu").detect_and_compute(img)
    >>> f.kind, f.descriptors.shape[1]
    ('surf', 64)
    """

    kind = "surf"

    def __init__(
        self,
        hessian_threshold: float = 100,
        n_octaves: int = 4,
        n_octave_layers: int = 3,
        extended: bool = False,
        upright: bool = False,
        max_features: int | None = None,
        backend: str = "auto",
        sample_step: int = 1,
    ) -> None:
        self.hessian_threshold = hessian_threshold
        self.n_octaves = n_octaves
        self.n_octave_layers = n_octave_layers
        self.extended = extended
        self.upright = upright
        self.max_features = max_features
        self.backend = backend
        self.sample_step = sample_step

    @property
    def descriptor_size(self) -> int:
        """Length of a descriptor: 64, or 128 when ``extended``."""
        return 128 if self.extended else 64

    # ------------------------------------------------------------------ public API
    def detect_and_compute(
        self,
        gray: np.ndarray,
        mask: np.ndarray | None = None,
        regions: Regions | None = None,
        max_features: int | None = None,
    ) -> Features:
        """Detect keypoints and compute descriptors on a gray (or BGR) uint8 image.

        Parameters
        ----------
        gray : (H, W) or (H, W, 3|4) uint8 array
            NumPy or CuPy. With ``backend="gpu"`` a NumPy image is uploaded once; a CuPy image (or a slice of
            one: a crop of a device frame) is used where it is.
        mask : (H, W) uint8 or bool array, optional
            Nonzero where features are wanted. The Hessian is evaluated only where a maximum could pass
            OpenCV's mask test (mean of the mask over the filter at least 0.5).
        regions : objrec.types.Regions, optional
            Boxes ``(x0, y0, x1, y1)`` from the prefilter. The result equals that of a mask covering the union
            of the boxes (intersected with ``mask`` when both are given), but the detector visits only the
            columns whose filters reach a box, so its cost follows the boxes' area. No boxes: no features.
        max_features : int, optional
            For this call, describe at most this many of the strongest keypoints (the smaller of this and
            the detector's ``max_features``): a caller under a time budget pays only for what it keeps.

        Returns
        -------
        Features
            ``kind="surf"``, sorted strongest first, empty when nothing is found. On the GPU the arrays are
            CuPy arrays that stay on the device (``Features.to_host`` copies them).
        """
        img, m = self._check_input(gray, mask)
        boxes = _check_regions(regions, img.shape)
        resolved = resolve_backend(self.backend, "SURF", extra=("cudasim",))
        cap = self.max_features if max_features is None else int(max_features)
        if max_features is not None and self.max_features is not None:
            cap = min(cap, int(self.max_features))
        with TransferCounter() as tc:
            if resolved == "gpu":
                out = self._run_gpu(img, m, boxes, cap)
            else:
                img, m = place(img, m, np)
                out = self._run(img, m, np, "cuda" if resolved == "cudasim" else "cpu", boxes, cap)
        self.last_stats_.update(h2d_bytes=tc.upload_bytes, d2h_bytes=tc.download_bytes)
        return out

    def detect(self, gray: np.ndarray, mask: np.ndarray | None = None, regions: Regions | None = None) -> Features:
        """Keypoints with orientation (the descriptors are computed too: they cost little next to detection)."""
        return self.detect_and_compute(gray, mask, regions)

    def compute(self, gray: np.ndarray, keypoints: Features) -> Features:
        """Orientation (unless ``upright``) and descriptors at given keypoints (``xy`` and ``size`` are used).

        Like OpenCV's ``compute``, keypoints whose orientation cannot be sampled are dropped.
        """
        img = to_numpy(self._check_input(gray, None)[0])
        if not isinstance(keypoints, Features):
            raise InputError(f"keypoints: expected objrec.types.Features, got {type(keypoints).__name__}")
        if len(keypoints) == 0:
            return Features.empty(self.descriptor_size, self.kind)
        angle, desc, ok = self._describe_host(img, keypoints.xy, keypoints.size, "cpu")
        keep = ok.astype(bool)
        return Features(
            keypoints.xy[keep],
            keypoints.size[keep],
            angle[keep],
            keypoints.response[keep],
            keypoints.octave[keep],
            keypoints.laplacian[keep],
            desc[keep],
            self.kind,
        )

    # ------------------------------------------------------------------ internals
    def _check_params(self) -> None:
        if not (isinstance(self.hessian_threshold, (int, float)) and self.hessian_threshold >= 0):
            raise ValueError(f"hessian_threshold: expected a number >= 0, got {self.hessian_threshold!r}")
        for name in ("n_octaves", "n_octave_layers"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {v!r}")
        if self.n_octaves > 12:
            raise ValueError(f"n_octaves: expected at most 12, got {self.n_octaves}")
        if self.sample_step not in (1, 2) or isinstance(self.sample_step, bool):
            raise ValueError(f"sample_step: expected 1 or 2, got {self.sample_step!r}")
        mf = self.max_features
        if mf is not None and (not isinstance(mf, (int, np.integer)) or isinstance(mf, bool) or mf < 0):
            raise ValueError(f"max_features: expected None or an int >= 0, got {mf!r}")

    def _check_input(self, gray: Any, mask: Any) -> tuple[Any, Any]:
        """Parameters, then image and mask (gray uint8, 0/1 uint8), each left on its device."""
        self._check_params()
        return check_image(gray, mask)

    def _plan(self, shape: tuple[int, int], xp: ModuleType) -> Plan:
        """Tables and buffers for one resolution on ``xp``, kept (a few sizes, least recently used dropped)."""
        params = (int(self.n_octaves), int(self.n_octave_layers), int(self.sample_step))
        key = plan_key(shape, params, xp)
        cache = self.__dict__.get("_plans_")
        if cache is None:
            cache = self._plans_ = PlanCache()
        return cache.get(key, lambda: self._build_plan(key, shape, xp))

    def _build_plan(self, key: tuple, shape: tuple[int, int], xp: ModuleType) -> Plan:
        plan = Plan(key, xp)
        plan.update(
            surf_plan(shape[0], shape[1], int(self.n_octaves), int(self.n_octave_layers), int(self.sample_step))
        )
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

    def _run(self, img: Any, mask: Any, xp: ModuleType, target: str, *args: Any) -> Features:
        """:meth:`_pipeline` (``args``: boxes, max_features) as :class:`Features`, with the CUDA launches
        it made counted in ``last_stats_``."""
        if target == "cuda":
            from objrec.kernels import get_target

            t = get_target("cuda")
            before = t.launches
            out = self._pipeline(img, mask, xp, target, *args)
            self.last_stats_["launches"] = t.launches - before
        else:
            out = self._pipeline(img, mask, xp, target, *args)
        return self._to_features(out, xp)

    def _to_features(self, out: dict[str, Any], xp: ModuleType) -> Features:
        """The pipeline's arrays as :class:`Features`, on the device they were computed on."""
        if out["n"] == 0:
            return empty_features(self.descriptor_size, self.kind, xp)
        return Features(
            out["xy"], out["size"], out["angle"], out["response"], out["octave"], out["laplacian"], out["desc"],
            self.kind,
        )  # fmt: skip

    def _pipeline(
        self,
        img: Any,
        mask: Any,
        xp: ModuleType,
        target: str,
        boxes: np.ndarray | None = None,
        max_features: int | None = None,
    ) -> dict[str, Any]:
        """All stages on arrays of ``xp`` with the kernels of ``target``; results stay in ``xp`` arrays.

        ``boxes`` (host int32 (N, 4), clipped to the frame, sorted by x0) restricts the detector to the regions;
        at most ``max_features`` (default: the detector's) of the strongest keypoints are described.
        """
        max_features = self.max_features if max_features is None else max_features
        kern = K.kernels_for(target)
        H, W = (int(v) for v in img.shape)
        plan = self._plan((H, W), xp)
        S = _integral(img, xp)
        stats: dict[str, Any] = {"backend": target, "det_samples_frame": plan["det_samples"]}
        self.last_stats_ = stats
        empty = {"n": 0}
        if plan["n_oct"] == 0 or plan["flag_len"] == 0:
            stats.update(candidates=0, keypoints=0, det_samples=0, det_visited=0)
            return empty
        cand = self._candidates(S, mask, boxes, plan, kern, target, xp, stats)
        n = int(cand.size)
        stats["candidates"] = n
        if n == 0:
            stats["keypoints"] = 0
            return empty
        xy, size, resp, lap, octv = self._keypoints(cand, S, plan, kern, xp, max_features)
        n = int(xy.shape[0])
        if n == 0:
            stats["keypoints"] = 0
            return empty
        # max_features is applied before orientation and description: a budgeted caller pays for the
        # descriptors it keeps only.
        stats["described"] = n
        angle, desc, dok = self._describe(S, H, W, xy, size, xp, kern, plan)
        good = xp.flatnonzero(dok)
        if int(good.size) != n:
            xy, size, resp, lap, octv, angle, desc = (a[good] for a in (xy, size, resp, lap, octv, angle, desc))
            n = int(good.size)
        stats["keypoints"] = n
        return {
            "n": n,
            "xy": xy,
            "size": size,
            "angle": angle,
            "response": resp,
            "octave": octv,
            "laplacian": lap,
            "desc": desc,
        }

    def _candidates(self, S, mask, boxes, plan, kern, target, xp, stats) -> Any:
        """Hessian planes and non-maximum suppression; the flat indices of the maxima (on ``xp``)."""
        H, W = plan["shape"]
        mode = K.DET_ALL
        if boxes is not None:
            # The nms mask test and the keypoints' filters see the union of the boxes (and the mask); built
            # where the frame is, so a device frame needs no mask upload.
            union = xp.zeros((H, W), np.uint8)
            for x0, y0, x1, y1 in boxes.tolist():
                union[y0:y1, x0:x1] = 1
            mode = K.DET_BOXES if mask is None else K.DET_BOXES_MASK
            mask = union if mask is None else union & mask
        elif mask is not None:
            mode = K.DET_MASK
        M = _integral(mask, xp) if mask is not None else plan["no_mask"]
        rbox = to_device(boxes, xp) if boxes is not None else plan["no_boxes"]
        nbox = 0 if boxes is None else int(boxes.shape[0])
        det, flags = plan["det"], plan["flags"]
        oinfo, linfo, hboxes, wts = plan["oinfo"], plan["linfo"], plan["boxes"], plan["wts"]
        n_oct, L = plan["n_oct"], plan["n_layers"]
        gr, gc = plan["grid"]
        # CPU: one work item per row (box offsets stay in registers along it); GPU: one thread per sample.
        chunk = K.target_for(target).row_chunk(gc)
        nc = (gc + chunk - 1) // chunk
        # Hessian evaluations per row, counted on the host (on a device it would cost an atomic per thread).
        counts = plan["counts"]
        if counts.shape[0] > 1:
            counts[:] = 0
        kern["det"](gr, nc, S, M, det, oinfo, linfo, hboxes, wts, mode, n_oct, L, H, W, chunk, rbox, nbox, counts)
        if counts.shape[0] > 1:
            half = counts.shape[0] // 2
            stats["det_samples"] = int(counts[:half].sum())
            stats["det_visited"] = int(counts[half:].sum())
        use_mask = int(mode != K.DET_ALL)
        thr = float(self.hessian_threshold)
        kern["nms"](gr, nc, det, flags, oinfo, linfo, M, use_mask, n_oct, L - 2, thr, W, chunk)
        return _flag_indices(flags[: plan["flag_len"]], xp)

    def _keypoints(self, cand, S, plan, kern, xp, max_features=None) -> tuple[Any, Any, Any, Any, Any]:
        """Interpolated keypoints of the candidates, strongest first, at most ``max_features``:
        ``(xy, size, response, laplacian, octave)`` on ``xp`` (copies, not views of the plan's scratch)."""
        n = int(cand.size)
        xy = plan.scratch("xy", (n, 2), np.float32)
        size = plan.scratch("size", (n,), np.float32)
        resp = plan.scratch("resp", (n,), np.float32)
        lap = plan.scratch("lap", (n,), np.int8)
        octv = plan.scratch("octv", (n,), np.int32)
        ok = plan.scratch("ok", (n,), np.uint8)
        det, oinfo, linfo, hboxes, wts = plan["det"], plan["oinfo"], plan["linfo"], plan["boxes"], plan["wts"]
        W = plan["shape"][1]
        kern["interp"](n, cand, det, oinfo, linfo, hboxes, wts, S, plan["n_oct"], W, xy, size, resp, lap, octv, ok)
        keep = xp.flatnonzero(ok)
        xy, size, resp, lap, octv = xy[keep], size[keep], resp[keep], lap[keep], octv[keep]
        # OpenCV's KeypointGreater: response, size, octave descending, then y descending, x ascending. Responses
        # rarely tie, so one key usually decides (cheaper than the five-key lexsort, which settles ties).
        order = xp.argsort(-resp, kind="stable")
        rs = resp[order]
        if to_scalar((rs[1:] == rs[:-1]).any()):
            order = xp.lexsort(xp.stack([xy[:, 0], -xy[:, 1], -octv.astype(np.float32), -size, -resp]))
        if max_features is not None:
            order = order[: int(max_features)]
        return xy[order], size[order], resp[order], lap[order], octv[order]

    def _describe(self, S, H, W, xy, size, xp, kern, plan):
        n = int(xy.shape[0])
        D = self.descriptor_size
        angle = xp.empty(n, np.float32)
        desc = xp.empty((n, D), np.float32)
        ok = xp.empty(n, np.uint8)
        args = (
            S,
            H,
            W,
            xy,
            size,
            int(bool(self.upright)),
            int(bool(self.extended)),
            plan["ori_pts"],
            plan["ori_w"],
            int(plan["ori_pts"].shape[0]),
            plan["desc_w"],
        )
        if not hasattr(kern["describe"], "kernel"):  # the CPU build (a CUDA launcher carries its kernel)
            # Chunks of keypoints over the threads, each chunk with its own scratch slice (kept in the plan);
            # small chunks balance the load when the machine is busy or keypoints differ in cost (borders).
            import numba

            chunk = max(1, min(_DESC_CHUNK, -(-n // (4 * numba.get_num_threads()))))
            nch = -(-n // chunk)
            scratch = plan.get("desc_scratch")
            if scratch is None or scratch.shape[0] < nch * K.SH_LEN:
                scratch = plan["desc_scratch"] = np.empty(max(nch, 64) * K.SH_LEN, np.float32)
                plan["desc_tmp"] = np.empty(max(nch, 64) * K.T_LEN, np.float64)
            kern["describe"](n, chunk, *args, scratch, plan["desc_tmp"], angle, desc.reshape(-1), ok)
        else:
            kern["describe"](n, *args, angle, desc.reshape(-1), ok)
        return angle, desc, ok

    def _describe_host(self, img: np.ndarray, xy: np.ndarray, size: np.ndarray, target: str):
        H, W = img.shape
        plan = self._plan((H, W), np)
        S = _integral(img, np)
        xy = np.ascontiguousarray(xy, np.float32)
        size = np.ascontiguousarray(size, np.float32)
        return self._describe(S, H, W, xy, size, np, K.kernels_for(target), plan)

    def _run_gpu(
        self, img: Any, mask: Any, boxes: np.ndarray | None = None, max_features: int | None = None
    ) -> Features:
        """The CUDA build on CuPy arrays: host inputs are uploaded once, device inputs used where they are."""
        import cupy as cp

        d_img, d_mask = place(img, mask, cp)
        return self._run(d_img, d_mask, cp, "cuda", boxes, max_features)
