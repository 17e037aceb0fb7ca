"""Command-line latency: a whole ``objrec detect`` process against a find_obj.py-style OpenCV script.

What a user waits for when they run one command: process start, imports, loading (or compiling) the kernels,
reading the database and the image, recognition. Measured as wall time of separate processes:

- ``objrec detect --db DB box_in_scene.png`` with ``box.png`` enrolled (OpenCV's samples from
  ``../shared/data/opencv_samples``), run after a first process has filled the kernel cache: median of
  ``--repeats``;
- the anchor, a find_obj.py-style script doing the same (OpenCV SIFT on both images, BFMatcher knn 2, Lowe's
  ratio 0.75, ``findHomography`` RANSAC 5 px): median of ``--repeats`` in the same run;
- ``objrec --help``: median of ``--repeats``;
- the first ``objrec enroll`` and the first ``objrec detect`` after ``objrec cache clear`` (kernels compiled).

The kernel cache is a temporary directory (``OBJREC_CACHE_DIR``) unless ``--cache-dir`` is given, so the
user's own cache is neither used nor cleared. Targets: the second ``detect`` at most 1.5 s and at most 6x the
anchor, ``--help`` at most 0.5 s; the exit code is 1 when one is missed.

    python bench/bench_cli.py --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cv2
from baseline_findobj import thread_report  # noqa: E402  (one thread report for every bench)

TARGET_S, TARGET_RATIO, TARGET_HELP_S = 1.5, 6.0, 0.5

# The anchor: what OpenCV's samples/python/find_obj.py does for one pair, as a script of its own.
ANCHOR = """
import sys
import cv2
import numpy as np
model = cv2.imread(sys.argv[1], cv2.IMREAD_GRAYSCALE)
scene = cv2.imread(sys.argv[2], cv2.IMREAD_GRAYSCALE)
sift = cv2.SIFT_create()
k1, d1 = sift.detectAndCompute(model, None)
k2, d2 = sift.detectAndCompute(scene, None)
pairs = cv2.BFMatcher(cv2.NORM_L2).knnMatch(d1, d2, k=2)
good = [m for m, n in (p for p in pairs if len(p) == 2) if m.distance < 0.75 * n.distance]
found = False
if len(good) >= 4:
    src = np.float32([k1[m.queryIdx].pt for m in good])
    dst = np.float32([k2[m.trainIdx].pt for m in good])
    H, inl = cv2.findHomography(src, dst, cv2.RANSAC, 5.0)
    found = H is not None and int(inl.sum()) >= 4
print("box" if found else "none", len(good))
"""


def _find_samples() -> Path | None:
    env = os.environ.get("OBJREC_SHARED_DATA")
    cands = [Path(env)] if env else []
    cands += [p / "shared" / "data" for p in Path(__file__).resolve().parents]
    for c in cands:
        if (c / "opencv_samples" / "box_in_scene.png").is_file():
            return c / "opencv_samples"
    return None


def _objrec_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("objrec")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "objrec"]


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"failed ({r.returncode}): {shlex.join(cmd)}\n{r.stderr}")
    return dt, r


def _median(cmd: list[str], env: dict[str, str], repeats: int) -> tuple[float, list[float], str]:
    times, out = [], ""
    for _ in range(repeats):
        dt, r = _timed(cmd, env)
        times.append(dt)
        out = r.stdout
    return statistics.median(times), times, out


def _detected(stdout: str) -> list[str]:
    doc = json.loads(stdout)
    return [d["name"] for d in doc["results"][0].get("detections", [])]


def run(args: argparse.Namespace, samples: Path, work: Path) -> dict:
    cache = Path(args.cache_dir) if args.cache_dir else work / "cache"
    env = dict(os.environ, OBJREC_CACHE_DIR=str(cache))
    # A user's installation keeps Python bytecode (pip compiles it at install time); a shell that sets
    # PYTHONDONTWRITEBYTECODE would make every process recompile objrec's modules from source.
    res_bytecode = env.pop("PYTHONDONTWRITEBYTECODE", None) is None
    objrec = _objrec_cmd()
    db, model, scene = work / "db", samples / "box.png", samples / "box_in_scene.png"
    res: dict = {"cache_dir": str(cache), "bytecode_env_removed": not res_bytecode}

    _timed([*objrec, "cache", "clear"], env)
    res["first_enroll_s"], r = _timed([*objrec, "enroll", "--db", str(db), f"box={model}"], env)
    res["first_enroll_stderr"] = r.stderr.strip()
    _timed([*objrec, "cache", "clear"], env)
    detect = [*objrec, "detect", "--db", str(db), "--json", str(scene)]
    res["first_detect_s"], r = _timed(detect, env)
    res["first_detect_stderr"] = r.stderr.strip()
    res["detect_cmd"] = shlex.join(detect)
    res["detect_s"], res["detect_all_s"], out = _median(detect, env, args.repeats)
    res["detected"] = _detected(out)

    anchor_py = work / "find_obj_anchor.py"
    anchor_py.write_text(ANCHOR)
    anchor = [sys.executable, str(anchor_py), str(model), str(scene)]
    res["anchor_cmd"] = shlex.join(anchor)
    res["anchor_s"], res["anchor_all_s"], out = _median(anchor, env, args.repeats)
    res["anchor_result"] = out.strip()

    helpc = [*objrec, "--help"]
    res["help_s"], res["help_all_s"], _ = _median(helpc, env, args.repeats)
    res["ratio"] = res["detect_s"] / res["anchor_s"]
    res["pass"] = {
        "detect_s": res["detect_s"] <= TARGET_S,
        "ratio": res["ratio"] <= TARGET_RATIO,
        "help_s": res["help_s"] <= TARGET_HELP_S,
    }
    return res


def _report(res: dict, model_shape: tuple, scene_shape: tuple) -> None:
    print(f"objrec (second run):  {res['detect_cmd']}")
    print(f"anchor (find_obj.py): {res['anchor_cmd']}")
    print(f"model {model_shape[1]}x{model_shape[0]}, scene {scene_shape[1]}x{scene_shape[0]}")
    print(f"kernel cache: {res['cache_dir']}")
    if res.get("bytecode_env_removed"):
        print("PYTHONDONTWRITEBYTECODE was set here: removed for the measured processes (as after pip install)")
    print()

    def row(label: str, key: str, target: str = "") -> None:
        each = ", ".join(f"{t:.2f}" for t in res[f"{key}_all_s"])
        print(f"  {label:28s} {res[f'{key}_s']:7.2f} s  (median of [{each}]) {target}")

    row("objrec detect (cached)", "detect", f"target <= {TARGET_S} s")
    row("find_obj-style anchor", "anchor")
    row("objrec --help", "help", f"target <= {TARGET_HELP_S} s")
    print(f"  {'ratio objrec / anchor':28s} {res['ratio']:7.2f} x  target <= {TARGET_RATIO} x")
    print(f"  {'first enroll after clear':28s} {res['first_enroll_s']:7.2f} s  ({res['first_enroll_stderr']!r})")
    print(f"  {'first detect after clear':28s} {res['first_detect_s']:7.2f} s  ({res['first_detect_stderr']!r})")
    print(f"  objrec found {res['detected'] or 'nothing'}; anchor: {res['anchor_result']}")
    print("  " + ", ".join(f"{k} {'ok' if v else 'MISSED'}" for k, v in res["pass"].items()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5, help="timed processes per command (default 5)")
    ap.add_argument("--cache-dir", help="kernel cache to use and clear (default: a temporary one)")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args(argv)
    samples = _find_samples()
    if samples is None:
        print("opencv_samples (box.png, box_in_scene.png) not found under ../shared/data", file=sys.stderr)
        return 2
    print(f"command: {shlex.join([sys.executable, *sys.argv])}")
    print(f"python {platform.python_version()}, opencv {cv2.__version__}, {platform.machine()}")
    print(f"threads (this process): {thread_report()}; NUMBA_NUM_THREADS={os.environ.get('NUMBA_NUM_THREADS')}")
    work = Path(tempfile.mkdtemp(prefix="objrec-bench-cli-"))
    try:
        res = run(args, samples, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    shape = cv2.imread(str(samples / "box.png"), cv2.IMREAD_GRAYSCALE).shape
    scene = cv2.imread(str(samples / "box_in_scene.png"), cv2.IMREAD_GRAYSCALE).shape
    _report(res, shape, scene)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0 if all(res["pass"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
