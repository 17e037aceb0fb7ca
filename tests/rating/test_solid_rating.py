"""The rating of objects with depth and of objects of several views: the corner weights against a brute-force
structure tensor, the solid score's properties, the object rating's agreement against a known homography, and the
database and command line around them."""

from __future__ import annotations

import json
import math

import cv2
import numpy as np
import pytest

from objrec.cli import main
from objrec.data import sample_objects, sample_photos
from objrec.features.model import DEFAULT_DETECTORS, extract_model_features
from objrec.rating import WEIGHTS, rate, score_from_measures
from objrec.rating.measures import corner_weights, ratio_pairs
from objrec.rating.model import MEASURE_KEYS, parts
from objrec.rating.objects import rate_object, view_agreement
from objrec.rating.rater import FEATURES_ONLY, RATING_VERSION, features_only


def _brute_ratio(gray: np.ndarray, x: int, y: int, sigma: float) -> float:
    """l2 / l1 of the structure tensor at (x, y): gradients of the image smoothed at 0.7 px (Sobel), weighted
    by a Gaussian of ``sigma`` over a window of 4 sigma, eigenvalues by numpy."""
    g = cv2.GaussianBlur(gray.astype(np.float32) / 255.0, (0, 0), 0.7)
    gx, gy = cv2.Sobel(g, cv2.CV_32F, 1, 0), cv2.Sobel(g, cv2.CV_32F, 0, 1)
    r = int(4 * sigma)
    yy, xx = np.mgrid[y - r : y + r + 1, x - r : x + r + 1]
    w = np.exp(-((xx - x) ** 2 + (yy - y) ** 2) / (2 * sigma**2))
    a, b = gx[yy, xx].astype(np.float64), gy[yy, xx].astype(np.float64)
    t = np.array([[np.sum(w * a * a), np.sum(w * a * b)], [np.sum(w * a * b), np.sum(w * b * b)]])
    lo, hi = np.linalg.eigvalsh(t)
    return float(lo / hi) if hi > 1e-12 else 0.0


def test_corner_weights_match_a_brute_force_structure_tensor():
    gray = cv2.cvtColor(sample_photos()["china"], cv2.COLOR_BGR2GRAY)[:240, :320]  # short side under 480
    rng = np.random.default_rng(3)
    xy = rng.integers(40, 200, (30, 2)).astype(np.float64)
    size = np.full(30, 8.0)  # sigma 8 * 0.25 = 2 px: the octave computed at full resolution
    got = corner_weights(gray, xy, size)
    want = [_brute_ratio(gray, int(x), int(y), 2.0) for x, y in xy]
    np.testing.assert_allclose(got, want, atol=0.03)


def test_corner_weights_tell_edges_from_corners_at_every_octave():
    img = np.zeros((480, 640), np.uint8)
    img[:, 320:] = 255  # a straight edge at x = 320
    img[100:300, 40:200] = 255  # a square with a corner at (40, 100)
    for size in (4, 8, 16, 32, 64):  # sigma 1, 2, 4, 8, 16 px
        w = corner_weights(img, [[320, 400], [40, 100]], [size, size])
        assert w[0] < 0.05 and w[1] > 0.3, (size, w)
    # a quarter turn of the image and the points keeps the weights (the tensor's eigenvalues turn with it)
    turned = cv2.rotate(img, cv2.ROTATE_90_CLOCKWISE)
    w0 = corner_weights(img, [[320, 400], [40, 100]], [16, 16])
    w1 = corner_weights(turned, [[480 - 1 - 400, 320], [480 - 1 - 100, 40]], [16, 16])
    np.testing.assert_allclose(w0, w1, atol=0.05)
    assert corner_weights(img, np.zeros((0, 2)), np.zeros(0)).shape == (0,)


def _measures(**kw: float) -> dict[str, float]:
    base = dict.fromkeys(MEASURE_KEYS, 0.0) | {"short_side": 480.0, "model_scale": 1.0, "blockiness": 1.0}
    base |= {"n_features": 800.0, "distinctive_features": 700.0, "coverage": 0.8, "gray_contrast": 0.2}
    base |= {"small_view_matches": 30.0, "hard_views": 1.0, "corner_features": 400.0}
    return base | kw


def test_the_solid_score_rises_with_stable_features_and_ignores_the_rendered_views():
    scores = [score_from_measures(_measures(corner_features=n), shape="solid")[0] for n in (5, 50, 150, 300, 1000)]
    assert scores == sorted(scores) and scores[0] < scores[-1]
    low, reasons = score_from_measures(_measures(corner_features=20), shape="solid")
    assert reasons[0].code == "few_stable_features" and reasons[0].basis == "real_photos"
    assert math.isclose(sum(r.cost for r in reasons), 100 - low, abs_tol=1.0)
    assert parts(reasons)["real_photos"] == pytest.approx(reasons[0].cost, abs=0.1)
    if WEIGHTS["solid_views_power"] == 0:
        nan = _measures(corner_features=20, small_view_matches=float("nan"), hard_views=float("nan"))
        assert score_from_measures(nan, shape="solid")[0] == low
    blank = _measures(n_features=0.0, distinctive_features=0.0, corner_features=0.0)
    assert score_from_measures(blank, shape="solid")[0] == 0
    flat, flat_reasons = score_from_measures(_measures(corner_features=20))
    assert "few_stable_features" not in [r.code for r in flat_reasons]  # a print has no outlines that move
    with pytest.raises(ValueError, match="shape"):
        score_from_measures(_measures(), shape="round")


def _outlines(shape: tuple[int, int] = (480, 640)) -> np.ndarray:
    """Flat coloured blobs: every feature sits on an outline."""
    img = np.full((*shape, 3), 235, np.uint8)
    rng = np.random.default_rng(7)
    for _ in range(25):
        c = tuple(int(v) for v in rng.integers(0, 200, 3))
        cv2.ellipse(
            img,
            tuple(int(v) for v in rng.integers(60, 580, 2)),
            (60, 35),
            float(rng.integers(0, 180)),
            0,
            360,
            c,
            -1,
            cv2.LINE_AA,
        )
    return cv2.GaussianBlur(img, (0, 0), 1.0)


def test_an_image_of_outlines_rates_lower_as_solid_than_printed_texture():
    texture = rate(sample_photos()["china"], shape="solid")
    outlines = rate(_outlines(), shape="solid")
    assert texture.object_shape == "solid" and texture.views
    assert outlines.measures["corner_features"] < texture.measures["corner_features"]
    assert outlines.score < texture.score
    assert outlines.to_json()["object_shape"] == "solid" and "parts" in outlines.to_json()
    with pytest.raises(ValueError, match="shape"):
        rate(sample_photos()["china"], shape="round")


def test_a_solid_rating_needs_no_rendered_views_so_enrolment_stores_it_complete():
    img = sample_objects()["cover"]
    full, own = rate(img, shape="solid"), rate(img, shape="solid", views=False)
    assert full.score == own.score and own.views and own.stored_version == RATING_VERSION
    flat_own = rate(img, views=False)
    assert not flat_own.views and flat_own.stored_version == RATING_VERSION + FEATURES_ONLY
    assert features_only(flat_own.stored_version) and not features_only(own.stored_version)
    assert not features_only(None)


def _warped(img: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    h, w = img.shape[:2]
    src = np.float32([[0, 0], [w, 0], [w, h], [0, h]])
    dst = np.float32([[30, 20], [w - 60, 40], [w - 20, h - 30], [10, h - 50]])
    H = cv2.getPerspectiveTransform(src, dst)
    return cv2.warpPerspective(img, H, (w, h)), H


def test_view_agreement_counts_the_matches_a_known_homography_confirms():
    img = sample_photos()["china"]
    other, H = _warped(img)
    kind = "surf"
    a, b = (extract_model_features(x, {kind: DEFAULT_DETECTORS[kind]})[kind].to_host() for x in (img, other))
    qi, ti = ratio_pairs(a.descriptors, b.descriptors)
    mapped = cv2.perspectiveTransform(a.xy[qi].reshape(-1, 1, 2).astype(np.float64), H).reshape(-1, 2)
    true = int((np.linalg.norm(mapped - b.xy[ti], axis=1) <= 5.0).sum())  # the reference: the known warp
    flat = view_agreement(a, b, solid=False)
    assert true > 50 and abs(flat - true) <= 0.1 * true, (flat, true)
    assert view_agreement(a, b, solid=True) >= 0.8 * true  # a plane is one case of an object with depth
    unrelated = extract_model_features(_outlines(), {kind: DEFAULT_DETECTORS[kind]})[kind].to_host()
    # unrelated views: what a fundamental matrix fits among chance matches, a fraction of the true agreement
    assert view_agreement(a, unrelated, solid=True) < 0.2 * true


def test_an_object_of_views_that_agree_rates_at_least_its_best_view_and_one_that_does_not_rates_lower():
    img = sample_photos()["china"]
    other, _ = _warped(img)
    kind = "surf"
    feats = [extract_model_features(x, {kind: DEFAULT_DETECTORS[kind]})[kind] for x in (img, other)]
    scores = [rate(x, shape="solid").score for x in (img, other)]
    agree = rate_object("same", scores, feats, "solid")
    assert agree.score >= max(scores) - 1 and agree.agreement > 50 and not agree.reasons
    stranger = extract_model_features(sample_objects()["dahlia"], {kind: DEFAULT_DETECTORS[kind]})[kind]
    apart = rate_object("apart", [scores[0], 90], [feats[0], stranger], "solid")
    # views that share only chance matches: well below its best view's score, for the reason that they disagree
    assert apart.score <= max(scores[0], 90) - 20 and apart.reasons[0].code == "views_disagree"
    assert rate_object("one", [64], [feats[0]]).score == 64
    with pytest.raises(ValueError, match="one score and one feature set per view"):
        rate_object("bad", [50, 60], [feats[0]])


def test_db_info_rating_reports_the_object_rating_of_a_solid_object_of_two_views(tmp_path, capsys):
    img = sample_photos()["china"]
    other, _ = _warped(img)
    paths = [tmp_path / "a.png", tmp_path / "b.png"]
    for p, x in zip(paths, (img, other), strict=True):
        cv2.imwrite(str(p), x)
    db = str(tmp_path / "db")
    assert main(["enroll", "--db", db, "--shape", "solid", f"vase={paths[0]}"]) == 0
    assert main(["db", "add-view", "--db", db, "vase", str(paths[1])]) == 0
    capsys.readouterr()
    assert main(["db", "info", "--db", db, "--rating", "--json", "vase"]) == 0
    doc = json.loads(capsys.readouterr().out)
    obj = doc["object_rating"]
    assert obj["shape"] == "solid" and len(obj["view_scores"]) == 2 and obj["agreement"] > 50
    assert obj["view_scores"][0] == rate(paths[0], shape="solid").score
    assert main(["db", "info", "--db", db, "--rating", "vase"]) == 0
    assert "object rating:" in capsys.readouterr().out


def test_rate_shape_solid_on_the_command_line(tmp_path, capsys):
    path = tmp_path / "outlines.png"
    cv2.imwrite(str(path), _outlines())
    assert main(["rate", "--json", "--shape", "solid", str(path)]) == 0
    doc = json.loads(capsys.readouterr().out)["results"][0]
    assert doc["object_shape"] == "solid" and doc["score"] == rate(path, shape="solid").score
    with pytest.raises(SystemExit) as exc:
        main(["rate", "--shape", "round", str(path)])
    assert exc.value.code == 2 and "--shape" in capsys.readouterr().err
