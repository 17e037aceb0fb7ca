"""Extractor inputs: device-side gray conversion bit-exact with OpenCV, host checks, empty results."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from objrec.features._frames import check_image, empty_features, gray_on_device, place
from objrec.imageio import InputError


@pytest.mark.parametrize("code, channels", [(cv2.COLOR_BGR2GRAY, 3), (cv2.COLOR_BGRA2GRAY, 4)])
def test_gray_conversion_equals_opencv(code, channels):
    """The array-code conversion used for CuPy frames, run on NumPy, equals ``cv2.cvtColor`` exactly."""
    img = np.random.default_rng(0).integers(0, 256, (37, 53, channels), dtype=np.uint8)
    img[0, :4] = [[0] * channels, [255] * channels, [255, 0, 0, 0][:channels], [0, 0, 255, 0][:channels]]
    np.testing.assert_array_equal(gray_on_device(img, np), cv2.cvtColor(img, code))


def test_host_inputs_are_checked_and_left_on_the_host():
    bgr = np.zeros((20, 30, 3), np.uint8)
    mask = np.zeros((20, 30), bool)
    mask[5:9] = True
    img, m = check_image(bgr[:, ::-1], mask)
    assert img.shape == (20, 30) and img.flags.c_contiguous
    assert m.dtype == np.uint8 and set(np.unique(m)) == {0, 1}
    assert place(img, m, np)[0] is img
    with pytest.raises(InputError, match="mask"):
        check_image(img, np.zeros((5, 5), np.uint8))


def test_empty_features_on_numpy():
    f = empty_features(64, "surf", np)
    assert len(f) == 0 and f.descriptors.shape == (0, 64) and f.xp is np and f.kind == "surf"
