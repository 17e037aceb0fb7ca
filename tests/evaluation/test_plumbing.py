"""What the harness adds around objrec.metrics, checked on hand-computed cases."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from objrec.evaluation import RecordStore, numbers_only, task_id
from objrec.evaluation.detectors import binary_to_float, cap_features, parse_detectors
from objrec.evaluation.feature_eval import estimate_homography, evaluate_pair, ratio_test_matches
from objrec.evaluation.feature_report import feature_summary
from objrec.evaluation.recognition import score_detections
from objrec.evaluation.recognition_report import recognition_stats
from objrec.evaluation.stats import median_with_failures
from objrec.geometry import model_corners
from objrec.metrics import corner_error
from objrec.types import Detection, Features


def _features(desc: np.ndarray, kind: str = "orb", xy: np.ndarray | None = None, response=None) -> Features:
    n = len(desc)
    xy = np.zeros((n, 2), np.float32) if xy is None else xy
    r = np.arange(n, dtype=np.float32) if response is None else response
    z = np.zeros(n, np.float32)
    return Features(xy, z + 10, z, r, np.zeros(n, np.int32), np.zeros(n, np.int8), desc, kind)


def test_unpacked_bits_squared_l2_is_hamming():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (20, 32), dtype=np.uint8)
    b = rng.integers(0, 256, (30, 32), dtype=np.uint8)
    fa, fb = binary_to_float(a), binary_to_float(b)
    assert fa.shape == (20, 256) and fa.dtype == np.float32
    l2sq = ((fa[:, None, :] - fb[None, :, :]) ** 2).sum(-1)
    hamming = np.array([[cv2.norm(x, y, cv2.NORM_HAMMING) for y in b] for x in a])
    np.testing.assert_array_equal(l2sq, hamming)


def test_binary_ratio_test_compares_hamming_distances():
    # Query 0 is 7 and 10 bits away from its two neighbours (ratio 0.7: kept at 0.8), query 1 is 9 and 10 away
    # (0.9: rejected). On sqrt(Hamming) both would pass a 0.8 test (0.84, 0.95 -> only the first) - the point is
    # that the threshold applies to Hamming distances, as with cv2.NORM_HAMMING.
    bits = np.zeros((2, 64), np.float32)
    t = np.zeros((4, 64), np.float32)
    t[0, :7] = 1  # 7 from q0
    t[1, 10:20] = 1  # 10 from q0
    bits[1, 30:40] = 1
    t[2, 30:40] = 1
    t[2, 40:49] = 1  # 9 from q1
    t[3, 30:40] = 1
    t[3, 50:60] = 1  # 10 from q1
    q = _features(bits)
    tr = _features(t)
    m = ratio_test_matches(q, tr, ratio=0.8, binary=True)
    assert m.tolist() == [[0, 0]]
    # As float descriptors (L2 = sqrt(Hamming)): 0.837 and 0.949, so at 0.8 neither passes.
    assert ratio_test_matches(q, tr, ratio=0.8, binary=False).shape == (0, 2)


def test_cap_features_keeps_the_strongest_in_original_order():
    f = _features(np.eye(5, dtype=np.float32), response=np.array([0.1, 0.9, 0.5, 0.7, 0.2], np.float32))
    c = cap_features(f, 3)
    np.testing.assert_array_equal(c.response, np.float32([0.9, 0.5, 0.7]))
    assert cap_features(f, 0) is f and cap_features(f, 10) is f


def test_ransac_homography_recovers_a_known_homography():
    H = np.array([[0.9, 0.1, 20.0], [-0.05, 1.1, 5.0], [1e-4, 2e-4, 1.0]])
    rng = np.random.default_rng(1)
    x1 = rng.uniform(0, 500, (60, 2))
    x2 = cv2.perspectiveTransform(x1.reshape(-1, 1, 2), H).reshape(-1, 2)
    x2[:10] += rng.uniform(30, 60, (10, 2))  # outliers
    H_est, n_inl = estimate_homography(x1, x2)
    assert n_inl == 50
    assert corner_error(H_est, H, 500, 400) < 1e-3
    assert estimate_homography(x1[:3], x2[:3]) == (None, 0)


def _write_pair(tmp_path, H, size=(480, 360)):
    from objrec.data import synthetic_cover

    img = cv2.cvtColor(synthetic_cover(3, size), cv2.COLOR_BGR2GRAY)
    warped = cv2.warpPerspective(img, H, size, flags=cv2.INTER_LINEAR)
    p1, p2 = tmp_path / "a.png", tmp_path / "b.png"
    cv2.imwrite(str(p1), img)
    cv2.imwrite(str(p2), warped)
    return str(p1), str(p2)


def _pair_spec(det, p1, p2, H, **kw):
    spec = {
        "type": "pair",
        "detector": det,
        "label": "x/1-2",
        "img1": p1,
        "imgN": p2,
        "H": H.tolist(),
        "meta": {},
        **kw,
    }
    return spec


@pytest.mark.parametrize("det", ["opencv-sift", "orb"])
def test_pair_identity_is_perfect(tmp_path, det):
    H = np.eye(3)
    p1, p2 = _write_pair(tmp_path, H)
    r = evaluate_pair(_pair_spec(det, p1, p2, H))
    assert r["n_features"][0] == r["n_features"][1] > 50
    assert r["repeatability"] > 0.98
    assert r["matching_score"] > 0.9
    assert r["mma"][0] > 0.95
    assert r["homography"]["correct"] == {"1": True, "3": True, "5": True}
    assert r["time_ms"]["detect_1"] > 0


def test_pair_known_rotation_scale(tmp_path):
    # 20 degrees and 0.8x about the centre: SIFT is built for this; the homography comes back within 1 px.
    R = cv2.getRotationMatrix2D((240, 180), 20, 0.8)
    H = np.vstack([R, [0, 0, 1]])
    p1, p2 = _write_pair(tmp_path, H)
    r = evaluate_pair(_pair_spec("opencv-sift", p1, p2, H))
    assert 0.4 < r["repeatability"] <= 1
    assert r["matching_score"] > 0.3
    assert r["homography"]["corner_error"] < 1.0
    # With a ground truth 40 px off, only large regions still overlap (30 px normalisation), descriptors no
    # longer agree with the geometry, and the estimate is far from the "truth".
    wrong = H @ np.array([[1, 0, 40], [0, 1, 0], [0, 0, 1.0]])
    r2 = evaluate_pair(_pair_spec("opencv-sift", p1, p2, wrong))
    assert r2["repeatability"] < 0.5 * r["repeatability"]
    assert r2["matching_score"] < 0.05
    assert r2["homography"]["correct"]["5"] is False


def _det(name, corners, score=0.9):
    H = cv2.getPerspectiveTransform(model_corners(100, 80).astype(np.float32), np.float32(corners))
    return Detection(name, score, 20, H, corners)


def test_score_detections_hand_cases():
    truth_c = model_corners(100, 80) + [50, 40]
    truth = [{"name": "a", "corners": truth_c}, {"name": "b", "corners": model_corners(100, 80) + [300, 200]}]
    dets = [
        _det("a", truth_c + [3, 4], 0.9),  # corner error 5: TP
        _det("a", truth_c, 0.5),  # duplicate of a: FP
        _det("b", model_corners(100, 80) + [330, 200], 0.8),  # right name, 30 px off: FP, and b is missed
        _det("c", truth_c, 0.7),  # not in the scene: FP
    ]
    s = score_detections(dets, truth, "corners", 10.0)
    assert (s["tp"], s["fp"], s["fn"], s["n_truth"]) == (1, 3, 1, 2)
    assert s["corner_errors"] == [5.0]
    assert [d["correct"] for d in s["detections"]] == [True, False, False, False]
    assert s["detections"][1]["corner_error"] == 30.0  # sorted by score: a(0.9), b(0.8), c(0.7), a(0.5)
    # Centre rule: b's outline centre (380, 240) lies inside the true outline (300..400, 200..280).
    s2 = score_detections(dets, truth, "centre")
    assert (s2["tp"], s2["fp"], s2["fn"]) == (2, 2, 0)
    assert score_detections([], [], "corners")["fp"] == 0


def test_recognition_stats_by_hand():
    rows = [
        {"n_truth": 1, "tp": 1, "fp": 0, "fn": 0, "corner_errors": [2.0], "latency_ms": 10.0, "deadline_met": True},
        {"n_truth": 1, "tp": 0, "fp": 1, "fn": 1, "corner_errors": [], "latency_ms": 30.0, "deadline_met": False},
        {"n_truth": 0, "tp": 0, "fp": 0, "fn": 0, "corner_errors": [], "latency_ms": 20.0, "deadline_met": True},
    ]
    s = recognition_stats(rows, budget_ms=25.0)
    assert (s["tp"], s["fp"], s["fn"], s["n_objects"]) == (1, 1, 1, 2)
    assert s["precision"] == 0.5 and s["recall"] == 0.5
    assert s["latency_ms"]["p50"] == 20.0 and s["latency_ms"]["max"] == 30.0
    assert s["deadline_met_fraction"] == pytest.approx(2 / 3, abs=1e-6)
    assert recognition_stats(rows[2:], None)["precision"] is None


def test_feature_summary_counts_failed_homographies():
    def row(ce, ok3):
        return {
            "n_features": [10, 20],
            "repeatability": 0.5,
            "matching_score": 0.25,
            "mma": [0.1] * 10,
            "homography": {"corner_error": ce, "correct": {"1": False, "3": ok3, "5": ok3}},
            "time_ms": {"detect_1": 5.0, "detect_N": None},
        }

    s = feature_summary([row(2.0, True), row(None, False), row(4.0, False)], None)
    assert s["homography_accuracy"] == {
        "1": 0.0,
        "3": pytest.approx(1 / 3, abs=1e-6),
        "5": pytest.approx(1 / 3, abs=1e-6),
    }
    assert s["corner_error_median"] == 4.0  # 2, 4, inf
    assert median_with_failures([None, None, 1.0]) is None
    assert s["n_features_mean"] == 15.0 and s["detect_ms"]["p50"] == 5.0


def test_record_store_drops_partial_and_damaged_lines(tmp_path):
    p = tmp_path / "records.jsonl"
    good = [{"id": f"t{i}", "result": {"v": i}} for i in range(3)]
    text = "\n".join(json.dumps(g) for g in good[:2]) + "\nnot json\n" + json.dumps(good[2])[:15]
    p.write_text(text)
    s = RecordStore(p)
    assert sorted(s.records) == ["t0", "t1"] and s.dropped == 2
    s.append(good[2])
    again = RecordStore(p)
    assert sorted(again.records) == ["t0", "t1", "t2"] and again.dropped == 0
    assert p.read_text().count("\n") == 3


def test_task_id_is_stable_and_tracks_parameters():
    spec = {"type": "pair", "detector": "orb", "label": "graf/1-2", "max_features": 0, "meta": {}}
    a = task_id(spec)
    assert a == task_id(dict(reversed(list(spec.items()))))
    assert a.startswith("orb/graf/1-2#")
    assert task_id({**spec, "max_features": 500}) != a


def test_parse_detectors():
    assert parse_detectors(None, ("orb",)) == ["orb"]
    assert parse_detectors("orb, akaze,orb", ()) == ["orb", "akaze"]
    assert "opencv-surf-ref" in parse_detectors("all", ())
    with pytest.raises(ValueError, match="unknown detector 'brisk'"):
        parse_detectors("orb,brisk", ())


def test_numbers_only_ignores_timings():
    r = {
        "dataset": {},
        "detectors": {},
        "recognition": None,
        "features": {"pairs": [{"repeatability": 0.5, "time_ms": {"detect_1": 3.0}}]},
    }
    r2 = json.loads(json.dumps(r))
    r2["features"]["pairs"][0]["time_ms"]["detect_1"] = 9.0
    assert numbers_only(r) == numbers_only(r2)
    r2["features"]["pairs"][0]["repeatability"] = 0.6
    assert numbers_only(r) != numbers_only(r2)
