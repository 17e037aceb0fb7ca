"""Keeping a model database small and clean: compaction of shards with dead rows, merging of small shards,
and deletion of files no manifest names.

Removing or replacing an object only marks its row dead (a tombstone); a shard whose rows are mostly dead is
rewritten, and small shards are merged, so both stay cheap at any size. Rewrites copy the stored arrays as
they are (nothing is re-extracted), so the database's content and id stay the same.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from objrec.modeldb.preparation import PreparedObject, thumb_sha256, thumbnail
from objrec.modeldb.records import MANIFEST, SHARD_ID_RE, SHARDS, THUMBS
from objrec.modeldb.shards import Shard, file_lock
from objrec.modeldb.store import ShardStore

__all__ = [
    "COMPACT_DEAD_FRACTION",
    "SMALL_SHARD",
    "MAX_SMALL_SHARDS",
    "maintain",
    "rewrite",
    "compact",
    "unnamed_files",
    "collect_garbage",
    "orphans",
]

#: A shard is rewritten without its dead rows once at least this fraction of them is dead.
COMPACT_DEAD_FRACTION = 0.5
#: Shards of fewer objects than this are small; more than ``MAX_SMALL_SHARDS`` of them are merged.
SMALL_SHARD = 32
MAX_SMALL_SHARDS = 16


def maintain(store: ShardStore) -> None:
    """Rewrite mostly-dead shards, merge small ones and delete files no manifest names (write lock held)."""
    shards = store.shards
    victims = [s for s in shards if s.dead and len(s.dead) >= COMPACT_DEAD_FRACTION * s.n]
    small = [s for s in shards if s.n - len(s.dead) < SMALL_SHARD]
    if len(small) > MAX_SMALL_SHARDS:
        victims += [s for s in small if s not in victims]
    if victims:
        rewrite(store, victims)
    collect_garbage(store)


def _live_objects(store: ShardStore, sh: Shard, kinds: list[str]) -> list[PreparedObject]:
    """The live objects of ``sh`` with their arrays as stored (thumbnails made from the images when the
    shard was written without them)."""
    images = store.array(sh, "images.npy")
    thumbs = store.array(sh, THUMBS) if THUMBS in sh.entry["files"] else None
    arrays = {k: (store.array(sh, f"{k}.keypoints.npy"), store.array(sh, f"{k}.descriptors.npy")) for k in kinds}
    out = []
    for r, o in enumerate(sh.objects):
        if r in sh.dead:
            continue
        a, b = sh.offsets["image"][r : r + 2]
        rows = {k: slice(sh.offsets[k][r], sh.offsets[k][r + 1]) for k in kinds}
        kps = {k: np.array(arrays[k][0][rows[k]]) for k in kinds}
        descs = {k: np.array(arrays[k][1][rows[k]]) for k in kinds}
        entry = dict(o)
        if thumbs is not None:
            thumb = np.array(thumbs[r])
        else:
            thumb = thumbnail(store.image(sh, r))
            entry["thumb_sha256"] = thumb_sha256(thumb)
        out.append(PreparedObject(entry, np.array(images[a:b]), kps, descs, thumb))
    return out


def rewrite(store: ShardStore, victims: list[Shard]) -> None:
    """Copy the live objects of ``victims`` (arrays as stored, nothing re-extracted) into one shard per keypoint
    row type (shards of an older schema keep their rows, so content hashes and the database id stay).
    ``store``: the database's shard store (write lock held)."""
    kinds = list(store.manifest["detectors"])
    moved = [p for sh in victims for p in _live_objects(store, sh, kinds)]
    manifest = dict(store.manifest)
    keep = [s for s in store.shards if s not in victims]
    groups: dict[tuple[str, ...], list[PreparedObject]] = {}
    for p in sorted(moved, key=lambda p: p.entry["seq"]):
        groups.setdefault(tuple(str(p.keypoints[k].dtype) for k in kinds), []).append(p)
    for group in groups.values():
        keep.append(store.new_shard(manifest, kinds, group))
    store.publish(manifest, keep, keeps_dependents=True)  # same content, same id


def compact(store: ShardStore) -> int:
    """Rewrite every shard with dead rows or without thumbnails (``thumbs.npy``, made then from the stored
    images) and merge all small shards; returns the shards rewritten (write lock held)."""
    old = [s for s in store.shards if s.dead or THUMBS not in s.entry["files"]]
    victims = old + [s for s in store.shards if s.n < SMALL_SHARD and s not in old]
    if len(victims) > 1 or old:
        rewrite(store, victims)
    else:
        victims = []
    collect_garbage(store)
    return len(victims)


def unnamed_files(store: ShardStore, newer_than: float | None = None) -> list[Path]:
    """Shard folders no manifest names and temporary files a killed writer left (retired shards still
    in their grace period excluded; with ``newer_than``, files modified after it too).
    ``store``: the database's shard store."""
    keep = {s.id for s in store.shards} | store.retired()
    root = store.path / SHARDS
    found = []
    if root.is_dir():
        found += [d for d in root.iterdir() if d.name not in keep and (SHARD_ID_RE.match(d.name) or ".tmp" in d.name)]
    found += list(store.path.glob(".*.tmp"))
    found += [t for d in (store.path, store.path / "index") if d.is_dir() for t in d.rglob("*.tmp") if t not in found]
    if newer_than is not None:
        found = [f for f in found if f.exists() and f.stat().st_mtime <= newer_than]
    return sorted(set(found))


def collect_garbage(store: ShardStore) -> None:
    """Delete what :func:`unnamed_files` lists (called with the write lock held, so no write is in
    progress)."""
    for f in unnamed_files(store):
        shutil.rmtree(f, ignore_errors=True) if f.is_dir() else f.unlink(missing_ok=True)


def orphans(store: ShardStore) -> list[Path]:
    """Files of the database that no commit names (left by a killed writer), without locking.

    While another process holds the write lock, files newer than the manifest are left out: they may
    belong to the write in progress.
    """
    store.refresh()
    with file_lock(store.path / ".lock", blocking=False) as free:
        cutoff = None if free else (store.path / MANIFEST).stat().st_mtime
        return unnamed_files(store, newer_than=cutoff)
