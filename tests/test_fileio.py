"""Atomic writes through a library's own writer: the file is named by its content hash, or nothing is left."""

from __future__ import annotations

import hashlib

import pytest

from objrec.fileio import atomic_write_via, file_sha256, file_sha256_once


def test_a_write_is_named_by_its_hash_and_a_failed_one_leaves_nothing(tmp_path):
    def write(path):
        with open(path, "wb") as f:
            f.write(b"objrec" * 1000)

    final, digest = atomic_write_via(tmp_path / "ix", write, lambda d: f"index-{d[:16]}.bin")
    assert digest == hashlib.sha256(b"objrec" * 1000).hexdigest() == file_sha256(final)
    assert final.name == f"index-{digest[:16]}.bin" and final.read_bytes() == b"objrec" * 1000

    def broken(path):
        with open(path, "wb") as f:
            f.write(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write_via(tmp_path / "ix", broken, lambda d: "other.bin")
    assert sorted(p.name for p in (tmp_path / "ix").iterdir()) == [final.name]


def test_a_changed_file_is_hashed_again(tmp_path):
    f = tmp_path / "a.bin"
    f.write_bytes(b"first")
    assert file_sha256_once(f) == hashlib.sha256(b"first").hexdigest()
    f.write_bytes(b"second, longer")  # another size: not the file that was hashed
    assert file_sha256_once(f) == hashlib.sha256(b"second, longer").hexdigest()
