"""Test fixtures: the shared third-party data folder, and device skips."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Numba's CUDA simulator runs each CUDA thread of a block as a Python thread. Spread over several cores, those
# threads hand the GIL to one another so slowly that the simulator run takes many times as long as on one core;
# so a simulator run keeps to one of the cores it may use.
if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" and hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def _find_shared_data() -> Path | None:
    env = os.environ.get("OBJREC_SHARED_DATA")
    candidates = [Path(env)] if env else []
    here = Path(__file__).resolve()
    candidates += [p / "shared" / "data" for p in here.parents]
    for c in candidates:
        if (c / "oxford_affine").is_dir():
            return c
    return None


SHARED_DATA = _find_shared_data()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` (or ``$OBJREC_SHARED_DATA``); skips with a reason when absent (a user's clone)."""
    if SHARED_DATA is None:
        pytest.skip("shared data folder (../shared/data with oxford_affine/) not found; set OBJREC_SHARED_DATA")
    return SHARED_DATA


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory):
    """A database of the three embedded sample objects (``objrec.data.sample_objects``), default detectors."""
    from objrec import ModelDB
    from objrec.data import sample_objects

    d = ModelDB.create(tmp_path_factory.mktemp("samples") / "db")
    for name, img in sample_objects().items():
        d.enroll(name, img)
    return d


def _assert_stored_image(stored, original, min_psnr: float = 35.0) -> None:
    """A model image as a database stores it (lossy, :data:`objrec.modeldb.records.MODEL_IMAGE_FORMAT`) is the
    original's size and channels, and in gray (what features, thumbnails and composed scenes' detectors see)
    close to it: OpenCV's PSNR at least ``min_psnr`` dB. Colour is not compared: the encoder subsamples chroma,
    which saturated synthetic edges show most."""
    import cv2
    import numpy as np

    assert stored.shape == original.shape and stored.dtype == np.uint8
    gray = [cv2.cvtColor(x, cv2.COLOR_BGR2GRAY) if x.ndim == 3 else x for x in (stored, original)]
    assert cv2.PSNR(*gray) >= min_psnr


def _assert_stored_positions(got, want, width: int, height: int) -> None:
    """Keypoint positions as a database stores them (16-bit fixed point over the model image's extent plus
    :data:`objrec.modeldb.records.POSITION_MARGIN` each side) are within half a step, and float32 rounding, of
    the extracted ones."""
    import numpy as np

    from objrec.modeldb.records import POSITION_MARGIN, POSITION_STEPS

    step = (np.array([width, height], np.float64) + 2 * POSITION_MARGIN) / POSITION_STEPS
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    float32 = np.abs(want) * 2.0**-22  # the rounding of both sides to float32
    assert got.shape == want.shape and (np.abs(got - want) <= step / 2 + float32 + 1e-6).all()


@pytest.fixture(scope="session")
def assert_stored_positions():
    """``assert_stored_positions(got, want, width, height)``: stored keypoint positions are the extracted ones,
    rounded to the stored fixed point."""
    return _assert_stored_positions


@pytest.fixture(scope="session")
def assert_stored_image():
    """``assert_stored_image(stored, original)``: a stored model image decodes close to the enrolled one."""
    return _assert_stored_image


@pytest.fixture(scope="session")
def gpu_device():
    """Skips unless CuPy sees a real CUDA device."""
    from objrec.backend import gpu_available

    if not gpu_available():
        pytest.skip("no CUDA device visible to CuPy")
    return True


def pytest_collection_modifyitems(config, items):
    sim = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
    skip_sim = pytest.mark.skip(reason="cudasim tests run in the separate NUMBA_ENABLE_CUDASIM=1 pytest run")
    skip_main = pytest.mark.skip(reason="only cudasim-marked tests run under NUMBA_ENABLE_CUDASIM=1")
    for item in items:
        is_sim = "cudasim" in item.keywords
        if is_sim and not sim:
            item.add_marker(skip_sim)
        elif sim and not is_sim:
            item.add_marker(skip_main)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """One line saying how the Dask tests ended, so a CI log shows that they ran."""
    counts: dict[str, int] = {}
    for outcome in ("passed", "failed", "skipped", "error"):
        for rep in terminalreporter.stats.get(outcome, []):
            if "dask" in getattr(rep, "keywords", {}) and rep.when in ("call", "setup"):
                if outcome == "passed" and rep.when != "call":
                    continue
                counts[outcome] = counts.get(outcome, 0) + 1
    if counts:
        terminalreporter.write_line("dask tests: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
