"""Close-ups partly outside the frame: ``objrec eval synthetic:... --sweeps outside`` on the shared objects.

The objects are the Oxford ``img1`` images, OpenCV's ``box.png`` and the SMVS DVD references (``--dvds`` of
them), linked into a folder (``--objects-dir``, default a temporary one; the data are not copied). Each is
placed 0.8-1.5x the size that fits a 640x480 frame, rotated and slightly tilted, with 20%, 40% and 60% of its
area beyond the border (:func:`objrec.scenes.place_partly_outside`). Per level the script prints recall and the
mean error of the model's grid points inside the frame (true vs recovered homography) beside the targets
(recall 95/90/80%, mean error 3 px), and, for each miss, what the recognizer saw (the detection's error or
nothing).

    OMP_NUM_THREADS=1 python bench/bench_closeup.py --out /tmp/closeup [--dvds 100] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from objrec.evaluation import EvalConfig, run_evaluation  # noqa: E402

#: Recall targets per share outside, and the mean error bound (pixels).
TARGETS = {0.2: 0.95, 0.4: 0.90, 0.6: 0.80}
MAX_MEAN_ERROR = 3.0


def link_objects(data: Path, folder: Path, dvds: int) -> list[Path]:
    """Symbolic links ``oxford_<seq>.png``, ``box.png``, ``dvd_NNN.jpg`` in ``folder`` to the shared images."""
    folder.mkdir(parents=True, exist_ok=True)
    srcs = {f"oxford_{p.parent.name}.png": p for p in sorted((data / "oxford_affine").glob("*/img1.png"))}
    srcs["box.png"] = data / "opencv_samples" / "box.png"
    for p in sorted((data / "smvs_dvd" / "reference").glob("*.jpg"))[:dvds]:
        srcs[f"dvd_{p.name}"] = p
    out = []
    for name, src in srcs.items():
        if not src.is_file():
            raise FileNotFoundError(f"{src}: object image not found")
        link = folder / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(src.resolve())
        out.append(link)
    return out


def closeup_config(folder: Path, out: Path, detectors: list[str], repeats: int, **kw: object) -> EvalConfig:
    """The evaluation of the objects in ``folder`` partly outside the frame (``synthetic:``, sweep ``outside``)."""
    return EvalConfig(
        kind="synthetic",
        path=str(folder),
        out=str(out),
        detectors=detectors,
        sweeps=["outside"],
        repeats=repeats,
        **kw,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    env = os.environ.get("OBJREC_SHARED_DATA")
    ap.add_argument("--data", type=Path, default=Path(env) if env else ROOT.parent / "shared" / "data")
    ap.add_argument("--objects-dir", type=Path, help="folder for the links (default: a temporary one)")
    ap.add_argument("--dvds", type=int, default=100, help="SMVS DVD references to include (default 100)")
    ap.add_argument("--repeats", type=int, default=1, help="scenes per object and level (default 1)")
    ap.add_argument("--detectors", default="surf")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    print("command:", shlex.join([sys.executable, *sys.argv]))
    folder = args.objects_dir or Path(tempfile.mkdtemp(prefix="objrec-closeup-objects-"))
    objects = link_objects(args.data, folder, args.dvds)
    print(f"{len(objects)} objects linked in {folder}")
    report = run_evaluation(closeup_config(folder, args.out, args.detectors.split(","), args.repeats))
    ok = True
    for g in report["recognition"]["groups"]:
        if g["distortion"] != "outside":
            continue
        target = TARGETS.get(g["level"])
        err = g["corner_error_mean"]
        good = target is not None and (g["recall"] or 0) >= target and err is not None and err <= MAX_MEAN_ERROR
        ok &= good
        print(
            f"{g['detector']:6s} outside {g['level']:.0%}: recall {g['recall']:.3f} ({g['tp']}/{g['n_objects']}, "
            f"target {target}), mean error {err} px (target <= {MAX_MEAN_ERROR}), FP {g['fp']} "
            f"{'ok' if good else 'MISSED'}"
        )
    print(f"report: {args.out}/report.md")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
