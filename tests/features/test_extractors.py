"""SURF and SIFT on every device, through their public entry points, against the CPU build (``_harness``).

Each case runs on ``cpu`` (main run), ``cudasim`` (``NUMBA_ENABLE_CUDASIM=1`` run, 64 px inputs) and ``gpu``
(skipped without a device, 640 x 480 frames). Simulator cases are few and small: SIFT runs there once (a
masked frame), and each SURF case also covers one variant (oriented 64-d on the frame, extended with a mask,
upright with regions at the coarse sampling step) instead of a case of its own.
"""

from __future__ import annotations

import numpy as np
import pytest

from objrec.backend import BackendError, TransferCounter
from objrec.features import make_detector
from objrec.types import Regions

from ._harness import (
    DEVICES,
    KINDS,
    assert_close,
    assert_on_device,
    box_mask,
    device_marks,
    devices,
    image,
    make,
    reference,
    run_and_compare,
    upload,
)

#: SURF's kernel launches per frame on the CUDA build: det, nms, interp, describe.
SURF_LAUNCHES = 4


def _sift_launches(stats: dict, n_layers: int = 3) -> int:
    """Upsampling and two blur passes for the base, two per further level of every octave, then extrema,
    refinement and the two descriptor stages."""
    return 3 + 2 * (n_layers + 2) * stats["n_octaves"] + 4


def _params(kind: str, device: str, case: str) -> dict:
    """Parameters of a case; on the simulator SURF describes only a few keypoints (a block of Python threads
    each) over fewer octaves."""
    if kind == "sift":
        return {}
    variant = {"frame": {}, "mask": {"extended": True}, "regions": {"upright": True, "sample_step": 2}}[case]
    if device == "cudasim":
        small = {"n_octaves": 2, "max_features": 4} if case == "frame" else {"n_octaves": 1, "max_features": 2}
        return {**variant, **small}
    return variant


_COMPARE = [
    pytest.param(kind, case, d, marks=device_marks(d), id=f"{kind}-{case}-{d}")
    for kind in KINDS
    for case in ("frame", "mask")
    for d in DEVICES
    if not (kind == "sift" and case == "frame" and d == "cudasim")
]


@pytest.mark.parametrize(("kind", "case", "device"), _COMPARE)
def test_matches_cpu_build(kind, case, device):
    """Keypoints (position, size, angle, response, octave, Laplacian) and descriptors agree with the CPU
    build; the CUDA build launches a fixed number of kernels per frame."""
    img = image(device)
    mask = box_mask(img.shape) if case == "mask" else None
    _, got, ext, _ = run_and_compare(kind, device, img, mask, **_params(kind, device, case))
    assert got.descriptor_size == (128 if kind == "sift" or case == "mask" else 64)
    if kind == "sift" and mask is not None:
        xi = (got.xy + 0.5).astype(int)
        assert np.all(mask[xi[:, 1], xi[:, 0]] > 0)
    if device != "cpu":
        want = SURF_LAUNCHES if kind == "surf" else _sift_launches(ext.last_stats_)
        assert ext.last_stats_["launches"] == want


@pytest.mark.parametrize("device", devices())
def test_surf_regions_match_cpu_build(device):
    """Regions give the CPU build's features, and the CUDA build evaluates as many Hessians (the simulator
    counts them with atomics; a device does not count), here at the coarse sampling step."""
    img = image(device)
    h, w = img.shape
    regions = Regions.from_boxes([[w // 16, h // 10, w * 5 // 8, h * 3 // 4], [w // 2, h // 3, w - 4, h - 4]])
    params = _params("surf", device, "regions")
    _, got, ext, ref_ext = run_and_compare("surf", device, img, regions=regions, **params)
    np.testing.assert_array_equal(got.angle, 270.0)  # upright
    stats, ref_stats = ext.last_stats_, ref_ext.last_stats_
    assert ref_stats["det_samples"] < ref_stats["det_samples_frame"]
    if "det_samples" in stats:
        assert stats["det_samples"] == ref_stats["det_samples"]
    if device != "cpu":
        assert stats["launches"] == SURF_LAUNCHES


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("device", devices("cpu", "gpu"))
def test_nothing_found_is_empty_on_the_device(kind, device):
    """A blank frame, or an empty mask, gives empty features of the right width, on the computing device."""
    ext = make(kind, device)
    img = np.full(image(device).shape, 77, np.uint8)
    for f in (
        ext.detect_and_compute(upload(device, img)),
        ext.detect_and_compute(upload(device, image(device)), upload(device, np.zeros(img.shape, np.uint8))),
    ):
        assert_on_device(f, device)
        assert len(f) == 0 and f.descriptors.shape == (0, 128 if kind == "sift" else 64)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("device", devices("cpu", "gpu"))
def test_frame_goes_up_once_and_results_stay(kind, device):
    """A host frame costs one upload (none on the host builds); a device frame, or a crop of one (a device
    slice), costs none; keypoints and descriptors are never copied back, only scalars that steer the run."""
    img = image(device)
    ext = make(kind, device)
    ext.detect_and_compute(img)  # compiles the kernels and builds the frame size's plan
    with TransferCounter() as tc:
        got = ext.detect_and_compute(img)
    assert_on_device(got, device)
    assert (tc.uploads, tc.upload_bytes) == ((1, img.nbytes) if device == "gpu" else (0, 0))
    assert all(t.nbytes <= 8 for t in tc.transfers if t.direction == "d2h"), tc.transfers
    assert_close(kind, device, reference(kind).detect_and_compute(img), got.to_host())

    h, w = img.shape
    y0, y1, x0, x1 = h // 8, h * 7 // 8, w // 8, w * 7 // 8
    frame = upload(device, img)
    crop = frame[y0:y1, x0:x1]
    ext.detect_and_compute(crop)  # the crop size's plan
    with TransferCounter() as tc:
        got_frame = ext.detect_and_compute(frame)
        got_crop = ext.detect_and_compute(crop)
    assert tc.uploads == 0
    assert all(t.nbytes <= 8 for t in tc.transfers)
    assert_on_device(got_frame, device)
    assert_on_device(got_crop, device)
    want = reference(kind).detect_and_compute(np.ascontiguousarray(img[y0:y1, x0:x1]))
    assert_close(kind, device, want, got_crop.to_host())


@pytest.mark.parametrize("kind", KINDS)
def test_cudasim_backend_needs_the_simulator(kind):
    """``backend="cudasim"`` is refused outside the ``NUMBA_ENABLE_CUDASIM=1`` run, naming the variable."""
    with pytest.raises(BackendError, match="NUMBA_ENABLE_CUDASIM=1"):
        make_detector(kind, backend="cudasim").detect_and_compute(image("cpu"))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("device", devices("cpu", "gpu"))
def test_limit_keeps_the_strongest(kind, device):
    """SURF's ``max_features`` and SIFT's ``n_features`` keep the CPU build's strongest keypoints."""
    n = 10 if device == "cpu" else 150
    limit = {"surf": {"max_features": n}, "sift": {"n_features": n}}[kind]
    full = reference(kind).detect_and_compute(image(device))
    ref, got, _, _ = run_and_compare(kind, device, image(device), **limit)
    assert len(full) > len(ref) >= n
    assert got.response.min() >= np.sort(full.response)[::-1][n - 1] * (1 - 1e-3)
