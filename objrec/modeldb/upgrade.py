"""Conversion of a schema 1 or 2 model database to the current layout, in place and atomically (schema 3
databases are read as they are: see :data:`~objrec.modeldb.records.SCHEMA_VERSION`).

Schema 1 held one ``.npz`` per object; schema 2 held shards with 25-byte keypoint rows, float16 SURF
descriptors and every feature of each image. The conversion works from what is stored (nothing is
re-extracted): each object's features are capped and re-encoded as enrolment now stores them
(:func:`~objrec.features.model.model_feature_cap` per kind, packed keypoint rows, int8 SURF descriptors), its
image re-encoded where that is smaller (:func:`~objrec.modeldb.preparation.encode_model_image`), and the
objects written as new shards, in enrolment order. Only then is the manifest replaced, in one step; the old
files are deleted after it. An interruption at any point before that leaves the old manifest and every old
file as they were (new shards already written are removed, or deleted by the next attempt).

What is lost: the features beyond the cap, the octave field's SIFT layer bits, the rounding of positions,
responses, sizes and angles (see :data:`~objrec.modeldb.records.KEYPOINT_DTYPE`), the int8 rounding of SURF
descriptors and the lossy re-encoding of a model image. Content hashes are those of the new rows, so the
database id changes (a prefilter stays valid: the id joins ``compatible_ids``; the retrieval index must be
rebuilt with ``objrec db reindex``).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from objrec.features.model import AUTO_CAP, cap_features
from objrec.fileio import file_sha256, load_npz_verified, read_json
from objrec.imageio import decode_image, to_bgr
from objrec.modeldb.preparation import (
    PreparedObject,
    content_sha256,
    decode_descriptors,
    encode_descriptors,
    encode_model_image,
    keypoint_columns,
    keypoint_rows,
    prepared_from_arrays,
    thumb_sha256,
    thumbnail,
)
from objrec.modeldb.records import (
    DESCRIPTOR_STORAGE,
    ENROLL_BATCH,
    FORMAT,
    MANIFEST,
    OLDEST_READ_SCHEMA,
    SCHEMA_VERSION,
    SHARDS,
    THUMBS,
    ModelDBError,
)
from objrec.modeldb.shards import Shard, check_free_space, disk_full_guard, file_lock, read_table, write_checked
from objrec.modeldb.store import ShardStore
from objrec.modeldb.tables import ROWS
from objrec.types import Features

__all__ = ["upgrade_database", "convert_object", "split_row_tables"]


def upgrade_database(
    path: str | os.PathLike, max_features: int | dict[str, int] | str | None = AUTO_CAP, progress: bool = False
) -> int | None:
    """Convert the schema 1 or 2 database at ``path`` in place; None (and nothing done) when this objrec reads
    it as it is (schema 3 and later).

    Parameters
    ----------
    path : path-like
        The database directory.
    max_features : int, dict of kind -> int, "auto" or None
        The cap per kind on each object's stored features (None keeps them all).
    progress : bool
        Show a tqdm progress bar (objects) on stderr.

    Returns
    -------
    int or None
        The schema version converted from.

    Raises
    ------
    ModelDBError
        For a directory that is not a model database, a damaged file (named) or a full disk
        (:class:`~objrec.modeldb.shards.DiskFullError`); the old database is then as it was.
    """
    path = Path(path)
    mpath = path / MANIFEST
    if not mpath.exists():
        raise ModelDBError(f"{mpath}: not found ({path} is not an objrec model database)")
    with file_lock(path / ".lock"):
        old = read_json(mpath)
        version = old.get("schema_version")
        if old.get("format") != FORMAT or not isinstance(version, int):
            raise ModelDBError(f"{mpath}: not an objrec model database manifest")
        if version >= OLDEST_READ_SCHEMA:
            return None
        if version == 1:
            objects, total = _schema1_objects(path, old, max_features), len(old["objects"])
            old_files = [path / "objects"]
        else:
            objects, total = _schema2_objects(path, old, max_features)
            old_files = [path / SHARDS / s["id"] for s in old["shards"]]
            old_files += [path / SHARDS / r["id"] for r in old.get("retired", [])]
        _remove_unnamed_shards(path, old)
        _write_converted(path, old, objects, total, progress)
        for f in old_files:
            shutil.rmtree(f, ignore_errors=True)
    return version


def split_row_tables(path: str | os.PathLike, progress: bool = False) -> int:
    """Split the row-oriented object table (``objects.json``) of each shard of the current-schema database at
    ``path`` into its columns and details tables (:mod:`objrec.modeldb.tables`), so that opening it reads
    only the columns; the arrays, the content and the database id stay as they are.

    The new tables are written beside the old ones and checked, the manifest naming them replaces the old
    one in one step, and only then are the old tables deleted: an interruption leaves the database readable
    as it was. ``progress``: show a progress bar (shards) on stderr.

    Returns
    -------
    int
        The shards whose tables were split (0: nothing to do).
    """
    from tqdm import tqdm

    path = Path(path)
    with file_lock(path / ".lock"):
        store = ShardStore.open(path)
        todo = [i for i, s in enumerate(store.shards) if ROWS in s.entry["files"]]
        if not todo:
            return 0
        shards = list(store.shards)
        encoded = {i: shards[i].table.encode() for i in todo}
        check_free_space(path, sum(len(d) for files in encoded.values() for d in files.values()))
        for i in tqdm(todo, unit="shard", desc="split tables", disable=not progress, file=sys.stderr):
            sh = shards[i]
            files = {k: v for k, v in sh.entry["files"].items() if k != ROWS}
            for fname, data in encoded[i].items():
                with disk_full_guard(path / SHARDS / sh.id / fname):
                    files[fname] = write_checked(path / SHARDS / sh.id / fname, data)
            shards[i] = sh.with_entry(dict(sh.entry, files=files))
        store.publish(dict(store.manifest), shards, keeps_dependents=True)
        for i in todo:
            (path / SHARDS / shards[i].id / ROWS).unlink(missing_ok=True)
    return len(todo)


def _remove_unnamed_shards(path: Path, old: dict[str, Any]) -> None:
    """Shard folders the old manifest does not name (an interrupted upgrade's), removed (write lock held)."""
    named = {s["id"] for s in old.get("shards", [])} | {r["id"] for r in old.get("retired", [])}
    root = path / SHARDS
    if root.is_dir():
        for d in root.iterdir():
            if d.is_dir() and d.name not in named:
                shutil.rmtree(d, ignore_errors=True)


def _write_converted(
    path: Path, old: dict[str, Any], objects: Iterator[PreparedObject], total: int, progress: bool
) -> None:
    """Write ``objects`` as new shards of :data:`ENROLL_BATCH`, then replace the manifest (the commit point).
    On any error the new shards are removed and the old manifest stays."""
    from tqdm import tqdm

    kinds = list(old["detectors"])
    manifest = {k: v for k, v in old.items() if k not in ("objects", "retired", "compatible_ids")}
    manifest.update(schema_version=SCHEMA_VERSION, next_shard=old.get("next_shard", 0))
    manifest["descriptor_storage"] = {k: DESCRIPTOR_STORAGE.get(k, "float32") for k in kinds}
    store = ShardStore(path, old, [])
    shards: list[Shard] = []
    batch: list[PreparedObject] = []
    bar = tqdm(total=total, unit="object", desc="upgrade", disable=not progress, file=sys.stderr, dynamic_ncols=True)
    try:
        for p in objects:
            batch.append(p)
            bar.update(1)
            if len(batch) >= ENROLL_BATCH:
                shards.append(store.new_shard(manifest, kinds, batch))
                batch = []
        if batch:
            shards.append(store.new_shard(manifest, kinds, batch))
        manifest["next_seq"] = max([old.get("next_seq", 0)] + [o["seq"] + 1 for s in shards for o in s.objects])
        store.publish(manifest, shards, keeps_dependents=True)
    except BaseException:
        for s in shards:
            shutil.rmtree(path / SHARDS / s.id, ignore_errors=True)
        raise
    finally:
        bar.close()


def _schema1_objects(
    path: Path, old: dict[str, Any], max_features: int | dict[str, int] | str | None
) -> Iterator[PreparedObject]:
    kinds = list(old["detectors"])
    for seq, e in enumerate(old["objects"]):
        arrays = load_npz_verified(path / e["file"], e["sha256"])
        try:
            feats = {k: Features.from_arrays(arrays, prefix=f"{k}__", kind=k) for k in kinds}
            img = arrays["image"]
        except (KeyError, ValueError) as exc:
            raise ModelDBError(f"{path / e['file']}: arrays missing or malformed ({exc})") from None
        p = prepared_from_arrays(e["name"], img, feats, None, max_features)
        p.entry["seq"] = seq
        yield p


def _checked_array(path: Path, shard: Shard, fname: str) -> np.ndarray:
    """A schema 2 shard file, its sha256 checked against the manifest, memory-mapped."""
    f = path / SHARDS / shard.id / fname
    if not f.exists():
        raise ModelDBError(f"{f}: array file not found")
    if file_sha256(f) != shard.entry["files"].get(fname):
        raise ModelDBError(f"{f}: sha256 mismatch (file damaged or modified after it was written)")
    return np.load(f, mmap_mode="r", allow_pickle=False)


def _schema2_objects(
    path: Path, old: dict[str, Any], max_features: int | dict[str, int] | str | None
) -> tuple[Iterator[PreparedObject], int]:
    kinds = list(old["detectors"])
    shards = [read_table(path / SHARDS / e["id"], e, kinds) for e in old["shards"]]
    rows = sorted(
        (o["seq"], si, r) for si, sh in enumerate(shards) for r, o in enumerate(sh.objects) if r not in sh.dead
    )

    def generate() -> Iterator[PreparedObject]:
        arrays: dict[tuple[str, str], np.ndarray] = {}
        for _, si, r in rows:
            sh = shards[si]
            need = ["images.npy"] + [f"{k}.{part}.npy" for k in kinds for part in ("keypoints", "descriptors")]
            need += [THUMBS] if THUMBS in sh.entry["files"] else []
            for fname in need:
                if (sh.id, fname) not in arrays:
                    arrays[(sh.id, fname)] = _checked_array(path, sh, fname)
            get = {fname: arrays[(sh.id, fname)] for fname in need}
            a, b = sh.offsets["image"][r : r + 2]
            kps = {k: np.array(get[f"{k}.keypoints.npy"][sh.offsets[k][r] : sh.offsets[k][r + 1]]) for k in kinds}
            descs = {k: np.array(get[f"{k}.descriptors.npy"][sh.offsets[k][r] : sh.offsets[k][r + 1]]) for k in kinds}
            thumb = np.array(get[THUMBS][r]) if THUMBS in get else None
            yield convert_object(sh.objects[r], np.array(get["images.npy"][a:b]), kps, descs, thumb, max_features)

    return generate(), len(rows)


def convert_object(
    entry: dict[str, Any],
    image: np.ndarray,
    keypoints: dict[str, np.ndarray],
    descriptors: dict[str, np.ndarray],
    thumb: np.ndarray | None,
    max_features: int | dict[str, int] | str | None = AUTO_CAP,
) -> PreparedObject:
    """One stored object (schema 2 rows) in the current stored form.

    Each kind's image features (the rows before any synthesised view's, see :mod:`objrec.modeldb.views`) are
    capped to ``max_features`` (:func:`~objrec.features.model.cap_features`); the views' rows are kept. The
    image is re-encoded when that is smaller.

    Parameters
    ----------
    entry : dict
        The object's table entry (with the manifest's renames and widths applied).
    image : (n,) uint8 ndarray
        The stored image bytes.
    keypoints : dict of kind -> ndarray
        Stored keypoint rows of any type :func:`~objrec.modeldb.preparation.keypoint_columns` reads.
    descriptors : dict of kind -> ndarray
        Stored descriptor rows.
    thumb : (THUMB_SIZE, THUMB_SIZE) uint8 ndarray or None
        The stored thumbnail (None: made from the image).
    max_features : int, dict of kind -> int, "auto" or None

    Returns
    -------
    PreparedObject
    """
    name = entry["name"]
    img = decode_image(image, f"object {name!r}: stored image")
    img = to_bgr(img) if img.ndim == 3 else img
    encoded = encode_model_image(img, image)
    table = entry.get("view_table")
    counts = dict(table["n_features"]) if table else {}
    kps, descs = {}, {}
    width, height = int(entry["width"]), int(entry["height"])
    for kind, rows in keypoints.items():
        try:
            columns = keypoint_columns(rows, width, height)
        except ValueError as exc:
            raise ModelDBError(f"object {name!r}: {kind} {exc}") from None
        values = decode_descriptors(kind, descriptors[kind])
        f = Features(**columns, descriptors=values, kind=kind)
        own = counts[kind][0] if kind in counts else len(f)
        kept = cap_features(f.subset(np.arange(own)), max_features, width, height)
        if kind in counts:
            counts[kind] = [len(kept)] + list(counts[kind][1:])
            kept = Features.concatenate([kept, f.subset(np.arange(own, len(f)))])
        kps[kind] = keypoint_rows(kept, width, height)
        descs[kind] = encode_descriptors(kind, kept.descriptors)
    new = dict(entry)
    new.update(
        sha256=content_sha256(encoded, kps, descs),
        n_features={k: len(v) for k, v in kps.items()},
        image_bytes=int(encoded.size),
    )
    if table:
        new["view_table"] = dict(table, n_features=counts)
    if thumb is None:
        thumb = thumbnail(img)
    new["thumb_sha256"] = thumb_sha256(thumb)
    return PreparedObject(new, encoded, kps, descs, thumb)
