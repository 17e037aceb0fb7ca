"""The CLI contract: commands, JSON shape, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import cv2
import numpy as np
import pytest

from objrec.cli import main
from objrec.data import sample_background, sample_objects
from objrec.scenes import compose_scene


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "objrec", *args], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    objs = sample_objects()
    paths = {}
    for name in ("dahlia", "cover"):
        paths[name] = d / f"{name}.png"
        cv2.imwrite(str(paths[name]), objs[name])
    scene = compose_scene(
        sample_background((800, 600)),
        {"cover": objs["cover"]},
        rng=2,
        frame_size=(800, 600),
        area_fraction=(0.12, 0.18),
    )
    paths["scene"] = d / "scene.png"
    cv2.imwrite(str(paths["scene"]), scene.image)
    paths["truth"] = scene.truth("cover")
    paths["dir"] = d
    return paths


@pytest.mark.parametrize("cmd", [[], ["enroll"], ["detect"], ["demo"], ["db"], ["db", "verify"], ["cache"]])
def test_help_on_every_command(cmd):
    r = run_cli(*cmd, "--help")
    assert r.returncode == 0 and "usage: objrec" in r.stdout


def test_enroll_then_detect_json(files, tmp_path):
    db = tmp_path / "db"
    r = run_cli("enroll", "--db", str(db), f"dahlia={files['dahlia']}", f"cover={files['cover']}")
    assert r.returncode == 0, r.stderr
    assert "enrolled dahlia" in r.stdout and "2 object(s)" in r.stdout
    r = run_cli("detect", "--db", str(db), "--json", str(files["scene"]))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    (res,) = doc["results"]
    assert res["image"] == str(files["scene"])
    assert isinstance(res["timings_ms"], dict) and all(v >= 0 for v in res["timings_ms"].values())
    if sys.platform.startswith("linux"):
        assert doc["memory"]["peak_rss_mb"] >= doc["memory"]["rss_mb"] > 10  # the process's own figures
    (det,) = res["detections"]
    assert set(det) == {
        "name",
        "score",
        "inliers",
        "homography",
        "corners",
        "visible_fraction",
        "state",
        "track_id",
        "pose",
        "view",
    }
    assert det["name"] == "cover" and det["view"] == 0 and 0 <= det["score"] <= 1 and det["inliers"] >= 10
    assert det["state"] == "detected" and det["pose"] is None  # no camera given
    H = np.array(det["homography"])
    assert H.shape == (3, 3) and H[2, 2] == 1.0
    corners = np.array(det["corners"])
    assert corners.shape == (4, 2)
    h, w = cv2.imread(str(files["cover"])).shape[:2]
    mapped = cv2.perspectiveTransform(np.float64([[[0, 0], [w, 0], [w, h], [0, h]]]), H)[0]
    np.testing.assert_allclose(corners, mapped, atol=1e-6)
    np.testing.assert_allclose(corners, files["truth"].corners, atol=3.0)


def test_detect_with_exact_matching(files, tmp_path):
    db = tmp_path / "db"
    assert run_cli("enroll", "--db", str(db), f"cover={files['cover']}").returncode == 0
    r = run_cli("detect", "--db", str(db), "--json", "--exact-matching", str(files["scene"]))
    assert r.returncode == 0, r.stderr
    (det,) = json.loads(r.stdout)["results"][0]["detections"]
    assert det["name"] == "cover"
    np.testing.assert_allclose(np.array(det["corners"]), files["truth"].corners, atol=3.0)
    assert abs(det["visible_fraction"] - files["truth"].visible_fraction) < 0.02


def test_detect_tilts_searches_tilted_views_only_without_a_budget(files, tmp_path, capsys):
    """``--tilts`` reaches the recognizer (the scene's cover is still found, at its corners) and is checked: numbers
    above 1, and no budget (a one-line error naming the option, exit code 2)."""
    db = tmp_path / "db"
    assert main(["enroll", "--db", str(db), f"cover={files['cover']}"]) == 0
    capsys.readouterr()
    assert main(["detect", "--db", str(db), "--json", "--tilts", "2,4", str(files["scene"])]) == 0
    (det,) = json.loads(capsys.readouterr().out)["results"][0]["detections"]
    assert det["name"] == "cover"
    np.testing.assert_allclose(np.array(det["corners"]), files["truth"].corners, atol=3.0)
    cases = [
        (["--tilts", "1"], "above 1"),
        (["--tilts", "2,x"], "above 1"),
        (["--tilts", ""], "above 1"),
        (["--tilts", "2,inf"], "above 1"),
        (["--tilts", "2", "--budget-ms", "33"], "without a budget"),
    ]
    for opts, why in cases:
        assert main(["detect", "--db", str(db), *opts, str(files["scene"])]) == 2, opts
        err = capsys.readouterr().err
        assert "--tilts" in err and why in err, err


def test_detect_unreadable_image_reports_error_and_continues(files, tmp_path):
    db = tmp_path / "db"
    assert main(["enroll", "--db", str(db), f"cover={files['cover']}"]) == 0
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"\x89PNG not really")
    r = run_cli("detect", "--db", str(db), "--json", str(bad), str(files["scene"]), str(tmp_path / "absent.jpg"))
    assert r.returncode == 2
    res = json.loads(r.stdout)["results"]
    assert [list(x) for x in res][0] == ["image", "error"]
    assert "broken.png" in res[0]["error"] and "not a readable image" in res[0]["error"]
    assert [d["name"] for d in res[1]["detections"]] == ["cover"]
    assert "no such file" in res[2]["error"]


def _one_line_error(r: subprocess.CompletedProcess, *needles: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_corrupt_database_is_a_one_line_error(files, tmp_path):
    db = tmp_path / "db"
    assert main(["enroll", "--db", str(db), f"cover={files['cover']}"]) == 0
    (db / "manifest.json").write_text("{ truncated")
    _one_line_error(run_cli("detect", "--db", str(db), str(files["scene"])), "manifest.json", "not valid JSON")
    _one_line_error(run_cli("enroll", "--db", str(db), f"x={files['dahlia']}"), "manifest.json")


def test_tampered_array_file_is_a_one_line_error(files, tmp_path):
    db = tmp_path / "db"
    assert main(["enroll", "--db", str(db), f"cover={files['cover']}"]) == 0
    (npy,) = (db / "shards").glob("*/sift.descriptors.npy")
    npy.write_bytes(npy.read_bytes()[:100])
    _one_line_error(run_cli("detect", "--db", str(db), str(files["scene"])), npy.name, "sha256 mismatch")


def test_missing_database_and_bad_arguments(files, tmp_path):
    _one_line_error(run_cli("detect", "--db", str(tmp_path / "nope"), str(files["scene"])), "no such model database")
    _one_line_error(run_cli("enroll", "--db", str(tmp_path / "db"), "no-equals-sign"), "NAME=IMAGE")
    _one_line_error(run_cli("enroll", "--db", str(tmp_path / "db"), f"x={tmp_path / 'missing.png'}"), "missing.png")
    assert not (tmp_path / "db").exists() or not list((tmp_path / "db").glob("shards/*"))
    r = run_cli("detect", "--db", str(tmp_path / "db"))  # argparse: missing IMAGE
    assert r.returncode == 2 and "usage:" in r.stderr


def test_enroll_is_all_or_nothing_and_refuses_duplicates(files, tmp_path):
    db = tmp_path / "db"
    r = run_cli("enroll", "--db", str(db), f"cover={files['cover']}", f"bad={tmp_path / 'missing.png'}")
    assert r.returncode == 2
    assert not db.exists()  # the readable image was not enrolled alone
    assert main(["enroll", "--db", str(db), f"cover={files['cover']}"]) == 0
    _one_line_error(run_cli("enroll", "--db", str(db), f"cover={files['dahlia']}"), "already enrolled")
    _one_line_error(run_cli("enroll", "--db", str(db), f"a={files['cover']}", f"a={files['dahlia']}"), "twice")


@pytest.mark.slow
def test_demo_runs_on_embedded_data(tmp_path):
    r = run_cli("demo", "--out", str(tmp_path / "demo"))
    assert r.returncode == 0, r.stdout + r.stderr
    for name in ("pagoda", "dahlia", "cover"):
        line = next(x for x in r.stdout.splitlines() if x.strip().startswith(name))
        err = float(line.split("mean corner error")[1].split("px")[0])
        assert err < 2.0, line
    img = cv2.imread(str(tmp_path / "demo" / "demo_result.png"))
    assert img is not None and img.shape == (540, 960, 3)


@pytest.mark.slow
def test_enroll_train_prefilter_then_stale_after_change(files, tmp_path):
    from objrec import ModelDB
    from objrec.prefilter import RegionPrefilter

    db = tmp_path / "db"
    r = run_cli("enroll", "--db", str(db), "--train-prefilter", f"cover={files['cover']}")
    assert r.returncode == 0, r.stderr
    assert (db / "prefilter.json").exists() and RegionPrefilter.load_for(ModelDB.open(db))
    r = run_cli("enroll", "--db", str(db), f"dahlia={files['dahlia']}")
    assert r.returncode == 0 and "prefilter is stale" in r.stdout
    r = run_cli("detect", "--db", str(db), "--json", str(files["scene"]))
    assert r.returncode == 0
    assert "warning" in r.stderr and "without the prefilter" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert [d["name"] for d in json.loads(r.stdout)["results"][0]["detections"]] == ["cover"]


def test_detect_explain_lists_rejected_candidates_with_reason_codes(files, tmp_path, capsys):
    from objrec.matching import REASONS

    db = str(tmp_path / "db")
    assert main(["enroll", "--db", db, f"dahlia={files['dahlia']}", f"cover={files['cover']}"]) == 0
    capsys.readouterr()
    assert main(["detect", "--db", db, "--json", "--explain", str(files["scene"])]) == 0
    (res,) = json.loads(capsys.readouterr().out)["results"]
    assert [d["name"] for d in res["detections"]] == ["cover"]
    # The absent dahlia gathers a few chance matches, and its rejection says why.
    assert res["rejections"] and {r["name"] for r in res["rejections"]} == {"dahlia"}
    for r in res["rejections"]:
        assert set(r) == {"name", "reason", "matches", "detail"} and r["reason"] in REASONS
    assert main(["detect", "--db", db, "--explain", str(files["scene"])]) == 0
    out = capsys.readouterr().out
    assert f"rejected dahlia: {res['rejections'][0]['reason']}" in out
    assert main(["detect", "--db", db, "--json", str(files["scene"])]) == 0
    assert "rejections" not in json.loads(capsys.readouterr().out)["results"][0]


def test_enroll_from_folder_lists_failures_and_resumes(files, tmp_path, assert_stored_image):
    folder = tmp_path / "covers"
    folder.mkdir()
    objs = sample_objects()
    for name in ("dahlia", "cover"):
        cv2.imwrite(str(folder / f"{name}.jpg"), objs[name])
    (folder / "broken.png").write_bytes(b"\x89PNG not really")
    whole = cv2.imencode(".jpg", objs["pagoda"])[1].tobytes()
    (folder / "truncated.jpg").write_bytes(whole[: len(whole) * 2 // 3])  # a download cut short
    cv2.imwrite(str(folder / "blank.png"), np.full((64, 64), 90, np.uint8))
    (folder / "notes.txt").write_text("not an image, not enrolled")
    db = tmp_path / "db"
    r = run_cli("enroll", "--db", str(db), "--detectors", "sift", "--from", str(folder))
    assert r.returncode == 2, r.stderr
    failed = [x for x in r.stderr.splitlines() if x.startswith("objrec enroll: failed")]
    assert len(failed) == 3
    assert any("broken" in x and "not a readable image" in x for x in failed)
    assert any("truncated.jpg" in x and "not a readable image" in x for x in failed)
    assert any("blank" in x and "no features found" in x for x in failed)
    assert "enrolled 2, skipped 0" in r.stdout and "failed 3" in r.stdout
    from objrec import ModelDB

    assert sorted(ModelDB.open(db).names) == ["cover", "dahlia"]
    assert_stored_image(ModelDB.open(db).image("cover"), cv2.imread(str(folder / "cover.jpg")))
    r = run_cli("enroll", "--db", str(db), "--from", str(folder), "--no-progress")
    assert r.returncode == 2 and "enrolled 0, skipped 2" in r.stdout


def test_enroll_from_csv(files, tmp_path):
    listing = tmp_path / "list.csv"
    rel = files["dahlia"].relative_to(files["dir"])
    (files["dir"] / "list.csv").write_text(f"name,path\nflower,{rel}\nbook,{files['cover']}\n")
    listing = files["dir"] / "list.csv"
    db = tmp_path / "db"
    r = run_cli("enroll", "--db", str(db), "--detectors", "sift", "--from", str(listing))
    assert r.returncode == 0, r.stderr
    from objrec import ModelDB

    d = ModelDB.open(db)
    assert d.names == ["flower", "book"]
    assert d.info("flower").source["path"] == str(files["dir"] / rel)
    bad = tmp_path / "bad.csv"
    bad.write_text("only-one-column\n")
    _one_line_error(run_cli("enroll", "--db", str(db), "--from", str(bad)), "bad.csv:1", "name,path")


def test_cli_process_loads_numba_array_math_without_scipy_linalg():
    """The command-line start-up hides scipy.linalg only while Numba's array math is imported: kernels
    compile and run, scipy.linalg stays unloaded until asked for, and then imports and works."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import sys
        from objrec import _startup
        _startup.numba_without_scipy_linalg()
        import numpy as np
        from numba import njit
        @njit
        def total(a):
            s = 0.0
            for v in a:
                s += v
            return s
        assert total(np.arange(5.0)) == 10.0
        assert "numba.np.arraymath" in sys.modules and "scipy.linalg" not in sys.modules
        import scipy.linalg
        assert abs(scipy.linalg.norm([3.0, 4.0]) - 5.0) < 1e-12
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_a_camera_that_cannot_be_opened_is_only_objrec_s_one_line_error(sample_db):
    """No camera at index 9 here: OpenCV's backends log their failed probes, but only objrec's line is shown."""
    import cv2

    probe = cv2.VideoCapture(9)
    if probe.isOpened():
        probe.release()
        pytest.skip("a camera answers at index 9 on this machine")
    r = run_cli("run", "--db", str(sample_db.path), "--source", "9", "--no-display", "--max-frames", "1")
    _one_line_error(r, "camera 9", "cannot be opened")


def test_run_help_documents_smoothing_with_its_defaults(capsys):
    from objrec.realtime.smoothing import SmoothParams

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    p = SmoothParams()
    assert "--no-smooth" in text and "One-Euro" in text
    assert "--smooth-cutoff HZ" in text and f"(default {p.min_cutoff:g})" in text
    assert "--smooth-beta B" in text and f"(default {p.beta:g})" in text


def test_run_smooths_unless_told_not_to_and_stats_keep_the_raw_corners(files, tmp_path):
    """A still scene with sensor noise: unless --no-smooth every detection's drawn corners are smoothed and its
    corners as detected recorded beside them; --no-smooth records the detected ones only."""
    from objrec.scenes import Distortion, place_homography

    frames = tmp_path / "frames"
    frames.mkdir()
    cover = sample_objects()["cover"]
    H = place_homography((cover.shape[1], cover.shape[0]), (160, 120), 0.45, 5.0)
    for i in range(3):
        sc = compose_scene(
            sample_background((320, 240)), {"cover": cover}, rng=i, frame_size=(320, 240),
            homographies={"cover": H}, distortion=Distortion(noise_sigma=3.0),
        )  # fmt: skip
        cv2.imwrite(str(frames / f"{i:03d}.png"), sc.image)
    db = tmp_path / "db"
    assert main(["enroll", "--db", str(db), f"cover={files['cover']}"]) == 0
    argv = ["run", "--db", str(db), "--source", str(frames), "--no-display", "--budget-ms", "1000", "--no-adapt"]
    docs = {}
    for mode, extra in (("smooth", ["--smooth-cutoff", "2", "--smooth-beta", "0.1"]), ("raw", ["--no-smooth"])):
        assert main([*argv, *extra, "--stats", str(tmp_path / f"{mode}.json")]) == 0
        docs[mode] = json.loads((tmp_path / f"{mode}.json").read_text())["per_frame"]
    smooth = [f["detections"] for f in docs["smooth"]]
    raw = [f["detections"] for f in docs["raw"]]
    assert all(len(s) == len(r) == 1 for s, r in zip(smooth, raw, strict=True))
    assert all("raw_corners" not in r[0] for r in raw)
    np.testing.assert_allclose([s[0]["raw_corners"] for s in smooth], [r[0]["corners"] for r in raw])
    assert smooth[0][0]["corners"] == smooth[0][0]["raw_corners"]  # the first frame starts the filter
    assert smooth[2][0]["corners"] != smooth[2][0]["raw_corners"]


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--smooth-cutoff", "0"], "--smooth-cutoff"),
        (["--smooth-beta", "-1"], "--smooth-beta"),
        (["--no-smooth", "--smooth-beta", "0.1"], "--no-smooth"),
    ],
)
def test_run_smoothing_options_are_checked(files, tmp_path, capsys, args, needle):
    rc = main(["run", "--db", str(tmp_path / "none"), "--source", str(tmp_path), "--no-display", *args])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and needle in err, err


def test_enroll_width_m_applies_to_every_object_of_the_command(files, tmp_path, capsys):
    from objrec import ModelDB

    db = tmp_path / "db"
    argv = ["enroll", "--db", str(db), "--detectors", "sift", "--width-m", "0.135"]
    assert main([*argv, f"dahlia={files['dahlia']}", f"cover={files['cover']}"]) == 0
    assert "width 0.135 m" in capsys.readouterr().out
    folder = tmp_path / "more"
    folder.mkdir()
    (folder / "third.png").write_bytes(files["cover"].read_bytes())
    assert main(["enroll", "--db", str(db), "--width-m", "0.2", "--from", str(folder), "--no-progress"]) == 0
    assert main(["enroll", "--db", str(db), f"plain={files['dahlia']}"]) == 0
    opened = ModelDB.open(db)
    assert {n: opened.info(n).width_m for n in opened.names} == {
        "dahlia": 0.135,
        "cover": 0.135,
        "third": 0.2,
        "plain": None,
    }


@pytest.mark.parametrize("value", ["0", "-0.1", "inf", "nan"])
def test_enroll_refuses_a_bad_width_before_writing(files, tmp_path, capsys, value):
    db = tmp_path / "db"
    assert main(["enroll", "--db", str(db), "--width-m", value, f"cover={files['cover']}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--width-m" in err and "metres" in err, err
    assert not db.exists()


def _write_camera(path, size=(640, 480)) -> None:
    fs = cv2.FileStorage(str(path), cv2.FILE_STORAGE_WRITE)
    fs.write("image_width", size[0])
    fs.write("image_height", size[1])
    fs.write("camera_matrix", np.array([[800.0, 0, 319.5], [0, 800.0, 239.5], [0, 0, 1]]))
    fs.write("distortion_coefficients", np.zeros((5, 1)))
    fs.release()


def test_run_with_a_bad_camera_file_is_a_one_line_error(sample_db, tmp_path):
    calib = tmp_path / "calib.yml"
    argv = ["run", "--db", str(sample_db.path), "--source", str(tmp_path), "--no-display", "--camera", str(calib)]
    _one_line_error(run_cli(*argv), "calib.yml", "not found")
    _write_camera(calib)
    fs = cv2.FileStorage(str(calib), cv2.FILE_STORAGE_WRITE)  # the same file without its camera matrix
    fs.write("image_width", 640)
    fs.write("image_height", 480)
    fs.release()
    _one_line_error(run_cli(*argv), "calib.yml", "camera_matrix")


def test_run_hands_the_camera_to_the_recognizer_and_the_overlay(files, tmp_path, monkeypatch):
    """--camera: the recognizer gets ``camera=`` and the drawing loop the camera and the objects' widths;
    without it the recognizer is built as before."""
    import objrec.realtime.loop
    import objrec.recognizer

    unset = object()
    seen: dict = {}
    real_recognizer, real_run_stream = objrec.recognizer.Recognizer, objrec.realtime.loop.run_stream

    class Recording(real_recognizer):
        def __init__(self, *args, camera=unset, **kwargs):
            seen["camera"] = camera
            super().__init__(*args, **kwargs)

    def run_stream(*args, **kwargs):
        seen.update(stream_camera=kwargs.get("camera"), widths=kwargs.get("widths_m"))
        return real_run_stream(*args, **kwargs)

    monkeypatch.setattr(objrec.recognizer, "Recognizer", Recording)
    monkeypatch.setattr(objrec.realtime.loop, "run_stream", run_stream)
    frames = tmp_path / "frames"
    frames.mkdir()
    cv2.imwrite(str(frames / "000.png"), cv2.resize(cv2.imread(str(files["scene"])), (320, 240)))
    db = tmp_path / "db"
    assert main(["enroll", "--db", str(db), "--width-m", "0.135", f"cover={files['cover']}"]) == 0
    assert main(["enroll", "--db", str(db), f"dahlia={files['dahlia']}"]) == 0
    calib = tmp_path / "calib.xml"
    _write_camera(calib)
    argv = ["run", "--db", str(db), "--source", str(frames), "--no-display", "--budget-ms", "1000", "--no-adapt"]
    assert main([*argv, "--camera", str(calib), "--max-frames", "1"]) == 0
    assert seen["camera"] is seen["stream_camera"] and seen["camera"].size == (640, 480)
    assert seen["widths"] == {"cover": 0.135}
    assert main([*argv, "--max-frames", "1"]) == 0
    assert seen["camera"] is unset and seen["stream_camera"] is None


def test_damaged_video_is_one_line_without_ffmpegs_own_log(files, tmp_path):
    db = tmp_path / "db"
    assert main(["enroll", "--db", str(db), f"cover={files['cover']}"]) == 0
    video = tmp_path / "clip.mp4"
    video.write_bytes(b"\0" * 64)
    cmd = [sys.executable, "-m", "objrec", "run", "--db", str(db), "--source", str(video), "--no-display"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    _one_line_error(r, "clip.mp4", "cannot be opened as a video")
