"""Build the default prefilter for the demo objects (objrec.data.sample_objects) into objrec/data/ (package data).

The demo database is rebuilt from embedded data, so its ``database_id`` is the same on every machine
and ``RegionPrefilter.load(path, database_id=db.database_id)`` accepts this file for it. Backgrounds are
the embedded ones (no download, no shared data).

Run: ``.venv/bin/python models/build_prefilter.py [--out models/demo_prefilter] [--scenes 500]``
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from objrec import ModelDB
from objrec.data import sample_objects
from objrec.prefilter import RegionPrefilter


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "objrec" / "data" / "demo_prefilter"))
    ap.add_argument("--scenes", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="objrec-demo-db-") as tmp:
        db = ModelDB.create(Path(tmp) / "db")
        for name, img in sample_objects().items():
            db.enroll(name, img)
        pf = RegionPrefilter(random_state=args.seed).train(
            db, None, n_scenes=args.scenes, seed=args.seed, progress=True
        )
        jpath, npath = pf.save(args.out)
    print(f"database {db.database_id}: wrote {jpath} ({jpath.stat().st_size} B) and {npath} ({npath.stat().st_size} B)")
    print(pf.training_report_)
    return 0


if __name__ == "__main__":
    sys.exit(main())
