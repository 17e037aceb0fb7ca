"""Reading a model database: the state of one manifest, shard arrays memory-mapped and checked against their
hashes, objects' features, images and thumbnails sliced out of them.

Layout of a database directory in :mod:`objrec.modeldb`; writes in :mod:`objrec.modeldb.store`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import numpy as np

from objrec.fileio import FileFormatError, file_sha256, read_json
from objrec.imageio import decode_image, to_bgr
from objrec.modeldb.preparation import (
    content_sha256,
    decode_descriptors,
    keypoint_columns,
    thumb_sha256,
    thumbnail,
)
from objrec.modeldb.records import (
    KEYPOINT_ROW_TYPES,
    MANIFEST,
    SHARDS,
    THUMBS,
    VIEW_SEP,
    ModelDBError,
    ModelObject,
    ObjectInfo,
    split_key,
)
from objrec.modeldb.shards import Shard, check_manifest, read_table, stat_signature
from objrec.modeldb.tables import TABLE_FILES
from objrec.types import Features

__all__ = [
    "ShardReader",
    "live_columns",
    "descriptor_totals",
    "stack_descriptors",
    "descriptor_table",
    "descriptor_spans",
    "iter_descriptor_chunks",
    "sample_descriptors",
]


def _will_need(arr: np.ndarray, a: int, b: int) -> None:
    """Advise the kernel that rows ``a:b`` of the memory-mapped ``arr`` will be read soon (it starts reading them
    and returns at once); nothing for an array not mapped from a file or where ``posix_fadvise`` is missing."""
    a, b = int(a), int(b)
    if b <= a or not hasattr(os, "posix_fadvise") or not isinstance(arr, np.memmap) or arr.filename is None:
        return
    step = arr.strides[0]
    fd = os.open(arr.filename, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, int(arr.offset) + a * step, (b - a) * step, os.POSIX_FADV_WILLNEED)
    finally:
        os.close(fd)


def _in_view_order(keys: list[str]) -> list[str]:
    """Record keys of one object, sorted by view number."""
    return sorted(keys, key=lambda k: split_key(k)[1])


class ShardReader:
    """A model database's shards as one manifest names them, read through memory maps.

    Parameters
    ----------
    path : Path
        The database directory.
    manifest : dict
        The manifest this state comes from.
    shards : list of Shard
        The shards it names, in order.

    Attributes
    ----------
    path : Path
    manifest : dict
        The current manifest (read only: a commit publishes a new one).
    shards : list of Shard
    live : dict of str -> (int, int)
        Each live record's shard index and row, in enrolment order, by record key (an object's view 0 under
        its name, view ``k`` under ``NAME#k``: :func:`~objrec.modeldb.records.view_key`).
    views : dict of str -> list of str
        Each object's live record keys, views in ascending order; objects in enrolment order.
    mapped : dict
        ``(shard id, file name) -> array`` of the files mapped so far.
    hashed : set
        ``(shard id, file name)`` of the files whose sha256 was checked whole.
    """

    #: Objects whose features stay cached after :meth:`cached_object` (the rest are re-read from the maps).
    CACHE_OBJECTS = 64
    #: Thumbnails made from images (for shards written without thumbnails) kept at once.
    CACHE_THUMBS = 64

    def __init__(self, path: Path, manifest: dict[str, Any], shards: list[Shard]) -> None:
        self.path = Path(path)
        self.mapped: dict[tuple[str, str], np.ndarray] = {}
        self.hashed: set[tuple[str, str]] = set()
        # Objects (shard, row) whose content sha256 was checked; (shard, ~row) for their thumbnails.
        self._verified: set[tuple[str, int]] = set()
        self._thumbs: dict[str, np.ndarray] = {}  # made from images, for shards written without thumbnails
        self._objects: dict[tuple[str, bool], ModelObject] = {}
        self._infos: list[ObjectInfo] | None = None
        self.set_state(manifest, shards)

    # -- construction and state ---------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike) -> Self:
        """The state of the database at ``path``; errors name the file that is missing, damaged or too new."""
        path = Path(path)
        mpath = path / MANIFEST
        if not path.exists():
            raise ModelDBError(f"{path}: no such model database")
        if not mpath.exists():
            raise ModelDBError(f"{mpath}: not found ({path} is not an objrec model database)")
        try:
            manifest = read_json(mpath)
        except FileFormatError as exc:
            raise ModelDBError(str(exc)) from None
        check_manifest(mpath, manifest)
        kinds = list(manifest["detectors"])
        shards = [read_table(path / SHARDS / e["id"], e, kinds) for e in manifest["shards"]]
        return cls(path, manifest, shards)

    def set_state(self, manifest: dict[str, Any], shards: list[Shard]) -> None:
        """Take ``manifest`` and its ``shards`` as the current state (ModelDBError if a name is live twice)."""
        live = []
        for si, sh in enumerate(shards):
            dead = sh.dead
            live += [
                (seq, name, si, r)
                for r, (seq, name) in enumerate(zip(sh.column("seq"), sh.column("name"), strict=True))
                if r not in dead
            ]
        live.sort()
        index = {name: (si, r) for _, name, si, r in live}
        if len(index) != len(live):
            raise ModelDBError(f"{self.path / MANIFEST}: an object name is live in two shards")
        self.manifest = manifest
        self.shards = shards
        self.live = index
        views: dict[str, list[str]] = {}
        for key in index:
            views.setdefault(key.partition(VIEW_SEP)[0], []).append(key)
        # (most objects have one view: only the others are sorted)
        self.views = {n: keys if len(keys) == 1 else _in_view_order(keys) for n, keys in views.items()}
        ids = {s.id for s in shards}
        self.mapped = {k: v for k, v in self.mapped.items() if k[0] in ids}
        self._thumbs.clear()
        self._objects.clear()
        self._infos = None
        self._signature = stat_signature(self.path / MANIFEST)

    def refresh(self) -> bool:
        """Take the current manifest if another process committed since this state was read."""
        if stat_signature(self.path / MANIFEST) == self._signature:
            return False
        fresh = type(self).open(self.path)
        self.set_state(fresh.manifest, fresh.shards)
        return True

    def locate(self, name: str) -> tuple[Shard, int]:
        """The shard and row of the live record ``name`` (a record key, or an object's name for its first view;
        KeyError naming the enrolled objects if absent)."""
        try:
            si, row = self.live[name] if name in self.live else self.live[self.views[name][0]]
        except (KeyError, TypeError):
            names = list(self.views)
            shown = names[:20]
            known = ", ".join(shown) + (f", ... ({len(names)} in all)" if len(names) > len(shown) else "")
            raise KeyError(f"unknown object {name!r} in {self.path} (enrolled: {known or 'none'})") from None
        return self.shards[si], row

    # -- reads --------------------------------------------------------------------------------------
    def array(self, shard: Shard, fname: str, check: bool = True) -> np.ndarray:
        """A shard file, memory-mapped.

        With ``check`` its sha256 is checked the first time this store touches it. Reads of single
        objects pass ``check=False`` and check the object's own rows instead (:meth:`verify_object`),
        which costs in proportion to what is read; a file that cannot even be mapped is then hashed, so
        the error names it as damaged.
        ``shard``: the shard; ``fname``: the file's name in its folder.
        """
        key = (shard.id, fname)
        arr = self.mapped.get(key)
        if arr is not None and (not check or key in self.hashed):
            return arr
        path = self.path / SHARDS / shard.id / fname
        if shard.entry["files"].get(fname) is None:
            raise ModelDBError(f"{self.path / MANIFEST}: shard {shard.id} lists no file {fname}")
        if not path.exists():
            raise ModelDBError(f"{path}: array file not found" + self._changed_note())
        if check:
            self.check_file(shard, fname)
        if arr is None:
            try:
                arr = np.load(path, mmap_mode="r", allow_pickle=False)
            except (ValueError, OSError, EOFError) as exc:
                self.check_file(shard, fname)
                raise ModelDBError(f"{path}: not a readable .npy array file ({type(exc).__name__}: {exc})") from None
            kind = "image" if fname == "images.npy" else fname.split(".")[0]
            rows = shard.n if fname == THUMBS else shard.offsets[kind][-1]
            if arr.shape[0] != rows or (fname.endswith("keypoints.npy") and arr.dtype not in KEYPOINT_ROW_TYPES):
                self.check_file(shard, fname)
                raise ModelDBError(f"{path}: shape {arr.shape} / dtype {arr.dtype} disagree with the object table")
            self.mapped[key] = arr
        return arr

    def check_file(self, shard: Shard, fname: str) -> None:
        """The shard file's sha256 against the manifest (once per store); ModelDBError naming it if not.
        ``shard``: the shard; ``fname``: the file's name in its folder."""
        key = (shard.id, fname)
        if key in self.hashed:
            return
        path = self.path / SHARDS / shard.id / fname
        if file_sha256(path) != shard.entry["files"].get(fname):
            raise ModelDBError(f"{path}: sha256 mismatch (file damaged or modified after it was written)")
        self.hashed.add(key)

    def verify_object(self, shard: Shard, row: int) -> None:
        """An object's rows against its content sha256 (image bytes, keypoints and descriptors of every kind),
        once per store. On a mismatch the shard's files are hashed whole: a damaged one raises naming the
        file; when all match the manifest the rows are as written and the object is accepted.
        ``shard``: the object's shard; ``row``: its row in the shard's object table."""
        if (shard.id, row) in self._verified:
            return
        kinds = sorted(self.manifest["detectors"])
        a, b = (int(x) for x in shard.offsets["image"][row : row + 2])
        image = self.array(shard, "images.npy", check=False)[a:b]
        kps, descs = {}, {}
        for kind in kinds:
            lo, hi = (int(x) for x in shard.offsets[kind][row : row + 2])
            kps[kind] = self.array(shard, f"{kind}.keypoints.npy", check=False)[lo:hi]
            descs[kind] = self.array(shard, f"{kind}.descriptors.npy", check=False)[lo:hi]
        if content_sha256(image, kps, descs) != shard.column("sha256")[row]:
            for fname in sorted(shard.entry["files"]):
                if fname not in TABLE_FILES:
                    self.array(shard, fname, check=True)
        self._verified.add((shard.id, row))

    def read_ahead(self, name: str) -> None:
        """Ask the kernel to start reading the rows of the live record ``name`` into the page cache and return at
        once: its image bytes and the keypoints and descriptors of every kind, all of which its first read
        checks (:meth:`verify_object`). A read of it a little later then finds them in memory instead of waiting
        on the disk (``posix_fadvise(POSIX_FADV_WILLNEED)``; nothing where the platform lacks it)."""
        shard, row = self.locate(name)
        for fname, key in self._row_parts():
            _will_need(self.array(shard, fname, check=False), *shard.offsets[key][row : row + 2])

    def _row_parts(self) -> list[tuple[str, str]]:
        """The shard files a read of an object touches, each with its offsets key: the image bytes and every
        kind's keypoints and descriptors (all of which :meth:`verify_object` checks)."""
        parts = [("images.npy", "image")]
        for kind in sorted(self.manifest["detectors"]):
            parts += [(f"{kind}.keypoints.npy", kind), (f"{kind}.descriptors.npy", kind)]
        return parts

    def row_files(self) -> list[Path]:
        """The files a read of objects touches (:meth:`_row_parts`), shard by shard, of the shards that hold
        live objects."""
        held = sorted({si for si, _ in self.live.values()})
        return [
            self.path / SHARDS / self.shards[si].id / fname
            for si in held
            for fname, _ in self._row_parts()
            if self.shards[si].entry["files"].get(fname)
        ]

    def _changed_note(self) -> str:
        if stat_signature(self.path / MANIFEST) != self._signature:
            return " (another process changed the database since it was opened here; open it again)"
        return ""

    def features(self, shard: Shard, row: int, kind: str) -> Features:
        """The ``kind`` features of the object at ``row`` of ``shard`` (its rows checked first)."""
        self.verify_object(shard, row)
        a, b = (int(x) for x in shard.offsets[kind][row : row + 2])
        kp = self.array(shard, f"{kind}.keypoints.npy", check=False)[a:b]
        desc = decode_descriptors(kind, self.array(shard, f"{kind}.descriptors.npy", check=False)[a:b])
        columns = keypoint_columns(kp, int(shard.column("width")[row]), int(shard.column("height")[row]))
        # Features converts to its own dtypes: stored rows become float32 copies here.
        return Features(**columns, descriptors=desc, kind=kind)

    def infos(self) -> list[ObjectInfo]:
        """What the object table records about every live object, in enrolment order (no array is read)."""
        if self._infos is None:
            self._infos = [ObjectInfo.from_entry(self.shards[si].objects[row]) for si, row in self.live.values()]
        return list(self._infos)

    def cached_object(self, name: str, with_image: bool) -> ModelObject:
        """:meth:`model_object` with every kind, kept for the last :attr:`CACHE_OBJECTS` objects asked for.
        ``name``: a record key, or an object's name for its first view; ``with_image``: with the model image too."""
        key = (name, with_image)
        if key in self._objects:
            return self._objects[key]
        obj = self.model_object(name, list(self.manifest["detectors"]), with_image)
        if len(self._objects) >= self.CACHE_OBJECTS:
            self._objects.pop(next(iter(self._objects)))
        self._objects[key] = obj
        return obj

    def model_object(self, name: str, kinds: list[str], with_image: bool) -> ModelObject:
        """The live object ``name`` with its features of ``kinds`` (and its image with ``with_image``)."""
        sh, row = self.locate(name)
        o = [sh.column(f)[row] for f in ("name", "width", "height", "views", "view_table", "width_m", "shape")]
        feats = {kind: self.features(sh, row, kind) for kind in kinds}
        image = self.image(sh, row) if with_image else None
        return ModelObject(o[0], int(o[1]), int(o[2]), feats, image, o[3], o[4], o[5], o[6] or "flat")

    def image(self, shard: Shard, row: int) -> np.ndarray:
        """The decoded model image (BGR or gray uint8) of the object at ``row`` of ``shard``."""
        self.verify_object(shard, row)
        a, b = (int(x) for x in shard.offsets["image"][row : row + 2])
        data = np.array(self.array(shard, "images.npy", check=False)[a:b])
        img = decode_image(data, f"{self.path / SHARDS / shard.id / 'images.npy'} (object {shard.column('name')[row]})")
        return to_bgr(img) if img.ndim == 3 else img

    def thumbnail(self, shard: Shard, row: int) -> np.ndarray:
        """The stored thumbnail of the object at ``row`` of ``shard`` (made from its image when the shard was
        written without thumbnails)."""
        if THUMBS in shard.entry["files"]:
            thumb = np.array(self.array(shard, THUMBS, check=False)[row])
            if (shard.id, ~row) not in self._verified:  # the thumbnail's rows against its own sha256, once
                if thumb_sha256(thumb) != shard.column("thumb_sha256")[row]:
                    self.check_file(shard, THUMBS)  # a damaged file raises, naming it
                self._verified.add((shard.id, ~row))
            return thumb
        name = shard.column("name")[row]
        if name not in self._thumbs:
            if len(self._thumbs) >= self.CACHE_THUMBS:
                self._thumbs.pop(next(iter(self._thumbs)))
            self._thumbs[name] = thumbnail(self.image(shard, row))
        return self._thumbs[name]

    def verify(self) -> list[str]:
        """Check every file of every shard (sha256, array headers, row counts against the object tables);
        one line per problem, each naming the file."""
        problems = []
        for sh in self.shards:
            try:
                read_table(self.path / SHARDS / sh.id, sh.entry, self.manifest["detectors"]).table.details()
            except ModelDBError as exc:
                problems.append(str(exc))
                continue
            for fname in sh.entry["files"]:
                if fname in TABLE_FILES:
                    continue
                self.mapped.pop((sh.id, fname), None)  # forces the sha256 check again
                self.hashed.discard((sh.id, fname))
                try:
                    self.array(sh, fname)
                except ModelDBError as exc:
                    problems.append(str(exc))
        return problems


def stack_descriptors(kind: str, parts: list[np.ndarray]) -> np.ndarray:
    """``parts`` (rows of ``kind`` descriptors as stored) as one array of values
    (:func:`~objrec.modeldb.preparation.decode_descriptors`: uint8 for SIFT, float16 for SURF) when they share a
    dtype, else float32; an empty float32 array of the kind's width when there are none."""
    if not parts:
        return np.zeros((0, 128 if kind == "sift" else 64), np.float32)
    parts = [decode_descriptors(kind, p) for p in parts]
    dtypes = {p.dtype for p in parts}
    dtype = dtypes.pop() if len(dtypes) == 1 else np.dtype(np.float32)
    return np.concatenate([p.astype(dtype, copy=False) for p in parts])


def descriptor_table(reader: ShardReader, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Every live descriptor of ``kind`` in ``reader`` (decoded: uint8 for SIFT, float16 for SURF), and the index
    (in :attr:`ShardReader.live` order) of the object of each row (see :meth:`ModelDB.descriptor_table`)."""
    order = {n: i for i, n in enumerate(reader.live)}
    parts, owners = [], []
    for sh in reader.shards:
        dead = sh.dead
        rows = [r for r in range(sh.n) if r not in dead]
        if not rows:
            continue
        off = sh.offsets[kind]
        desc = reader.array(sh, f"{kind}.descriptors.npy")
        parts += [desc[off[r] : off[r + 1]] for r in rows]
        names = sh.column("name")
        owners += [np.full(off[r + 1] - off[r], order[names[r]], np.int64) for r in rows]
    if not parts:
        return stack_descriptors(kind, parts), np.zeros(0, np.int64)
    return stack_descriptors(kind, parts), np.concatenate(owners)


def descriptor_spans(
    reader: ShardReader, kind: str, names: list[str] | None = None
) -> Iterator[tuple[str, Shard, int, int]]:
    """``(record key, shard, first row, end row)`` of each live record's ``kind`` descriptors in ``reader``, in
    :attr:`ShardReader.live` order (or the order of ``names``)."""
    for name in reader.live if names is None else names:
        si, r = reader.live[name]
        sh = reader.shards[si]
        off = sh.offsets[kind]
        yield name, sh, int(off[r]), int(off[r + 1])


def iter_descriptor_chunks(
    reader: ShardReader, kind: str, max_rows: int, names: list[str] | None = None
) -> Iterator[tuple[np.ndarray, list[str], np.ndarray]]:
    """The live descriptors of ``kind`` in chunks of whole records, at most ``max_rows`` rows each (a record
    with more rows comes alone), copied out of the memory maps one chunk at a time.

    Parameters
    ----------
    reader : ShardReader
    kind : str
    max_rows : int
    names : list of str, optional
        Record keys to read, in this order (default: every live record, in :attr:`ShardReader.live` order).

    Yields
    ------
    descriptors : (N, D) ndarray
        Decoded from their stored form: uint8 for SIFT, float16 for SURF.
    keys : list of str
        The records of the chunk, in row order (records without ``kind`` descriptors included).
    counts : (len(keys),) int64
        Rows of each record.
    """
    max_rows = max(1, int(max_rows))
    parts: list[np.ndarray] = []
    keys: list[str] = []
    counts: list[int] = []
    rows = 0
    for name, sh, lo, hi in descriptor_spans(reader, kind, names):
        if keys and rows + hi - lo > max_rows:
            yield stack_descriptors(kind, parts), keys, np.asarray(counts, np.int64)
            parts, keys, counts, rows = [], [], [], 0
        parts.append(reader.array(sh, f"{kind}.descriptors.npy")[lo:hi])
        keys.append(name)
        counts.append(hi - lo)
        rows += hi - lo
    if keys:
        yield stack_descriptors(kind, parts), keys, np.asarray(counts, np.int64)


def sample_descriptors(reader: ShardReader, kind: str, n: int, seed: int = 0) -> np.ndarray:
    """``n`` live descriptors of ``kind`` drawn uniformly without replacement (all of them when there are
    fewer), decoded as :func:`stack_descriptors` does; only the drawn rows are read from the maps.
    ``reader``: the database's shard reader; ``seed``: seeds the draw."""
    spans = list(descriptor_spans(reader, kind))
    sizes = np.asarray([hi - lo for _, _, lo, hi in spans], np.int64)
    total = int(sizes.sum())
    if total <= n:
        return stack_descriptors(kind, [reader.array(sh, f"{kind}.descriptors.npy")[lo:hi] for _, sh, lo, hi in spans])
    picked = np.sort(np.random.default_rng(seed).choice(total, int(n), replace=False))
    starts = np.concatenate([[0], np.cumsum(sizes)])
    record = np.searchsorted(starts, picked, side="right") - 1
    parts = []
    for i in np.unique(record):
        _, sh, lo, _ = spans[i]
        rows = picked[record == i] - starts[i] + lo
        parts.append(reader.array(sh, f"{kind}.descriptors.npy")[rows])
    return stack_descriptors(kind, parts)


def live_columns(store: ShardReader, *fields: str) -> list[list[Any]]:
    """Fields of every live record's object-table entry in ``store`` (None where absent), one list per field,
    in enrolment order: what :meth:`ShardReader.infos` holds of them, without making an :class:`ObjectInfo`
    per record (nor reading a shard's details unless a field is one of them). The values are the table's own
    (not to be changed)."""
    out = []
    for f in fields:
        columns = [sh.column(f) for sh in store.shards]
        out.append([columns[si][row] for si, row in store.live.values()])
    return out


def descriptor_totals(store: ShardReader) -> dict[str, int]:
    """The live descriptors of each detector kind in ``store``, from its shards' row offsets (no object entry
    is read)."""
    totals = dict.fromkeys(store.manifest["detectors"], 0)
    for sh in store.shards:
        dead = sorted(sh.dead)
        for kind in totals:
            per_row = np.diff(sh.offsets[kind])
            totals[kind] += int(per_row.sum()) - int(per_row[dead].sum())
    return totals
