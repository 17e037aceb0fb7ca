"""The storage engine of a model database: commits (new shards, tombstones, renames) published by replacing the
manifest, on top of the reads of :class:`~objrec.modeldb.reader.ShardReader`.

A reader sees the state of the manifest it read; a writer holds ``DB/.lock`` (:meth:`ShardStore.writing`)
and publishes a whole new state in one atomic replacement of the manifest. Compaction and garbage
collection are in :mod:`objrec.modeldb.maintenance`.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from objrec import __version__
from objrec.fileio import atomic_write_json
from objrec.modeldb.preparation import PreparedObject
from objrec.modeldb.reader import ShardReader
from objrec.modeldb.records import DESCRIPTOR_STORAGE, FORMAT, MANIFEST, SCHEMA_VERSION, SHARDS, ModelDBError
from objrec.modeldb.shards import (
    Shard,
    content_id,
    disk_full_guard,
    file_lock,
    row_offsets,
    write_shard,
)
from objrec.modeldb.tables import ShardTable

__all__ = ["ShardStore", "RETIRE_GRACE_S", "MAX_COMPATIBLE_IDS"]

#: Seconds a shard dropped by a commit stays on disk, so that a reader which opened the manifest just
#: before the commit can still read it; it is deleted by the first write after that.
RETIRE_GRACE_S = 60.0
#: Earlier database ids remembered in ``compatible_ids`` (see :attr:`ModelDB.compatible_ids`).
MAX_COMPATIBLE_IDS = 32


class ShardStore(ShardReader):
    """A model database's storage engine: the reads of :class:`ShardReader` and the commits that change it.

    Writers hold ``DB/.lock`` (:meth:`writing`); each commit writes its new shard, if any, then replaces the
    manifest in one step (:meth:`publish`) and takes the new state.
    """

    @classmethod
    def create(cls, path: Path, detectors: dict[str, dict[str, Any]]) -> ShardStore:
        """Write the manifest of an empty database with ``detectors`` in the directory ``path``: created, or
        an empty one (ModelDBError naming what is there otherwise; ValueError for an unknown detector)."""
        if (path / MANIFEST).exists():
            raise ModelDBError(f"{path / MANIFEST}: a database already exists here (use ModelDB.open)")
        if path.exists() and not path.is_dir():
            raise ModelDBError(f"{path}: exists and is not a directory")
        if path.is_dir() and any(path.iterdir()):
            raise ModelDBError(f"{path}: directory is not empty and holds no {MANIFEST}; refusing to use it")
        detectors = {k: dict(v) for k, v in detectors.items()}
        for kind in detectors:
            if kind not in ("sift", "surf"):
                raise ValueError(f"detectors: unknown detector {kind!r} (expected 'sift' or 'surf')")
        manifest = {
            "format": FORMAT,
            "schema_version": SCHEMA_VERSION,
            "library_version": __version__,
            "detectors": detectors,
            "descriptor_storage": {k: DESCRIPTOR_STORAGE.get(k, "float32") for k in detectors},
            "shards": [],
            "next_seq": 0,
            "next_shard": 0,
            "database_id": content_id(detectors, []),
        }
        path.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path / MANIFEST, manifest)
        return cls(path, manifest, [])

    # -- writes -------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the write lock, on a state refreshed if another writer committed since it was read."""
        with file_lock(self.path / ".lock"):
            detectors = self.manifest["detectors"]
            if self.refresh() and self.manifest["detectors"] != detectors:
                raise ModelDBError(f"{self.path / MANIFEST}: detectors changed under this open database")
            yield

    def commit(self, add: list[PreparedObject], drop: set[str]) -> None:
        """Write a shard for ``add``, tombstone ``drop`` and the names ``add`` replaces, then the manifest
        (write lock held)."""
        manifest = dict(self.manifest)
        kinds = list(manifest["detectors"])
        shards = list(self.shards)
        dead: dict[int, set[int]] = {}
        for name in drop | {p.entry["name"] for p in add if p.entry["name"] in self.live}:
            si, row = self.live[name]
            dead.setdefault(si, set()).add(row)
        for si, rows in dead.items():
            entry = dict(shards[si].entry, removed=sorted(shards[si].dead | rows))
            shards[si] = shards[si].with_entry(entry)
        if add:
            for i, p in enumerate(add):
                p.entry["seq"] = manifest["next_seq"] + i
            shards.append(self.new_shard(manifest, kinds, add))
            manifest["next_seq"] += len(add)
        self.publish(manifest, [s for s in shards if len(s.dead) < s.n], keeps_dependents=not add)

    def rename(self, pairs: list[tuple[str, str]]) -> None:
        """Record the renames of live records ``old`` to free keys ``new`` (``(old, new)`` pairs) in one commit
        (write lock held; the shard's files stay as they are)."""
        self.override([(old, "renamed", new) for old, new in pairs])

    def set_width(self, names: list[str], width_m: float | None) -> None:
        """Record the physical width of the live records ``names`` (None: unknown) in one commit (write lock
        held; the shard's files stay as they are, and the database id with them).
        ``width_m``: the width in metres."""
        self.override([(n, "width_m", width_m) for n in names])

    def override(self, changes: list[tuple[str, str, Any]]) -> None:
        """Change fields of live records through their shards' manifest entries, in one commit (write lock
        held): ``(record key, field, value)`` triples, each field a key of :data:`~objrec.modeldb.shards.OVERRIDES`."""
        shards = list(self.shards)
        for name, key, value in changes:
            si, row = self.live[name]
            sh = shards[si]
            entry = dict(sh.entry, **{key: {**sh.entry.get(key, {}), str(row): value}})
            shards[si] = sh.with_entry(entry)
        self.publish(dict(self.manifest), shards, keeps_dependents=True)

    def new_shard(self, manifest: dict[str, Any], kinds: list[str], objects: list[PreparedObject]) -> Shard:
        """Write ``objects`` as a new shard, numbered from ``manifest`` (whose counter it advances).
        ``kinds``: the detector kinds whose arrays it holds."""
        # The random part keeps a shard left unreferenced by a crashed writer from being overwritten.
        sid = f"s{manifest['next_shard'] % 1_000_000:06d}-{secrets.token_hex(4)}"
        manifest["next_shard"] += 1
        files = write_shard(self.path / SHARDS / sid, kinds, objects)
        entry = {"id": sid, "n_objects": len(objects), "removed": [], "files": files}
        table = ShardTable.from_rows([p.entry for p in objects])
        return Shard(entry, table, row_offsets(table, kinds))

    def publish(self, manifest: dict[str, Any], shards: list[Shard], keeps_dependents: bool = False) -> None:
        """Replace the manifest (the commit point) and take the new state.

        ``keeps_dependents``: the change only removes or renames objects, so a prefilter trained for the
        previous content is still valid; the previous id joins ``compatible_ids`` in this same commit.
        Shards this commit drops are listed as retired (kept on disk for readers for a grace period).
        ``manifest``: the new manifest; ``shards``: the live shards it names.
        """
        manifest["shards"] = [s.entry for s in shards]
        manifest["library_version"] = __version__
        # Whatever it writes is of this schema, which still reads the shards of older ones it keeps.
        manifest["schema_version"] = SCHEMA_VERSION
        live = []
        for s in shards:
            dead = s.dead
            live += [p for r, p in enumerate(zip(s.column("name"), s.column("sha256"), strict=True)) if r not in dead]
        previous = self.manifest.get("database_id")
        manifest["database_id"] = content_id(manifest["detectors"], live)
        compatible = list(self.manifest.get("compatible_ids", [])) + [previous] if keeps_dependents else []
        compatible = [c for c in dict.fromkeys(compatible) if c and c != manifest["database_id"]]
        manifest["compatible_ids"] = compatible[-MAX_COMPATIBLE_IDS:]
        now, named = time.time(), {s.id for s in shards}
        retired = [r for r in self.manifest.get("retired", []) if now - r["at"] < RETIRE_GRACE_S]
        retired += [{"id": s.id, "at": now} for s in self.shards if s.id not in named]
        manifest["retired"] = [r for r in retired if r["id"] not in named]
        try:
            with disk_full_guard(self.path / MANIFEST):
                atomic_write_json(self.path / MANIFEST, manifest)
        except BaseException:
            # The previous manifest stands: the shards written for this commit are removed with it.
            known = {s.id for s in self.shards}
            for s in shards:
                if s.id not in known:
                    shutil.rmtree(self.path / SHARDS / s.id, ignore_errors=True)
            raise
        self.set_state(manifest, shards)

    def retired(self) -> set[str]:
        """Shards dropped by a recent commit, still kept on disk for readers of the previous manifest."""
        now = time.time()
        return {r["id"] for r in self.manifest.get("retired", []) if now - r["at"] < RETIRE_GRACE_S}
