"""The retrieval index saved with a model database: a FAISS inverted file in segments sharing one trained codec.

Layout of ``DB/index/<kind>/``::

    index.json                     the commit point: format, schema, kind, parameters, the codec file, the
                                   segments (file and sha256 of each), tombstoned labels, the database id
    codec-<sha>.faiss              the trained, empty index (coarse quantiser and code books)
    seg-<sha>.faiss                one segment: the codes of some objects, each descriptor labelled by its object
    seg-<sha>.json                 the segment's objects: record keys, labels and content sha256

Each commit of the database writes one new segment with the objects it added (and tombstones the labels of
the objects it removed or replaced), so a bulk enrolment writes each code a bounded number of times rather
than rewriting the index per commit. Segments are merged log-structured (:mod:`objrec.modeldb.index_update`)
so that only a few exist. All segments share the codec: their inverted lists are stacked into one index
(FAISS ``HStackInvertedLists``), which answers exactly as a single index holding the same codes in the same
order, and tombstoned labels are filtered out during the search (an ``IDSelector``). Segment files are read
back memory-mapped (``faiss.IO_FLAG_MMAP``): anonymous memory holds the codec, not the codes.

The codes are product-quantised (Jégou et al. 2011) by default: a descriptor costs ``pq_bytes`` bytes plus
FAISS's 8-byte label instead of 64 or 128 bytes of scalar codes; a vote only needs one of an object's
descriptors among a query descriptor's ``k`` approximate neighbours, not the exact nearest one.

References
----------
.. [1] H. Jégou, M. Douze, C. Schmid, "Product quantization for nearest neighbor search", IEEE TPAMI 33(1),
   2011. DOI: 10.1109/TPAMI.2010.57
.. [2] J. Johnson, M. Douze, H. Jégou, "Billion-scale similarity search with GPUs", IEEE Trans. Big Data,
   2019. DOI: 10.1109/TBDATA.2019.2921572
.. [3] P. O'Neil, E. Cheng, D. Gawlick, E. O'Neil, "The log-structured merge-tree (LSM-tree)", Acta
   Informatica 33(4), 1996. DOI: 10.1007/s002360050048
.. [4] D. G. Lowe, "Distinctive image features from scale-invariant keypoints", IJCV 60(2), 2004.
   DOI: 10.1023/B:VISI.0000029664.99615.94
.. [5] Y. A. Malkov, D. A. Yashunin, "Efficient and robust approximate nearest neighbor search using
   hierarchical navigable small world graphs", IEEE TPAMI 42(4), 2020. DOI: 10.1109/TPAMI.2018.2889473
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from objrec.fileio import FileFormatError, atomic_write_json, atomic_write_via, file_sha256_once, read_json
from objrec.modeldb.index_files import (
    MANIFEST,
    REINDEX_HINT,
    BackgroundCheck,
    RetrievalIndexError,
    StaleIndexError,
    faiss_module,
    manifest_header,
    read_faiss_index,
)

__all__ = [
    "DatabaseIndex",
    "RetrievalParams",
    "Segment",
    "new_codec",
    "n_lists_for",
    "FORMAT",
    "SCHEMA_VERSION",
    "IVF_MIN_DESCRIPTORS",
    "TRAIN_PER_LIST",
    "TRAIN_MAX",
    "index_folder",
]

FORMAT = "objrec-retrieval-index"
#: Schema 3: segments sharing a codec. Older (single-file) indexes are stale: ``objrec db reindex`` rebuilds them.
SCHEMA_VERSION = 3
#: Below this many descriptors the index is exact (a flat scan); an inverted file would not pay off.
IVF_MIN_DESCRIPTORS = 20_000
#: Training points per inverted list (FAISS's k-means warns below 39) and k-means iterations: the cells
#: only need to spread the descriptors evenly, and training cost is points x lists x iterations.
TRAIN_PER_LIST = 50
TRAIN_ITERATIONS = 10
#: Training points for product-quantiser code books: 256 centroids per sub-quantiser, 40 points each.
PQ_TRAIN = 256 * 40
#: At most this many training points (512 MB as float32 SIFT), so that training stays in bounded memory
#: whatever the catalogue (past about 20,000 lists each is trained on fewer than TRAIN_PER_LIST points).
TRAIN_MAX = 1_000_000


@dataclass(frozen=True)
class RetrievalParams:
    """How an index is built and searched.

    Attributes
    ----------
    k : int
        Nearest neighbours per query descriptor; each object among them gets one vote.
    n_lists : int or None
        Inverted lists (cells); None: ``lists_per_sqrt`` times the square root of the descriptors. A query
        costs the coarse search plus the scan of ``n_probe / n_lists`` of the codes; with a flat coarse
        quantiser the sum is smallest when both grow as the square root of the descriptors, and with an HNSW
        one (``hnsw_lists``) more lists cost little more than their training.
    lists_per_sqrt : float
        See ``n_lists``. Four: on the tune split of the SMVS phone photos against a 2,026-object catalogue it
        is the finest division tried whose shortlists at the recognizer's probes lost nothing (eight lost);
        larger catalogues have more codes per list (the square root of the descriptors over four), so the
        probed cells hold more of each query's neighbours, not fewer. Training is points x lists, so a reindex
        grows as the number of descriptors to the power 1.5.
    n_probe : int
        Cells visited per query descriptor (a search may override it).
    exact_below : int
        Indexes of fewer descriptors are exact.
    seed : int
        Seed of the k-means that places the cells and of the training sample.
    codes : {"pq", "sq"}
        Product-quantised codes of ``pq_bytes`` bytes, or scalar codes (SIFT's integers 0-255 exactly as
        8-bit codes, SURF as float16).
    pq_bytes : int
        Bytes per product-quantised code (sub-quantisers of 256 centroids); must divide the dimension. Sixteen
        (4 dimensions of SURF, 8 of SIFT per sub-quantiser): on the tune split of the SMVS phone photos
        against a 2,026-object catalogue, 32-byte codes shortlisted no better and cost twice the bytes and scan.
    max_per_object : int or None
        At most this many descriptors of each record are indexed, the strongest by detector response (a
        database index only; the matcher still uses all stored ones). None: all. The strongest responses are
        the most repeatable keypoints (Lowe 2004), so they carry most of an object's votes; the cap bounds the
        index's bytes and scan per object whatever the model image's size. The default is the smallest of
        the caps tried that kept shortlist recall on that tune split at the recognizer's probes.
    hnsw_lists : int
        From this many lists on, the coarse quantiser is an HNSW graph over the cell centres (32 links) rather
        than a flat scan of them: the coarse search then costs about the logarithm of the lists (a graph walk
        computes some hundreds of distances, a flat scan one per list), so the lists can grow with the
        catalogue and keep the codes scanned per query small (Malkov & Yashunin 2020).
    """

    k: int = 5
    n_lists: int | None = None
    lists_per_sqrt: float = 4.0
    n_probe: int = 16
    exact_below: int = IVF_MIN_DESCRIPTORS
    seed: int = 1234
    codes: str = "pq"
    pq_bytes: int = 16
    max_per_object: int | None = 300
    hnsw_lists: int = 1024

    def __post_init__(self) -> None:
        if self.codes not in ("pq", "sq"):
            raise ValueError(f"codes: expected 'pq' or 'sq', got {self.codes!r}")
        if self.max_per_object is not None and self.max_per_object < 1:
            raise ValueError(f"max_per_object: expected a positive integer or None, got {self.max_per_object}")

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


def index_folder(db_path: str | os.PathLike, kind: str) -> Path:
    """Where the index of ``kind`` of the database at ``db_path`` lives."""
    return Path(db_path) / "index" / kind


def _integral_u8(x: np.ndarray) -> bool:
    return bool(len(x)) and float(x.min()) >= 0 and float(x.max()) <= 255 and np.array_equal(np.rint(x), x)


def n_lists_for(n: int, params: RetrievalParams) -> int:
    """Inverted lists for ``n`` descriptors (0: an exact index).
    ``params``: the index's settings (its ``exact_below`` and list sizes)."""
    if n < params.exact_below:
        return 0
    n_lists = params.n_lists or int(params.lists_per_sqrt * np.sqrt(n))
    return int(max(1, min(n_lists, n // TRAIN_PER_LIST)))


def new_codec(train: np.ndarray, kind: str, params: RetrievalParams, n: int | None = None) -> tuple[Any, str]:
    """An empty FAISS index for ``n`` descriptors (default: ``len(train)``) like ``train``, trained on (a
    sample of) ``train`` when it is an inverted file; and the name of its codes.

    An exact index (fewer than ``exact_below`` descriptors) holds scalar codes (SIFT's integers exactly as
    8-bit codes, SURF as float16). An inverted file holds product-quantised codes of the residuals from the
    cell centres (``codes="pq"``) or the same scalar codes of the descriptors themselves (``"sq"``: 8-bit
    direct codes are exact only for integers 0-255, which residuals are not).
    ``kind``: the descriptor kind ("sift" or "surf"); ``params``: the index's settings (its lists, codes and training
    sample).
    """
    faiss = faiss_module()
    n = len(train) if n is None else int(n)
    d = train.shape[1]
    direct = kind == "sift" and _integral_u8(train[:100_000])
    qt = faiss.ScalarQuantizer.QT_8bit_direct if direct else faiss.ScalarQuantizer.QT_fp16
    sq_codes = "8bit_direct" if direct else "fp16"
    n_lists = n_lists_for(n, params)
    if not n_lists:
        return faiss.IndexIDMap(faiss.IndexScalarQuantizer(d, qt, faiss.METRIC_L2)), sq_codes
    hnsw = n_lists >= params.hnsw_lists
    quantizer = faiss.IndexHNSWFlat(d, 32) if hnsw else faiss.IndexFlatL2(d)
    # Code books of 256 centroids per sub-quantiser need PQ_TRAIN points; fewer descriptors keep scalar codes.
    if params.codes == "pq" and len(train) >= PQ_TRAIN:
        if d % params.pq_bytes:
            raise ValueError(f"pq_bytes: {params.pq_bytes} does not divide the descriptors' dimension {d}")
        index = faiss.IndexIVFPQ(quantizer, d, n_lists, int(params.pq_bytes), 8)
        codes = f"pq{params.pq_bytes}"
        index.pq.cp.niter = TRAIN_ITERATIONS * 2
    else:
        index = faiss.IndexIVFScalarQuantizer(quantizer, d, n_lists, qt, faiss.METRIC_L2)
        index.by_residual = False
        codes = sq_codes
    index.cp.seed = int(params.seed)
    index.cp.niter = TRAIN_ITERATIONS
    if hnsw:  # k-means assigns with an exact scan; the graph is built over the final centres
        index.clustering_index = faiss.IndexFlatL2(d)
    want = min(max(n_lists * TRAIN_PER_LIST, PQ_TRAIN if codes.startswith("pq") else 0), TRAIN_MAX)
    rng = np.random.default_rng(params.seed)
    m = len(train)
    sample = train if m <= want else train[np.sort(rng.choice(m, want, replace=False))]
    index.train(np.ascontiguousarray(sample, dtype=np.float32))
    index.nprobe = int(params.n_probe)
    return index, codes


@dataclass
class Segment:
    """One segment of a database index: its file, its objects and (once read) its FAISS index.

    Attributes
    ----------
    file, sha256 : str
        The FAISS file (in the index folder) and its hash.
    table, table_sha256 : str
        The JSON file of its objects and its hash.
    n : int
        Codes it holds.
    keys, labels, shas
        Its records, their labels and content hashes, in the order their codes were added.
    index : FAISS index or None
        Read memory-mapped on load.
    """

    file: str
    sha256: str
    table: str
    table_sha256: str
    n: int
    keys: list[str] = field(default_factory=list)
    labels: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    shas: list[str] = field(default_factory=list)
    index: Any = None

    def entry(self) -> dict[str, Any]:
        """Its entry in the index manifest."""
        return {"file": self.file, "sha256": self.sha256, "table": self.table, "table_sha256": self.table_sha256}

    @classmethod
    def write(cls, folder: Path, index: Any, keys: list[str], labels: np.ndarray, shas: list[str]) -> Segment:
        """Write ``index`` (the codes) and its object table into ``folder`` atomically, each file named by its
        hash; returns the segment, its index kept as given.
        ``folder``: the index folder; ``keys``: the record keys the segment holds; ``labels``: their labels, in the same
        order; ``shas``: their content sha256."""
        faiss = faiss_module()
        final, digest = atomic_write_via(
            folder, lambda tmp: faiss.write_index(index, tmp), lambda digest: f"seg-{digest[:16]}.faiss"
        )
        doc = {"keys": list(keys), "labels": [int(x) for x in labels], "sha256": list(shas), "n": int(index.ntotal)}
        data = json.dumps(doc).encode()
        tfinal, tdigest = atomic_write_via(
            folder, lambda tmp: Path(tmp).write_bytes(data), lambda digest: f"seg-{digest[:16]}.json"
        )
        labels = np.asarray(labels, np.int64)
        return cls(final.name, digest, tfinal.name, tdigest, int(index.ntotal), list(keys), labels, list(shas), index)

    @classmethod
    def read(cls, folder: Path, entry: dict[str, Any], mmap: bool = True, check_codes: bool = True) -> Segment:
        """A segment named by a manifest entry, both files checked against their sha256 (the codes' file only
        with ``check_codes``: see :meth:`DatabaseIndex.load`).
        ``folder``: the index folder; ``entry``: the manifest's entry for the segment; with ``mmap``, its codes stay in
        the file, mapped read-only."""
        paths = []
        for name, sha in ((entry.get("file"), entry.get("sha256")), (entry.get("table"), entry.get("table_sha256"))):
            path = folder / str(name)
            if not path.exists():
                raise RetrievalIndexError(f"{path}: index segment not found")
            if (check_codes or name == entry.get("table")) and file_sha256_once(path) != sha:
                raise RetrievalIndexError(f"{path}: sha256 mismatch (file damaged or modified after it was written)")
            paths.append(path)
        try:
            doc = read_json(paths[1], "index segment table")
        except FileFormatError as exc:
            raise RetrievalIndexError(str(exc)) from None
        index, _ = read_faiss_index(paths[0], mmap)
        labels = np.asarray(doc["labels"], np.int64)
        seg = cls(entry["file"], entry["sha256"], entry["table"], entry["table_sha256"], int(doc["n"]))
        seg.keys, seg.labels, seg.shas, seg.index = list(doc["keys"]), labels, list(doc["sha256"]), index
        return seg


class DatabaseIndex:
    """The segmented retrieval index of one detector kind of a model database (see the module notes).

    Read with :meth:`load`; kept current by :mod:`objrec.modeldb.index_update` as the database commits.
    :meth:`search` answers each query descriptor's ``k`` approximate nearest neighbours as object labels.

    Parameters
    ----------
    folder : Path
        ``DB/index/<kind>``.
    kind : str
    params : RetrievalParams
    codec : FAISS index
        The trained, empty index every segment was filled from.
    codes : str
        Name of the codes (``"pq16"``, ``"8bit_direct"``, ``"fp16"``).
    trained_for : int
        Codes the codec was trained for (its lists were sized for).

    Attributes
    ----------
    segments : list of Segment
    removed : set of int
        Tombstoned labels (objects removed or replaced), filtered from every search.
    next_label : int
    database_id : str or None
        The database content the index holds; None while an update is under way.
    building : bool
        True while a build (a reindex) is under way: a rerun with the same parameters continues it.
    codec_file, codec_sha256 : str
    """

    def __init__(self, folder: Path, kind: str, params: RetrievalParams, codec: Any, codes: str, trained_for: int):
        self.folder = Path(folder)
        self.kind = kind
        self.params = params
        self.codec = codec
        self.codes = codes
        self.trained_for = int(trained_for)
        self.segments: list[Segment] = []
        self.removed: set[int] = set()
        self.next_label = 0
        self.database_id: str | None = None
        self.building = False
        self.codec_file = ""
        self.codec_sha256 = ""
        #: The check of the segments' codes still under way, for an index loaded with ``check="background"``.
        self.check: BackgroundCheck | None = None
        self._view: Any = None

    @property
    def dim(self) -> int:
        return int(self.codec.d)

    def __len__(self) -> int:
        """Codes held (tombstoned ones included until their segment is rewritten)."""
        return sum(s.n for s in self.segments)

    def table(self) -> dict[str, tuple[int, str]]:
        """Live records: key -> (label, content sha256)."""
        out = {}
        for s in self.segments:
            for key, lab, sha in zip(s.keys, s.labels.tolist(), s.shas, strict=True):
                if lab not in self.removed:
                    out[key] = (lab, sha)
        return out

    # -- search ---------------------------------------------------------------------------------------
    def _stacked(self) -> Any:
        """One FAISS index over every segment's lists (built once per state)."""
        if self._view is None:
            faiss = faiss_module()
            segs = [s for s in self.segments if s.n]
            # Tombstoned labels are skipped during the scan (the selector is kept with the view it filters).
            sel = None
            if self.removed:
                sel = faiss.IDSelectorNot(faiss.IDSelectorBatch(np.fromiter(self.removed, np.int64)))
            if len(segs) == 1:
                self._view = (segs[0].index, None, None, sel)
            else:
                vec = faiss.InvertedListsPtrVector()
                for s in segs:
                    vec.push_back(s.index.invlists)
                stacked = faiss.HStackInvertedLists(vec.size(), vec.data())
                view = faiss.clone_index(self.codec)
                view.replace_invlists(stacked, False)
                view.ntotal = sum(s.n for s in segs)
                self._view = (view, stacked, vec, sel)
        return self._view[0]

    def search(self, query: np.ndarray, n_probe: int | None = None) -> np.ndarray:
        """Labels (N, k) of each query descriptor's ``k`` approximate nearest neighbours among the live codes
        (-1 where fewer exist).
        ``query``: (N, D) float32 descriptors; ``n_probe``: inverted lists probed (default: the index's ``n_probe``)."""
        if self.check is not None:
            self.check.raise_if_damaged()
        faiss = faiss_module()
        q = np.ascontiguousarray(query, dtype=np.float32)
        k = int(self.params.k)
        if not len(q) or not len(self):
            return np.full((len(q), k), -1, np.int64)
        view = self._stacked()
        sel = self._view[3]
        probe = int(self.params.n_probe if n_probe is None else n_probe)
        params = faiss.SearchParametersIVF(nprobe=probe, sel=sel) if sel else faiss.SearchParametersIVF(nprobe=probe)
        _, labels = view.search(q, k, params=params)
        return labels

    # -- files ----------------------------------------------------------------------------------------
    def save_manifest(self) -> Path:
        """Write ``index.json`` (the commit point) atomically, then delete files it no longer names."""
        m = {
            **manifest_header(FORMAT, SCHEMA_VERSION, self),
            "codec": {"file": self.codec_file, "sha256": self.codec_sha256},
            "segments": [s.entry() for s in self.segments],
            "removed": sorted(int(x) for x in self.removed),
            "next_label": int(self.next_label),
            "building": bool(self.building),
        }
        atomic_write_json(self.folder / MANIFEST, m)
        keep = {self.codec_file, MANIFEST} | {s.file for s in self.segments} | {s.table for s in self.segments}
        for old in self.folder.iterdir():
            if old.is_file() and old.name not in keep and not old.name.endswith(".tmp"):
                old.unlink(missing_ok=True)
        self._view = None
        return self.folder / MANIFEST

    def save_codec(self) -> None:
        """Write the codec file (atomically, named by its hash)."""
        faiss = faiss_module()
        final, digest = atomic_write_via(
            self.folder, lambda tmp: faiss.write_index(self.codec, tmp), lambda digest: f"codec-{digest[:16]}.faiss"
        )
        self.codec_file, self.codec_sha256 = final.name, digest

    @classmethod
    def load(
        cls, folder: str | os.PathLike, database_id: str | None = None, mmap: bool = True, check: str = "now"
    ) -> DatabaseIndex:
        """Read the index in ``folder``; segments memory-mapped with ``mmap``; never unpickles.

        Every file is checked against its sha256, all before it returns with ``check`` "now". With ``check``
        "background" the segments' codes (most of the bytes) are checked in a low-priority thread instead
        (:class:`BackgroundCheck`), while the index answers searches: a damaged one is raised by a search once
        found (what a recognizer opens with).

        Raises
        ------
        StaleIndexError
            When the index is missing, of an older schema, or (``database_id`` given) of other content; the
            message names ``objrec db reindex``.
        RetrievalIndexError
            Naming a file that is damaged or of another format.
        """
        if check not in ("now", "background"):
            raise ValueError(f"check: expected 'now' or 'background', got {check!r}")
        folder = Path(folder)
        hint = REINDEX_HINT.format(db=folder.parent.parent)
        if not (folder / MANIFEST).exists():
            raise StaleIndexError(f"{folder / MANIFEST}: no retrieval index (a database written without one); {hint}")
        try:
            m = read_json(folder / MANIFEST, "retrieval index manifest")
        except FileFormatError as exc:
            raise RetrievalIndexError(f"{exc}; {hint}") from None
        if m.get("format") != FORMAT:
            raise RetrievalIndexError(f"{folder / MANIFEST}: not an objrec retrieval index; {hint}")
        version = m.get("schema_version")
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise RetrievalIndexError(f"{folder / MANIFEST}: schema version {version!r} is newer than this objrec")
        if version < SCHEMA_VERSION or "segments" not in m:
            raise StaleIndexError(f"{folder / MANIFEST}: an index of an older version (schema {version}); {hint}")
        if database_id is not None and m.get("database_id") != database_id:
            raise StaleIndexError(
                f"{folder / MANIFEST}: built for database {m.get('database_id')}, not {database_id} (an interrupted "
                f"enrolment or a change made without index support); {hint}"
            )
        try:
            out = cls._from_manifest(folder, m, mmap, check == "now")
        except RetrievalIndexError as exc:
            raise RetrievalIndexError(f"{exc}; {hint}") from None
        if check != "now":
            files = [(folder / s.file, s.sha256) for s in out.segments]
            out.check = BackgroundCheck(files, hint)
        return out

    @classmethod
    def _from_manifest(cls, folder: Path, m: dict[str, Any], mmap: bool, check_codes: bool) -> DatabaseIndex:
        codec_path = folder / str(m["codec"]["file"])
        if not codec_path.exists() or file_sha256_once(codec_path) != m["codec"]["sha256"]:
            raise RetrievalIndexError(f"{codec_path}: codec missing or damaged (sha256 mismatch)")
        codec, _ = read_faiss_index(codec_path, False)
        out = cls(folder, m["kind"], RetrievalParams(**m["params"]), codec, m["codes"], m["trained_for"])
        out.codec_file, out.codec_sha256 = m["codec"]["file"], m["codec"]["sha256"]
        out.segments = [Segment.read(folder, e, mmap, check_codes) for e in m["segments"]]
        out.removed = {int(x) for x in m.get("removed", [])}
        out.next_label = int(m["next_label"])
        out.database_id = m.get("database_id")
        out.building = bool(m.get("building", False))
        return out
