"""SURF's stages on the host side: integral images, the launches of each stage, and what lies between them.

:class:`~objrec.features.surf.SURF` runs them in order on one array module (``xp``: NumPy, or CuPy on a
GPU) with the launchers of one target (:func:`objrec.features._surf_kernels.kernels_for`) and the
tables and buffers of a plan (:func:`objrec.features.surf_tables.make_plan`):

1. :func:`integral_image` of the frame (float64 on the CPU, integers on a device) and of the mask, or of the
   union of the prefilter's boxes;
2. :func:`detect_candidates`: ``det`` (determinant of the box-filter Hessian for every layer of every octave,
   one launch; with boxes, only the columns whose filters reach one), ``nms`` (threshold, mask and 3x3x3
   non-maximum suppression into a flag plane, one launch) and the flags' compaction (on the device when
   ``xp`` is CuPy);
3. :func:`interpolate_keypoints`: ``interp`` (sub-pixel/sub-scale refinement and Laplacian sign per
   candidate, one launch), ordering (OpenCV's ``KeypointGreater``) and ``max_features``;
4. :func:`describe_keypoints`: ``describe`` (orientation and descriptor per keypoint, one launch, one block
   per keypoint on the GPU).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from objrec.backend import to_device, to_scalar
from objrec.features import _surf_kernels as K
from objrec.features._plans import Plan
from objrec.imageio import InputError
from objrec.types import Regions

__all__ = [
    "integral_image",
    "flag_indices",
    "check_regions",
    "detect_candidates",
    "interpolate_keypoints",
    "describe_keypoints",
]

DESC_CHUNK = 16  # keypoints per work item of the CPU describe launch


def integral_image(img: Any, xp: ModuleType, target: str = "cuda") -> Any:
    """Raveled (H+1) x (W+1) integral image, exact: float64 for the CPU target, else int32 when the total fits
    and int64 otherwise.

    On the CPU the box sums are then formed in float64 from the start: a float64 holds every sum of uint8
    pixels exactly (below 2^53), and LLVM vectorises the detector's row loop over float64 loads, which it does
    not over integer loads whose sums must be converted to float (x86 converts 64-bit integers to floats in
    vector registers only with AVX-512). A device keeps 32-bit integers (half the memory traffic, and float64
    is slow on most GPUs).
    ``img``: the gray uint8 image; ``xp``: its array module; ``target``: ``"cpu"`` or ``"cuda"``.
    """
    H, W = img.shape
    if target == "cpu" and xp is np:
        import cv2

        return cv2.integral(np.ascontiguousarray(img), sdepth=cv2.CV_64F).reshape(-1)
    dtype = np.int32 if H * W * 255 < 2**31 - 1 else np.int64
    if xp is np:
        import cv2

        if dtype == np.int32:
            return cv2.integral(np.ascontiguousarray(img), sdepth=cv2.CV_32S).reshape(-1)
    S = xp.zeros((H + 1, W + 1), dtype)
    S[1:, 1:] = xp.cumsum(xp.cumsum(img, axis=0, dtype=dtype), axis=1, dtype=dtype)
    return S.reshape(-1)


def flag_indices(flags: Any, xp: ModuleType) -> Any:
    """``flatnonzero`` of a sparse uint8 flag plane: on the host, nonzero 8-byte words first (8x fewer elements
    to scan), then the bytes inside them; on the device, CuPy's own.
    ``flags``: the flag plane; ``xp``: its array module."""
    if xp is not np:
        return xp.flatnonzero(flags)
    n8 = flags.shape[0] // 8 * 8
    words = np.flatnonzero(flags[:n8].view(np.uint64))
    r, c = np.nonzero(flags[:n8].reshape(-1, 8)[words])
    head = words[r] * 8 + c
    return np.concatenate([head, np.flatnonzero(flags[n8:]) + n8]) if n8 < flags.shape[0] else head


def check_regions(regions: Any, shape: tuple[int, int]) -> np.ndarray | None:
    """Boxes of ``regions`` clipped to the frame, empty ones dropped, sorted by x0 (host int32 (N, 4)).
    ``regions``: boxes (a ``Regions``, an (N, 4) array, or None: returns None); ``shape``: the frame's (rows, cols)."""
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


def detect_candidates(
    S: Any, mask: Any, boxes: np.ndarray | None, threshold: float, plan: Plan, target: str, stats: dict[str, Any]
) -> Any:
    """Hessian planes and non-maximum suppression; the flat indices of the maxima (on the plan's ``xp``).

    Parameters
    ----------
    S : array
        Raveled integral image of the frame (:func:`integral_image`).
    mask : (H, W) uint8 array or None
        Nonzero where features are wanted.
    boxes : host int32 (N, 4) or None
        Prefilter boxes from :func:`check_regions`: the detector visits only the columns they reach.
    threshold : float
        The Hessian threshold.
    plan : Plan
        The frame size's tables and buffers.
    target : {"cpu", "cuda"}
        Whose launchers run.
    stats : dict
        On the CPU, ``det_samples`` (Hessians evaluated) and ``det_visited`` (samples looked at) are set.
    """
    xp = plan.xp
    kern = K.kernels_for(target)
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
    M = integral_image(mask, xp) if mask is not None else plan["no_mask"]
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
    kern["nms"](gr, nc, det, flags, oinfo, linfo, M, use_mask, n_oct, L - 2, float(threshold), W, chunk)
    return flag_indices(flags[: plan["flag_len"]], xp)


def interpolate_keypoints(
    cand: Any, S: Any, plan: Plan, target: str, max_features: int | None = None
) -> tuple[Any, Any, Any, Any, Any]:
    """Interpolated keypoints of the candidates, strongest first, at most ``max_features``:
    ``(xy, size, response, laplacian, octave)`` on the plan's ``xp`` (copies, not views of its scratch).
    ``cand``: the candidates' indices in the response planes; ``S``: the integral image; ``plan``: the frame's plan
    (tables and buffers); ``target``: ``"cpu"`` or ``"cuda"``."""
    xp = plan.xp
    n = int(cand.size)
    xy = plan.scratch("xy", (n, 2), np.float32)
    size = plan.scratch("size", (n,), np.float32)
    resp = plan.scratch("resp", (n,), np.float32)
    lap = plan.scratch("lap", (n,), np.int8)
    octv = plan.scratch("octv", (n,), np.int32)
    ok = plan.scratch("ok", (n,), np.uint8)
    det, oinfo, linfo, hboxes, wts = plan["det"], plan["oinfo"], plan["linfo"], plan["boxes"], plan["wts"]
    W = plan["shape"][1]
    interp = K.kernels_for(target)["interp"]
    interp(n, cand, det, oinfo, linfo, hboxes, wts, S, plan["n_oct"], W, xy, size, resp, lap, octv, ok)
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


def describe_keypoints(
    S: Any, xy: Any, size: Any, plan: Plan, target: str, upright: bool, extended: bool
) -> tuple[Any, Any, Any]:
    """Orientation (unless ``upright``) and descriptor of each keypoint: ``(angle, descriptors, ok)``.

    ``ok`` is 0 for a keypoint whose orientation cannot be sampled (its angle and descriptor are undefined).
    ``S``: the integral image; ``xy``, ``size``: the keypoints' positions and sizes; ``plan``: the frame's plan;
    ``target``: ``"cpu"`` or ``"cuda"``; ``extended``: 128-value descriptors rather than 64.
    """
    xp = plan.xp
    H, W = plan["shape"]
    n = int(xy.shape[0])
    D = 128 if extended else 64
    angle = xp.empty(n, np.float32)
    desc = xp.empty((n, D), np.float32)
    ok = xp.empty(n, np.uint8)
    ori_pts = plan["ori_pts"]
    args: tuple[Any, ...] = (S, H, W, xy, size, int(bool(upright)), int(bool(extended)), ori_pts, plan["ori_w"])
    args += (int(ori_pts.shape[0]), plan["desc_w"])
    describe = K.kernels_for(target)["describe"]
    if target == "cpu":
        # Chunks of keypoints over the threads, each chunk with its own scratch slice (kept in the plan);
        # small chunks balance the load when the machine is busy or keypoints differ in cost (borders).
        import numba

        chunk = max(1, min(DESC_CHUNK, -(-n // (4 * numba.get_num_threads()))))
        nch = -(-n // chunk)
        scratch = plan.get("desc_scratch")
        if scratch is None or scratch.shape[0] < nch * K.SH_LEN:
            scratch = plan["desc_scratch"] = np.empty(max(nch, 64) * K.SH_LEN, np.float32)
            plan["desc_tmp"] = np.empty(max(nch, 64) * K.T_LEN, np.float64)
        describe(n, chunk, *args, scratch, plan["desc_tmp"], angle, desc.reshape(-1), ok)
    else:
        describe(n, *args, angle, desc.reshape(-1), ok)
    return angle, desc, ok
