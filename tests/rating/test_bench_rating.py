"""``bench/bench_rating.py``: the whole grid measured with the calibration subset taken from its cache gives what
measuring every view gives (``--views all``); a retest seed measures the same views again (``--retest-seed``) and
its figures are the rank correlations of the images measured twice."""

from __future__ import annotations

import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

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


def test_a_retest_seed_measures_the_same_views_again_with_new_clutter_and_noise(tmp_path):
    from bench_rating import grid_views, load_cache, measure_synthetic

    cv2.imwrite(str(tmp_path / "cover.png"), synthetic_cover(11, (240, 320)))
    images = {"cover.png": "test"}
    cache = load_cache(tmp_path / "m.json", False, grid_views("calibration"))
    measure_synthetic(tmp_path, images, cache, tmp_path / "m.json", None)
    first = dict(cache["synthetic"]["cover.png"])
    measure_synthetic(tmp_path, images, cache, tmp_path / "m.json", None, seed=3)
    assert cache["synthetic"]["cover.png"] == first  # the calibration's own run is left as it was
    again = cache["retest"]["synthetic"]["cover.png"]
    direct = measure_envelope(tmp_path / "cover.png", views=CALIBRATION_VIEWS, seed=3)
    assert cache["retest"]["seed"] == 3
    assert again["found"] == [int(r.found) for r in direct.views] and again["found_share"] == direct.found_share
    with pytest.raises(ValueError, match="seed 3, not 4"):
        measure_synthetic(tmp_path, images, cache, tmp_path / "m.json", None, seed=4)


def test_retest_figures_are_the_rank_correlations_of_the_images_measured_twice():
    from rating_fit import retest_figures

    def rank_corr(a, b):  # Spearman without ties: Pearson's correlation of the ranks
        ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
        return float(np.corrcoef(ra, rb)[0, 1])

    rng = np.random.default_rng(5)
    paths = [f"img{i}.jpg" for i in range(30)]
    first = rng.permutation(30) / 30.0
    again = first + rng.normal(0, 0.2, 30)
    scores = first * 100 + rng.normal(0, 30, 30)
    retest = {
        "seed": 2,
        "synthetic": {p: {"found_share": float(a), "error": None} for p, a in zip(paths, again, strict=True)},
    }
    del retest["synthetic"]["img0.jpg"]  # measured once only: left out of every retest figure
    retest["synthetic"]["img1.jpg"]["error"] = "no features"
    got = retest_figures(scores, first, paths, retest)
    keep = np.arange(2, 30)
    assert got["seed"] == 2 and got["n"] == 28
    assert got["spearman_runs"] == pytest.approx(rank_corr(first[keep], again[keep]))
    assert got["spearman_score_retest"] == pytest.approx(rank_corr(scores[keep], again[keep]))
    assert got["spearman_score_mean"] == pytest.approx(rank_corr(scores[keep], (first[keep] + again[keep]) / 2))
    assert retest_figures(scores, first, paths, None) is None


def test_the_spearman_interval_covers_the_population_value_and_has_the_textbook_width():
    from rating_fit import spearman_ci

    # Bivariate normal with Pearson correlation r: its population Spearman correlation is (6 / pi) asin(r / 2)
    # (Pearson 1907), and the sample's Fisher-transformed Spearman has a standard error of about
    # sqrt(1.06 / (n - 3)) (Fieller, Hartley and Pearson 1957).
    r, n = 0.7, 300
    xy = np.random.default_rng(7).multivariate_normal([0, 0], [[1, r], [r, 1]], n)
    lo, hi = spearman_ci(xy[:, 0], xy[:, 1])
    population = 6 / np.pi * np.arcsin(r / 2)
    assert lo < population < hi
    z, se = np.arctanh(population), np.sqrt(1.06 / (n - 3))
    textbook = np.tanh(z + 1.96 * se) - np.tanh(z - 1.96 * se)
    assert 0.75 < (hi - lo) / textbook < 1.33
    assert spearman_ci(np.ones(10), np.arange(10.0)) is None  # no ranking on one side
