"""Headless stream demo on embedded data: three covers moving over panning backgrounds, 33 ms budget.

    python demos/headless_stream.py [--frames 300] [--budget-ms 33] [--out demo-out]

Writes an annotated video and the run statistics (the ``objrec run --stats`` schema), and prints recall of
fully visible objects against the generator's ground truth. ``objrec demo`` runs a shorter version.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from objrec import ModelDB, Recognizer
from objrec.data import sample_objects, sample_video
from objrec.realtime.loop import run_stream
from objrec.realtime.sources import ArraySource
from objrec.realtime.stream import SceneStream, StreamScore


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--budget-ms", type=float, default=33.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="demo-out")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    objects = sample_objects()
    stream = SceneStream(objects, sample_video(args.frames // 3 + 1, seed=args.seed), args.frames, seed=args.seed)
    frames = list(stream)
    score = StreamScore()
    with tempfile.TemporaryDirectory() as tmp:
        db = ModelDB.create(Path(tmp) / "db", detectors={"surf": {}, "sift": {"n_features": 0}})
        for name, img in objects.items():
            db.enroll(name, img)
        rec = Recognizer(db, budget_ms=args.budget_ms)
        stats = run_stream(
            rec,
            ArraySource([f.image for f in frames], fps=30.0),
            out_video=out / "stream.mp4",
            on_result=lambda fr, r: score.add(r.detections, frames[fr.index].objects),
            warmup_shape=frames[0].image.shape[:2],
        )
    stats.write(out / "stats.json")
    print(stats.summary())
    print(
        f"recall of fully visible objects {100 * score.recall:.1f}% ({score.found}/{score.visible}), "
        f"false detections {score.false}"
    )
    print(f"wrote {out / 'stream.mp4'} and {out / 'stats.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
