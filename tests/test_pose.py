"""Metric pose from a homography, against known poses and OpenCV's iterative PnP; the camera file."""

from __future__ import annotations

import itertools
from collections import Counter

import cv2
import numpy as np
import pytest

from objrec.data import sample_background, synthetic_cover
from objrec.fileio import FileFormatError
from objrec.pose import Camera, object_pose
from objrec.types import Pose

K = np.array([[800.0, 0.0, 319.5], [0.0, 800.0, 239.5], [0.0, 0.0, 1.0]])
FRAME = (640, 480)
MODEL = (540, 760)  # a DVD cover's proportions at 4 px per mm
WIDTH_M = 0.135
SCALE = WIDTH_M / MODEL[0]  # metres per model pixel
SMALL_DIST = [0.05, -0.08, 0.001, -0.0005, 0.02]  # (k1, k2, p1, p2, k3): about 2 px at the frame's corners


def _rotation(axis, degrees: float) -> np.ndarray:
    return cv2.Rodrigues(np.asarray(axis, np.float64) * np.deg2rad(degrees))[0]


def _view(tilt: float, distance: float, spin: float, tilt_axis: float) -> tuple[np.ndarray, np.ndarray]:
    """(R, t) of the model plane: turned by ``spin`` degrees in its plane, tilted by ``tilt`` degrees about an
    in-plane axis at ``tilt_axis`` degrees, its centre ``distance`` metres ahead, slightly off the axis."""
    a = np.deg2rad(tilt_axis)
    R = _rotation([np.cos(a), np.sin(a), 0.0], tilt) @ _rotation([0.0, 0.0, 1.0], spin)
    centre = np.array([SCALE * MODEL[0] / 2, SCALE * MODEL[1] / 2, 0.0])
    return R, np.array([0.02, -0.01, distance]) - R @ centre


#: Tilts up to 60 degrees, three distances, three in-plane rotations, three tilt directions.
VIEWS = [_view(*v) for v in itertools.product((0, 20, 40, 60), (0.35, 0.5, 0.7), (0, 100, 230), (0, 60, 135))]


def _exact_homography(R: np.ndarray, t: np.ndarray, K: np.ndarray = K) -> np.ndarray:
    """H = K [r1 r2 t] diag(s, s, 1): model pixels to frame pixels for a camera without distortion."""
    H = K @ np.column_stack([R[:, 0], R[:, 1], t]) @ np.diag([SCALE, SCALE, 1.0])
    return H / H[2, 2]


def _project(model_xy: np.ndarray, R: np.ndarray, t: np.ndarray, camera: Camera) -> np.ndarray:
    obj = np.column_stack([model_xy * SCALE, np.zeros(len(model_xy))])
    return cv2.projectPoints(obj, cv2.Rodrigues(R)[0], t, camera.K, camera.dist)[0].reshape(-1, 2)


def _errors(pose: Pose | None, R: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """(translation error as a fraction of the distance, rotation error in degrees)."""
    assert pose is not None
    Re = cv2.Rodrigues(pose.rvec)[0]
    angle = np.degrees(np.arccos(np.clip((np.trace(Re @ R.T) - 1) / 2, -1.0, 1.0)))
    return float(np.linalg.norm(pose.tvec - t) / np.linalg.norm(t)), float(angle)


# -- pose ------------------------------------------------------------------------------------------
def test_exact_homography_gives_the_pose_opencv_iterative_pnp_finds():
    """Noise-free: the pose from the exact homography equals the known one, and OpenCV's iterative PnP on the
    same 3D-2D points (projected by OpenCV, not through the homography) agrees with both."""
    camera = Camera(K, [], FRAME)
    rng = np.random.default_rng(1)
    for R, t in VIEWS[::5]:
        model_xy = rng.uniform((0, 0), MODEL, (50, 2))
        image_xy = _project(model_xy, R, t, camera)
        H = _exact_homography(R, t)
        mapped = cv2.perspectiveTransform(model_xy.reshape(-1, 1, 2), H).reshape(-1, 2)
        np.testing.assert_allclose(mapped, image_xy, atol=1e-6)  # the test's homography is the camera's
        obj = np.column_stack([model_xy * SCALE, np.zeros(len(model_xy))])
        ok, rvec, tvec = cv2.solvePnP(obj, image_xy, K, None, flags=cv2.SOLVEPNP_ITERATIVE)
        assert ok
        reference = Pose(rvec, tvec)
        pose = object_pose(H, MODEL, WIDTH_M, camera, FRAME)
        for a, b in ((pose, (R, t)), (reference, (R, t))):
            dt, dr = _errors(a, *b)
            assert dt < 1e-6 and dr < 1e-4, (dt, dr)
        np.testing.assert_allclose(pose.tvec, reference.tvec, atol=1e-7)


@pytest.mark.parametrize("dist", [[], SMALL_DIST], ids=["no-distortion", "small-distortion"])
def test_pose_from_noisy_homographies_meets_the_accuracy_targets(dist):
    """Homographies fitted to 50 model points projected with 0.5 px noise (and the lens's distortion), over tilts
    up to 60 degrees, three distances and several in-plane rotations: median translation error at most 2% of
    the distance and median rotation error at most 1 degree. With distortion, the pose that applies it is
    closer than one from a camera without it."""
    camera = Camera(K, dist, FRAME)
    plain = Camera(K, [], FRAME)
    rng = np.random.default_rng(7)
    errors, errors_plain = [], []
    for R, t in VIEWS:
        model_xy = rng.uniform((0, 0), MODEL, (50, 2))
        image_xy = _project(model_xy, R, t, camera) + rng.normal(0.0, 0.5, (50, 2))
        H, _ = cv2.findHomography(model_xy, image_xy, 0)
        errors.append(_errors(object_pose(H, MODEL, WIDTH_M, camera, FRAME), R, t))
        errors_plain.append(_errors(object_pose(H, MODEL, WIDTH_M, plain, FRAME), R, t))
    dt, dr = np.median(errors, axis=0)
    assert dt <= 0.02 and dr <= 1.0, (dt, dr)
    if dist:
        assert dt < np.median(errors_plain, axis=0)[0]


def _render(texture: np.ndarray, R: np.ndarray, t: np.ndarray, camera: Camera) -> np.ndarray:
    """The textured model plane seen by ``camera`` over a background: each frame pixel is undistorted, then
    traced back through the plane's homography into the texture."""
    w, h = camera.size
    xs, ys = np.meshgrid(np.arange(w, dtype=np.float64), np.arange(h, dtype=np.float64))
    pix = np.column_stack([xs.ravel(), ys.ravel()]).reshape(-1, 1, 2)
    ideal = cv2.undistortPoints(pix, camera.K, camera.dist, P=camera.K) if camera.dist.size else pix
    model = cv2.perspectiveTransform(ideal, np.linalg.inv(_exact_homography(R, t, camera.K))).reshape(h, w, 2)
    frame = sample_background((w, h))
    return cv2.remap(
        texture,
        model[..., 0].astype(np.float32),
        model[..., 1].astype(np.float32),
        cv2.INTER_LINEAR,
        dst=frame,
        borderMode=cv2.BORDER_TRANSPARENT,
    )


@pytest.fixture(scope="module")
def cover():
    """A textured cover of the model's size and its SIFT features: (image, keypoint positions, descriptors)."""
    texture = synthetic_cover(7, MODEL)
    kp, des = cv2.SIFT_create().detectAndCompute(cv2.cvtColor(texture, cv2.COLOR_BGR2GRAY), None)
    return texture, np.float32([k.pt for k in kp]), des


@pytest.mark.parametrize("dist", [[], SMALL_DIST], ids=["no-distortion", "small-distortion"])
def test_pose_of_rendered_views_through_matched_features(dist, cover):
    """Rendered views of a textured cover, tilted up to 55 degrees (SIFT finds too few matches beyond): SIFT
    matches (Lowe's ratio, each frame keypoint matched once), a RANSAC homography, then the pose."""
    camera = Camera(K, dist, FRAME)
    texture, model_xy, des_m = cover
    sift = cv2.SIFT_create()
    matcher = cv2.BFMatcher(cv2.NORM_L2)
    errors = []
    for view in [(0, 0.45, 30, 0), (25, 0.5, 200, 45), (40, 0.45, 100, 90), (55, 0.4, 0, 150), (35, 0.6, 300, 20)]:
        R, t = _view(*view)
        frame = _render(texture, R, t, camera)
        kp_f, des_f = sift.detectAndCompute(cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY), None)
        pairs = [p[0] for p in matcher.knnMatch(des_m, des_f, k=2) if p[0].distance < 0.75 * p[1].distance]
        once = Counter(m.trainIdx for m in pairs)
        pairs = [m for m in pairs if once[m.trainIdx] == 1]
        src = model_xy[[m.queryIdx for m in pairs]]
        dst = np.float32([kp_f[m.trainIdx].pt for m in pairs])
        H, inliers = cv2.findHomography(src, dst, cv2.RANSAC, 3.0)
        assert H is not None and inliers.sum() >= 20, view
        errors.append(_errors(object_pose(H, MODEL, WIDTH_M, camera, FRAME), R, t))
    dt, dr = np.median(errors, axis=0)
    assert dt <= 0.02 and dr <= 1.0, errors


def test_pose_in_a_resized_frame_uses_the_rescaled_camera():
    """The same view in a frame of half the calibration's size: the homography of the resized frame gives the
    same metric pose."""
    camera = Camera(K, [], FRAME)
    R, t = VIEWS[40]
    half = np.array([[0.5, 0, -0.25], [0, 0.5, -0.25], [0, 0, 1]])  # cv2.resize's pixel-centre mapping
    pose = object_pose(half @ _exact_homography(R, t), MODEL, WIDTH_M, camera, (320, 240))
    dt, dr = _errors(pose, R, t)
    assert dt < 1e-9 and dr < 1e-4
    assert _errors(object_pose(_exact_homography(R, t), MODEL, WIDTH_M, camera, (320, 240)), R, t)[0] > 0.1


def test_degenerate_homographies_give_no_pose():
    camera = Camera(K, [], FRAME)
    R, t = VIEWS[20]
    H = _exact_homography(R, t)
    assert object_pose(np.zeros((3, 3)), MODEL, WIDTH_M, camera, FRAME) is None
    assert object_pose(np.full((3, 3), np.nan), MODEL, WIDTH_M, camera, FRAME) is None
    assert object_pose(np.outer([1.0, 2.0, 1.0], [1.0, 1.0, 1.0]), MODEL, WIDTH_M, camera, FRAME) is None  # rank 1
    mirrored = H @ np.array([[-1.0, 0, MODEL[0]], [0, 1, 0], [0, 0, 1]])  # the cover's back
    assert object_pose(mirrored, MODEL, WIDTH_M, camera, FRAME) is None
    across = H.copy()
    across[2] = [-2e-3, 0.0, 1.0]  # the plane crosses the focal plane inside the object
    assert object_pose(across, MODEL, WIDTH_M, camera, FRAME) is None
    assert object_pose(-H, MODEL, WIDTH_M, camera, FRAME) is not None  # a homography's scale is free


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"width_m": 0.0}, "width_m"),
        ({"width_m": float("nan")}, "width_m"),
        ({"width_m": "wide"}, "width_m"),
        ({"model_size": (0, 10)}, "model_size"),
        ({"frame_size": (640,)}, "frame_size"),
        ({"homography": np.eye(2)}, "homography"),
        ({"frame_size": (640, 360)}, "aspect ratio"),
    ],
)
def test_bad_arguments_are_value_errors_naming_them(kwargs, needle):
    args = {"homography": np.eye(3), "model_size": MODEL, "width_m": WIDTH_M, "frame_size": FRAME}
    with pytest.raises(ValueError, match=needle):
        object_pose(camera=Camera(K, [], FRAME), **{**args, **kwargs})


# -- camera ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"K": np.eye(2)}, "K"),
        ({"K": [[800, 0, 320], [0, -800, 240], [0, 0, 1]]}, "K"),
        ({"K": [[800, 0, 320], [0, 800, 240], [0, 0, 2]]}, "K"),
        ({"dist": [0.1, 0.2, 0.3]}, "dist"),
        ({"dist": [np.inf, 0, 0, 0]}, "dist"),
        ({"size": (640, 0)}, "size"),
        ({"size": (640.5, 480)}, "size"),
        ({"size": 640}, "size"),
    ],
)
def test_camera_checks_its_arguments(kwargs, needle):
    args = {"K": K, "dist": [], "size": FRAME}
    with pytest.raises(ValueError, match=f"^{needle}:"):
        Camera(**{**args, **kwargs})


def test_for_frame_rescales_k_like_a_resized_image():
    """A point projected at the calibration's resolution, moved as cv2.resize moves pixel centres, is where the
    rescaled K projects it; the distortion acts on normalised coordinates and carries over unchanged."""
    camera = Camera([[1000.0, 0.5, 639.0], [0, 1010.0, 481.0], [0, 0, 1]], SMALL_DIST, (1280, 960))
    np.testing.assert_array_equal(camera.for_frame(1280, 960), camera.K)
    pts = np.random.default_rng(3).uniform((-0.3, -0.2, 0.8), (0.3, 0.2, 1.5), (20, 3))
    full = cv2.projectPoints(pts, np.zeros(3), np.zeros(3), camera.K, camera.dist)[0].reshape(-1, 2)
    for w, h in ((640, 480), (1920, 1440), (800, 600), (1280, 964)):  # the last within the aspect tolerance
        scale = np.array([w / 1280, h / 960])
        small = cv2.projectPoints(pts, np.zeros(3), np.zeros(3), camera.for_frame(w, h), camera.dist)[0]
        np.testing.assert_allclose(small.reshape(-1, 2), (full + 0.5) * scale - 0.5, atol=1e-9)
    with pytest.raises(ValueError, match="aspect ratio.*1280x720"):
        camera.for_frame(1280, 720)


def _write_like_opencv_calibration(path, K, dist, size) -> None:
    """What OpenCV's samples/cpp/calibration.cpp writes (saveCameraParams), keys and types as there."""
    fs = cv2.FileStorage(str(path), cv2.FILE_STORAGE_WRITE)
    fs.write("calibration_time", "Mon Jan  1 12:00:00 2024")
    fs.write("nframes", 20)
    fs.write("image_width", size[0])
    fs.write("image_height", size[1])
    fs.write("board_width", 9)
    fs.write("board_height", 6)
    fs.write("square_size", 0.025)
    fs.write("flags", 0)
    fs.write("camera_matrix", np.asarray(K, np.float64))
    fs.write("distortion_coefficients", np.asarray(dist, np.float64).reshape(-1, 1))
    fs.write("avg_reprojection_error", 0.31)
    fs.release()


@pytest.mark.parametrize("suffix", [".yml", ".xml", ".json"])
def test_camera_file_round_trip_with_opencv(tmp_path, suffix):
    K1 = [[612.5, 0.0, 331.25], [0.0, 611.75, 247.125], [0.0, 0.0, 1.0]]
    written = tmp_path / f"calib{suffix}"
    _write_like_opencv_calibration(written, K1, SMALL_DIST, (640, 480))
    camera = Camera.load(written)
    np.testing.assert_array_equal(camera.K, K1)
    np.testing.assert_array_equal(camera.dist, SMALL_DIST)
    assert camera.size == (640, 480)
    saved = tmp_path / "out" / f"saved{suffix}"
    camera.save(saved)
    assert sorted(p.name for p in saved.parent.iterdir()) == [saved.name]  # no temporary file left
    fs = cv2.FileStorage(str(saved), cv2.FILE_STORAGE_READ)  # read back by OpenCV itself
    np.testing.assert_array_equal(fs.getNode("camera_matrix").mat(), K1)
    np.testing.assert_array_equal(fs.getNode("distortion_coefficients").mat().ravel(), SMALL_DIST)
    assert (fs.getNode("image_width").real(), fs.getNode("image_height").real()) == (640, 480)
    again = Camera.load(saved)
    np.testing.assert_array_equal(again.K, camera.K)
    np.testing.assert_array_equal(again.dist, camera.dist)
    assert again.size == camera.size


def test_camera_without_distortion_round_trips(tmp_path):
    camera = Camera(K, [], FRAME)
    camera.save(tmp_path / "c.yaml")
    assert Camera.load(tmp_path / "c.yaml").dist.shape == (0,)
    with pytest.raises(ValueError, match=r"\.yml"):
        camera.save(tmp_path / "c.txt")


@pytest.mark.parametrize(
    "drop, replace, needle",
    [
        ("camera_matrix", {}, "no 'camera_matrix'"),
        ("distortion_coefficients", {}, "no 'distortion_coefficients'"),
        ("image_width", {}, "no 'image_width'"),
        ("image_height", {}, "no 'image_height'"),
        (None, {"camera_matrix": np.eye(2, 3)}, "camera_matrix: expected a 3x3 matrix, got 2x3"),
        (None, {"camera_matrix": -np.eye(3)}, "camera_matrix: expected [[fx, s, cx]"),
        (None, {"distortion_coefficients": np.zeros((2, 3))}, "distortion_coefficients: expected a row or column"),
        (None, {"distortion_coefficients": np.zeros((3, 1))}, "distortion_coefficients: expected 0/4/5/8/12/14"),
        (None, {"image_width": "wide"}, "image_width: expected a positive integer"),
        (None, {"image_height": 0}, "image_height: expected a positive integer"),
    ],
)
def test_bad_camera_files_name_the_file_and_the_key(tmp_path, drop, replace, needle):
    entries = {"camera_matrix": K, "distortion_coefficients": np.zeros((5, 1)), "image_width": 640, "image_height": 480}
    entries = {k: v for k, v in {**entries, **replace}.items() if k != drop}
    path = tmp_path / "calib.yml"
    fs = cv2.FileStorage(str(path), cv2.FILE_STORAGE_WRITE)
    for k, v in entries.items():
        fs.write(k, v)
    fs.release()
    with pytest.raises(FileFormatError) as info:
        Camera.load(path)
    assert str(info.value).startswith(f"{path}: ") and needle in str(info.value)


def test_missing_and_unreadable_camera_files(tmp_path):
    with pytest.raises(FileFormatError, match="nope.yml: camera calibration file not found"):
        Camera.load(tmp_path / "nope.yml")
    for name, data in (("garbage.yml", b"camera_matrix: [1, 2\n  oops"), ("binary.yml", b"\xff\xfe\x00")):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(FileFormatError, match=f"{name}: not a readable OpenCV"):
            Camera.load(tmp_path / name)


def test_recognizer_reports_the_pose_of_objects_with_a_width(tmp_path, cover):
    """End to end: a cover enrolled with its width, rendered by a known camera at tilts up to 50 degrees, and
    recognised by a Recognizer given that camera (no tracking, so each view stands alone): each detection
    carries the pose within the acceptance targets (median); an object without a width carries none."""
    from objrec import ModelDB, Recognizer

    texture = cover[0]
    db = ModelDB.create(tmp_path / "db")
    db.enroll("cover", texture, width_m=WIDTH_M)
    db.enroll("plain", synthetic_cover(11, (400, 560)))
    camera = Camera(K, [], FRAME)
    rec = Recognizer(db, camera=camera, track=False, prefilter=None)
    errors = []
    for view in [(10, 0.45, 30, 0), (30, 0.5, 200, 45), (50, 0.45, 100, 90), (20, 0.55, 300, 20)]:
        R, t = _view(*view)
        found = {d.name: d for d in rec.process(_render(texture, R, t, camera)).detections}
        assert "cover" in found and found["cover"].pose is not None, view
        errors.append(_errors(found["cover"].pose, R, t))
        assert found["cover"].to_json()["pose"]["tvec"] == pytest.approx(list(found["cover"].pose.tvec))
    dt, dr = np.median(errors, axis=0)
    assert dt <= 0.02 and dr <= 1.0, errors
    with pytest.raises(ValueError, match="camera"):
        Recognizer(db, camera=K)
