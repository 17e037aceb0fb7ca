"""``bench/bench_rating.py --views all``: the whole grid measured with the calibration subset taken from its cache
gives what measuring every view gives."""

from __future__ import annotations

import sys
from pathlib import Path

import cv2

from objrec.data import synthetic_cover
from objrec.envelope import CALIBRATION_VIEWS, measure_envelope

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))


def test_whole_grid_from_a_subset_cache_equals_measuring_every_view(tmp_path):
    from bench_rating import grid_views, load_cache, measure_synthetic

    cv2.imwrite(str(tmp_path / "cover.png"), synthetic_cover(7, (240, 320)))
    images = {"cover.png": "test"}
    subset = load_cache(tmp_path / "measures.json", False, grid_views("calibration"))
    measure_synthetic(tmp_path, images, subset, tmp_path / "measures.json", None)
    assert subset["views"] == list(CALIBRATION_VIEWS) and len(subset["synthetic"]["cover.png"]["found"]) == 16
    full = load_cache(tmp_path / "measures_all.json", False, grid_views("all"))
    measure_synthetic(tmp_path, images, full, tmp_path / "measures_all.json", None, subset)
    merged = full["synthetic"]["cover.png"]
    direct = measure_envelope(tmp_path / "cover.png")
    assert merged["found"] == [int(r.found) for r in direct.views]
    assert merged["found_share"] == direct.found_share
    assert merged["limits"] == direct.to_dict()["limits"]
    # The subset's views are taken as cached: a changed cached verdict shows in the merged share.
    i = CALIBRATION_VIEWS.index(1) if 1 in CALIBRATION_VIEWS else 0
    subset["synthetic"]["cover.png"]["found"][i] ^= 1
    again = load_cache(tmp_path / "again.json", False, grid_views("all"))
    measure_synthetic(tmp_path, images, again, tmp_path / "again.json", None, subset)
    flipped = CALIBRATION_VIEWS[i]
    assert again["synthetic"]["cover.png"]["found"][flipped] == 1 - merged["found"][flipped]
