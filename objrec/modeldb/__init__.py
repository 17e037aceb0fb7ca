"""The model database: enrolled objects, their images and features, in memory-mappable ``.npy`` shards.

Layout of a database directory (schema 4; schema 3 differs only in its keypoint rows, which it keeps)::

    DB/manifest.json                     the commit point: schema and library version, database id,
                                         detectors, and the list of shards with the sha256 of each file
                                         (and the rows removed, renamed or given a width since)
    DB/shards/<id>/columns.json          the shard's object table by column (:mod:`objrec.modeldb.tables`):
                                         name, enrolment order, size, content sha256, feature counts, image
                                         bytes, physical width in metres (``width_m``, optional), views
    DB/shards/<id>/details.json          the rest of each object's entry, read when asked for: source (path
                                         and sha256 of the enrolled file), rating and its reasons
    DB/shards/<id>/images.npy            uint8: the objects' encoded model images, back to back (WebP, or
                                         the enrolled file's own bytes when smaller: :data:`MODEL_IMAGE_FORMAT`)
    DB/shards/<id>/thumbs.npy            uint8 (n, 64, 64): each model image in gray, resized to a square
                                         (the appearance check of verification reads these, not images.npy)
    DB/shards/<id>/<kind>.keypoints.npy  12-byte rows (xy, size, angle, response, octave, laplacian):
                                         :data:`KEYPOINT_DTYPE` (shards written under schema 3: the
                                         18-byte :data:`WIDE_KEYPOINT_DTYPE`)
    DB/shards/<id>/<kind>.descriptors.npy  one row per keypoint: uint8 for SIFT (OpenCV's descriptors are
                                         integers 0-255), int8 for SURF (unit vectors at a fixed scale, see
                                         :data:`DESCRIPTOR_STORAGE`), float32 otherwise

Each view stores at most :func:`~objrec.features.model.model_feature_cap` features of each kind from its image
(the strongest, spread over the image; synthesised views add theirs).

A shard holds the objects of one commit (one :meth:`ModelDB.enroll` or one batch of
:meth:`ModelDB.enroll_many`); it is immutable once the manifest names it. Removing or replacing an
object only marks its row dead in the manifest (a tombstone); a shard whose rows are mostly dead is
rewritten, and small shards are merged, so both stay cheap at any size. Opening reads the manifest and
the object tables' columns only; arrays are memory-mapped and each file's sha256 is checked the first time it
is touched (:meth:`ModelDB.verify` checks everything). Every write is atomic (temporary file, then
rename; the manifest is replaced last), and nothing is ever unpickled. The database id is a hash of the
content (detector parameters, object names and content hashes): a prefilter or retrieval index built
for another id is stale.

Databases of schema 1 (one ``.npz`` per object) and 2 (every feature, wider rows) are not read directly:
:meth:`ModelDB.upgrade` (``objrec db upgrade``) converts one in place, atomically. Schema 3 databases are read as
they are (their shards keep their wider keypoint rows, also when rewritten; what is enrolled into them is written in
the narrower rows, and any write marks the manifest schema 4); on one whose shards hold a row-oriented
``objects.json`` (written by earlier versions) the upgrade splits those tables, nothing else changed. A write that
finds too little free disk space, or fills the disk, raises :class:`~objrec.modeldb.shards.DiskFullError` and leaves
the database as it was.

Modules
-------
records
    The records a database holds and reports (:class:`ModelObject`, :class:`ObjectInfo`, ...), constants.
views, preparation
    An object made ready for storage: features of the model image (extracted by
    :func:`objrec.features.model.extract_model_features`) and of its synthesised views, stored arrays,
    thumbnail and content hash.
enrolment
    Bulk enrolment: parallel preparation, batched commits, resumption.
shards, tables, reader, store, maintenance
    The storage engine: shard files, object tables and the manifest, reads through memory maps, commits,
    compaction and garbage collection.
upgrade
    Conversion of a schema 1 or 2 database; the split of older row-oriented object tables.
index_files, index, index_update
    The retrieval index saved in ``DB/index/<kind>/``: segments of FAISS codes sharing one trained codec, kept
    current by every commit (:func:`~objrec.modeldb.index_update.keep_indexes_current`) and rebuilt by
    ``objrec db reindex``; :mod:`objrec.matching.retrieval` votes over it.
database
    :class:`ModelDB`, the read and write API over the storage engine.
"""

from objrec.features.model import extract_model_features
from objrec.modeldb.database import ModelDB
from objrec.modeldb.maintenance import MAX_SMALL_SHARDS
from objrec.modeldb.preparation import THUMB_SIZE, thumbnail
from objrec.modeldb.records import (
    DEFAULT_DETECTORS,
    DESCRIPTOR_STORAGE,
    KEYPOINT_DTYPE,
    MODEL_IMAGE_FORMAT,
    SCHEMA_VERSION,
    WIDE_KEYPOINT_DTYPE,
    EnrollFailure,
    EnrollReport,
    ModelDBError,
    ModelObject,
    ObjectInfo,
)
from objrec.modeldb.shards import DiskFullError

__all__ = [
    "ModelDB",
    "ModelObject",
    "ModelDBError",
    "ObjectInfo",
    "EnrollReport",
    "EnrollFailure",
    "SCHEMA_VERSION",
    "DEFAULT_DETECTORS",
    "DESCRIPTOR_STORAGE",
    "KEYPOINT_DTYPE",
    "WIDE_KEYPOINT_DTYPE",
    "MODEL_IMAGE_FORMAT",
    "DiskFullError",
    "MAX_SMALL_SHARDS",
    "THUMB_SIZE",
    "extract_model_features",
    "thumbnail",
]
