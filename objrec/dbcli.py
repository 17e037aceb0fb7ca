"""``objrec db``: see and change a model database from the command line.

``list`` the objects, ``info`` on the database (or one object; bytes on disk per object, every file counted),
``remove`` and ``rename`` objects,
``set-width`` of one, ``add-view`` and ``remove-view`` (another photo of an enrolled object; each one atomic
commit), ``compact`` its shards (removed rows dropped, small shards
merged, thumbnails added to shards that lack them), ``reindex`` (build or update the retrieval indexes, with a
progress bar, encoded in threads or on a Dask cluster; an interrupted run resumes), ``upgrade`` an older
database in place (progress bar; atomic), ``verify`` every file. Every action takes ``--json`` for
one JSON document on stdout. ``verify`` exits 2 when a file is damaged; orphan files (left by a killed writer)
and a stale prefilter or retrieval index are warnings (exit 0); ``verify --clean`` deletes the orphans under
the write lock.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from objrec._cliargs import (
    add_cluster_options,
    add_deprecated_option,
    add_json,
    add_no_progress,
    cluster_choice,
    print_json,
)

EXIT_OK, EXIT_DAMAGED = 0, 2


def _open(args: argparse.Namespace) -> Any:
    from objrec.modeldb import ModelDB

    return ModelDB.open(args.db)


def _disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _view_doc(i: Any) -> dict[str, Any]:
    src = i.source or {}
    return {
        "view": i.view,
        "width": i.width,
        "height": i.height,
        "n_features": i.n_features,
        "sha256": i.sha256,
        "source": src.get("path"),
        "source_sha256": src.get("sha256"),
        "rating": i.rating,
        "rating_version": i.rating_version,
    }


def _object_doc(db: Any, name: str) -> dict[str, Any]:
    """An object's entry: its first view's fields at the top (an object of one view is described whole by
    them), every view under ``"photos"``."""
    infos = [db.info(k) for k in db.view_keys(name)]
    first = infos[0]
    doc = {"name": name, **_view_doc(first)}
    del doc["view"]
    extra = {"views": first.views, "width_m": first.width_m, "shape": first.shape}
    return {**doc, **extra, "photos": [_view_doc(i) for i in infos]}


def prefilter_status(db: Any) -> dict[str, Any]:
    """``{"status": "current"|"stale"|"absent"|"damaged", "path", "detail"}`` of the database's prefilter."""
    from objrec.prefilter.storage import (
        PrefilterError,
        StalePrefilterError,
        default_path,
        load_prefilter,
        prefilter_files,
    )

    jpath, _ = prefilter_files(default_path(db))
    doc: dict[str, Any] = {"path": str(jpath)}
    if not jpath.exists():
        return {**doc, "status": "absent", "detail": "no prefilter (objrec train-prefilter trains one)"}
    try:
        load_prefilter(jpath, database_id=[db.database_id, *db.compatible_ids])
    except StalePrefilterError as exc:
        return {**doc, "status": "stale", "detail": " ".join(str(exc).split())}
    except PrefilterError as exc:
        return {**doc, "status": "damaged", "detail": " ".join(str(exc).split())}
    return {**doc, "status": "current", "detail": ""}


def index_status(db: Any) -> dict[str, dict[str, Any]]:
    """Per detector kind with a saved retrieval index: its status, as :func:`prefilter_status`."""
    root = Path(db.path) / "index"
    out: dict[str, dict[str, Any]] = {}
    if not root.is_dir():
        return out
    from objrec.matching.retrieval import DatabaseRetrieval, RetrievalIndexError, StaleIndexError

    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        doc: dict[str, Any] = {"path": str(folder)}
        try:
            index = DatabaseRetrieval.load(folder)
        except StaleIndexError as exc:  # an older version: rebuilt, not repaired
            out[folder.name] = {**doc, "status": "stale", "detail": " ".join(str(exc).split())}
            continue
        except RetrievalIndexError as exc:
            out[folder.name] = {**doc, "status": "damaged", "detail": " ".join(str(exc).split())}
            continue
        if index.database_id != db.database_id:
            when = f"rebuilt by `objrec db reindex --db {db.path}`"
            detail = f"built for database {index.database_id}; {when}"
            out[folder.name] = {**doc, "status": "stale", "detail": detail}
        else:
            out[folder.name] = {**doc, "status": "current", "detail": ""}
    return out


def _print(args: argparse.Namespace, doc: Any, lines: list[str]) -> None:
    if args.json:
        print_json(doc)
    else:
        for line in lines:
            print(line)


def cmd_list(args: argparse.Namespace) -> int:
    db = _open(args)
    rows = [_object_doc(db, n) for n in db.names]
    lines = [
        f"{r['name']:32s} {r['width']:5d}x{r['height']:<5d} "
        + ", ".join(f"{k} {v}" for k, v in r["n_features"].items())
        + (f"  rating {r['rating']}" if r.get("rating") is not None else "")
        + (f"  width {r['width_m']:g} m" if r["width_m"] else "")
        + (f"  {len(r['photos'])} views" if len(r["photos"]) > 1 else "")
        + (f"  {r['shape']}" if r["shape"] != "flat" else "")
        + (f"  ({r['source']})" if r["source"] else "")
        for r in rows
    ]
    lines.append(f"{len(rows)} object(s) in {args.db}, id {db.database_id}")
    _print(args, {"database": str(args.db), "database_id": db.database_id, "objects": rows}, lines)
    return EXIT_OK


def _rating_line(v: dict[str, Any]) -> str:
    """A view's stored rating, saying when it was computed without the rendered views."""
    which = "" if v["view"] == 0 else f" (view {v['view']})"
    from objrec.rating.rater import features_only

    partial = features_only(v["rating_version"])
    how = " from its own features (the full rating: --rating)" if partial else ""
    return f"rating{which}: {v['rating']}/100{how}"


def cmd_info(args: argparse.Namespace) -> int:
    db = _open(args)
    if args.rating:
        # the full ratings (with rendered views) of views enrolled with their features' rating, written back
        db.rate([args.name] if args.name else None, progress=not args.json)
    if args.name:
        doc = _object_doc(db, args.name)
        feats = ", ".join(f"{k} {v}" for k, v in doc["n_features"].items())
        lines = [f"{doc['name']}: {doc['width']}x{doc['height']}, features {feats}", f"content sha256 {doc['sha256']}"]
        lines += [f"enrolled from {doc['source']}"] if doc["source"] else []
        lines += [f"synthesised views: {doc['views']}"] if doc["views"] else []
        lines += [f"physical width: {doc['width_m']:g} m"] if doc["width_m"] else []
        lines += [f"shape: {doc['shape']}"]
        lines += [_rating_line(v) for v in doc["photos"] if v["rating"] is not None]
        if args.rating and len(doc["photos"]) > 1:
            obj = db.rate_object(args.name)
            doc["object_rating"] = obj.to_json()
            lines.append(f"object rating: {obj.summary()}")
        if len(doc["photos"]) > 1:
            lines += [
                f"view {v['view']}: {v['width']}x{v['height']}, "
                + ", ".join(f"{k} {n}" for k, n in v["n_features"].items())
                + (f" ({v['source']})" if v["source"] else "")
                for v in doc["photos"]
            ]
        _print(args, doc, lines)
        return EXIT_OK
    m = db.manifest
    doc = {
        "database": str(args.db),
        "database_id": db.database_id,
        "compatible_ids": db.compatible_ids,
        "objects": len(db),
        "detectors": db.detectors,
        "descriptor_storage": m.get("descriptor_storage", {}),
        "shards": len(m["shards"]),
        "disk_bytes": _disk_bytes(Path(args.db)),
        "records": len(db.records),
        "library_version": m.get("library_version"),
        "prefilter": prefilter_status(db),
        "index": index_status(db),
    }
    # Every file of the database folder counts (index and prefilter included); a view counts as an object.
    doc["disk_bytes_per_object"] = round(doc["disk_bytes"] / doc["records"]) if doc["records"] else None
    per = f", {doc['disk_bytes_per_object'] / 1e3:.1f} KB per object (view)" if doc["records"] else ""
    lines = [
        f"database {args.db}: {doc['objects']} object(s), id {doc['database_id']}",
        "detectors: " + ", ".join(f"{k} {v}" for k, v in doc["detectors"].items()),
        f"storage: {doc['shards']} shard(s), {doc['disk_bytes'] / 2**20:.1f} MiB on disk{per}",
        f"prefilter: {doc['prefilter']['status']} {doc['prefilter']['detail']}".rstrip(),
    ]
    lines += [f"index {k}: {v['status']} {v['detail']}".rstrip() for k, v in doc["index"].items()]
    _print(args, doc, lines)
    return EXIT_OK


def cmd_remove(args: argparse.Namespace) -> int:
    db = _open(args)
    db.remove(args.names)
    doc = {"removed": args.names, "database_id": db.database_id, "objects": len(db)}
    _print(args, doc, [f"removed {', '.join(args.names)}; {len(db)} object(s) left, id {db.database_id}"])
    return EXIT_OK


def cmd_rename(args: argparse.Namespace) -> int:
    db = _open(args)
    db.rename(args.old, args.new)
    doc = {"renamed": {"from": args.old, "to": args.new}, "database_id": db.database_id}
    _print(args, doc, [f"renamed {args.old} to {args.new}; id {db.database_id}"])
    return EXIT_OK


def cmd_set_width(args: argparse.Namespace) -> int:
    from objrec.modeldb.records import check_width_m

    try:
        width_m = check_width_m(args.width_m)
    except ValueError as exc:
        raise ValueError(f"WIDTH_M: {exc}".replace("width_m: ", "", 1)) from None
    db = _open(args)
    db.set_width(args.name, width_m)
    doc = {"name": args.name, "width_m": width_m, "database_id": db.database_id}
    _print(args, doc, [f"{args.name}: physical width {width_m:g} m"])
    return EXIT_OK


def cmd_add_view(args: argparse.Namespace) -> int:
    db = _open(args)
    if args.min_rating is not None and not 0 <= args.min_rating <= 100:
        raise ValueError(f"--min-rating: expected an integer 0-100, got {args.min_rating}")
    view = db.add_view(args.name, args.image, min_rating=args.min_rating, full_rating=True)
    from objrec.modeldb.records import view_key

    info = db.info(view_key(args.name, view))
    doc = {"name": args.name, "view": view, "views": len(db.view_keys(args.name)), "database_id": db.database_id}
    doc["rating"] = info.rating
    rated = "" if info.rating is None else f"; rating {info.rating}/100"
    _print(args, doc, [f"{args.name}: view {view} added from {args.image}; {doc['views']} view(s){rated}"])
    return EXIT_OK


def cmd_remove_view(args: argparse.Namespace) -> int:
    db = _open(args)
    db.remove_view(args.name, args.view)
    doc = {"name": args.name, "removed_view": args.view, "views": len(db.view_keys(args.name))}
    _print(args, doc, [f"{args.name}: view {args.view} removed; {doc['views']} view(s) left"])
    return EXIT_OK


def cmd_compact(args: argparse.Namespace) -> int:
    db = _open(args)
    n = db.compact()
    doc = {"shards_rewritten": n, "database_id": db.database_id, "objects": len(db)}
    _print(args, doc, [f"{args.db}: {n} shard(s) rewritten; {len(db)} object(s), id {db.database_id}"])
    return EXIT_OK


def cmd_reindex(args: argparse.Namespace) -> int:
    from objrec.matching.shortlist import prepare_indexes
    from objrec.modeldb.enrolment import LOCAL_CLUSTER

    workers, scheduler = cluster_choice(args)
    db = _open(args)
    n, where = (workers, LOCAL_CLUSTER) if workers is not None else (args.threads, scheduler)
    kinds = prepare_indexes(db, progress=not args.no_progress, send_bytes=args.send_bytes, workers=n, scheduler=where)
    doc = {"database_id": db.database_id, "indexes": index_status(db), "kinds": kinds}
    lines = [f"index {k}: {v['status']}" for k, v in doc["indexes"].items() if k in kinds]
    lines.append(f"{args.db}: {len(kinds)} retrieval index(es) current; {len(db)} object(s), id {db.database_id}")
    _print(args, doc, lines)
    return EXIT_OK


def cmd_upgrade(args: argparse.Namespace) -> int:
    from objrec.matching.shortlist import prepare_indexes
    from objrec.modeldb import ModelDB
    from objrec.modeldb.upgrade import split_row_tables, upgrade_database

    before = _disk_bytes(Path(args.db))
    version = upgrade_database(args.db, progress=not args.no_progress)
    split = split_row_tables(args.db, progress=not args.no_progress)
    db = ModelDB.open(args.db)
    kinds = prepare_indexes(db, progress=not args.no_progress) if version is not None else []
    after = _disk_bytes(Path(args.db))
    doc = {"database": str(args.db), "upgraded_from": version, "schema_version": db.manifest["schema_version"]}
    doc.update(database_id=db.database_id, objects=len(db), disk_bytes_before=before, disk_bytes=after, reindexed=kinds)
    doc["tables_split"] = split
    if version is None and split:
        lines = [f"{args.db}: schema {doc['schema_version']}: the object tables of {split} shard(s) split for opening"]
    elif version is None:
        lines = [f"{args.db}: already schema {doc['schema_version']}; nothing to do"]
    else:
        lines = [
            f"{args.db}: upgraded from schema {version} to {doc['schema_version']}: {len(db)} object(s), "
            f"{before / 2**20:.1f} -> {after / 2**20:.1f} MiB on disk, id {db.database_id}",
            f"retrieval index(es) rebuilt: {', '.join(kinds) or 'none needed'}",
        ]
    _print(args, doc, lines)
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    db = _open(args)
    problems = db.verify()
    pf, index = prefilter_status(db), index_status(db)
    problems += [d["detail"] for d in [pf, *index.values()] if d["status"] == "damaged"]
    warnings = [f"prefilter {pf['detail']}" for d in [pf] if d["status"] == "stale"]
    warnings += [f"index {k}: {d['detail']}" for k, d in index.items() if d["status"] == "stale"]
    orphans = [str(p) for p in db.orphans()]
    cleaned = [str(p) for p in db.clean()] if args.clean and orphans else []
    doc = {
        "database": str(args.db),
        "database_id": db.database_id,
        "objects": len(db),
        "ok": not problems,
        "problems": problems,
        "warnings": warnings,
        "orphans": orphans,
        "cleaned": cleaned,
    }
    lines = [f"damaged: {p}" for p in problems] + [f"warning: {w}" for w in warnings]
    if orphans and not cleaned:
        lines.append(f"warning: {len(orphans)} orphan file(s) no commit names (objrec db verify --clean deletes them):")
        lines += [f"  {p}" for p in orphans]
    lines += [f"deleted orphan {p}" for p in cleaned]
    verdict = "DAMAGED" if problems else "ok"
    lines.append(f"{args.db}: {verdict}: {len(db)} object(s), every file checked against its sha256")
    _print(args, doc, lines)
    if problems and not args.json:
        print(f"objrec db verify: {len(problems)} damaged file(s) in {args.db}", file=sys.stderr)
    return EXIT_DAMAGED if problems else EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``objrec db ACTION`` to the top-level subcommands."""
    d = sub.add_parser(
        "db",
        help="list, inspect, remove, rename, compact or verify a model database's objects",
        description=__doc__.split("\n\n")[1].replace("\n", " "),
    )
    acts = d.add_subparsers(dest="action", metavar="ACTION", required=True)

    def action(name: str, summary: str, func: Any) -> argparse.ArgumentParser:
        a = acts.add_parser(name, help=summary, description=summary)
        a.add_argument("--db", required=True, help="model database directory")
        add_json(a)
        a.set_defaults(func=func)
        return a

    action("list", "list the enrolled objects (name, size, features, physical width, source file)", cmd_list)
    i = action("info", "the database's id, detectors, storage, prefilter and index status, or one object's", cmd_info)
    i.add_argument("name", nargs="?", metavar="NAME", help="an object: its size, features and source")
    i.add_argument(
        "--rating",
        action="store_true",
        help="first give NAME's views (or every object's) the full rating, with its rendered views, where "
        "enrolment stored the rating of their own features; written back (one atomic commit); for an object of "
        "several views, also the object's rating (its views together and how well they agree)",
    )
    r = action("remove", "remove objects (one atomic commit; the prefilter stays valid)", cmd_remove)
    r.add_argument("names", nargs="+", metavar="NAME")
    n = action("rename", "rename an object (one atomic commit; nothing re-extracted)", cmd_rename)
    n.add_argument("old", metavar="OLD")
    n.add_argument("new", metavar="NEW")
    w = action(
        "set-width", "record an object's physical width in metres, for its pose (one atomic commit)", cmd_set_width
    )
    w.add_argument("name", metavar="NAME")
    w.add_argument("width_m", type=float, metavar="WIDTH_M", help="the width of the model image's x axis, in metres")
    a = action("add-view", "add another photo of an enrolled object as a view (one atomic commit)", cmd_add_view)
    a.add_argument("name", metavar="NAME")
    a.add_argument("image", metavar="IMAGE", help="an image file of the object from another side")
    a.add_argument("--min-rating", type=int, metavar="N", help="refuse the image if it rates below N (0-100)")
    rv = action("remove-view", "remove one view of an object (the others keep their numbers)", cmd_remove_view)
    rv.add_argument("name", metavar="NAME")
    rv.add_argument("view", type=int, metavar="VIEW", help="the view's number (objrec db info --db DB NAME lists them)")
    action(
        "compact",
        "rewrite shards with removed rows or without thumbnails and merge small ones (one atomic commit)",
        cmd_compact,
    )
    x = action(
        "reindex",
        "build or update the retrieval index of each kind that needs one, in bounded memory (resumable), "
        "encoded in threads or on a Dask cluster",
        cmd_reindex,
    )
    _add_encoding_options(x)
    add_no_progress(x)
    u = action(
        "upgrade",
        "convert an older (schema 1 or 2) database in place to the current compact layout, or split a current one's "
        "row-oriented shard tables so that it opens faster (atomic; progress bar)",
        cmd_upgrade,
    )
    add_no_progress(u)
    v = action(
        "verify",
        "check every file against its sha256 (exit 2 on damage), report orphans and stale prefilter or index",
        cmd_verify,
    )
    v.add_argument("--clean", action="store_true", help="delete orphan files (under the write lock)")


def _add_encoding_options(x: argparse.ArgumentParser) -> None:
    """Where ``reindex`` encodes the descriptors: FAISS's threads here (default), or the workers of a Dask cluster."""
    add_cluster_options(x, threads="FAISS threads for training and encoding")
    add_deprecated_option(x, "--cluster", "--workers N", choices=("local",))
    x.add_argument(
        "--send-bytes",
        action="store_true",
        help="read the descriptors here and send them to the workers (for workers that cannot see the database)",
    )
