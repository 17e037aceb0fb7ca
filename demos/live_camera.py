"""Live camera demo: enroll objects from image files, then recognise them in the camera stream.

    python demos/live_camera.py NAME=IMAGE [NAME=IMAGE ...] [--camera 0] [--budget-ms 33]

A window shows each object's outline and name, the latency and budget use, and what was skipped; press q
to quit. Without a display it runs headless and prints statistics. The same as
``objrec enroll`` + ``objrec run --source 0``, in library calls.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from objrec import ModelDB, Recognizer
from objrec.realtime.loop import display_available, run_stream
from objrec.realtime.sources import CameraSource


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("objects", nargs="+", metavar="NAME=IMAGE")
    ap.add_argument("--camera", type=int, default=0)
    ap.add_argument("--budget-ms", type=float, default=33.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = ModelDB.create(Path(tmp) / "db", detectors={"surf": {}, "sift": {"n_features": 0}})
        for pair in args.objects:
            name, _, path = pair.partition("=")
            db.enroll(name, path)
        rec = Recognizer(db, budget_ms=args.budget_ms, smooth=True)
        source = CameraSource(args.camera)
        stats = run_stream(rec, source, display=display_available(), warmup_shape=source.frame_shape)
    print(stats.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
