"""The scorecard's entries: one function per capability, each measuring it in a quick, fixed form on the real
data of ``../shared/data`` and returning its figures (:class:`scorecard_core.Figure`).

Every entry runs in its own process (``bench/scorecard.py`` starts it), so its peak memory is its own and one
entry's caches cannot help another. Entries that need the same database build it in the shared work folder
(``ctx.work``) under a name that says what it holds, and reuse it when it is there.

Splits: where a data set has an established tuning half, figures are reported for each half separately, the
tuning half being the one thresholds may be chosen on (``bench/README.md``, "How to tune"):
- SMVS phone photos: covers 001-025 tuning, 026-050 held out (as ``bench_feature_cap.py`` splits them);
- UKBench objects, ``homography_pairs`` pairs: by the first hex digit of the SHA-256 of the item's name (even
  tuning, odd held out; :func:`split_of`), as ``bench_rating.py`` splits its images;
- the prefilter's backgrounds: ``bench_prefilter_defaults.py``'s tuning and hold-out parts.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from scorecard_core import Figure, count, share  # noqa: E402

__all__ = ["Context", "Entry", "ENTRIES", "DEFAULT_ENTRIES", "CI_ENTRIES", "split_of"]


@dataclass
class Context:
    """What an entry is given: the shared data folder, a work folder shared by the entries of one run (databases
    kept there are reused), the seed, and where to write pictures."""

    data: Path
    work: Path
    out: Path
    seed: int = 0


@dataclass
class Entry:
    """A capability: its function, whether its figures depend on the machine's speed (``timed``) and whether it
    belongs to the CI subset."""

    name: str
    run: Callable[[Context], dict[str, Figure]]
    timed: bool
    ci: bool
    about: str


def split_of(name: str) -> str:
    """``tuning`` or ``held_out`` for an item, by the first hex digit of the SHA-256 of its name."""
    return "tuning" if int(hashlib.sha256(name.encode()).hexdigest()[0], 16) % 2 == 0 else "held_out"


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


# --- the 334-object catalogue and the SMVS phone photos ---------------------------------------------------------
def _catalogue_items(data: Path) -> list[tuple[str, str]]:
    from objrec.datasets import load_catalogue
    from objrec.evaluation.kinds.catalogue import catalogue_objects

    class _Cfg:
        distractors = [str(data / "dvd_covers")]
        without_query_objects = False

    return catalogue_objects(_Cfg(), load_catalogue(str(data / "smvs_dvd")))


def _catalogue_db(ctx: Context, fresh: bool = False) -> tuple[Any, dict[str, float]]:
    """The 334-object catalogue (SMVS references and ``dvd_covers``, library defaults), enrolled into
    ``ctx.work/catalogue334`` with ``enroll_many`` (all cores) unless it is there; with ``fresh`` it is enrolled
    again and the enrolment timed (wall and CPU seconds)."""
    from objrec.matching.shortlist import prepare_indexes
    from objrec.modeldb import ModelDB

    path = ctx.work / "catalogue334"
    items = _catalogue_items(ctx.data)
    done = path / ".complete"
    if fresh or not done.exists():
        shutil.rmtree(path, ignore_errors=True)
        c0, t0 = _cpu_s(), time.perf_counter()
        db = ModelDB.create(path)
        report = db.enroll_many(items, progress=False)
        if report.failed:
            raise RuntimeError(f"catalogue: {report.failed[0].name} could not be enrolled ({report.failed[0].reason})")
        prepare_indexes(db, rebuild=False)
        timing = {"wall_s": time.perf_counter() - t0, "cpu_s": _cpu_s() - c0, "objects": len(items)}
        done.write_text(json.dumps(timing))
    return ModelDB.open(path), json.loads(done.read_text())


def _smvs_photos(data: Path) -> list[tuple[str, str, str]]:
    """``(photo path, cover name, split)`` of the 200 SMVS phone photos."""
    from objrec.datasets import load_catalogue

    cat = load_catalogue(str(data / "smvs_dvd"))
    out = []
    for image, label, _group in cat.queries:
        split = "tuning" if int(label) <= 25 else "held_out"
        out.append((image, label, split))
    return out


def _recognise_photos(
    db: Any, photos: list[tuple[str, str, str]], budget_ms: float | None, passes: int = 1, defaults: bool = False
) -> list[dict]:
    """Each photo (640 px on its long side, as ``objrec eval catalogue:`` sizes it) recognised as one still frame
    by a recognizer like the catalogue evaluation's (no prefilter, no tracking); the last pass is kept. With
    ``defaults``, by a recognizer with the library's defaults (tracking on, as ``objrec detect`` runs), reset
    before each photo: each photo is a single photo, not a frame of a stream."""
    from objrec.evaluation.kinds.catalogue import _query_image, score_query
    from objrec.recognizer import Recognizer

    if defaults:
        rec = Recognizer(db, budget_ms=budget_ms)
    else:
        rec = Recognizer(db, budget_ms=budget_ms, prefilter=None, track=False)
    rec.warmup((480, 640))
    rows: list[dict] = []
    for _ in range(passes):
        rows = []
        for image, label, split in photos:
            if defaults:
                rec.reset()
            r = rec.process(_query_image(image, 640))
            names = [d.name for d in r.detections]
            rows.append(
                {
                    "photo": image,
                    "truth": label,
                    "split": split,
                    **score_query(names, label),
                    "latency_ms": r.latency_ms,
                    "deadline_met": r.deadline_met,
                }
            )
    return rows


def entry_smvs(ctx: Context) -> dict[str, Figure]:
    db, timing = _catalogue_db(ctx, fresh=True)
    rows = _recognise_photos(db, _smvs_photos(ctx.data), None)
    (ctx.work / "smvs_rows.json").write_text(json.dumps(rows))
    single = _recognise_photos(db, _smvs_photos(ctx.data), None, defaults=True)
    figs: dict[str, Figure] = {}
    for split in ("tuning", "held_out"):
        sel = [r for r in rows if r["split"] == split]
        figs[f"found.{split}"] = count(
            sum(r["found"] for r in sel), len(sel), split, "smvs_dvd", unit="photos", gated=True
        )
        sel = [r for r in single if r["split"] == split]
        figs[f"found_defaults.{split}"] = count(
            sum(r["found"] for r in sel),
            len(sel),
            split,
            "smvs_dvd",
            unit="photos",
            gated=True,
            note="Recognizer defaults (tracking on), one photo at a time, as objrec detect",
        )
    figs["photos_with_wrong"] = count(
        sum(r["wrong"] > 0 for r in rows),
        len(rows),
        "held_out",
        "smvs_dvd",
        better="lower",
        unit="photos",
        gated=True,
        note="a photo may show other covers beside its own",
    )
    n = timing["objects"]
    figs["enrol_rate"] = Figure(
        n / timing["wall_s"],
        "objects/s",
        "higher",
        "tuning",
        "smvs_dvd+dvd_covers",
        "timing",
        note="enroll_many, library defaults, all cores",
    )
    figs["enrol_cpu_per_object"] = Figure(
        timing["cpu_s"] / n, "CPU s", "lower", "tuning", "smvs_dvd+dvd_covers", "timing"
    )
    figs["disk_per_object"] = Figure(
        _dir_bytes(db.path) / n / 1024, "KB", "lower", "tuning", "smvs_dvd+dvd_covers", "disk", floor=0.5, gated=True
    )
    lat = np.array([r["latency_ms"] for r in rows])
    figs["p50_ms"] = Figure(float(np.percentile(lat, 50)), "ms", "lower", "held_out", "smvs_dvd", "timing")
    return figs


def entry_smvs_budget(ctx: Context) -> dict[str, Figure]:
    db, _ = _catalogue_db(ctx)
    rows = _recognise_photos(db, _smvs_photos(ctx.data), 33.0, passes=2)
    figs: dict[str, Figure] = {}
    for split in ("tuning", "held_out"):
        sel = [r for r in rows if r["split"] == split]
        figs[f"found.{split}"] = count(
            sum(r["found"] for r in sel), len(sel), split, "smvs_dvd", unit="photos", note="33 ms budget, second pass"
        )
    lat = np.array([r["latency_ms"] for r in rows])
    figs["p99_ms"] = Figure(float(np.percentile(lat, 99)), "ms", "lower", "held_out", "smvs_dvd", "timing")
    figs["late"] = count(
        sum(not r["deadline_met"] for r in rows),
        len(rows),
        "held_out",
        "smvs_dvd",
        better="lower",
        unit="frames",
        kind="timing",
    )
    return figs


# --- wide-baseline pairs -----------------------------------------------------------------------------------------
def entry_pairs(ctx: Context) -> dict[str, Figure]:
    """Each pair's image A enrolled (library defaults), B recognised by a new ``Recognizer`` with its defaults
    (tracking on, as ``objrec detect`` runs): solved when the median error of the annotated points is <= 5 px."""
    import cv2

    from objrec import ModelDB, Recognizer
    from objrec.datasets import load_annotated_pairs
    from objrec.evaluation.kinds.pairs import median_error

    solved: dict[tuple[str, str], list[int]] = {}
    detail = {}
    for p in load_annotated_pairs(ctx.data / "homography_pairs", None):
        A, B = cv2.imread(str(p.path_a)), cv2.imread(str(p.path_b))
        with tempfile.TemporaryDirectory() as tmp:
            db = ModelDB.create(Path(tmp) / "db")
            db.enroll("a", A)
            r = Recognizer(db).process(B)
        det = r.detections[0] if r.detections else None
        err = median_error(det.homography if det is not None else None, p.points_a, p.points_b)
        ok = err is not None and err <= 5.0
        key = (p.label.split("/")[0], split_of(p.label))
        solved.setdefault(key, []).append(int(ok))
        detail[p.label] = err
    (ctx.out / "pairs.json").write_text(json.dumps(detail, indent=1))
    figs = {}
    for (s, split), v in sorted(solved.items()):
        figs[f"{s}.{split}"] = count(sum(v), len(v), split, f"homography_pairs/{s}", unit="pairs", gated=True)
    return figs


# --- close-ups partly outside the frame --------------------------------------------------------------------------
def entry_closeup(ctx: Context) -> dict[str, Figure]:
    """``bench_closeup.py``'s sweep (objects 20/40/60% outside the frame) on the Oxford ``img1`` images,
    ``box.png`` and 20 SMVS references, one scene per object and level: objects found within 3 px."""
    from bench_closeup import closeup_config, link_objects

    from objrec.evaluation.runner import run_evaluation

    folder = ctx.work / "closeup_objects"
    folder.mkdir(exist_ok=True)
    link_objects(ctx.data, folder, 20)
    cfg = closeup_config(folder, ctx.work / "closeup", ["surf"], 1, progress=False, plots=False)
    report = run_evaluation(cfg)
    figs = {}
    for g in report["recognition"]["groups"]:
        if g["distortion"] == "outside":
            lvl = f"{round(100 * g['level'])}"
            figs[f"outside{lvl}.found"] = count(
                g["tp"], g["n_objects"], "tuning", "oxford+box+smvs_dvd", unit="objects", gated=True
            )
            figs[f"outside{lvl}.error"] = Figure(
                g["corner_error_mean"],
                "px",
                "lower",
                "tuning",
                "oxford+box+smvs_dvd",
                "accuracy",
                floor=0.1,
                gated=True,
            )
    return figs


# --- UKBench: everyday objects with depth ------------------------------------------------------------------------
def entry_ukbench(ctx: Context) -> dict[str, Figure]:
    """The 120 UKBench objects enrolled as solid from 1 view (the other 3 queried) and from 2 views (the other 2
    queried), ``objrec eval ukbench:``'s recognition, objrec alone."""
    from objrec.evaluation.config import EvalConfig
    from objrec.evaluation.runner import run_evaluation

    out = ctx.work / "ukbench"
    cfg = EvalConfig(
        kind="ukbench", path=str(ctx.data / "ukbench"), out=str(out), detectors=["objrec"], progress=False, plots=False
    )
    run_evaluation(cfg)
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines() if line.strip()]
    found: dict[tuple[str, str], list[int]] = {}
    per_object: dict[str, list[int]] = {}
    per_object_two: dict[str, list[int]] = {}
    for r in records:
        res, meta = r["result"], r["meta"]
        setting = meta.get("setting")
        if setting is None or meta.get("object") is None or "found" not in res:
            continue
        obj = f"ukb{int(meta['object']):05d}"
        key = (str(setting), split_of(obj))
        found.setdefault(key, []).append(int(res["found"]))
        if str(setting).startswith("1"):
            per_object.setdefault(str(obj), []).append(int(res["found"]))
        elif str(setting).startswith("2"):
            per_object_two.setdefault(str(obj), []).append(int(res["found"]))
    (ctx.work / "ukbench_found.json").write_text(json.dumps(per_object))
    (ctx.work / "ukbench_found_two.json").write_text(json.dumps(per_object_two))
    figs = {}
    for (setting, split), v in sorted(found.items()):
        figs[f"{setting}.{split}"] = count(sum(v), len(v), split, "ukbench", unit="views", gated=True)
    return figs


# --- the rating against real recognition ---------------------------------------------------------------------------
def entry_rating(ctx: Context) -> dict[str, Figure]:
    """Spearman correlation of ``objrec.rating.rate``'s score of each reference with how many of its real photos
    were found: UKBench first views rated as solid (``shape="solid"``, as they are enrolled; the other three
    views, from the ``ukbench`` entry), UKBench objects of two views rated as objects
    (:func:`objrec.rating.objects.rate_object` of views 0 and 1; views 2 and 3, from the ``ukbench`` entry) and
    SMVS covers rated as flat (their four phone photos, from the ``smvs`` entry), per split: the halves the
    rating's weights were fitted on (``bench/rating_fit.py``'s ``split_halves`` of ``bench_rating.py``'s
    reference images; an object is in the half of its first view); the held-out figures with their bootstrap
    95% interval in the note. Each figure's floor is at least what one photo found or missed moves it
    (:func:`one_photo_move`), as a count's floor is one: a change of recognition by a single photo is not a
    change of the rating."""
    import cv2
    from bench_rating import reference_images
    from rating_fit import spearman, spearman_ci, split_halves

    tune, _held = split_halves(reference_images(ctx.data))
    tuned = set(tune)

    def half(rel: str) -> str:
        return "tuning" if rel in tuned else "held_out"

    pairs: dict[tuple[str, str], list[tuple[float, float, int]]] = {}
    for source, points in (
        ("ukbench", _ukbench_solid_points(ctx)),
        ("ukbench_objects", _ukbench_object_points(ctx)),
        ("smvs_dvd", _smvs_points(ctx, cv2)),
    ):
        for rel, score, found, photos in points:
            pairs.setdefault((source, half(rel)), []).append((score, found, photos))
    figs = {}
    for (source, split), v in sorted(pairs.items()):
        a = np.array(v)
        rho = spearman(a[:, 0], a[:, 1])
        ci = spearman_ci(a[:, 0], a[:, 1]) if rho is not None and split == "held_out" else None
        note = f"{len(a)} objects" + (f", 95% CI {ci[0]:.2f} to {ci[1]:.2f}" if ci else "")
        floor = max(RATING_FLOOR, one_photo_move(a[:, 0], a[:, 1], a[:, 2]))
        figs[f"{source}.spearman.{split}"] = share(rho, split, source, unit="rho", floor=floor, gated=True, note=note)
    return figs


#: The least floor of a rating correlation: the difference of floating point between machines.
RATING_FLOOR = 0.02


def one_photo_move(scores: Any, found: Any, photos: Any) -> float:
    """The most Spearman's correlation of ``scores`` with ``found`` (each object's share of its ``photos`` real
    photos found) moves when one photo of one object is found or missed the other way: the resolution of a
    rating figure over recognition that changes by whole photos (0 where the correlation is undefined)."""
    from rating_fit import spearman

    s, f, n = (np.asarray(x, np.float64) for x in (scores, found, photos))
    rho = spearman(s, f)
    if rho is None:
        return 0.0
    moves = [0.0]
    for i in range(len(f)):
        for step in (1.0 / n[i], -1.0 / n[i]):
            if -1e-9 <= f[i] + step <= 1.0 + 1e-9:
                g = f.copy()
                g[i] += step
                r = spearman(s, g)
                moves.append(abs(r - rho) if r is not None else 0.0)
    return float(max(moves))


@functools.cache
def _solid_score(path: str) -> float:
    """``rate(path, shape="solid")``'s score, once per image (the UKBench first views serve two figures)."""
    from objrec.rating import rate

    return float(rate(path, shape="solid").score)


def _ukbench_solid_points(ctx: Context) -> list[tuple[str, float, float, int]]:
    """(first view's path, its solid rating, share of the other three views found, 3) per UKBench object."""
    path = ctx.work / "ukbench_found.json"
    if not path.exists():
        return []
    out = []
    for obj, found in json.loads(path.read_text()).items():
        rel = f"ukbench/ukbench{4 * int(obj[3:]):05d}.jpg"
        out.append((rel, _solid_score(str(ctx.data / rel)), float(np.mean(found)), len(found)))
    return out


def _ukbench_object_points(ctx: Context) -> list[tuple[str, float, float, int]]:
    """(first view's path, the object rating of views 0 and 1 as solid, share of views 2 and 3 found, 2) per
    UKBench object."""
    from objrec.features.model import DEFAULT_DETECTORS, extract_model_features
    from objrec.imageio import read_image
    from objrec.rating.objects import rate_object
    from objrec.rating.rater import rated_kind

    path = ctx.work / "ukbench_found_two.json"
    if not path.exists():
        return []
    kind = rated_kind(DEFAULT_DETECTORS)
    out = []
    for obj, found in json.loads(path.read_text()).items():
        k = int(obj[3:])
        rels = [f"ukbench/ukbench{4 * k + j:05d}.jpg" for j in (0, 1)]
        feats = [extract_model_features(read_image(ctx.data / r), {kind: DEFAULT_DETECTORS[kind]})[kind] for r in rels]
        scores = [int(_solid_score(str(ctx.data / r))) for r in rels]
        out.append((rels[0], float(rate_object(obj, scores, feats, "solid").score), float(np.mean(found)), len(found)))
    return out


def _smvs_points(ctx: Context, cv2: Any) -> list[tuple[str, float, float, int]]:
    """(reference path, its flat rating, share of its phone photos found, their number) per SMVS cover with
    photos."""
    from objrec.rating import rate

    path = ctx.work / "smvs_rows.json"
    if not path.exists():
        return []
    by_cover: dict[str, list[int]] = {}
    for r in json.loads(path.read_text()):
        by_cover.setdefault(r["truth"], []).append(int(r["found"]))
    out = []
    for cover, found in by_cover.items():
        rel = f"smvs_dvd/reference/{cover}.jpg"
        out.append((rel, float(rate(cv2.imread(str(ctx.data / rel))).score), float(np.mean(found)), len(found)))
    return out


# --- false detections --------------------------------------------------------------------------------------------
def entry_false(ctx: Context) -> dict[str, Figure]:
    """Every 4th ``ukbench_small`` web photo (none shows a catalogue object) against the 334-object catalogue,
    ``Recognizer`` defaults without tracking: detections, all false."""
    import cv2

    from objrec import Recognizer

    db, _ = _catalogue_db(ctx)
    photos = sorted((ctx.data / "ukbench_small").glob("ukbench*.jpg"))[::4]
    rec = Recognizer(db, track=False)
    rec.warmup((480, 640))
    false = 0
    for p in photos:
        false += len(rec.process(cv2.imread(str(p))).detections)
    return {
        "ukbench_small": count(
            false, len(photos), "held_out", "ukbench_small", better="lower", unit="detections", gated=True
        )
    }


# --- the prefilter ------------------------------------------------------------------------------------------------
def entry_prefilter(ctx: Context) -> dict[str, Figure]:
    """``bench_prefilter_defaults.py`` in a quick form (20 photos per part): the trained defaults' empty-frame area
    rejected and object area kept, per object set, on backgrounds training never sees (tuning and hold-out
    parts), as the mean over the sources (video, photos, still images) and for the video frames alone."""
    import bench_prefilter_defaults as bpd

    from objrec import ModelDB
    from objrec.prefilter import RegionPrefilter

    parts = bpd.background_parts(ctx.data, 20)
    figs = {}
    for set_name, objects in bpd.object_sets(ctx.data, ["demo", "dvd-a", "dvd-b"]).items():
        with tempfile.TemporaryDirectory() as tmp:
            db = ModelDB.create(Path(tmp) / "db")
            for n, img in objects.items():
                db.enroll(n, img)
            pf = RegionPrefilter(random_state=ctx.seed).train(db, None, seed=ctx.seed)
        for part, sources in parts.items():
            split = "tuning" if part == "tuning" else "held_out"
            per_source = {src: bpd.measure(pf, objects, bgs, 1000 + ctx.seed) for src, bgs in sources.items()}
            per = list(per_source.values())
            figs[f"{set_name}.rejected_video.{split}"] = share(
                per_source["video"]["empty_rejected"], split, "vtest", gated=True, note="video frames alone"
            )
            figs[f"{set_name}.rejected.{split}"] = share(
                float(np.mean([m["empty_rejected"] for m in per])), split, "vtest+ukbench_small+oxford", gated=True
            )
            figs[f"{set_name}.kept.{split}"] = share(
                float(np.mean([m["object_area_kept"] for m in per])),
                split,
                "vtest+ukbench_small+oxford",
                gated=True,
                floor=0.001,
            )
    return figs


def entry_adapt(ctx: Context) -> dict[str, Figure]:
    """``bench_adapt.py`` in a quick form: the SMVS objects sliding over 600 ``vtest.avi`` frames (never seen in
    training), 33 ms at 30 fps, the prefilter adapting: empty-frame area rejected and recall in frames 150-600."""
    import bench_adapt as ba

    from objrec import ModelDB
    from objrec.prefilter import RegionPrefilter

    objs = ba.objects("smvs", ctx.data)
    with tempfile.TemporaryDirectory() as tmp:
        db = ModelDB.create(Path(tmp) / "db")
        for n, img in objs.items():
            db.enroll(n, img)
        pf = RegionPrefilter(random_state=0).train(db, None, n_scenes=400)
        stream = ba.Stream(ba.vtest(ctx.data, 600), ba.schedule(600, list(objs), np.random.default_rng(0)), objs)
        r = ba.run("adapt", db, pf, stream, 33.0, True, [(150, 600)], None, 30.0)
    w = r["windows"][0]
    return {
        "rejected": share(w["empty_area_rejected"], "held_out", "vtest", note="frames 150-600"),
        "recall": share(w["recall"], "held_out", "vtest", note="frames 150-600"),
    }


# --- streams ---------------------------------------------------------------------------------------------------------
def _stream_objects(kind: str, data: Path) -> dict[str, np.ndarray]:
    import cv2

    from objrec.data import sample_objects

    if kind == "demo":
        return sample_objects()
    if kind == "dvd":
        files = sorted((data / "dvd_covers").glob("*.jpg"))
        return {p.stem[:20]: cv2.imread(str(p)) for p in files[7:40:11]}
    if kind == "mixed":
        objs = {"box": cv2.imread(str(data / "opencv_samples" / "box.png"))}
        for clip in sorted((data / "real_video").iterdir())[:2]:
            if (clip / "reference.png").exists():
                objs[clip.name[:20]] = cv2.imread(str(clip / "reference.png"))
        return objs
    raise ValueError(kind)


#: The streams: (objects, seed, SceneStream motion settings); ``bench_realtime.py``'s own is ``demo`` with seed 0.
STREAMS: dict[str, tuple[str, int, dict[str, Any]]] = {
    "bench": ("demo", 0, {}),
    "dvd": ("dvd", 11, {"pass_frames": (60, 120), "max_rotation": 30.0, "max_tilt": 0.2}),
    "mixed": ("mixed", 23, {"pass_frames": (120, 260), "max_rotation": 90.0, "height_fraction": (0.3, 0.6)}),
    "fast": ("demo", 37, {"pass_frames": (45, 90), "blur_every": 5}),
}


def _stream_run(ctx: Context, which: str, budget: float, frames: int) -> dict[str, Any]:
    from bench_realtime import run_once

    from objrec import ModelDB
    from objrec.prefilter import RegionPrefilter
    from objrec.realtime.stream import SceneStream, video_backgrounds

    kind, seed, motion = STREAMS[which]
    objs = _stream_objects(kind, ctx.data)
    all_bgs = video_backgrounds(str(ctx.data / "opencv_samples/vtest.avi"), (640, 480))
    half = len(all_bgs) // 2
    stream = SceneStream(objs, all_bgs[half:], n_frames=frames, seed=seed, hold=3, **motion)
    imgs, truths = [], []
    for f in stream:
        imgs.append(f.image)
        truths.append(f.objects)
    with tempfile.TemporaryDirectory() as tmp:
        db = ModelDB.create(Path(tmp) / "db")
        for n, img in objs.items():
            db.enroll(n, img)
        pf = RegionPrefilter().train(db, all_bgs[:half:10])
        stats, score = run_once(db, imgs, truths, budget, True, "auto", prefilter=pf)
    j = stats.to_json()
    return {
        "recall": score.recall,
        "false": score.false,
        "misses": j["deadline_misses"],
        "frames": j["frames"],
        "p99": j["latency_ms"]["p99"],
    }


def _stream_figures(ctx: Context, which: str, budget: float, frames: int) -> dict[str, Figure]:
    r = _stream_run(ctx, which, budget, frames)
    split = "tuning" if which == "bench" else "held_out"
    src = f"stream:{which}"
    return {
        f"{which}{budget:g}.recall": share(r["recall"], split, src),
        f"{which}{budget:g}.misses": count(
            r["misses"], r["frames"], split, src, better="lower", unit="frames", kind="timing"
        ),
        f"{which}{budget:g}.false": count(r["false"], r["frames"], split, src, better="lower", unit="detections"),
    }


def entry_stream(ctx: Context) -> dict[str, Figure]:
    """The 3-cover stream of ``bench_realtime.py`` (300 frames, 30 fps pace, prefilter trained on the other
    half of ``vtest.avi``) at 33 and 16 ms, and three streams that differ from it in covers and motion at 16 ms:
    ``dvd`` (three ``dvd_covers``, faster passes, steeper), ``mixed`` (``box.png`` and the ``real_video``
    references, larger, more rotation), ``fast`` (the demo covers, passes twice as fast, blur every 5th frame)."""
    figs: dict[str, Figure] = {}
    figs.update(_stream_figures(ctx, "bench", 33.0, 300))
    for which in STREAMS:
        figs.update(_stream_figures(ctx, which, 16.0, 300))
    return figs


# --- many objects tracked, still camera ------------------------------------------------------------------------------
def _tracking(ctx: Context, scene: str, frames: int, smooth: bool) -> dict[str, Any]:
    import bench_tracking

    out = ctx.work / f"tracking_{scene}"
    argv = [
        "--scenes",
        scene,
        "--frames",
        str(frames),
        "--modes",
        "track",
        "--annotate",
        "1",
        "--no-progress",
        "--out",
        str(out),
        "--data",
        str(ctx.data),
    ]
    if smooth:
        argv.append("--smooth")
    bench_tracking.main(argv)
    doc = json.loads((out / "results.json").read_text())
    (only,) = doc["scenes"].values()  # "still" is named "still12" there, after its covers
    return only["modes"]["track"]


def entry_shelf(ctx: Context) -> dict[str, Figure]:
    """``bench_tracking.py``'s 12-cover shelf at 1280x720, 33 ms, 150 frames (tracking on): share of fully visible
    covers found within 10 px from frame 30 on, late frames."""
    m = _tracking(ctx, "shelf12", 150, False)
    return {
        "found10": share(m["found"]["share_settled_10px"], "tuning", "smvs_dvd", note="from frame 30"),
        "late": count(
            m["latency"]["late"],
            m["latency"]["frames"],
            "tuning",
            "smvs_dvd",
            better="lower",
            unit="frames",
            kind="timing",
        ),
    }


def entry_still(ctx: Context) -> dict[str, Figure]:
    """``bench_tracking.py``'s still camera, 12 covers, 1280x720, 33 ms, 150 frames, smoothed corners: mean and
    largest jitter of the drawn corners, share found from frame 30 on."""
    m = _tracking(ctx, "still", 150, True)
    j = m["jitter"]["corners"]
    return {
        "jitter_mean": Figure(j["mean_px"], "px", "lower", "tuning", "smvs_dvd", "accuracy", floor=0.01),
        "jitter_max": Figure(j["max_px"], "px", "lower", "tuning", "smvs_dvd", "accuracy", floor=0.05),
        "found10": share(m["found"]["share_settled_10px"], "tuning", "smvs_dvd", note="from frame 30"),
    }


# --- real footage ------------------------------------------------------------------------------------------------
#: The real clips' splits: smoothing and tracking defaults may be chosen on ``visp_postcard`` alone.
FOOTAGE_SPLITS = {"visp_postcard": "tuning", "visp_bruegel": "held_out", "visp_postcard_tracking": "held_out"}


def _footage(ctx: Context, detector: str, budget_ms: float | None, tag: str) -> dict[str, Figure]:
    """``objrec eval video:`` on the clips of ``real_video`` (recognition protocol): per clip the share of scored
    frames within 10 px, the median alignment error of the drawn (smoothed) and of the raw corners, and the
    frames lost; misplaced and late frames pooled."""
    from objrec.evaluation.config import EvalConfig
    from objrec.evaluation.runner import run_evaluation

    out = ctx.out / f"footage_{tag}"
    shutil.rmtree(out, ignore_errors=True)
    cfg = EvalConfig(kind="video", path=str(ctx.data / "real_video"), out=str(out), detectors=[detector],
                     budget_ms=budget_ms, progress=False)  # fmt: skip
    report = run_evaluation(cfg)
    figs: dict[str, Figure] = {}
    for row in report["video"]["clips"]:
        clip, split = row["clip"], FOOTAGE_SPLITS.get(row["clip"], "held_out")
        src = f"real_video/{clip}"
        figs[f"{clip}.found10"] = count(row["found"], row["scored"], split, src, unit="frames")
        figs[f"{clip}.error_median"] = Figure(row["error_median"], "px", "lower", split, src, "accuracy", floor=0.05)
        figs[f"{clip}.raw_error_median"] = Figure(row["raw_error_median"], "px", "lower", split, src, "accuracy",
                                                  floor=0.05)  # fmt: skip
        figs[f"{clip}.lost"] = count(row["lost"], row["scored"], split, src, better="lower", unit="frames")
    pooled = report["video"]["summary"][detector]["all"]
    figs["misplaced"] = count(pooled["misplaced"], pooled["scored"], "held_out", "real_video", better="lower",
                              unit="frames")  # fmt: skip
    if budget_ms:
        figs["late"] = count(pooled["late"], pooled["processed"], "held_out", "real_video", better="lower",
                             unit="frames", kind="timing")  # fmt: skip
    for f in figs.values():
        f.gated = budget_ms is None
    return figs


def entry_footage(ctx: Context) -> dict[str, Figure]:
    """Real footage without a budget (``objrec-plain``: tracking and smoothing, no prefilter): what does not
    depend on the machine's speed."""
    return _footage(ctx, "objrec-plain", None, "plain")


def entry_footage33(ctx: Context) -> dict[str, Figure]:
    """Real footage as ``objrec run`` runs it by default (smoothing, the prefilter adapting), 33 ms budget."""
    return _footage(ctx, "objrec", 33.0, "run33")


# --- the command line ------------------------------------------------------------------------------------------------
def entry_cli(ctx: Context) -> dict[str, Figure]:
    """``objrec detect --json`` of ``box_in_scene.png`` against ``box.png`` once the kernel cache is filled (the
    user's own cache, filled by an enrolment first), median of 5 processes, and its ratio to a find_obj.py-style
    script (``bench_cli.py``'s anchor) timed the same way in the same run. ``bench_cli.py`` adds the first
    enrolment and detection after the cache is cleared."""
    import bench_cli

    samples = ctx.data / "opencv_samples"
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package keeps its bytecode
    objrec = bench_cli._objrec_cmd()
    db = ctx.work / "cli_db"
    if not db.exists():
        bench_cli._timed([*objrec, "enroll", "--db", str(db), f"box={samples / 'box.png'}"], env)
    detect = [*objrec, "detect", "--db", str(db), "--json", str(samples / "box_in_scene.png")]
    bench_cli._timed(detect, env)  # the kernels this detection needs, compiled into the cache if missing
    det, _, out = bench_cli._median(detect, env, 5)
    anchor_py = ctx.work / "find_obj_anchor.py"
    anchor_py.write_text(bench_cli.ANCHOR)
    anchor, _, _ = bench_cli._median(
        [sys.executable, str(anchor_py), str(samples / "box.png"), str(samples / "box_in_scene.png")], env, 5
    )
    found = int(bench_cli._detected(out) == ["box"])
    return {
        "detect_s": Figure(det, "s", "lower", "tuning", "opencv_samples", "timing"),
        "detect_over_anchor": Figure(det / anchor, "x", "lower", "tuning", "opencv_samples", "timing"),
        "detect_found": count(found, 1, "tuning", "opencv_samples", unit="objects", floor=0),
    }


ENTRIES: dict[str, Entry] = {
    e.name: e
    for e in [
        Entry("smvs", entry_smvs, False, True, "SMVS phone photos against 334 covers, no budget; enrolment"),
        Entry("pairs", entry_pairs, False, True, "wide-baseline planar pairs, Recognizer defaults"),
        Entry("ukbench", entry_ukbench, False, True, "UKBench, 1 and 2 views enrolled as solid"),
        Entry("rating", entry_rating, False, True, "the rating against real recognition (after smvs, ukbench)"),
        Entry("false", entry_false, False, True, "false detections on unrelated web photos"),
        Entry("prefilter", entry_prefilter, False, True, "the prefilter's trained defaults on unseen backgrounds"),
        Entry("closeup", entry_closeup, False, True, "close-ups partly outside the frame"),
        Entry("footage", entry_footage, False, True, "real footage, no budget"),
        Entry("footage33", entry_footage33, True, False, "real footage as objrec run runs it, 33 ms"),
        Entry("smvs_budget", entry_smvs_budget, True, False, "SMVS photos under a 33 ms budget"),
        Entry("stream", entry_stream, True, False, "3-cover streams at 33 and 16 ms"),
        Entry("shelf", entry_shelf, True, False, "12 covers tracked at 1280x720, 33 ms"),
        Entry("still", entry_still, True, False, "still camera jitter, smoothed"),
        Entry("adapt", entry_adapt, True, False, "prefilter adaptation on an unseen scene"),
        Entry("cli", entry_cli, True, False, "objrec detect latency"),
    ]
}
DEFAULT_ENTRIES = list(ENTRIES)
CI_ENTRIES = [n for n, e in ENTRIES.items() if e.ci]


def run_entry(name: str, ctx: Context) -> dict[str, Any]:
    """Run one entry in this process: its figures (named ``entry.figure``) and its wall and CPU seconds."""
    entry = ENTRIES[name]
    t0, c0 = time.perf_counter(), _cpu_s()
    figs = entry.run(ctx)
    for f in figs.values():
        if entry.timed and f.kind == "accuracy":
            f.gated = False
    return {
        "figures": {f"{name}.{k}": f.to_json() for k, f in figs.items()},
        "wall_s": time.perf_counter() - t0,
        "cpu_s": _cpu_s() - c0,
    }
