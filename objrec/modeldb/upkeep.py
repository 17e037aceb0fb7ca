"""A database's upkeep: compaction, orphan files, re-reading the manifest and checking the files
(:class:`DatabaseUpkeep`, which :class:`~objrec.modeldb.database.ModelDB` inherits)."""

from __future__ import annotations

from pathlib import Path

from objrec.modeldb import maintenance
from objrec.modeldb.access import DatabaseReads

__all__ = ["DatabaseUpkeep"]


class DatabaseUpkeep(DatabaseReads):
    """Compaction, orphan files, the manifest re-read and the files checked: what keeps a database sound, apart
    from its content."""

    def compact(self) -> int:
        """Rewrite every shard with dead rows or without thumbnails (``thumbs.npy``, made then from the stored
        images) and merge all small shards; returns the shards rewritten."""
        with self.store.writing():
            return maintenance.compact(self.store)

    def orphans(self) -> list[Path]:
        """Files of this database that no commit names (left by a killed writer), without locking.

        While another process holds the write lock, files newer than the manifest are left out: they may
        belong to the write in progress.
        """
        return maintenance.orphans(self.store)

    def clean(self) -> list[Path]:
        """Delete the orphan files, holding the write lock (so never a write in progress); returns them."""
        with self.store.writing():
            found = maintenance.unnamed_files(self.store)
            maintenance.collect_garbage(self.store)
        return found

    def refresh(self) -> bool:
        """Take the current manifest if another process committed since this database read it."""
        return self.store.refresh()

    def verify(self) -> list[str]:
        """Check every file of every shard (sha256, array headers, row counts against the object tables);
        returns one line per problem, each naming the file (none when the database is sound)."""
        return self.store.verify()
