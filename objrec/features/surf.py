"""SURF (Bay et al. 2008) of our own, on the CPU (Numba) and the GPU (Numba CUDA), in OpenCV's conventions.

:class:`SURF` checks its inputs, keeps a plan per frame size (:func:`objrec.features.surf_tables.make_plan`)
and runs the stages of :mod:`objrec.features._surf_stages` in order; their element functions live in
:mod:`objrec.features._surf_kernels`.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

import numpy as np

from objrec.backend import TransferCounter, resolve_backend, to_numpy
from objrec.features._frames import check_image, empty_features, place
from objrec.features._plans import Plan, PlanCache, plan_key
from objrec.features._surf_stages import (
    check_regions,
    describe_keypoints,
    detect_candidates,
    integral_image,
    interpolate_keypoints,
)
from objrec.features.surf_tables import make_plan
from objrec.imageio import InputError
from objrec.types import Features, Regions

__all__ = ["SURF"]

# Numba's OpenMP workers spin between parallel regions by default. Where cores are shared, the spinning takes
# the time that other workers and the Python glue between stages need; waiting passively costs nothing on an
# idle machine. Read once, when libgomp loads (the first parallel launch); a value set by the user wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _check_params(det: SURF) -> None:
    """Raise ValueError naming the first of ``det``'s parameters that is out of range."""
    if not (isinstance(det.hessian_threshold, (int, float)) and det.hessian_threshold >= 0):
        raise ValueError(f"hessian_threshold: expected a number >= 0, got {det.hessian_threshold!r}")
    for name in ("n_octaves", "n_octave_layers"):
        v = getattr(det, name)
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name}: expected an int >= 1, got {v!r}")
    if det.n_octaves > 12:
        raise ValueError(f"n_octaves: expected at most 12, got {det.n_octaves}")
    if det.sample_step not in (1, 2) or isinstance(det.sample_step, bool):
        raise ValueError(f"sample_step: expected 1 or 2, got {det.sample_step!r}")
    mf = det.max_features
    if mf is not None and (not isinstance(mf, (int, np.integer)) or isinstance(mf, bool) or mf < 0):
        raise ValueError(f"max_features: expected None or an int >= 0, got {mf!r}")


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
        boxes = check_regions(regions, img.shape)
        resolved = resolve_backend(self.backend, "SURF", extra=("cudasim",))
        cap = self.max_features if max_features is None else int(max_features)
        if max_features is not None and self.max_features is not None:
            cap = min(int(max_features), int(self.max_features))
        with TransferCounter() as tc:
            if resolved == "gpu":
                out = self._run_gpu(img, m, boxes, cap)
            else:
                img, m = place(img, m, np)
                out = self._run(img, m, np, "cuda" if resolved == "cudasim" else "cpu", boxes, cap)
        self.last_stats_.update(h2d_bytes=tc.upload_bytes, d2h_bytes=tc.download_bytes)
        return out

    def detect(self, gray: np.ndarray, mask: np.ndarray | None = None, regions: Regions | None = None) -> Features:
        """Keypoints with orientation (the descriptors are computed too: they cost little next to detection).
        ``gray``: the image (gray or BGR uint8, on the host or the device); ``mask``: (H, W) nonzero where keypoints may
        lie (None: everywhere); ``regions``: boxes to search (None: the whole image)."""
        return self.detect_and_compute(gray, mask, regions)

    def compute(self, gray: np.ndarray, keypoints: Features) -> Features:
        """Orientation (unless ``upright``) and descriptors at given keypoints (``xy`` and ``size`` are used).

        Like OpenCV's ``compute``, keypoints whose orientation cannot be sampled are dropped.
        ``gray``: the image (gray or BGR uint8); ``keypoints``: where to describe.
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
    def _check_input(self, gray: Any, mask: Any) -> tuple[Any, Any]:
        """Parameters, then image and mask (gray uint8, 0/1 uint8), each left on its device."""
        _check_params(self)
        return check_image(gray, mask)

    def _plan(self, shape: tuple[int, int], xp: ModuleType) -> Plan:
        """Tables and buffers for one resolution on ``xp``, kept (a few sizes, least recently used dropped)."""
        params = (int(self.n_octaves), int(self.n_octave_layers), int(self.sample_step))
        key = plan_key(shape, params, xp)
        cache = self.__dict__.get("_plans_")
        if cache is None:
            cache = self._plans_ = PlanCache[Plan]()
        return cache.get(key, lambda: make_plan(key, shape, params, xp))

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
        H, W = (int(v) for v in img.shape)
        plan = self._plan((H, W), xp)
        S = integral_image(img, xp, target)
        stats: dict[str, Any] = {"backend": target, "det_samples_frame": plan["det_samples"]}
        self.last_stats_ = stats
        empty = {"n": 0}
        if plan["n_oct"] == 0 or plan["flag_len"] == 0:
            stats.update(candidates=0, keypoints=0, det_samples=0, det_visited=0)
            return empty
        cand = detect_candidates(S, mask, boxes, self.hessian_threshold, plan, target, stats)
        n = int(cand.size)
        stats["candidates"] = n
        if n == 0:
            stats["keypoints"] = 0
            return empty
        xy, size, resp, lap, octv = interpolate_keypoints(cand, S, plan, target, max_features)
        n = int(xy.shape[0])
        if n == 0:
            stats["keypoints"] = 0
            return empty
        # max_features is applied before orientation and description: a budgeted caller pays for the
        # descriptors it keeps only.
        stats["described"] = n
        angle, desc, dok = describe_keypoints(S, xy, size, plan, target, self.upright, self.extended)
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

    def _describe_host(self, img: np.ndarray, xy: np.ndarray, size: np.ndarray, target: str) -> tuple[Any, Any, Any]:
        """Orientation and descriptors at keypoints of a host image: ``(angle, descriptors, ok)`` (NumPy)."""
        plan = self._plan(img.shape, np)
        xy = np.ascontiguousarray(xy, np.float32)
        size = np.ascontiguousarray(size, np.float32)
        S = integral_image(img, np, target)
        return describe_keypoints(S, xy, size, plan, target, self.upright, self.extended)

    def _run_gpu(
        self, img: Any, mask: Any, boxes: np.ndarray | None = None, max_features: int | None = None
    ) -> Features:
        """The CUDA build on CuPy arrays: host inputs are uploaded once, device inputs used where they are."""
        import cupy as cp

        d_img, d_mask = place(img, mask, cp)
        return self._run(d_img, d_mask, cp, "cuda", boxes, max_features)
