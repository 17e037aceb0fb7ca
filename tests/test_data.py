"""Embedded sample data: decodes without optional packages, and equals scikit-learn's own loader."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest


def test_sample_photos_equal_scikit_learns_loader():
    pytest.importorskip("PIL", reason="scikit-learn's load_sample_image (the reference) needs Pillow")
    from sklearn.datasets import load_sample_image

    from objrec.data import sample_photos

    photos = sample_photos()
    for name in ("china", "flower"):
        ref = load_sample_image(f"{name}.jpg")[:, :, ::-1]  # RGB -> BGR
        assert photos[name].dtype == np.uint8 and photos[name].shape == (427, 640, 3)
        np.testing.assert_array_equal(photos[name], ref)


def test_embedded_data_needs_no_pillow():
    """A plain ``pip install objrec`` has no Pillow: the demo's objects must load without it."""
    code = (
        "import sys; sys.modules['PIL'] = None\n"  # any import of PIL now raises ImportError
        "from objrec.data import sample_objects, sample_background\n"
        "objs = sample_objects(); bg = sample_background((640, 480))\n"
        "assert len(objs) == 3 and bg.shape == (480, 640, 3), (list(objs), bg.shape)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
