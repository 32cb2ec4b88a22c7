"""A file layer that loses what was not synced, as a power cut does.

``FaultFS`` plugs into ``JournalStore(file_ops=...)``. Writes go through to the
file (the file plays the page cache) while the layer remembers, per file, what
the disk held before each write not yet synced. ``power_cut()`` then decides,
sector by sector, what of those writes reached the disk: each 512-byte sector
of an unsynced write keeps the new bytes or goes back to the old ones (or,
where a disk returns junk for a sector it was writing, to garbage). Any subset
of sectors can survive, which is also what a disk that reorders the sectors of
one write leaves. ``arm()`` makes the next sync fail with ``PowerCut`` before
it completes: the write is on its way, nobody has been told it is stored.

Segment creation, renames and directory fsyncs bypass the layer: the journal
completes them (fsync included) before it writes any data there.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass

from shoal.store.journal.segment import FileOps, write_all

SECTOR = 512


class PowerCut(Exception):
    """The power went off during a sync (not an OSError: the journal must not retry)."""


@dataclass
class Unsynced:
    fd: int
    pos: int
    old: bytes  # what the disk held there (past the old end of file: zeros)
    new: bytes
    old_size: int

    def sectors(self) -> list[tuple[int, int]]:
        """The sectors this write touches, cut to the write: ``(start, end)``."""
        end = self.pos + len(self.new)
        first = self.pos // SECTOR * SECTOR
        return [(max(a, self.pos), min(a + SECTOR, end)) for a in range(first, end, SECTOR)]


# What happens to one sector of an unsynced write: "new" (it reached the
# disk), "old" (it did not) or "junk" (the disk was writing it: garbage).
Fate = str
Chooser = Callable[[Unsynced, int], Fate]  # (write, sector index) -> fate


class FaultFS(FileOps):
    def __init__(self) -> None:
        self.unsynced: list[Unsynced] = []
        self.armed = False
        self.syncs = 0  # completed syncs

    def arm(self) -> None:
        """The next sync does not complete: the power goes off."""
        self.armed = True

    def write(self, fd: int, data: bytes | memoryview, pos: int) -> None:
        data = bytes(data)
        size = os.fstat(fd).st_size
        old = os.pread(fd, len(data), pos)
        old += bytes(len(data) - len(old))
        write_all(fd, data, pos)
        self.unsynced.append(Unsynced(fd, pos, old, data, size))

    def sync(self, fd: int) -> None:
        if self.armed:
            self.armed = False
            raise PowerCut("power cut during fdatasync")
        self.syncs += 1
        self.unsynced = [w for w in self.unsynced if w.fd != fd]

    def power_cut(self, choose: Chooser, seed: int = 0) -> list[list[Fate]]:
        """Put back, sector by sector, what did not reach the disk.

        Newest write first, so an older write's old bytes win where both were
        lost. Returns the fates chosen, per write. A write that lost every
        sector past the old end of the file leaves the file at its old size
        or with zeros (both happen: the size is metadata).
        """
        junk = random.Random(seed)
        fates: list[list[Fate]] = []
        for w in reversed(self.unsynced):
            chosen = []
            for i, (a, b) in enumerate(w.sectors()):
                fate = choose(w, i)
                chosen.append(fate)
                if fate == "new":
                    continue
                off = a - w.pos
                content = w.old[off : off + b - a]
                if fate == "junk":
                    content = bytes(junk.getrandbits(8) for _ in range(b - a))
                write_all(w.fd, content, a)
            if all(f == "old" for f in chosen) and w.old_size < w.pos + len(w.new):
                os.ftruncate(w.fd, w.old_size)  # the size did not reach the disk either
            fates.append(chosen)
        self.unsynced = []
        return fates
