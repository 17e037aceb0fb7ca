"""The rating against properties of images made to have (or lack) each defect, and its parts against brute force
and OpenCV."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from objrec.data import sample_objects, sample_photos
from objrec.features.model import DEFAULT_DETECTORS, extract_model_features
from objrec.imageio import InputError
from objrec.rating import WEIGHTS, rate, score_from_measures
from objrec.rating.measures import (
    MIN_CELL_FEATURES,
    RATIO,
    blockiness,
    cell_counts,
    nearest_other_distance,
    quarter_turned,
    quarter_turned_points,
    query_ratio,
    upright_turns,
)
from objrec.rating.model import MEASURE_KEYS


@pytest.fixture(scope="module")
def photo() -> np.ndarray:
    return sample_photos()["china"]


@pytest.fixture(scope="module")
def photo_rating(photo):
    return rate(photo)


def _jpeg(img: np.ndarray, quality: int) -> np.ndarray:
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return cv2.imdecode(buf, cv2.IMREAD_UNCHANGED)


def test_blank_image_rates_zero_for_few_features():
    r = rate(np.full((480, 640, 3), 128, np.uint8))
    assert r.score == 0
    assert r.codes[0] == "few_features"
    assert r.reasons[0].value == 0
    assert set(MEASURE_KEYS) <= set(r.measures)


def test_an_image_the_envelope_finds_in_nine_views_of_ten_rates_at_least_75():
    # The reference is recognition itself: the operating envelope renders the image in its 60 views and counts
    # those the recognizer finds in place.
    from objrec.envelope import measure_envelope

    img = sample_objects()["dahlia"]
    assert measure_envelope(img).found_share >= 0.9
    r = rate(img)
    assert r.score >= 75, r.summary()


def test_reason_costs_are_within_the_points_lost(photo_rating):
    assert photo_rating.reasons
    # the costs split 100 - 100 * product among all factors (those reported and those too small to report); the
    # score is that product rounded to a whole point
    assert sum(x.cost for x in photo_rating.reasons) <= 100 - photo_rating.score + 0.5


def test_tiled_patch_rates_low_for_repetition(photo):
    patch = np.ascontiguousarray(photo[100:260, 200:360])
    tiled = np.tile(patch, (4, 4, 1))
    r_patch, r_tiled = rate(patch), rate(tiled)
    assert "repetition" in r_tiled.codes, r_tiled.summary()
    assert r_tiled.measures["repetition"] > 0.5
    assert r_tiled.score < 40
    assert r_tiled.score < r_patch.score, (r_tiled.summary(), r_patch.summary())


def test_checkerboard_rates_low_for_repetition():
    board = np.kron((np.indices((12, 16)).sum(0) % 2).astype(np.uint8) * 200 + 30, np.ones((40, 40), np.uint8))
    r = rate(board)
    assert r.score < 40, r.summary()
    assert "repetition" in r.codes or "few_features" in r.codes[:1]
    assert r.measures["distinctive_features"] < 0.5 * max(1.0, r.measures["n_features"])


def test_downscaling_below_the_pixel_limit_costs_too_few_pixels(photo, photo_rating):
    small = cv2.resize(photo, (144, 96), interpolation=cv2.INTER_AREA)
    r = rate(small)
    assert r.measures["short_side"] == 96
    assert "too_few_pixels" in r.codes
    assert r.score < photo_rating.score


def test_rotation_by_90_degrees_and_jpeg_q95_keep_the_score(photo, photo_rating):
    png = cv2.imdecode(cv2.imencode(".png", photo)[1], cv2.IMREAD_UNCHANGED)
    assert abs(rate(png).score - photo_rating.score) <= 3
    assert abs(rate(cv2.rotate(photo, cv2.ROTATE_90_CLOCKWISE)).score - photo_rating.score) <= 3
    assert abs(rate(_jpeg(photo, 95)).score - photo_rating.score) <= 3


def test_heavy_jpeg_raises_blocking(photo, photo_rating):
    r = rate(_jpeg(photo, 5))
    assert r.measures["blockiness"] > photo_rating.measures["blockiness"] + 0.3
    assert "jpeg_blocking" in r.codes


def test_mirror_symmetric_image_is_reported(photo, photo_rating):
    half = photo[:, :320]
    mirrored = np.hstack([half, cv2.flip(half, 1)])
    r = rate(mirrored)
    assert "symmetry" in r.codes, r.summary()
    assert photo_rating.measures["symmetry"] < WEIGHTS["symmetry_onset"]


def test_contrast_only_in_hue_is_reported():
    # Two colours of the same gray level (0.299 R + 0.587 G + 0.114 B = 129.9) side by side.
    img = np.zeros((240, 320, 3), np.uint8)
    img[:, :160] = (100, 100, 200)
    img[:, 160:] = (133, 170, 50)
    assert np.ptp(cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)) <= 1
    r = rate(img)
    assert "colour_only_contrast" in r.codes
    assert r.score < 40


def test_given_features_rate_as_extracted(photo, photo_rating):
    feats = extract_model_features(photo, DEFAULT_DETECTORS)
    r = rate(photo, features=feats)
    assert r.score == photo_rating.score
    np.testing.assert_equal(r.measures, photo_rating.measures)  # NaN (a measure not taken) equals NaN


def test_bad_input_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="16-bit|uint8"):
        rate(np.zeros((64, 64), np.uint16))
    with pytest.raises(InputError, match="no such file"):
        rate(tmp_path / "missing.png")


def test_nearest_other_distance_matches_opencv_brute_force(photo):
    f = extract_model_features(photo[:200, :200], {"surf": DEFAULT_DETECTORS["surf"]})["surf"]
    d = f.descriptors.astype(np.float32)
    knn = cv2.BFMatcher(cv2.NORM_L2).knnMatch(d, d, k=2)
    want = np.array([m[1].distance if m[0].queryIdx == m[0].trainIdx else m[0].distance for m in knn])
    got = nearest_other_distance(d) * np.linalg.norm(d, axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
    dup = np.vstack([d[:5], d[:5]])
    np.testing.assert_allclose(nearest_other_distance(dup), 0.0, atol=1e-3)


def test_query_ratio_marks_twins_and_far_features():
    r = query_ratio(np.array([0.0, 0.01, 1.0, np.inf]), "sift")
    assert r[0] == pytest.approx(1.0) and r[1] > RATIO
    assert r[2] < RATIO and r[3] == 0.0


def test_cell_counts_match_a_loop():
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 1, (500, 2)) * (319.99, 239.99)
    want = np.zeros((8, 8), int)
    for x, y in xy:
        want[int(y // 30), int(x // 40)] += 1
    np.testing.assert_array_equal(cell_counts(xy, (240, 320)), want)
    assert MIN_CELL_FEATURES >= 1


def test_blockiness_is_one_without_blocks_and_grows_with_them():
    rng = np.random.default_rng(1)
    smooth = cv2.GaussianBlur(rng.integers(0, 255, (256, 256)).astype(np.uint8), (0, 0), 3)
    assert blockiness(smooth) == pytest.approx(1.0, abs=0.1)
    blocks = np.kron(rng.integers(0, 255, (32, 32)), np.ones((8, 8))).astype(np.uint8)
    assert blockiness(cv2.add(blocks // 4, smooth // 2)) > 2.0


def test_score_model_is_monotone_in_features():
    base = dict.fromkeys(MEASURE_KEYS, 0.0) | {
        "short_side": 480.0,
        "model_scale": 1.0,
        "blockiness": 1.0,
        "gray_contrast": 0.2,
        "coverage": 0.9,
        "small_view_matches": 50.0,
    }
    scores = [score_from_measures(base | {"n_features": n, "distinctive_features": n})[0] for n in (10, 100, 1000)]
    assert scores == sorted(scores) and scores[0] < scores[-1]
    with pytest.raises(KeyError, match="missing"):
        score_from_measures({})


def test_fine_detail_only_keeps_few_matches_in_small_views():
    # One random pattern drawn at two grains: 2 px cells (fine print) and 24 px cells (bold shapes), same
    # image size. Seen blurred, or small and from the side, the fine one has nothing left to match; the bold
    # one keeps its features, and its rating does not report fine detail.
    rng = np.random.default_rng(3)
    fine = (rng.integers(0, 2, (240, 320)) * 255).astype(np.uint8)
    fine = np.kron(fine, np.ones((2, 2), np.uint8))
    bold = np.kron((rng.integers(0, 2, (20, 27)) * 255).astype(np.uint8), np.ones((24, 24), np.uint8))[:480, :640]
    bold = cv2.GaussianBlur(bold, (0, 0), 1.0)
    r_fine, r_bold = rate(fine), rate(bold)
    assert r_fine.measures["small_view_matches"] < 3
    assert r_bold.measures["small_view_matches"] > 4 * max(1.0, r_fine.measures["small_view_matches"])
    assert "fine_detail" in r_fine.codes and "fine_detail" not in r_bold.codes


def _grains(seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """One random pattern drawn at two grains: 2 px cells (fine print) and 24 px cells (bold shapes)."""
    rng = np.random.default_rng(seed)
    fine = np.kron((rng.integers(0, 2, (240, 320)) * 255).astype(np.uint8), np.ones((2, 2), np.uint8))
    bold = np.kron((rng.integers(0, 2, (20, 27)) * 255).astype(np.uint8), np.ones((24, 24), np.uint8))[:480, :640]
    return fine, cv2.GaussianBlur(bold, (0, 0), 1.0)


def test_hard_views_keep_bold_shapes_and_lose_fine_print():
    # Small, side-on, steep, out of focus or hand-held, a camera resolves bold shapes and not 2 px print: the
    # bold pattern keeps correct matches in most hard views (which needs the views' geometry to be right), the
    # fine one in almost none, and only its rating reports it.
    fine, bold = _grains()
    r_fine, r_bold = rate(fine), rate(bold)
    assert r_fine.measures["hard_views"] < 0.15
    assert r_bold.measures["hard_views"] > 0.5
    assert "hard_views" in r_fine.codes and "hard_views" not in r_bold.codes


def test_quarter_turns_are_rated_exactly_alike():
    # The features and views are measured on the image turned upright, the same pixels whichever way up it
    # was given; PNG-like pixels have no JPEG grid, so the blocking measure agrees too.
    for img in (sample_objects()["cover"], sample_photos()["flower"]):
        first = rate(img)
        for turn in (cv2.ROTATE_90_CLOCKWISE, cv2.ROTATE_180, cv2.ROTATE_90_COUNTERCLOCKWISE):
            r = rate(cv2.rotate(img, turn))
            assert r.score == first.score and r.measures["hard_views"] == first.measures["hard_views"]
            assert r.measures["n_features"] == first.measures["n_features"]
            assert r.shape == cv2.rotate(img, turn).shape[:2]


def test_upright_turns_pick_one_orientation_for_all_quarter_turns():
    img = sample_photos()["flower"]
    upright = quarter_turned(img, upright_turns(img[..., 1]))
    for k in range(4):
        turned = quarter_turned(img, k)
        assert np.array_equal(quarter_turned(turned, upright_turns(turned[..., 1])), upright)


def test_quarter_turned_points_follow_the_pixels():
    img = np.zeros((5, 8), np.uint8)
    xy = np.array([[6.0, 1.0], [0.0, 4.0], [7.0, 0.0]])
    for i, (x, y) in enumerate(xy.astype(int)):
        img[y, x] = 10 * (i + 1)
    for k in range(-3, 5):
        turned = np.rot90(img, -k)  # numpy turns counter-clockwise
        at = quarter_turned_points(xy, img.shape, k).astype(int)
        assert [int(turned[y, x]) for x, y in at] == [10, 20, 30]
        np.testing.assert_array_equal(quarter_turned_points(at, turned.shape, -k), xy)


def test_blockiness_finds_the_grid_of_a_turned_jpeg(photo):
    # A width that is not a multiple of 8: turned, the JPEG grid starts at the other end of the axis.
    gray = cv2.cvtColor(photo, cv2.COLOR_BGR2GRAY)[:, :637]
    blocky = cv2.imdecode(cv2.imencode(".jpg", gray, [cv2.IMWRITE_JPEG_QUALITY, 10])[1], cv2.IMREAD_GRAYSCALE)
    first = blockiness(blocky)
    assert first > 1.5
    for turn in (cv2.ROTATE_90_CLOCKWISE, cv2.ROTATE_180, cv2.ROTATE_90_COUNTERCLOCKWISE):
        assert blockiness(cv2.rotate(blocky, turn)) == pytest.approx(first, rel=1e-9)


def test_mirrored_descriptors_are_those_of_the_mirrored_image(photo):
    """A feature's mirrored descriptor (computed from its own descriptor) matches the descriptor extracted at
    the same feature in the left-right flipped image: exactly for SURF (a rearrangement of the same sums),
    within SIFT's resampling for SIFT; far closer than unrelated features in both."""
    from scipy.spatial import cKDTree

    from objrec.features.model import DEFAULT_DETECTORS, extract_model_features
    from objrec.rating.measures import mirror_descriptors

    gray = cv2.cvtColor(photo, cv2.COLOR_BGR2GRAY)
    w = gray.shape[1]
    for kind in ("surf", "sift"):
        det = {kind: DEFAULT_DETECTORS[kind]}
        f = extract_model_features(gray, det)[kind].to_host()
        g = extract_model_features(cv2.flip(gray, 1), det)[kind].to_host()
        gxy = np.asarray(g.xy, np.float64).reshape(-1, 2).copy()
        gxy[:, 0] = w - 1 - gxy[:, 0]
        dist, j = cKDTree(gxy).query(np.asarray(f.xy, np.float64).reshape(-1, 2))
        same = (dist < 0.5) & (np.abs(np.asarray(g.size)[j] - np.asarray(f.size)) < 0.05 * np.asarray(f.size))
        assert same.sum() > 100
        a = mirror_descriptors(kind, np.asarray(f.descriptors, np.float64)[same])
        b = np.asarray(g.descriptors, np.float64)[j[same]]
        err = np.median(np.linalg.norm(a - b, axis=1))
        unrelated = np.median(np.linalg.norm(b - np.roll(b, 7, axis=0), axis=1))
        assert err < (1e-4 if kind == "surf" else 0.15) * unrelated, (kind, err, unrelated)
    with pytest.raises(ValueError, match="expected"):
        mirror_descriptors("surf", np.zeros((3, 128), np.float32))
