"""Conversion of a schema 1 model database (one ``.npz`` per object) to the current layout, in place."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from objrec.fileio import load_npz_verified, read_json
from objrec.modeldb.preparation import prepared_from_arrays
from objrec.modeldb.records import DESCRIPTOR_STORAGE, ENROLL_BATCH, FORMAT, MANIFEST, SCHEMA_VERSION, ModelDBError
from objrec.modeldb.shards import file_lock
from objrec.modeldb.store import ShardStore
from objrec.types import Features

__all__ = ["upgrade_schema1"]


def upgrade_schema1(path: str | os.PathLike) -> bool:
    """Convert the schema 1 database at ``path`` in place; False (and nothing done) for any other directory.

    Features and images are carried over as stored (nothing is re-extracted), each array file checked
    against its sha256 first. The new manifest replaces the old one in one step, after which the old
    ``objects/`` folder is deleted; an interrupted upgrade leaves the old database as it was. Content
    hashes are those of the new layout, so the database id changes.

    Parameters
    ----------
    path : path-like
        The database directory.

    Returns
    -------
    bool
        True when a schema 1 database was converted.
    """
    path = Path(path)
    mpath = path / MANIFEST
    old = read_json(mpath) if mpath.exists() else {}
    if old.get("schema_version") != 1 or old.get("format") != FORMAT:
        return False
    kinds = list(old["detectors"])
    with file_lock(path / ".lock"):
        prepared = []
        for seq, e in enumerate(old["objects"]):
            arrays = load_npz_verified(path / e["file"], e["sha256"])
            try:
                feats = {k: Features.from_arrays(arrays, prefix=f"{k}__", kind=k) for k in kinds}
                img = arrays["image"]
            except (KeyError, ValueError) as exc:
                raise ModelDBError(f"{path / e['file']}: arrays missing or malformed ({exc})") from None
            p = prepared_from_arrays(e["name"], img, feats, None)
            p.entry["seq"] = seq
            prepared.append(p)
        new = ShardStore(path, {**old, "shards": [], "next_seq": len(prepared), "next_shard": 0}, [])
        manifest = {k: v for k, v in old.items() if k != "objects"}
        manifest.update(schema_version=SCHEMA_VERSION, next_seq=len(prepared), next_shard=0)
        manifest["descriptor_storage"] = {k: DESCRIPTOR_STORAGE.get(k, "float32") for k in kinds}
        shards = [
            new.new_shard(manifest, kinds, prepared[i : i + ENROLL_BATCH])
            for i in range(0, len(prepared), ENROLL_BATCH)
        ]
        new.publish(manifest, shards)
        shutil.rmtree(path / "objects", ignore_errors=True)
    return True
