"""``objrec enroll``: add objects to a model database, one by one (``NAME=IMAGE``) or in bulk (``--from``), with
features extracted in threads here (``--threads N``), on a local Dask cluster (``--workers N``) or on a running one
(``--scheduler ADDRESS``).

Bad input is a ``ValueError``: ``objrec`` prints it as one line and
exits with 2; so does an enrolment with failed images (each listed with its reason).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from objrec.modeldb import ModelDB

from objrec._cliargs import (
    add_cluster_options,
    add_deprecated_option,
    add_json,
    add_no_progress,
    cluster_choice,
    detectors_arg,
    print_json,
)

__all__ = [
    "register",
    "cmd_enroll",
    "detectors_arg",
    "look_alikes",
    "RATING_WARN_BELOW",
    "WEAKEST_SHOWN",
    "LOOK_ALIKE_MAX",
]

#: Views rated below this are enrolled with a warning (``--min-rating`` refuses them instead).
RATING_WARN_BELOW = 40
#: ``--from`` lists this many of the lowest-rated images at the end.
WEAKEST_SHOWN = 5
#: Look-alikes among the objects already enrolled are searched for when an enrolment adds at most this many
#: images (each is recognised against the database, a fraction of a second apiece); a larger ``--from`` batch is
#: not checked, nor are the images of one batch against each other.
LOOK_ALIKE_MAX = 100
#: An image is recognised for look-alikes with its longer side at most this (a camera frame's size).
LOOK_ALIKE_SIDE = 640


def look_alikes(db: Any, images: Sequence[tuple[str, Any]]) -> list[str]:
    """Warnings for the ``(name, image array)`` pairs of ``images`` whose image looks like an object of ``db``
    other than ``name``: the recognizer, without a budget, finds that object in the image (retrieval shortlists
    it and its geometry verifies), or verifies it in the place of another (``explained``). Two such objects
    would compete in every frame that shows either of them."""
    import cv2

    from objrec.modeldb.records import split_key
    from objrec.recognizer import Recognizer

    if not len(db) or not images:
        return []
    rec = Recognizer(db, budget_ms=None, track=False, prefilter=None)
    out = []
    for name, frame in images:
        side = max(frame.shape[:2])
        if side > LOOK_ALIKE_SIDE:
            f = LOOK_ALIKE_SIDE / side
            frame = cv2.resize(frame, None, fx=f, fy=f, interpolation=cv2.INTER_AREA)
        found = [(d.name, d.inliers) for d in rec.process(frame).detections]
        # An object verified in the same place as a stronger one is rejected as explained by it: a look-alike
        # all the same.
        found += [(r.name, r.matches) for r in rec.last_rejections if r.reason == "explained"]
        seen = set()
        for key, inliers in found:
            other = split_key(key)[0]
            if other != name and other not in seen:
                seen.add(other)
                out.append(f"warning: {name} looks like {other}, already enrolled ({inliers} matches verified)")
    return out


class _Report:
    """What ``enroll`` reports: lines on stdout as they come (none with ``--json``), and the ``--json`` document."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.doc: dict[str, Any] = {"enrolled": [], "warnings": []}

    def say(self, line: str) -> None:
        if not self.quiet:
            print(line)

    def warn(self, line: str) -> None:
        self.doc["warnings"].append(line.strip().removeprefix("warning: "))
        self.say(line)


def _ratings(db: Any, name: str) -> list[dict[str, Any]]:
    """``{"view", "rating", "reasons"}`` of every rated view of ``name``."""
    infos = [db.info(k) for k in db.view_keys(name)]
    return [
        {"view": i.view, "rating": i.rating, "reasons": list(i.rating_reasons)} for i in infos if i.rating is not None
    ]


def _rating_lines(ratings: list[dict[str, Any]], report: _Report) -> None:
    """One line per rated view: its rating and reasons, a warning below :data:`RATING_WARN_BELOW`."""
    for r in ratings:
        label = f"view {r['view']}" if len(ratings) > 1 else "rating"
        why = f" ({'; '.join(r['reasons'])})" if r["reasons"] else ""
        text = f"{label} {r['rating']}/100{why}"
        if r["rating"] < RATING_WARN_BELOW:
            report.warn(f"  warning: {text}")
        else:
            report.say(f"  {text}")


def _parse_pairs(pairs: Sequence[str]) -> list[tuple[str, str]]:
    out = []
    for p in pairs:
        name, sep, path = p.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"expected NAME=IMAGE, got {p!r}")
        out.append((name, path))
    names = [n for n, _ in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"object name(s) given twice: {', '.join(sorted(dup))}")
    return out


def _enroll_pairs(db: Any, pairs: list[tuple[str, Any]], path: str, args: argparse.Namespace, report: _Report) -> None:
    """Enrol NAME=IMAGE pairs; a name given more than once is one object with those images as its views."""
    objects: dict[str, list[Any]] = {}
    for name, img in pairs:
        objects.setdefault(name, []).append(img)
    for name in objects:
        if name in db and not args.replace:
            raise ValueError(f"object {name!r} is already enrolled in {path} (use --replace)")
    for name, imgs in objects.items():
        obj = db.enroll(
            name,
            imgs,
            replace=args.replace,
            views=args.views,
            width_m=args.width_m,
            shape=args.shape,
            min_rating=args.min_rating,
            full_rating=True,  # a few images named one by one: each gets the full rating, with its views
        )
        features = {k: len(f) for k, f in obj.features.items()}
        ratings = _ratings(db, name)
        report.doc["enrolled"].append(
            {
                "name": name,
                "width": obj.width,
                "height": obj.height,
                "features": features,
                "views": len(imgs),
                "synthesised_views": obj.views,
                "shape": obj.shape,
                "width_m": obj.width_m,
                "ratings": ratings,
            }
        )
        counts = ", ".join(f"{k}: {n}" for k, n in features.items())
        shown = f"; {len(imgs)} views" if len(imgs) > 1 else ""
        shown += f"; synthesised views {obj.views}" if obj.views else ""
        shown += f"; {obj.shape}" if obj.shape != "flat" else ""
        shown += f"; width {obj.width_m:g} m" if obj.width_m else ""
        report.say(f"enrolled {name} ({obj.width}x{obj.height}; features {counts}{shown})")
        _rating_lines(ratings, report)


def _extraction(args: argparse.Namespace) -> AbstractContextManager[tuple[Any, str]]:
    """Where ``--from`` extracts: ``(None, "threads")``, or a Dask client (``--workers N``, ``--scheduler``)
    connected before anything is written, so a bad address fails with the database untouched."""
    on_cluster = any(v is not None for v in (args.workers, args.scheduler, args.cluster))
    if (on_cluster or args.send_bytes or args.threads is not None) and not args.source:
        raise ValueError("--threads, --workers, --scheduler and --send-bytes apply to --from DIR|LIST.csv")
    workers, scheduler = cluster_choice(args)
    if workers is None and scheduler is None:
        return nullcontext((None, "threads"))
    from objrec.cluster import dask_client

    return dask_client(workers, scheduler)


def _enroll_from(db: ModelDB, source: str, args: argparse.Namespace, client: Any, report: _Report) -> bool:
    """Bulk enrolment from a folder or a name,path CSV; prints each failure to stderr. True if none failed."""
    from objrec.imageio import InputError, read_image
    from objrec.modeldb.enrolment import items_from_csv, items_from_dir

    src = Path(source)
    if not src.exists():
        raise ValueError(f"--from {source}: no such folder or file")
    items = items_from_dir(src) if src.is_dir() else items_from_csv(src)
    views = [(n, p) for n, ps in items for p in (ps if isinstance(ps, list | tuple) else [ps])]
    alikes = []
    if len(views) <= LOOK_ALIKE_MAX:
        readable = []
        for n, p in views:
            try:
                readable.append((n, read_image(p)))
            except (InputError, OSError):
                continue  # enrolment reports it as a failure
        alikes = look_alikes(db, readable)
    result = db.enroll_many(
        items,
        replace=args.replace,
        workers=args.threads,
        progress=not args.no_progress,
        views=args.views,
        width_m=args.width_m,
        shape=args.shape,
        scheduler=client,
        send_bytes=args.send_bytes,
        min_rating=args.min_rating,
    )
    for f in result.failed:
        print(f"objrec enroll: failed {f.name} ({f.source}): {f.reason}", file=sys.stderr)
    report.doc["from"] = {
        "source": str(source),
        "enrolled": list(result.enrolled),
        "skipped": list(result.skipped),
        "failed": [{"name": f.name, "source": str(f.source), "reason": f.reason} for f in result.failed],
        "weakest": _weakest(db, result.enrolled, report),
    }
    for line in alikes:
        report.warn(line)
    report.say(
        f"from {source}: enrolled {len(result.enrolled)}, skipped {len(result.skipped)} "
        f"(already enrolled from the same content), failed {len(result.failed)}"
    )
    return not result.failed


def _weakest(db: Any, names: Sequence[str], report: _Report) -> list[dict[str, Any]]:
    """The :data:`WEAKEST_SHOWN` lowest-rated views of the objects ``names``, with their reasons."""
    infos = [i for n in names for i in (db.info(k) for k in db.view_keys(n)) if i.rating is not None]
    if not infos:
        return []
    from objrec.rating.rater import features_only

    partial = any(features_only(i.rating_version) for i in infos)
    how = " from their own features; `objrec db info --rating` adds the rendered views" if partial else ""
    report.say(f"weakest images (of {len(infos)} rated{how}):")
    out = []
    for i in sorted(infos, key=lambda i: (i.rating, i.name))[:WEAKEST_SHOWN]:
        src = (i.source or {}).get("path") or i.name
        why = f" ({'; '.join(i.rating_reasons)})" if i.rating_reasons else ""
        warn = "warning: " if i.rating < RATING_WARN_BELOW else ""
        report.say(f"  {warn}{i.rating}/100 {i.name} {src}{why}")
        out.append({"name": i.name, "source": src, "rating": i.rating, "reasons": list(i.rating_reasons)})
    return out


def _check_min_rating(
    images: list[tuple[str, Any]], detectors: dict, min_rating: int | None, shape: str = "flat"
) -> None:
    """Refuse, before anything is written, when an image of a NAME=IMAGE pair rates below ``--min-rating`` (rated
    for the objects' ``shape``)."""
    if min_rating is None:
        return
    if not 0 <= min_rating <= 100:
        raise ValueError(f"--min-rating: expected an integer 0-100, got {min_rating}")
    from objrec.rating import rate

    for name, img in images:
        r = rate(img, detectors=detectors, shape=shape)
        if r.score < min_rating:
            why = "; ".join(x.text for x in r.reasons) or "no reason above the report threshold"
            raise ValueError(f"{name}: rating {r.score} is below --min-rating {min_rating} ({why}); nothing enrolled")


def _check_object_options(args: argparse.Namespace) -> None:
    from objrec.modeldb.records import check_width_m
    from objrec.modeldb.views import check_views

    if not args.objects and not args.source:
        raise ValueError("nothing to enroll: give NAME=IMAGE pairs or --from DIR|LIST.csv")
    try:
        args.views = check_views(args.views)
    except ValueError as exc:
        raise ValueError(f"--views: {exc}".replace("views: ", "", 1)) from None
    try:
        args.width_m = check_width_m(args.width_m)
    except ValueError as exc:
        raise ValueError(f"--width-m: {exc}".replace("width_m: ", "", 1)) from None


def cmd_enroll(args: argparse.Namespace) -> int:
    from objrec.imageio import read_image
    from objrec.modeldb import DEFAULT_DETECTORS, ModelDB

    _check_object_options(args)
    pairs = _parse_pairs(args.objects)
    images = [(name, read_image(path)) for name, path in pairs]  # all readable before anything is written
    kinds = detectors_arg(args.detectors)
    dets = {k: DEFAULT_DETECTORS.get(k, {}) for k in kinds} if kinds else None
    report = _Report(quiet=args.json)
    with _extraction(args) as (client, _):
        db = ModelDB.create(args.db, detectors=dets, exist_ok=True)
        if kinds and set(kinds) != set(db.detectors):
            raise ValueError(f"--detectors {','.join(kinds)} differs from the database's {','.join(db.detectors)}")
        _check_min_rating(images, db.detectors, args.min_rating, args.shape)
        if len(images) <= LOOK_ALIKE_MAX:
            for line in look_alikes(db, images):
                report.warn(line)
        _enroll_pairs(db, images, args.db, args, report)
        ok = _enroll_from(db, args.source, args, client, report) if args.source else True
    report.say(f"database {args.db}: {len(db)} object(s), id {db.database_id}")
    report.doc.update(database=str(args.db), database_id=db.database_id, objects=len(db), prefilter=None)
    if args.train_prefilter:
        from objrec.prefilter.estimator import RegionPrefilter

        pf = RegionPrefilter().train(db, None, progress=not args.no_progress)
        from objrec.prefilter.storage import save_for

        jpath, _ = save_for(pf, db)
        report.doc["prefilter"] = {"status": "trained", "path": str(jpath)}
        report.say(f"trained the prefilter for this content (embedded backgrounds): {jpath}")
    elif (Path(args.db) / "prefilter.json").exists():
        report.doc["prefilter"] = {"status": "stale", "path": str(Path(args.db) / "prefilter.json")}
        report.say("note: the database changed, so its prefilter is stale; retrain with objrec train-prefilter")
    if args.json:
        print_json(report.doc)
    return 0 if ok else 2


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``enroll`` command to the ``objrec`` parser's subcommands."""
    e = sub.add_parser(
        "enroll",
        help="add objects to a model database (created if missing)",
        description="Add objects to a model database, created if missing. Every write is atomic. --from extracts "
        "the features in this process's threads (--threads N), on a local Dask cluster (--workers N) or on the "
        "workers of a running Dask scheduler (--scheduler ADDRESS); this process commits the batches, so the "
        "database is the same wherever the features were extracted.",
        epilog="A LIST.csv has one 'name,path' row per object (an optional header row 'name,path'; relative "
        "paths are taken from the CSV's folder).",
    )
    e.add_argument("--db", required=True, help="model database directory")
    e.add_argument(
        "--detectors", metavar="LIST", help="comma-separated detector kinds for a new database (default: surf,sift)"
    )
    e.add_argument("--replace", action="store_true", help="replace objects that are already enrolled")
    e.add_argument(
        "--min-rating",
        type=int,
        metavar="N",
        help="refuse images rated below N (0-100, see objrec rate), naming the reasons: NAME=IMAGE pairs are all "
        "checked before anything is written; with --from such images are failures (exit code 2)",
    )
    e.add_argument(
        "--train-prefilter",
        action="store_true",
        help="retrain the database's prefilter afterwards on embedded backgrounds (off by default; "
        "objrec train-prefilter --backgrounds uses your own)",
    )
    e.add_argument(
        "--from",
        dest="source",
        metavar="DIR|LIST.csv",
        help="enroll every image of a folder (names from file stems; a sub-folder DIR/NAME/ is one object whose "
        "images are its views) or of a name,path CSV (a repeated name adds a view): in parallel, "
        "committed in batches, resumable (a rerun skips names already enrolled from the same file); "
        "unreadable or featureless images are listed with their reason and the exit code is 2",
    )
    e.add_argument(
        "--shape",
        choices=("flat", "solid"),
        default="flat",
        help="what verification assumes of the objects: flat (default; a homography maps the image to the "
        "frame) or solid (an object with depth: verified without a plane, found by its outline and box)",
    )
    e.add_argument(
        "--views",
        metavar="none|affine",
        help="also enroll features of synthesised views of each image: 'affine' adds ASIFT-style tilted and "
        "rotated copies (recognition under strong viewpoint change, at a few times the database size and "
        "matching time); default none",
    )
    e.add_argument(
        "--width-m",
        type=float,
        metavar="METRES",
        help="the physical width of the objects enrolled by this command, in metres (their model image's x "
        "axis), for a metric pose with objrec run --camera; objrec db set-width sets it later",
    )
    _add_extraction_options(e)
    add_json(e, "the objects enrolled, --from's outcome, warnings and the database's id and size")
    e.add_argument(
        "objects", nargs="*", metavar="NAME=IMAGE", help="object name and image file (a name repeated: its views)"
    )
    e.set_defaults(func=cmd_enroll)


def _add_extraction_options(e: argparse.ArgumentParser) -> None:
    """Where ``--from`` extracts features: threads here (default), or the workers of a Dask cluster."""
    add_cluster_options(e, threads="extraction threads for --from")
    add_deprecated_option(e, "--cluster", "--workers N", choices=("local",))
    e.add_argument(
        "--send-bytes",
        action="store_true",
        help="read each image file here and send its bytes to the workers (for workers that cannot see the files)",
    )
    add_no_progress(e)
