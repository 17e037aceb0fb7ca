"""``objrec enroll``: add objects to a model database, one by one (``NAME=IMAGE``) or in bulk (``--from``), with
features extracted in threads, on a local Dask cluster (``--cluster local``) or on a running one
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
    """Warnings for the ``(name, image array)`` pairs whose image looks like an object of ``db`` other than ``name``:
    the recognizer, without a budget, finds that object in the image (retrieval shortlists it and its
    geometry verifies), or verifies it in the place of another (``explained``). Two such objects would compete
    in every frame that shows either of them."""
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


def _rating_lines(db: Any, name: str) -> list[str]:
    """One line per view of ``name``: its rating and reasons, a warning below :data:`RATING_WARN_BELOW`."""
    lines = []
    keys = db.view_keys(name)
    for key in keys:
        i = db.info(key)
        if i.rating is None:
            continue
        label = f"view {i.view}" if len(keys) > 1 else "rating"
        why = f" ({'; '.join(i.rating_reasons)})" if i.rating_reasons else ""
        warn = "warning: " if i.rating < RATING_WARN_BELOW else ""
        lines.append(f"  {warn}{label} {i.rating}/100{why}")
    return lines


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


def detectors_arg(text: str | None) -> list[str] | None:
    """The detector kinds of a ``--detectors sift,surf`` option (None when not given)."""
    if text is None:
        return None
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    for k in kinds:
        if k not in ("sift", "surf"):
            raise ValueError(f"--detectors: unknown detector {k!r} (choose from sift, surf)")
    return kinds


def _enroll_pairs(db: Any, pairs: list[tuple[str, Any]], path: str, args: argparse.Namespace) -> None:
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
        counts = ", ".join(f"{k}: {len(f)}" for k, f in obj.features.items())
        shown = f"; {len(imgs)} views" if len(imgs) > 1 else ""
        shown += f"; synthesised views {obj.views}" if obj.views else ""
        shown += f"; {obj.shape}" if obj.shape != "flat" else ""
        shown += f"; width {obj.width_m:g} m" if obj.width_m else ""
        print(f"enrolled {name} ({obj.width}x{obj.height}; features {counts}{shown})")
        for line in _rating_lines(db, name):
            print(line)


def _extraction(args: argparse.Namespace) -> AbstractContextManager[tuple[Any, str]]:
    """Where ``--from`` extracts: ``(None, "threads")``, or a Dask client (``--cluster local``, ``--scheduler``)
    connected before anything is written, so a bad address fails with the database untouched."""
    cluster = args.cluster is not None or args.scheduler is not None
    if (cluster or args.send_bytes) and not args.source:
        raise ValueError("--cluster, --scheduler and --send-bytes apply to --from DIR|LIST.csv")
    from objrec.cluster import check_workers

    check_workers(args.workers, args.scheduler)
    if not cluster:
        return nullcontext((None, "threads"))
    from objrec._threads import usable_cores
    from objrec.cluster import dask_client

    return dask_client(args.workers or usable_cores() if args.cluster else None, args.scheduler)


def _enroll_from(db: ModelDB, source: str, args: argparse.Namespace, client: Any) -> bool:
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
    report = db.enroll_many(
        items,
        replace=args.replace,
        workers=args.workers,
        progress=not args.no_progress,
        views=args.views,
        width_m=args.width_m,
        shape=args.shape,
        scheduler=client,
        send_bytes=args.send_bytes,
        min_rating=args.min_rating,
    )
    for f in report.failed:
        print(f"objrec enroll: failed {f.name} ({f.source}): {f.reason}", file=sys.stderr)
    _print_weakest(db, report.enrolled)
    for line in alikes:
        print(line)
    print(
        f"from {source}: enrolled {len(report.enrolled)}, skipped {len(report.skipped)} "
        f"(already enrolled from the same content), failed {len(report.failed)}"
    )
    return not report.failed


def _print_weakest(db: Any, names: Sequence[str]) -> None:
    """The :data:`WEAKEST_SHOWN` lowest-rated views of the objects ``names``, with their reasons."""
    infos = [i for n in names for i in (db.info(k) for k in db.view_keys(n)) if i.rating is not None]
    if not infos:
        return
    partial = any("+features" in (i.rating_version or "") for i in infos)
    how = " from their own features; `objrec db info --rating` adds the rendered views" if partial else ""
    print(f"weakest images (of {len(infos)} rated{how}):")
    for i in sorted(infos, key=lambda i: (i.rating, i.name))[:WEAKEST_SHOWN]:
        src = (i.source or {}).get("path") or i.name
        why = f" ({'; '.join(i.rating_reasons)})" if i.rating_reasons else ""
        warn = "warning: " if i.rating < RATING_WARN_BELOW else ""
        print(f"  {warn}{i.rating}/100 {i.name} {src}{why}")


def _check_min_rating(images: list[tuple[str, Any]], detectors: dict, min_rating: int | None) -> None:
    """Refuse, before anything is written, when an image of a NAME=IMAGE pair rates below ``--min-rating``."""
    if min_rating is None:
        return
    if not 0 <= min_rating <= 100:
        raise ValueError(f"--min-rating: expected an integer 0-100, got {min_rating}")
    from objrec.rating import rate

    for name, img in images:
        r = rate(img, detectors=detectors)
        if r.score < min_rating:
            why = "; ".join(x.text for x in r.reasons) or "no reason above the report threshold"
            raise ValueError(f"{name}: rating {r.score} is below --min-rating {min_rating} ({why}); nothing enrolled")


def cmd_enroll(args: argparse.Namespace) -> int:
    from objrec.imageio import read_image
    from objrec.modeldb import DEFAULT_DETECTORS, ModelDB
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
    pairs = _parse_pairs(args.objects)
    images = [(name, read_image(path)) for name, path in pairs]  # all readable before anything is written
    kinds = detectors_arg(args.detectors)
    dets = {k: DEFAULT_DETECTORS.get(k, {}) for k in kinds} if kinds else None
    with _extraction(args) as (client, _):
        db = ModelDB.create(args.db, detectors=dets, exist_ok=True)
        if kinds and set(kinds) != set(db.detectors):
            raise ValueError(f"--detectors {','.join(kinds)} differs from the database's {','.join(db.detectors)}")
        _check_min_rating(images, db.detectors, args.min_rating)
        if len(images) <= LOOK_ALIKE_MAX:
            for line in look_alikes(db, images):
                print(line)
        _enroll_pairs(db, images, args.db, args)
        ok = _enroll_from(db, args.source, args, client) if args.source else True
    print(f"database {args.db}: {len(db)} object(s), id {db.database_id}")
    if args.train_prefilter:
        from objrec.prefilter.estimator import RegionPrefilter

        pf = RegionPrefilter().train(db, None, progress=True)
        from objrec.prefilter.storage import save_for

        jpath, _ = save_for(pf, db)
        print(f"trained the prefilter for this content (embedded backgrounds): {jpath}")
    elif (Path(args.db) / "prefilter.json").exists():
        print("note: the database changed, so its prefilter is stale; retrain with objrec train-prefilter")
    return 0 if ok else 2


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``enroll`` command to the ``objrec`` parser's subcommands."""
    e = sub.add_parser(
        "enroll",
        help="add objects to a model database (created if missing)",
        description="Add objects to a model database, created if missing. Every write is atomic.",
        epilog="A LIST.csv has one 'name,path' row per object (an optional header row 'name,path'; relative "
        "paths are taken from the CSV's folder).",
    )
    e.add_argument("--db", required=True, help="model database directory")
    e.add_argument("--detectors", help="comma-separated detector kinds for a new database (default: surf,sift)")
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
    e.add_argument(
        "objects", nargs="*", metavar="NAME=IMAGE", help="object name and image file (a name repeated: its views)"
    )
    e.set_defaults(func=cmd_enroll)


def _add_extraction_options(e: argparse.ArgumentParser) -> None:
    """Where ``--from`` extracts features: threads here (default), or the workers of a Dask cluster."""
    e.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="extraction threads for --from (default: the usable cores); with --cluster local, its worker processes",
    )
    where = e.add_mutually_exclusive_group()
    where.add_argument(
        "--cluster",
        choices=("local",),
        help="extract the features of --from on a local Dask cluster of --workers processes (pip install "
        "'objrec[dask]'); this process commits the batches, so the database equals the threads' one",
    )
    where.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="extract the features of --from on the workers of a running Dask scheduler (tcp://host:8786); the "
        "workers read the image files by their paths unless --send-bytes",
    )
    e.add_argument(
        "--send-bytes",
        action="store_true",
        help="read each image file here and send its bytes to the workers (for workers that cannot see the files)",
    )
    e.add_argument("--no-progress", action="store_true", help="no progress bar for --from")
