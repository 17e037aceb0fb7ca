"""A shard's object table, kept as two files so that opening a database reads only what opening needs.

- ``columns.json``: every field of the objects but their :data:`DETAIL_FIELDS`, by column. A field that every
  object has is a list (``"dense"``); one that only some objects have is a ``{row: value}`` table
  (``"sparse"``), so that a row read back has exactly the keys it was written with. Opening a database reads
  these (names, enrolment order, sizes, feature counts, content hashes, views): decoding lists of numbers and
  strings costs a fraction of decoding one dictionary per object.
- ``details.json``: the :data:`DETAIL_FIELDS` of each object, one dictionary per row (the enrolled file's path
  and hash, the rating and its reasons), read the first time one of them is asked for.

Shards written before this split hold one row-oriented table, ``objects.json`` (:data:`ROWS`); they are read
as they are, and ``objrec db upgrade`` splits their tables without touching anything else.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from objrec.modeldb.records import SHARD_FORMAT, check_width_m

__all__ = [
    "ShardTable",
    "DETAIL_FIELDS",
    "REQUIRED_FIELDS",
    "COLUMNS",
    "DETAILS",
    "ROWS",
    "TABLE_FILES",
    "COLUMNS_FORMAT",
    "DETAILS_FORMAT",
    "parse_rows",
    "parse_columns",
    "parse_details",
]

#: Object-table fields kept in ``details.json``: nothing that opening a database or recognising needs.
DETAIL_FIELDS = frozenset({"source", "rating", "rating_version", "rating_reasons"})
#: Fields every object has.
REQUIRED_FIELDS = frozenset({"name", "width", "height", "sha256", "n_features", "image_bytes", "seq"})
COLUMNS, DETAILS, ROWS = "columns.json", "details.json", "objects.json"
#: A shard's object-table files (the rest of its files are arrays).
TABLE_FILES = frozenset({COLUMNS, DETAILS, ROWS})
COLUMNS_FORMAT = "objrec-modeldb-shard-columns"
DETAILS_FORMAT = "objrec-modeldb-shard-details"


class ShardTable:
    """A shard's object table as written (the manifest's later changes are applied by
    :class:`~objrec.modeldb.shards.Shard`).

    Parameters
    ----------
    n : int
        Objects (rows).
    dense : dict of str -> list
        Fields every object has, one value per row.
    sparse : dict of str -> dict
        Fields only some objects have: ``{str(row): value}``.
    details : list of dict or None
        Each row's :data:`DETAIL_FIELDS`; None: ``load_details`` reads them when first asked for.
    load_details : callable or None
        Returns the rows' details (checked, ``n`` of them).
    """

    def __init__(
        self,
        n: int,
        dense: dict[str, list[Any]],
        sparse: dict[str, dict[str, Any]],
        details: list[dict[str, Any]] | None = None,
        load_details: Callable[[], list[dict[str, Any]]] | None = None,
    ) -> None:
        if details is None and load_details is None:
            raise ValueError("ShardTable: give details or load_details")
        self.n = n
        self.dense = dense
        self.sparse = sparse
        self._details = details
        self._load_details = load_details
        self._rows: list[dict[str, Any]] | None = None

    @classmethod
    def from_rows(cls, rows: list[dict[str, Any]]) -> ShardTable:
        """The table of object-table entries ``rows`` (one dictionary per object, as enrolment makes them)."""
        keys: dict[str, int] = {}
        for o in rows:
            for k in o:
                if k not in DETAIL_FIELDS:
                    keys[k] = keys.get(k, 0) + 1
        dense = {k: [o[k] for o in rows] for k, c in keys.items() if c == len(rows)}
        sparse = {k: {str(r): o[k] for r, o in enumerate(rows) if k in o} for k, c in keys.items() if c < len(rows)}
        details = [{k: v for k, v in o.items() if k in DETAIL_FIELDS} for o in rows]
        table = cls(len(rows), dense, sparse, details)
        table._rows = rows
        return table

    def column(self, field: str) -> list[Any]:
        """The ``field`` of every row (None where a row lacks it); a dense column is the table's own list (not
        to be changed)."""
        if field in self.dense:
            return self.dense[field]
        if field in DETAIL_FIELDS:
            return [d.get(field) for d in self.details()]
        values = self.sparse.get(field)
        if not values:
            return [None] * self.n
        return [values.get(str(r)) for r in range(self.n)]

    def details(self) -> list[dict[str, Any]]:
        """Each row's :data:`DETAIL_FIELDS` (read from ``details.json`` the first time)."""
        if self._details is None:
            assert self._load_details is not None
            self._details = self._load_details()
        return self._details

    def rows(self) -> list[dict[str, Any]]:
        """One dictionary per object, with exactly the keys it was written with."""
        if self._rows is None:
            rows = [dict(d) for d in self.details()]
            for k, values in self.dense.items():
                for row, v in zip(rows, values, strict=True):
                    row[k] = v
            for k, table in self.sparse.items():
                for r, v in table.items():
                    rows[int(r)][k] = v
            self._rows = rows
        return self._rows

    def encode(self) -> dict[str, bytes]:
        """The files of this table: ``{"columns.json": bytes, "details.json": bytes}``."""
        columns = {"format": COLUMNS_FORMAT, "n": self.n, "dense": self.dense, "sparse": self.sparse}
        details = {"format": DETAILS_FORMAT, "objects": self.details()}
        return {
            COLUMNS: (json.dumps(columns, sort_keys=True) + "\n").encode(),
            DETAILS: (json.dumps(details, sort_keys=True) + "\n").encode(),
        }


def _check_widths(values: list[Any]) -> None:
    for v in values:
        check_width_m(v)


def parse_rows(data: bytes) -> ShardTable:
    """The table of a row-oriented ``objects.json`` (its bytes, ``data``; ValueError, TypeError or KeyError when
    malformed)."""
    table = json.loads(data)
    objects = table["objects"]
    if table.get("format") != SHARD_FORMAT or not isinstance(objects, list):
        raise ValueError("not an objrec shard object table")
    for o in objects:
        if not REQUIRED_FIELDS <= o.keys():
            raise ValueError(f"object entry lacks {sorted(REQUIRED_FIELDS - set(o))}")
        check_width_m(o.get("width_m"))
    return ShardTable.from_rows(objects)


def parse_columns(data: bytes, load_details: Callable[[], list[dict[str, Any]]]) -> ShardTable:
    """The table of a ``columns.json`` (its bytes, ``data``) whose details ``load_details`` reads (ValueError,
    TypeError or KeyError when malformed)."""
    doc = json.loads(data)
    n, dense, sparse = doc["n"], doc["dense"], doc["sparse"]
    if doc.get("format") != COLUMNS_FORMAT or not isinstance(n, int) or n < 0:
        raise ValueError("not an objrec shard columns table")
    if not isinstance(dense, dict) or not isinstance(sparse, dict):
        raise ValueError("'dense' and 'sparse' must be tables")
    if n and not REQUIRED_FIELDS <= dense.keys():
        raise ValueError(f"columns lack {sorted(REQUIRED_FIELDS - set(dense))}")
    for k, values in dense.items():
        if not isinstance(values, list) or len(values) != n:
            raise ValueError(f"column {k!r} does not hold {n} values")
    for k, table in sparse.items():
        if not isinstance(table, dict) or not all(r.isdigit() and int(r) < n for r in table):
            raise ValueError(f"sparse column {k!r} names rows outside 0-{n - 1}")
    if DETAIL_FIELDS & (dense.keys() | sparse.keys()):
        raise ValueError(f"columns hold detail fields {sorted(DETAIL_FIELDS & (dense.keys() | sparse.keys()))}")
    _check_widths(dense.get("width_m", []))
    _check_widths(list(sparse.get("width_m", {}).values()))
    return ShardTable(n, dense, sparse, load_details=load_details)


def parse_details(data: bytes, n: int) -> list[dict[str, Any]]:
    """The rows of a ``details.json`` (its bytes, ``data``) of ``n`` objects (ValueError when malformed)."""
    doc = json.loads(data)
    objects = doc.get("objects") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or doc.get("format") != DETAILS_FORMAT or not isinstance(objects, list):
        raise ValueError("not an objrec shard details table")
    if len(objects) != n:
        raise ValueError(f"holds {len(objects)} rows, the columns {n}")
    for o in objects:
        if not isinstance(o, dict) or not o.keys() <= DETAIL_FIELDS:
            raise ValueError(f"row {o!r} is not a table of {sorted(DETAIL_FIELDS)}")
    return objects
