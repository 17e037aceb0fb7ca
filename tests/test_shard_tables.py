"""A shard's object table as columns and details: rows read back exactly as written, a database that opens
without reading any details, and the split of older row-oriented tables by ``objrec db upgrade``."""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys

import numpy as np
import pytest

from objrec import ModelDB
from objrec.data import synthetic_cover
from objrec.modeldb import ModelDBError
from objrec.modeldb.records import SHARD_FORMAT
from objrec.modeldb.tables import (
    COLUMNS,
    DETAIL_FIELDS,
    DETAILS,
    ROWS,
    ShardTable,
    parse_columns,
    parse_details,
)

SIFT_ONLY = {"sift": {"n_features": 0}}


def _random_rows(rng: random.Random, n: int) -> list[dict]:
    rows = []
    for r in range(n):
        o = {
            "name": f"obj{r}",
            "seq": 100 + r,
            "width": rng.randint(10, 900),
            "height": rng.randint(10, 900),
            "sha256": f"{rng.getrandbits(256):064x}",
            "n_features": {"sift": rng.randint(0, 500), "surf": rng.randint(0, 900)},
            "image_bytes": rng.randint(100, 50_000),
            "thumb_sha256": f"{rng.getrandbits(256):064x}",
            "source": rng.choice([None, {"path": f"/x/{r}.jpg", "sha256": "ab" * 32}]),
        }
        if rng.random() < 0.3:
            o["width_m"] = rng.choice([None, 0.135])
        if rng.random() < 0.3:
            o["shape"] = "solid"
            o["views"] = "solid-8"
            o["view_table"] = {"sift": [[0, rng.randint(1, 9)], [1, 3]], "tilts": [0.0, 40.0]}
        if rng.random() < 0.5:
            o.update(rating=rng.randint(0, 100), rating_version="rating-6", rating_reasons=["low contrast"])
        rows.append(o)
    return rows


@pytest.mark.parametrize("seed", range(6))
def test_rows_read_back_exactly_as_written(seed):
    """Every row comes back with exactly its keys and values (optional keys absent where they were absent),
    and each column equals the field read row by row."""
    rng = random.Random(seed)
    rows = _random_rows(rng, rng.randint(0, 40))
    files = ShardTable.from_rows(rows).encode()
    n = len(rows)
    table = parse_columns(files[COLUMNS], lambda: parse_details(files[DETAILS], n))
    assert table.n == n
    assert table.rows() == rows
    for field in ["name", "seq", "n_features", "width_m", "shape", "view_table", "rating", "source", "absent"]:
        assert table.column(field) == [o.get(field) for o in rows]
    assert not DETAIL_FIELDS & json.loads(files[COLUMNS])["sparse"].keys()


def test_columns_are_read_without_the_details():
    rows = _random_rows(random.Random(7), 12)
    files = ShardTable.from_rows(rows).encode()
    calls = []

    def load():
        calls.append(1)
        return parse_details(files[DETAILS], len(rows))

    table = parse_columns(files[COLUMNS], load)
    for field in ("name", "seq", "sha256", "n_features", "image_bytes", "view_table", "width_m", "thumb_sha256"):
        table.column(field)
    assert not calls
    assert table.column("rating") == [o.get("rating") for o in rows] and calls == [1]


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d["dense"]["seq"].pop(), "column 'seq' does not hold"),
        (lambda d: d["dense"].pop("sha256"), "columns lack"),
        (lambda d: d["sparse"].update(shape={"99": "solid"}), "names rows outside"),
        (lambda d: d["sparse"].update(rating={"0": 5}), "detail fields"),
        (lambda d: d.update(format="other"), "not an objrec shard columns table"),
    ],
)
def test_malformed_columns_raise(edit, message):
    rows = _random_rows(random.Random(3), 5)
    doc = json.loads(ShardTable.from_rows(rows).encode()[COLUMNS])
    edit(doc)
    with pytest.raises(ValueError, match=message):
        parse_columns(json.dumps(doc).encode(), lambda: [])


def _to_row_tables(path) -> None:
    """Rewrite every shard's object table at ``path`` in the older row-oriented layout (``objects.json``)."""
    mpath = path / "manifest.json"
    manifest = json.loads(mpath.read_text())
    for entry in manifest["shards"]:
        folder = path / "shards" / entry["id"]
        cols = (folder / COLUMNS).read_bytes()
        det = (folder / DETAILS).read_bytes()
        rows = parse_columns(cols, lambda det=det, n=entry["n_objects"]: parse_details(det, n)).rows()
        data = (json.dumps({"format": SHARD_FORMAT, "objects": rows}, sort_keys=True) + "\n").encode()
        (folder / ROWS).write_bytes(data)
        (folder / COLUMNS).unlink()
        (folder / DETAILS).unlink()
        files = {k: v for k, v in entry["files"].items() if k not in (COLUMNS, DETAILS)}
        entry["files"] = dict(files, **{ROWS: hashlib.sha256(data).hexdigest()})
    mpath.write_text(json.dumps(manifest))


def test_row_tables_are_read_and_split_by_upgrade_with_nothing_else_changed(tmp_path):
    """A database whose shards hold row-oriented tables (written by an earlier objrec) opens as it is; the
    upgrade splits the tables, keeps the id, every object's table entry (renames and widths given since
    included) and its features, and deletes the old tables only once the new manifest names the new ones."""
    db = ModelDB.create(tmp_path / "db", detectors=SIFT_ONLY)
    for i in range(4):
        db.enroll(f"c{i}", synthetic_cover(40 + i, (180, 220)), width_m=0.1 if i == 2 else None)
    db.rename("c1", "renamed")
    db.set_width("c3", 0.25)
    before = ModelDB.open(db.path)
    infos = [before.info(n) for n in before.names]
    feats = {n: before.get(n).features["sift"].descriptors for n in before.names}
    _to_row_tables(db.path)
    old = ModelDB.open(db.path)
    assert old.database_id == before.database_id and [old.info(n) for n in old.names] == infos
    assert list(db.path.glob(f"shards/*/{ROWS}")) and not list(db.path.glob(f"shards/*/{COLUMNS}"))

    done = subprocess.run(
        [sys.executable, "-m", "objrec", "db", "upgrade", "--db", str(db.path), "--json", "--no-progress"],
        capture_output=True,
        text=True,
        check=True,
    )
    doc = json.loads(done.stdout)
    assert doc["tables_split"] == len(json.loads((db.path / "manifest.json").read_text())["shards"]) >= 1
    assert doc["upgraded_from"] is None and doc["database_id"] == before.database_id
    assert not list(db.path.glob(f"shards/*/{ROWS}")) and list(db.path.glob(f"shards/*/{COLUMNS}"))
    new = ModelDB.open(db.path)
    assert new.names == before.names and [new.info(n) for n in new.names] == infos
    assert new.columns("width_m", "name") == [[i.width_m for i in infos], [i.name for i in infos]]
    for n in new.names:
        np.testing.assert_array_equal(new.get(n).features["sift"].descriptors, feats[n])
    assert new.verify() == []
    assert ModelDB.upgrade(db.path).database_id == before.database_id  # nothing left to split


def test_a_row_table_that_does_not_match_the_manifest_is_named(tmp_path):
    db = ModelDB.create(tmp_path / "db", detectors=SIFT_ONLY)
    db.enroll("c0", synthetic_cover(5, (160, 200)))
    _to_row_tables(db.path)
    (table,) = db.path.glob(f"shards/*/{ROWS}")
    table.write_bytes(table.read_bytes().replace(b'"c0"', b'"c9"'))
    with pytest.raises(ModelDBError, match=f"{ROWS}: sha256 mismatch"):
        ModelDB.open(db.path)
