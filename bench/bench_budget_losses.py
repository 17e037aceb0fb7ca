"""Where a budget loses catalogue photos: each photo recognised without a budget and with one, and each photo
found only without it put in one class by what its budgeted frame did.

The catalogue is a database built by ``bench/bench_catalogue_sizes.py`` (``--db OUT/n334/db-*``: the 100
SMVS references and 234 DVD covers); the photos are the 200 of ``smvs_dvd/queries``, 640 px on the long side,
recognised in the order ``objrec eval catalogue:`` takes them, by a recognizer set up as it does (no
prefilter, no tracking, warmed up). Three runs: no budget, no budget with the primary detector only (the
photos only the secondary detector finds), and ``--budget-ms``.

A lost photo's class: ``truth not verified`` (the object was no candidate, or its verification was not
reached), ``verify skipped`` (its verification was left out for the budget), ``rejected: REASON`` (verified
and rejected); with the frame's degrade level, how the primary search was coarsened (SURF's sampling step,
the keypoints described, the resolution), whether an escalation was offered, run or skipped; and how many of
the lost frames were late. Found shares are given for covers 001-025 and 026-050 apart (the tune and hold-out
halves) and for all.

``--clock cpu`` times frames by the process's CPU time (``time.process_time``) instead of the wall clock:
on a machine whose cores other processes share, the budget then acts as it would on an idle core (a proxy
for diagnosis; the acceptance figures are wall-clock, from ``bench_catalogue_sizes.py``).

    python bench/bench_budget_losses.py --db OUT/n334/db-XXXX [--budget-ms 33] [--clock cpu] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from pathlib import Path

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from objrec import ModelDB, Recognizer  # noqa: E402
from objrec.datasets import load_catalogue, load_image  # noqa: E402

#: Covers whose photos tune (the first half) and the held-out rest.
TUNE_COVERS = range(1, 26)


class CpuClock:
    """Milliseconds of this process's CPU time: other processes' use of the core does not count."""

    def now(self) -> float:
        return time.process_time() * 1e3


def query_image(path: str, side: int = 640) -> np.ndarray:
    """The photo at ``side`` px on its long side (INTER_AREA), as ``objrec eval catalogue:`` reads it."""
    img = load_image(Path(path))
    s = side / max(img.shape[:2])
    return img if s == 1 else cv2.resize(img, None, fx=s, fy=s, interpolation=cv2.INTER_AREA)


def run(db: ModelDB, queries: list, budget: float | None, detectors: list | None, clock) -> list[dict]:
    """Each photo's outcome: found, latency, the units offered (unit, subject, admitted), the verdict on the
    true object, the degrade level the frame ran at."""
    rec = Recognizer(db, budget_ms=budget, prefilter=None, track=False, detectors=detectors, clock=clock)
    rec.warmup((480, 640))
    rows = []
    for path, truth, _ in queries:
        img = query_image(path)
        level = rec.degrade.level
        r = rec.process(img)
        units = [(u.unit, u.subject, bool(u.admitted)) for u in rec.scheduler.records]
        rej = [x.reason for x in rec.last_rejections if x.name == truth]
        rows.append(
            {
                "photo": Path(path).stem,
                "truth": truth,
                "found": truth in [d.name for d in r.detections],
                "latency_ms": round(r.latency_ms, 2),
                "late": not r.deadline_met,
                "level": level,
                "units": units,
                "rejected": rej[0] if rej else None,
            }
        )
    return rows


def loss_class(row: dict) -> str:
    """One lost photo's class (see the module notes)."""
    verify = [u for u in row["units"] if u[0] == "verify" and u[1] == row["truth"]]
    if row["rejected"]:
        what = f"rejected: {row['rejected']}"
    elif verify and not any(u[2] for u in verify):
        what = "verify skipped"
    else:
        what = "truth not verified"
    esc = [u for u in row["units"] if u[0] == "escalate"]
    esc_s = "none" if not esc else ("run" if any(u[2] for u in esc) else "skipped")
    cuts = {u[0]: u[1] for u in row["units"] if u[0] in ("fine_sampling", "keypoints", "full_resolution")}
    primary = "full" if not cuts else ", ".join(f"{k} {v}" for k, v in sorted(cuts.items()))
    level = "0" if row["level"] == 0 else ">0"
    return f"{what} | degrade level {level} | primary search: {primary} | escalation {esc_s}"


def shares(rows: list[dict]) -> dict:
    """Found shares of the tune half, the hold-out half and all photos."""

    def part(sel):
        return round(float(np.mean([r["found"] for r in sel])), 4) if sel else None

    tune = [r for r in rows if int(r["truth"]) in TUNE_COVERS]
    hold = [r for r in rows if int(r["truth"]) not in TUNE_COVERS]
    return {"tune_001_025": part(tune), "holdout_026_050": part(hold), "all": part(rows)}


def summary(label: str, rows: list[dict]) -> dict:
    lat = [r["latency_ms"] for r in rows]
    s = {"found": shares(rows), "late": sum(r["late"] for r in rows), "latency_p50_ms": float(np.median(lat))}
    esc = [u for r in rows for u in r["units"] if u[0] == "escalate"]
    s["escalations"] = {"offered": len(esc), "run": sum(u[2] for u in esc)}
    p50, esc_n = s["latency_p50_ms"], s["escalations"]
    print(f"{label}: found {s['found']}, p50 {p50:.1f} ms, late {s['late']}, escalations {esc_n}", flush=True)
    return s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True, help="a catalogue database built by bench_catalogue_sizes.py")
    ap.add_argument("--data", default=os.environ.get("OBJREC_SHARED_DATA", str(ROOT.parent / "shared" / "data")))
    ap.add_argument("--budget-ms", type=float, default=33.0)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--out", help="write the per-photo rows and the summary here (JSON)")
    args = ap.parse_args()
    print("command:", " ".join([Path(sys.executable).name] + sys.argv), flush=True)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()}; clock {args.clock}", flush=True)
    db = ModelDB.open(args.db)
    queries = load_catalogue(Path(args.data) / "smvs_dvd").queries
    clock = CpuClock() if args.clock == "cpu" else None
    primary = [k for k in ("surf", "sift") if k in db.detectors][:1]
    free = run(db, queries, None, None, clock)
    alone = run(db, queries, None, primary, clock)
    tight = run(db, queries, args.budget_ms, None, clock)
    out = {
        "no_budget": summary("no budget", free),
        "primary_only": summary(f"no budget, {primary[0]} only", alone),
        "budget": summary(f"budget {args.budget_ms:g} ms", tight),
    }
    out["secondary_only"] = [a["photo"] for a, b in zip(free, alone, strict=True) if a["found"] and not b["found"]]
    lost = [b for a, b in zip(free, tight, strict=True) if a["found"] and not b["found"]]
    out["lost"] = dict(collections.Counter(loss_class(r) for r in lost).most_common())
    out["lost_late"] = sum(r["late"] for r in lost)
    print(f"found only by the secondary detector (no budget): {out['secondary_only']}")
    print(f"lost under the budget: {len(lost)} ({out['lost_late']} of them late)")
    for k, v in out["lost"].items():
        print(f"  {v:3d}  {k}")
    if args.out:
        out["rows"] = {"no_budget": free, "primary_only": alone, "budget": tight}
        Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
