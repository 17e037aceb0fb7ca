"""Catalogue scale versus the number of enrolled objects, up to 100,000, resumable stage by stage.

The catalogue of size N is the first N objects of one fixed sequence (``bench/catalogue_plan.py``): the 100
SMVS DVD references, the real distractors (``dvd_covers``, ``ukbench_small``, ``ukbench``, Oxford affine,
COIL-100, ``vtest.avi`` frames), then generated objects (``bench/distractor_images.py``: generated covers in
varied fonts and layouts, crops of several photos tiled into one object, warped crops) written as JPEG files
into ``--cache``. One database, ``--out/db``, is grown through the sizes (smallest first), so a larger size
reuses the enrolment of the smaller ones. The photos are those of ``smvs_dvd/queries`` (200 phone photos of
covers 001-050; ``--photos`` takes fewer, evenly spread), resized to ``--query-side`` (640) px on the long side.
Objects are enrolled at their files' sizes: SMVS references 500x500, ``dvd_covers`` about 270x400,
``ukbench_small`` about 150-320 px, UKBench 640x480, Oxford 765-1000 px wide, COIL-100 128x128, ``vtest``
frames 768x576, generated objects 220-600 px wide.

Per size, each stage in its own process, its peak anonymous memory (``RssAnon`` of the child, read from
``/proc`` at about 20 Hz; pages of memory-mapped database files do not count) sampled by this process:

* ``enrol``: the objects missing from the database enrolled with ``ModelDB.enroll_many`` (default detectors
  and threads), ``--chunk`` objects per call: objects per second over this size's increment; the time taken
  before it to write the generated distractors missing from ``--cache`` is its ``generate_s``;
* ``reindex``: ``objrec db reindex --db DB``: wall time and peak memory;
* ``disk``: every file of the database counted, per object and per file suffix;
* ``recognise`` once with no budget and once with ``--budget-ms``: every database file dropped from the page
  cache (``posix_fadvise(POSIX_FADV_DONTNEED)`` on each, not the machine's whole cache), then ``ModelDB.open``
  plus a ready ``Recognizer`` (timed: open + ready, cold), its warm-up on a synthetic 640x480 frame, a ``cold``
  pass over the photos (the recognizer's own background warming of the page cache, ``warm_cache=True``, under
  way as after a reboot) and a ``warm`` pass right after: found (the label among the detections), top-1, photos
  with a wrong detection, latency p50/p90/p99/max, late photos (``--clock cpu`` times frames and the budget by
  the process's CPU time, for a machine shared with other work: then a cold read's wait does not count,
  and the time of every thread counts, so frames that use both cores meet a stricter budget than by the wall clock);
* ``nobudget_limit`` and ``budget_limit`` (at ``--warm-limit-sizes``, default the largest size): the same two
  passes with the recognizer's warming bounded to ``--warm-limit-mb`` (``Recognizer(warm_cache=2 << 30)`` by
  default) and every database file outside the warmed part dropped from the page cache before each pass: a
  catalogue larger than the memory that keeps it;
* ``open``: ``ModelDB.open`` plus a ready ``Recognizer`` in a fresh process on a warm page cache;
* ``anchor`` up to ``--anchor-max`` objects: the find_obj-style anchor on the same objects and photos;
* ``without`` (at ``--wrong-sizes``, default every size): covers 001-050 removed from a hard-linked copy of the
  database (the removal's commit tombstones their rows in the index, as ``objrec db remove`` does), one pass with
  no budget: photos with a detection, every one wrong;
  the copy is deleted after, so the database grows to the next size with its covers where they were.

Every stage's result is kept in ``--out/state.json`` as soon as it is measured, and a rerun skips what is done:
an interrupted run is continued by running the same command again. An interrupted enrolment resumes where it
stopped (its rate counts every chunk committed, from ``--out/n<N>/enrol.jsonl``); its peak memory is the
largest of the runs that ended. A size smaller than the database already is cannot be measured any more
(its rows are kept if they were). Writes ``sizes.json``, ``sizes.md`` and ``sizes.png`` in ``--out`` after
every stage.

    taskset -c 1 python bench/bench_catalogue_sizes.py --out /tmp/sizes --cache /tmp/objrec-distractors \
        --sizes 100,500,2000 [--budget-ms 33] [--photos 200] [--anchor-max 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from procmem import disk_bytes, run_sampled, thread_report  # noqa: E402
from sizes_report import write_report  # noqa: E402

STATE = "state.json"


def data_root(arg: str | None) -> Path:
    env = os.environ.get("OBJREC_SHARED_DATA")
    for c in [Path(arg)] if arg else [Path(env)] if env else [ROOT.parent / "shared" / "data"]:
        if (c / "smvs_dvd" / "queries").is_dir():
            return c
    sys.exit("shared data (smvs_dvd/) not found; pass --data or set OBJREC_SHARED_DATA")


def photos(data: Path, k: int | None) -> list[tuple[str, str]]:
    """(path, label) of the labelled SMVS photos, ``k`` of them evenly spread when given."""
    from objrec.datasets import load_catalogue

    qs = [(str(p), lab) for p, lab, _ in load_catalogue(data / "smvs_dvd").queries if lab is not None]
    if k and k < len(qs):
        qs = [qs[int(i * len(qs) / k)] for i in range(k)]
    return qs


class Run:
    """One benchmark run: its arguments, the state file and the database grown through the sizes."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Path(args.out).resolve()
        self.db = self.out / "db"
        self.data = data_root(args.data)
        self.cache = Path(args.cache).resolve()
        path = self.out / STATE
        self.state = json.loads(path.read_text()) if path.exists() else {"sizes": {}, "skip": [], "argv": []}
        self.state["argv"].append(shlex.join([sys.executable, *sys.argv]))

    def save(self) -> None:
        tmp = self.out / (STATE + ".tmp")
        tmp.write_text(json.dumps(self.state, indent=1))
        os.replace(tmp, self.out / STATE)
        write_report(self.out, self.state, self.args.budget_ms)

    def child(self, n: int, stage: str, extra: list[str]) -> tuple[dict, Path]:
        """Run one stage of this script in a child process, its memory sampled; (its record, its result file)."""
        work = self.out / f"n{n}"
        work.mkdir(parents=True, exist_ok=True)
        result = work / f"{stage}.json"
        result.unlink(missing_ok=True)
        cmd = [sys.executable, __file__, "--child", stage, "--out", str(self.out), "--data", str(self.data)]
        cmd += ["--cache", str(self.cache), "--result", str(result), "--size", str(n)] + extra
        s = run_sampled(cmd, work / f"{stage}.log", cwd=ROOT)
        rec = {"wall_s": round(s.wall_s, 2), "cpu_s": round(s.cpu_s, 2), "samples": s.samples}
        rec["peak_rss_anon_mb"] = round(s.peak_rss_anon_mb, 1)
        if s.returncode:
            raise SystemExit(f"N={n} {stage}: exit {s.returncode}; see {work / f'{stage}.log'}")
        return rec, result

    def items(self, n: int) -> list[tuple[str, str]]:
        from catalogue_plan import catalogue_items

        a = self.args
        return catalogue_items(self.data, self.cache, n, a.seed, a.vtest_step, set(self.state["skip"]))

    def enrol(self, n: int) -> dict:
        """Grow the database to the first ``n`` objects; images that fail are skipped for good (the next ones
        are taken). The rate counts every chunk committed for this size, over interruptions."""
        work = self.out / f"n{n}"
        work.mkdir(parents=True, exist_ok=True)
        segments, peak, wall, generate = work / "enrol.jsonl", 0.0, 0.0, 0.0
        for _ in range(5):
            items_file = work / "items.json"
            t0 = time.perf_counter()
            items_file.write_text(json.dumps(self.items(n)))
            generate += time.perf_counter() - t0
            rec, _ = self.child(n, "enrol", ["--items", str(items_file), "--chunk", str(self.args.chunk)])
            peak, wall = max(peak, rec["peak_rss_anon_mb"]), wall + rec["wall_s"]
            segs = [json.loads(line) for line in segments.read_text().splitlines()] if segments.exists() else []
            failed = [name for s in segs for name, _ in s["failed"]]
            new = sorted(set(failed) - set(self.state["skip"]))
            if not new:
                break
            print(f"N={n}: {len(new)} image(s) could not be enrolled, taking the next ones", flush=True)
            self.state["skip"] += new
        enrolled, seconds = sum(s["enrolled"] for s in segs), sum(s["seconds"] for s in segs)
        cpu = sum(s.get("cpu_s", 0.0) for s in segs)
        sources: dict[str, int] = {}
        for seg in segs:
            for k, v in seg.get("sources", {}).items():
                sources[k] = sources.get(k, 0) + v
        objects = segs[-1]["objects"] if segs else None
        if objects != n:
            raise SystemExit(f"N={n}: the database {self.db} holds {objects} objects; start a new --out for this size")
        return {
            "objects": objects,
            "enrolled": enrolled,
            "seconds": round(seconds, 2),
            "per_s": round(enrolled / seconds, 3) if seconds else None,
            "cpu_s_per_object": round(cpu / enrolled, 4) if enrolled else None,
            "sources": sources,
            "peak_rss_anon_mb": peak,
            "wall_s": round(wall, 1),
            "generate_s": round(generate, 1),
            "failed": [f for s in segs for f in s["failed"]],
        }

    def reindex(self, n: int) -> dict:
        """``objrec db reindex`` in its own process, its memory sampled."""
        work = self.out / f"n{n}"
        log = work / "reindex.log"
        log.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "objrec", "db", "reindex", "--db", str(self.db), "--json", "--no-progress"]
        s = run_sampled(cmd, log, cwd=ROOT)
        if s.returncode:
            raise SystemExit(f"N={n} reindex: exit {s.returncode}; see {log}")
        text = log.read_text()
        doc = json.loads(text[text.index("{") :]) if "{" in text else {}
        return {
            "wall_s": round(s.wall_s, 2),
            "cpu_s": round(s.cpu_s, 2),
            "peak_rss_anon_mb": round(s.peak_rss_anon_mb, 1),
            "kinds": doc.get("kinds"),
            "indexes": doc.get("indexes"),
        }

    def size(self, n: int) -> None:
        """Every stage of size ``n`` not measured yet."""
        row = self.state["sizes"].setdefault(str(n), {})
        a = self.args
        larger = [int(k) for k, v in self.state["sizes"].items() if int(k) > n and "enrol" in v]
        stages = ["enrol", "reindex", "disk", "nobudget", "budget"]
        stages += ["nobudget_limit", "budget_limit"] * (n in a.limit_sizes)
        stages += ["open"] + ["anchor"] * (n <= a.anchor_max)
        stages += ["without"] * (not a.wrong_sizes or n in a.wrong_sizes)
        if larger and any(s not in row for s in stages):
            print(f"N={n}: the database already holds size {max(larger)}; size {n} is left as it is", flush=True)
            return
        todo = [s for s in stages if s not in row]
        for stage in todo:
            print(f"N={n} {stage} ...", flush=True)
            if stage == "enrol":
                row[stage] = self.enrol(n)
            elif stage == "reindex":
                row[stage] = self.reindex(n)
            elif stage == "disk":
                d = disk_bytes(self.db)
                objects = row["enrol"]["objects"] or n
                row[stage] = {"bytes": d, "kb_per_object": round(d["total"] / 1e3 / objects, 1)}
            else:
                extra = ["--clock", a.clock]
                extra += ["--budget-ms", f"{a.budget_ms:g}"] if stage.startswith("budget") else []
                extra += ["--warm-limit-mb", str(a.warm_limit_mb)] if stage.endswith("_limit") else []
                rec, result = self.child(n, stage, extra + ["--photos", str(a.photos), "--query-side", str(a.side)])
                row[stage] = {**rec, **json.loads(result.read_text())}
            print(f"N={n} {stage}: {short(row[stage])}", flush=True)
            self.save()


def short(rec: dict) -> str:
    keys = (
        "per_s",
        "cpu_s_per_object",
        "cpu_s",
        "peak_rss_anon_mb",
        "wall_s",
        "kb_per_object",
        "open_ready_cold_s",
        "open_ready_warm_s",
    )
    parts = [f"{k} {rec[k]}" for k in keys if k in rec]
    for p in ("cold", "warm"):
        if p in rec:
            s = rec[p]
            parts.append(
                f"{p}: found {s['found']}/{s['photos']} p50 {s['latency_ms']['p50']} p99 "
                f"{s['latency_ms']['p99']} late {s['late']}"
            )
    return ", ".join(parts)


def run_child(args: argparse.Namespace) -> None:
    """The work of one child process (``--child STAGE``)."""
    import sizes_children as ch

    out, result = Path(args.out), Path(args.result)
    data = data_root(args.data)
    if args.child == "enrol":
        ch.enrol(out / "db", Path(args.items), out / f"n{args.size}" / "enrol.jsonl", args.chunk)
    elif args.child in ("nobudget", "budget", "nobudget_limit", "budget_limit"):
        budget = args.budget_ms if args.child.startswith("budget") else None
        limit = args.warm_limit_mb << 20 if args.child.endswith("_limit") else None
        ch.recognise(out / "db", photos(data, args.photos), args.side, budget, result, args.clock == "cpu", limit)
    elif args.child == "without":
        from objrec.datasets import load_catalogue

        covers = sorted({lab for _, lab, _ in load_catalogue(data / "smvs_dvd").queries if lab is not None})
        ch.without(out / "db", photos(data, args.photos), args.side, covers, result)
    elif args.child == "open":
        ch.open_ready(out / "db", result)
    elif args.child == "anchor":
        items = json.loads((out / f"n{args.size}" / "items.json").read_text())
        ch.anchor(items, photos(data, args.photos), args.side, result)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="run folder: state, database, logs, report")
    p.add_argument("--cache", required=True, help="folder for generated distractors and vtest frames (reused)")
    p.add_argument("--data", help="shared data folder (default $OBJREC_SHARED_DATA or ../shared/data)")
    p.add_argument("--sizes", default="100,500,2000", help="catalogue sizes, comma-separated (up to 100000)")
    p.add_argument("--budget-ms", type=float, default=33.0)
    p.add_argument("--photos", type=int, default=200, help="SMVS photos per pass (evenly spread; 200 = all)")
    p.add_argument("--query-side", dest="side", type=int, default=640, help="photo long side in px")
    p.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="time recognition by the wall clock (the figures to report) or the process's CPU time (a shared machine)",
    )
    p.add_argument("--anchor-max", type=int, default=1000, help="largest size the anchor is measured at")
    p.add_argument(
        "--wrong-sizes",
        default="",
        help="sizes at which wrong detections are measured without the photos' covers (default: every size)",
    )
    p.add_argument(
        "--warm-limit-mb",
        type=int,
        default=2048,
        help="the recognizer's page-cache warming bound (MiB) of the limited passes",
    )
    p.add_argument(
        "--warm-limit-sizes",
        default=None,
        help="sizes also recognised with the warming bounded to --warm-limit-mb, every other database page "
        "dropped before each pass (a catalogue larger than memory; default: the largest size; '' none)",
    )
    p.add_argument("--chunk", type=int, default=500, help="objects per enroll_many call (a resume point)")
    p.add_argument("--seed", type=int, default=0, help="series of the generated distractors")
    p.add_argument(
        "--vtest-step",
        type=int,
        default=5,
        help="every k-th vtest.avi frame is a distractor; 0: none, and none in the generated objects either "
        "(a catalogue for bench_tracking.py --db, whose scenes play vtest.avi behind the covers)",
    )
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument("--items", help=argparse.SUPPRESS)
    p.add_argument("--size", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        run_child(args)
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated: rerun the same command to continue"))
    args.wrong_sizes = {int(x) for x in args.wrong_sizes.split(",") if x}
    if args.warm_limit_sizes is None:
        args.warm_limit_sizes = str(max(int(x) for x in args.sizes.split(",")))
    args.limit_sizes = {int(x) for x in args.warm_limit_sizes.split(",") if x}
    run = Run(args)
    run.out.mkdir(parents=True, exist_ok=True)
    print("command:", run.state["argv"][-1])
    print("threads:", json.dumps(thread_report()), "| photos:", args.photos, f"at {args.side} px long side")
    for n in sorted(int(x) for x in args.sizes.split(",")):
        run.size(n)
    run.save()
    print((run.out / "sizes.md").read_text())


if __name__ == "__main__":
    main()
