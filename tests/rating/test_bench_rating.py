"""``bench/bench_rating.py``: the whole grid measured with the calibration subset taken from its cache gives what
measuring every view gives (``--views all``); each retest seed measures the same views again (``--retest-seeds``) and
the retest figures are the rank correlations of the images every run measured."""

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


def test_retest_seeds_measure_the_same_views_again_with_new_clutter_and_noise(tmp_path):
    from bench_rating import grid_views, load_cache, measure_synthetic

    cv2.imwrite(str(tmp_path / "cover.png"), synthetic_cover(11, (240, 320)))
    images = {"cover.png": "test"}
    cache = load_cache(tmp_path / "m.json", False, grid_views("calibration"))
    measure_synthetic(tmp_path, images, cache, tmp_path / "m.json", None)
    first = dict(cache["synthetic"]["cover.png"])
    for seed in (3, 4):
        measure_synthetic(tmp_path, images, cache, tmp_path / "m.json", None, seed=seed)
    assert cache["synthetic"]["cover.png"] == first  # the calibration's own run is left as it was
    assert sorted(cache["repeats"]) == ["3", "4"]
    for seed in (3, 4):
        again = cache["repeats"][str(seed)]["cover.png"]
        direct = measure_envelope(tmp_path / "cover.png", views=CALIBRATION_VIEWS, seed=seed)
        assert again["found"] == [int(r.found) for r in direct.views] and again["found_share"] == direct.found_share
    reloaded = load_cache(tmp_path / "m.json", True, grid_views("calibration"))
    assert reloaded["repeats"] == cache["repeats"]


def test_retest_figures_are_the_rank_correlations_of_the_images_every_run_measured():
    from rating_fit import retest_figures

    def rank_corr(a, b):  # Spearman without ties: Pearson's correlation of the ranks
        ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
        return float(np.corrcoef(ra, rb)[0, 1])

    rng = np.random.default_rng(5)
    paths = [f"img{i}.jpg" for i in range(120)]
    sources = {p: "a" if i % 2 else "b" for i, p in enumerate(paths)}
    first = rng.permutation(120) / 120.0
    again = {seed: first + rng.normal(0, 0.2, 120) for seed in ("2", "7")}
    noisy = first + rng.normal(0, 0.3, 120)
    scores = 100 * (noisy - noisy.min()) / np.ptp(noisy)  # 0-100 without ties
    repeats = {
        seed: {p: {"found_share": float(a), "error": None} for p, a in zip(paths, run, strict=True)}
        for seed, run in again.items()
    }
    del repeats["7"]["img0.jpg"]  # measured by one repeat only: left out of every retest figure
    repeats["2"]["img1.jpg"]["error"] = "no features"
    got = retest_figures(scores, first, paths, repeats, sources)
    keep = np.arange(2, 120)
    runs = [first[keep], again["2"][keep], again["7"][keep]]
    pairs = [rank_corr(runs[0], runs[1]), rank_corr(runs[0], runs[2]), rank_corr(runs[1], runs[2])]
    r = np.mean(pairs)
    assert got["seeds"] == [0, 2, 7] and got["n"] == 118
    assert got["spearman_runs"] == pytest.approx(r)
    assert got["reliability_mean"] == pytest.approx(3 * r / (1 + 2 * r))
    assert got["spearman_score_runs"]["7"] == pytest.approx(rank_corr(scores[keep], again["7"][keep]))
    assert got["spearman_score_mean"] == pytest.approx(rank_corr(scores[keep], np.mean(runs, axis=0)))
    hi = scores[keep] >= 75
    assert got["bands_mean"][">=75"]["n"] == hi.sum()
    assert got["bands_mean"][">=75"]["found_share"] == pytest.approx(np.mean(runs, axis=0)[hi].mean())
    a = keep[keep % 2 == 1]
    assert got["per_source"]["a"]["n"] == len(a) == 59
    assert got["per_source"]["a"]["spearman_score_mean"] == pytest.approx(
        rank_corr(scores[a], (first[a] + again["2"][a] + again["7"][a]) / 3)
    )
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
