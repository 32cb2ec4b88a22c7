"""Acting on damage found by ``recovery.scan``: cut a torn tail, repair corruption.

Nothing is thrown away: the bytes cut or removed are first written, synced,
to a file next to the segment (``<segment>.torn-<offset>`` or
``<segment>.damaged-<offset>``), and each action returns a note for
``Recovered.notes``.
"""

from __future__ import annotations

import os
from pathlib import Path

from shoal.records import Record
from shoal.store.journal.codec import Snapshot
from shoal.store.journal.recovery import (
    CORRUPT,
    TORN,
    Damage,
    read_file,
    salvage,
)
from shoal.store.journal.segment import (
    SEGMENT_HEADER_SIZE,
    SUFFIX,
    TMP_SUFFIX,
    fsync_dir,
    pack_header,
    preallocate,
    write_all,
)

Lost = list[Record | Snapshot]  # what a damaged region held, as far as it decodes


def _save_aside(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        write_all(fd, data, 0)
        os.fsync(fd)
    finally:
        os.close(fd)


def cut_torn_tail(d: Damage, *, preallocated: bool) -> tuple[str, Lost]:
    """Save the torn bytes aside, then zero them (or truncate the file).

    Returns the note and the records the torn write held.
    """
    assert d.kind == TORN
    path = d.path
    with open(path, "rb") as f:
        f.seek(d.start)
        torn = f.read(d.end - d.start)
    lost = salvage(torn, 0, len(torn))
    aside = path.with_name(f"{path.name}.torn-{d.start}")
    _save_aside(aside, torn)
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        if preallocated and size > d.start:
            write_all(fd, bytes(d.end - d.start), d.start)
        else:
            os.ftruncate(fd, d.start)
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(path.parent)
    return (
        f"truncated torn tail of {path.name} at offset {d.start}: {len(torn)} bytes of an "
        f"unfinished write ({d.reason}); bytes kept in {aside.name}"
    ), lost


def repair_segment(
    path: Path, seq: int, salt: int, damages: list[Damage], *, preallocated: bool
) -> list[tuple[str, Lost]]:
    """Move every damaged region of one segment aside and rewrite it without them.

    Returns a note and the records it held for each region.
    """
    data = read_file(path)
    notes = []
    keep: list[bytes] = []
    cur = SEGMENT_HEADER_SIZE
    for d in sorted(damages, key=lambda d: d.start):
        aside = path.with_name(f"{path.name}.damaged-{d.start}")
        _save_aside(aside, data[d.start : d.end])
        what = "torn" if d.kind == TORN else "damaged"
        note = (
            f"repair: moved {d.end - d.start} {what} bytes of {path.name} at offset {d.start} "
            f"to {aside.name} ({d.reason})"
        )
        notes.append((note, salvage(data, d.start, d.end)))
        if d.start >= cur:
            keep.append(data[cur : d.start])
        cur = max(cur, d.end)
    keep.append(data[cur:])
    body = b"".join(keep)
    new = pack_header(seq, salt) + body
    tmp = path.with_name(path.name[: -len(SUFFIX)] + TMP_SUFFIX)
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        if preallocated:
            preallocate(fd, max(len(data), len(new)))
        write_all(fd, new, 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)
    fsync_dir(path.parent)
    return notes


__all__ = ["CORRUPT", "TORN", "cut_torn_tail", "repair_segment"]
