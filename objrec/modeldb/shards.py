"""The files of a model database: shard files and object tables, the manifest's checks, the write lock.

A shard is a folder of ``.npy`` arrays and an object table (``columns.json`` and ``details.json``, see
:mod:`objrec.modeldb.tables`), written once and never changed; the manifest names each shard with the sha256
of each of its files (layout in :mod:`objrec.modeldb`). Every file is written atomically (temporary file, then
rename) and read back.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from objrec.fileio import atomic_write_bytes, check_manifest_header, file_sha256, sha256_bytes
from objrec.modeldb.preparation import THUMB_SIZE, PreparedObject
from objrec.modeldb.records import (
    FORMAT,
    FREE_SPACE_MARGIN,
    KEYPOINT_DTYPE,
    KEYPOINT_ROW_TYPES,
    NAME_RE,
    OLDEST_READ_SCHEMA,
    SCHEMA_VERSION,
    SHARD_ID_RE,
    ModelDBError,
    check_width_m,
)
from objrec.modeldb.tables import COLUMNS, DETAILS, ROWS, ShardTable, parse_columns, parse_details, parse_rows

__all__ = [
    "Shard",
    "write_shard",
    "read_table",
    "read_details",
    "write_checked",
    "with_overrides",
    "OVERRIDES",
    "row_offsets",
    "content_id",
    "file_lock",
    "stat_signature",
    "check_manifest",
    "DiskFullError",
    "check_free_space",
    "disk_full_guard",
]

#: Bytes of free space kept besides :data:`~objrec.modeldb.records.FREE_SPACE_MARGIN` times a write's size.
FREE_SPACE_RESERVE = 16 << 20


class DiskFullError(ModelDBError):
    """Not enough free disk space for a write; nothing of it was kept (the database is as it was)."""


def check_free_space(folder: Path, need: int) -> None:
    """Raise :class:`DiskFullError` unless the file system of ``folder`` (or its nearest existing parent) has
    room for ``need`` bytes with the margin of :data:`~objrec.modeldb.records.FREE_SPACE_MARGIN`."""
    probe = Path(folder)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    want = int(need * FREE_SPACE_MARGIN) + FREE_SPACE_RESERVE
    if free < want:
        raise DiskFullError(
            f"{folder}: not enough free disk space: this write needs about {want / 1e6:.1f} MB, "
            f"{free / 1e6:.1f} MB are free; nothing was written and the database is as it was"
        )


@contextlib.contextmanager
def disk_full_guard(path: Path, cleanup: Path | None = None) -> Iterator[None]:
    """Turn a full disk (ENOSPC, EDQUOT) while writing ``path`` into :class:`DiskFullError`; on any error,
    remove the folder ``cleanup`` (what the failed write had made) before the error goes on."""
    try:
        yield
    except BaseException as exc:
        if cleanup is not None:
            shutil.rmtree(cleanup, ignore_errors=True)
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFullError(
                f"{path}: the disk is full ({exc.strerror or exc}); the write was undone and the database is as "
                "it was: free some space and run it again"
            ) from None
        raise


@dataclass(eq=False)
class Shard:
    """A shard as the manifest names it, with its object table and row offsets.

    Attributes
    ----------
    entry : dict
        The shard's manifest entry: ``id``, ``n_objects``, ``files`` (name -> sha256), ``removed`` rows,
        ``renamed`` rows and rows with a new ``width_m``.
    table : ShardTable
        The object table as written (:meth:`column` and :attr:`objects` apply the entry's changes).
    offsets : dict of str -> ndarray
        Per kind, the ``(n + 1,)`` keypoint row offsets of the objects; ``"image"``: their byte offsets.
    """

    entry: dict[str, Any]
    table: ShardTable
    offsets: dict[str, np.ndarray]
    _columns: dict[str, list[Any]] = field(default_factory=dict, init=False, repr=False)
    _objects: list[dict[str, Any]] | None = field(default=None, init=False, repr=False)

    @property
    def id(self) -> str:
        """The shard's folder name."""
        return self.entry["id"]

    @property
    def n(self) -> int:
        """Rows in the shard, dead ones included."""
        return self.table.n

    @property
    def dead(self) -> set[int]:
        """Rows removed or replaced since the shard was written (tombstones)."""
        return set(self.entry.get("removed", []))

    @property
    def objects(self) -> list[dict[str, Any]]:
        """The object table, one dictionary per row, with the manifest's renames, widths and ratings applied
        (reads the shard's details the first time)."""
        if self._objects is None:
            self._objects = with_overrides(self.table.rows(), self.entry)
        return self._objects

    def column(self, name: str) -> list[Any]:
        """Field ``name`` of every row (None where a row lacks it), with the manifest's changes applied; a
        field of the columns table is read without the shard's details. Not to be changed."""
        values = self._columns.get(name)
        if values is None:
            values = self.table.column(name)
            for key, fld in OVERRIDES.items():
                if fld == name and self.entry.get(key):
                    values = list(values)
                    for r, v in self.entry[key].items():
                        values[int(r)] = v
            self._columns[name] = values
        return values

    def with_entry(self, entry: dict[str, Any]) -> Shard:
        """The same shard under a changed manifest ``entry`` (new tombstones or overrides)."""
        return Shard(entry, self.table, self.offsets)


def _npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


def write_checked(path: Path, data: bytes) -> str:
    """Write ``data`` atomically to ``path``, read it back and return its sha256 (a short or damaged write
    raises)."""
    digest = sha256_bytes(data)
    atomic_write_bytes(path, data)
    if file_sha256(path) != digest:
        raise ModelDBError(f"{path}: read back differs from what was written (disk or file system error)")
    return digest


def write_shard(shard_dir: Path, kinds: Iterable[str], objects: list[PreparedObject]) -> dict[str, str]:
    """Write one shard's files.

    Parameters
    ----------
    shard_dir : Path
        The shard's folder (created).
    kinds : iterable of str
        The database's detector kinds.
    objects : list of PreparedObject
        The shard's objects, in row order.

    Returns
    -------
    dict of str -> str
        File name to sha256, for the manifest.

    Raises
    ------
    DiskFullError
        When the file system lacks room for the encoded files (checked before anything is written) or fills
        up while they are written; the shard's folder is removed, temporary files with it.
    ValueError
        When the objects' keypoint rows of one kind are not all of one row type: a shard holds one type per
        kind (rows are written as they come, so a rewritten schema 3 shard keeps its wide rows and content hashes).
    """
    files: dict[str, bytes] = {}
    empty = np.zeros(0, np.uint8)
    files["images.npy"] = _npy_bytes(np.concatenate([o.image for o in objects]) if objects else empty)
    thumbs = [o.thumb for o in objects]
    files["thumbs.npy"] = _npy_bytes(np.stack(thumbs) if thumbs else np.zeros((0, THUMB_SIZE, THUMB_SIZE), np.uint8))
    for kind in kinds:
        kps = [o.keypoints[kind] for o in objects]
        descs = [o.descriptors[kind] for o in objects]
        dtypes = {d.dtype for d in descs if len(d)}
        dtype = dtypes.pop() if len(dtypes) == 1 else np.dtype(np.float32)
        dim = max((d.shape[1] for d in descs), default=128)
        row_types = {k.dtype for k in kps}
        if len(row_types) > 1:
            raise ValueError(f"{kind} keypoint rows of several types in one shard: {sorted(map(str, row_types))}")
        kp = np.concatenate(kps) if kps else np.zeros(0, KEYPOINT_DTYPE)
        if kp.dtype not in KEYPOINT_ROW_TYPES:
            raise ValueError(f"{kind} keypoint rows of unknown dtype {kp.dtype}")
        files[f"{kind}.keypoints.npy"] = _npy_bytes(kp)
        desc = np.concatenate([d.astype(dtype, copy=False) for d in descs]) if descs else np.zeros((0, dim), dtype)
        files[f"{kind}.descriptors.npy"] = _npy_bytes(desc)
    files.update(ShardTable.from_rows([o.entry for o in objects]).encode())
    check_free_space(shard_dir, sum(len(d) for d in files.values()))
    with disk_full_guard(shard_dir, cleanup=shard_dir):
        return {fname: write_checked(shard_dir / fname, data) for fname, data in files.items()}


def row_offsets(table: ShardTable, kinds: Iterable[str]) -> dict[str, np.ndarray]:
    """Per kind, where each object's keypoint rows start and end in the shard's arrays; ``"image"``: where
    its image bytes do (see :attr:`Shard.offsets`).
    ``table``: the shard's object table; ``kinds``: the detector kinds."""
    counts = table.column("n_features")
    out = {k: np.concatenate([[0], np.cumsum([c.get(k, 0) for c in counts])]) for k in kinds}
    out["image"] = np.concatenate([[0], np.cumsum(table.column("image_bytes"))])
    return {k: v.astype(np.int64) for k, v in out.items()}


def _read_checked(path: Path, entry: dict[str, Any]) -> bytes:
    if not path.exists():
        raise ModelDBError(f"{path}: object table not found")
    data = path.read_bytes()
    if sha256_bytes(data) != entry["files"].get(path.name):
        raise ModelDBError(f"{path}: sha256 mismatch (file damaged or modified after it was written)")
    return data


def read_details(shard_dir: Path, entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The details table of the shard the manifest ``entry`` names, checked against the entry's sha256.
    ``shard_dir``: the shard's folder. ModelDBError naming the file when it is missing, damaged or malformed."""
    path = shard_dir / DETAILS
    data = _read_checked(path, entry)
    try:
        return parse_details(data, entry.get("n_objects", -1))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ModelDBError(f"{path}: malformed object table ({exc})") from None


def read_table(shard_dir: Path, entry: dict[str, Any], kinds: Iterable[str]) -> Shard:
    """The shard the manifest ``entry`` names, its object table checked against the entry's sha256: the
    columns table (the details are read when first asked for), or a row-oriented ``objects.json``.
    ``shard_dir``: the shard's folder; ``kinds``: the detector kinds whose row offsets it gets.

    Raises
    ------
    ModelDBError
        For a missing, damaged or malformed object table, naming the file.
    """
    split = COLUMNS in entry["files"]
    path = shard_dir / (COLUMNS if split else ROWS)
    data = _read_checked(path, entry)
    try:
        if split:
            table = parse_columns(data, lambda: read_details(shard_dir, entry))
        else:
            table = parse_rows(data)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ModelDBError(f"{path}: malformed object table ({exc})") from None
    if table.n != entry.get("n_objects"):
        raise ModelDBError(f"{path}: holds {table.n} objects, the manifest says {entry.get('n_objects')}")
    return Shard(entry, table, row_offsets(table, kinds))


#: Keys of a shard's manifest entry that change fields of its objects: ``{key: {row: value}}``.
OVERRIDES = {
    "renamed": "name",
    "width_m": "width_m",
    "rating": "rating",
    "rating_version": "rating_version",
    "rating_reasons": "rating_reasons",
}


def with_overrides(objects: list[dict[str, Any]], entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The object table with the manifest's changes applied. A shard's files never change after it is
    written, so a rename, a new width or a rating computed later is recorded in the shard's manifest entry
    (``"renamed": {row: new name}``, ``"width_m": {row: metres or null}``, ``"rating"`` and its version and
    reasons, see :data:`OVERRIDES`).
    ``objects``: the shard's object table as written; ``entry``: its manifest entry."""
    changes = [(field, entry[key]) for key, field in OVERRIDES.items() if entry.get(key)]
    if not changes:
        return objects
    out = []
    for r, o in enumerate(objects):
        new = {field: values[str(r)] for field, values in changes if str(r) in values}
        out.append(dict(o, **new) if new else o)
    return out


def content_id(detectors: dict[str, dict[str, Any]], objects: Iterable[tuple[str, str]]) -> str:
    """The database id: a hash of the detectors and the live objects' (name, content sha256).
    ``detectors``: the database's detector settings; ``objects``: the live objects' (name, content sha256) pairs."""
    h = hashlib.sha256()
    h.update(repr(sorted((k, sorted(v.items())) for k, v in detectors.items())).encode())
    for name, digest in sorted(objects):
        h.update(f"{name}\0{digest}\0".encode())
    return h.hexdigest()[:16]


@contextlib.contextmanager
def file_lock(path: Path, blocking: bool = True) -> Iterator[bool]:
    """An exclusive advisory lock on ``path`` (one writer per database at a time; a no-op without fcntl).

    Yields True when the lock is held; with ``blocking=False`` it yields False at once if another process
    holds it.
    ``blocking``: wait for the lock (False: yield False at once when another process holds it).
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield True
        return
    with open(path, "a+b") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def stat_signature(path: Path) -> tuple[int, int, int] | None:
    """Changes whenever the manifest is replaced (a new inode) or rewritten; None when it does not exist."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def check_manifest(mpath: Path, manifest: dict[str, Any]) -> None:
    """Raise :class:`ModelDBError` naming ``mpath`` unless ``manifest`` is a readable current-schema manifest (an
    older schema's error names ``objrec db upgrade``)."""
    version = manifest.get("schema_version")
    if manifest.get("format") == FORMAT and isinstance(version, int) and version < OLDEST_READ_SCHEMA:
        layout = "one .npz per object" if version == 1 else "uncompacted shards"
        raise ModelDBError(
            f"{mpath}: schema {version} model database ({layout}), which this objrec no longer reads; convert it "
            f"once, in place, with `objrec db upgrade --db {mpath.parent}` (or objrec.ModelDB.upgrade)"
        )
    check_manifest_header(mpath, manifest, FORMAT, SCHEMA_VERSION, "model database", ModelDBError)
    shards = manifest.get("shards")
    if not isinstance(shards, list) or not isinstance(manifest.get("detectors"), dict):
        raise ModelDBError(f"{mpath}: manifest lacks 'shards' list or 'detectors' table")
    for s in shards:
        ok = (
            isinstance(s, dict)
            and isinstance(s.get("id"), str)
            and SHARD_ID_RE.match(s["id"])
            and isinstance(s.get("n_objects"), int)
            and isinstance(s.get("files"), dict)
            and isinstance(s.get("removed", []), list)
            and isinstance(s.get("renamed", {}), dict)
            and all(isinstance(v, str) and NAME_RE.match(v) for v in s.get("renamed", {}).values())
            and isinstance(s.get("width_m", {}), dict)
        )
        if not ok:
            raise ModelDBError(f"{mpath}: malformed shard entry {s!r}")
        try:
            for v in s.get("width_m", {}).values():
                check_width_m(v)
        except ValueError as exc:
            raise ModelDBError(f"{mpath}: shard {s['id']}: {exc}") from None
    for key in ("next_seq", "next_shard"):
        if not isinstance(manifest.get(key), int):
            raise ModelDBError(f"{mpath}: manifest lacks the integer {key!r}")
