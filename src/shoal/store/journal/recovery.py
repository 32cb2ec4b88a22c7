"""Reading a journal back: walk the frames, tell a torn tail from corruption.

``scan(directory, on_frame)`` reads every segment in order, hands each valid
frame's decoded records to ``on_frame`` and returns what it found per
segment, damaged regions included. It changes nothing on disk; the store
(``writer.py``), ``repair.py`` and the tools decide what to do with the
damage. Rules: ``docs/journal.md``, section "Recovery".
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shoal.records import MessageStored, Record
from shoal.store.journal.codec import (
    DECODE_ERRORS,
    RECORD_HEADER,
    TAG_NAMES,
    DecodeError,
    Snapshot,
    _decode,
    decode_payload,
)
from shoal.store.journal.record import (
    ALIGN,
    FRAME_HEADER,
    FRAME_HEADER_SIZE,
    align8,
    check_frame,
)
from shoal.store.journal.segment import (
    SEGMENT_HEADER_SIZE,
    fsync_dir,
    list_segments,
    parse_header,
    segment_name,
    write_all,
)

TORN = "torn"
CORRUPT = "corrupt"
# Written by close() after the last sync: where the data ended. With it, no
# write can have been torn, so any damage is corruption.
CLOSE_MARKER = "CLOSED"
_AFTER_CLOSE = "; the journal was closed cleanly, so this is no torn write"


@dataclass(slots=True)
class Damage:
    """Bytes ``[start, end)`` of a segment that are not valid frames."""

    path: Path
    seq: int
    start: int
    end: int
    kind: str  # TORN or CORRUPT
    reason: str

    def describe(self) -> str:
        return (
            f"{self.kind} data in {self.path.name} at offset {self.start} "
            f"({self.end - self.start} bytes): {self.reason}"
        )


@dataclass(slots=True)
class SegmentScan:
    seq: int
    path: Path
    size: int = 0  # file size
    salt: int = 0
    header_ok: bool = True
    data_end: int = SEGMENT_HEADER_SIZE  # end of the last valid frame
    frames: int = 0
    data_frames: int = 0  # frames that are not the opening snapshot
    first_batch: int = 0
    last_batch: int = 0
    damages: list[Damage] = field(default_factory=list)


Decoded = list[tuple[Record | Snapshot, int]]
# (segment, frame offset, batch sequence, records with body offsets)
OnFrame = Callable[[SegmentScan, int, int, Decoded], None]


def read_file(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def scan(
    directory: Path,
    on_frame: OnFrame | None = None,
    lazy: bool = False,
    closed: dict[str, int] | None = None,
) -> list[SegmentScan]:
    """Walk every segment of ``directory``; see the module docstring.

    With ``lazy`` queue messages come without their bodies (``_decode``).
    ``closed`` is the clean-close marker (``read_close_marker``), if any: it
    turns a torn tail into corruption.
    """
    scans = _scan(directory, on_frame, lazy)
    if closed is not None and scans:
        judge_after_close(scans[-1], closed)
    return scans


def _scan(directory: Path, on_frame: OnFrame | None, lazy: bool) -> list[SegmentScan]:
    segments = list_segments(directory)
    out: list[SegmentScan] = []
    last_seq = 0
    if len(segments) == 1:
        seq, path = segments[0]
        return [scan_segment(seq, path, read_file(path), 0, True, on_frame, lazy)[0]]
    # Read the next segment in a thread while this one is decoded (file reads
    # release the GIL): with a cold page cache, reading and decoding overlap.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="journal-read") as pool:
        ahead = pool.submit(read_file, segments[0][1]) if segments else None
        for i, (seq, path) in enumerate(segments):
            assert ahead is not None
            data = ahead.result()
            ahead = pool.submit(read_file, segments[i + 1][1]) if i + 1 < len(segments) else None
            is_last = i == len(segments) - 1
            s, last_seq = scan_segment(seq, path, data, last_seq, is_last, on_frame, lazy)
            del data
            out.append(s)
    return out


def scan_segment(
    seq: int,
    path: Path,
    data: bytes,
    last_seq: int,
    is_last: bool,
    on_frame: OnFrame | None,
    lazy: bool = False,
) -> tuple[SegmentScan, int]:
    """Scan one segment's bytes; returns the scan and the last batch number."""
    buf = memoryview(data)
    end = len(data)
    s = SegmentScan(seq=seq, path=path, size=end)
    salt, problem = parse_header(buf, seq)
    s.salt = salt
    if problem is not None:
        s.header_ok = False
        s.damages.append(Damage(path, seq, 0, min(end, SEGMENT_HEADER_SIZE), CORRUPT, problem))
    pos = SEGMENT_HEADER_SIZE
    # The hot loop: check_frame() inlined (it gives the reason when this fails).
    unpack = FRAME_HEADER.unpack_from
    crc32 = zlib.crc32
    count = data.count
    frames = 0
    first_batch = 0
    first_is_snapshot = False
    data_end = pos
    reason = ""
    while pos < end:
        whole = False  # the bad frame is complete (its CRC checks): no torn write
        if pos + FRAME_HEADER_SIZE <= end:
            crc, length, bseq = unpack(data, pos)
            if length:
                p0 = pos + FRAME_HEADER_SIZE
                p1 = p0 + length
                stop = p0 + ((length + 7) & ~7)
                if (
                    stop <= end
                    and bseq > last_seq
                    and crc32(buf[pos + 4 : p1], salt) == crc
                    and (stop == p1 or count(0, p1, stop) == stop - p1)
                ):
                    try:
                        records = _decode(data, p0, p1, lazy)  # decode_payload() minus a call
                    except DECODE_ERRORS as e:
                        reason = e.args[0] if type(e) is DecodeError else f"undecodable record: {e}"
                        whole = True
                    else:
                        if not frames:
                            first_batch = bseq
                            first_is_snapshot = (
                                len(records) == 1 and type(records[0][0]) is Snapshot
                            )
                        frames += 1
                        if on_frame is not None:
                            on_frame(s, pos, bseq, records)
                        last_seq = bseq
                        pos = data_end = stop
                        continue
                else:
                    reason = check_frame(buf, pos, end, salt, last_seq)  # type: ignore[assignment]
                    whole = reason != "CRC mismatch" and not reason.startswith("length")
            else:
                reason = "zero length"
        hend = min(pos + FRAME_HEADER_SIZE, end)
        if count(0, pos, hend) == hend - pos:
            if count(0, pos) == end - pos:
                break  # clean end: zeros to the end of the file
            reason = "non-zero bytes after the end-of-data marker"
        elif hend - pos < FRAME_HEADER_SIZE:
            reason = "frame header cut short"
        # A damaged region starts at pos: find where valid frames resume.
        nxt = _next_valid(buf, data, pos + 8, end, salt, last_seq)
        if nxt is not None:
            s.damages.append(Damage(path, seq, pos, nxt, CORRUPT, reason + "; valid data follows"))
            pos = nxt
            continue
        stop = max(align8(len(data.rstrip(b"\0"))), pos + 8)
        stop = min(stop, end)
        if is_last and s.header_ok and not whole:
            # One frame is one write and a write is synced before the next
            # starts: damage in the last frame with nothing valid after it is
            # what a power cut during that write leaves, whichever of its
            # sectors reached the disk. Nobody heard that write was stored.
            s.damages.append(Damage(path, seq, pos, stop, TORN, reason))
        elif whole:
            why = reason + "; the frame's CRC checks, so it is no torn write"
            s.damages.append(Damage(path, seq, pos, stop, CORRUPT, why))
        else:
            why = reason + ("" if is_last else "; not the last segment")
            s.damages.append(Damage(path, seq, pos, stop, CORRUPT, why))
        break
    s.frames = frames
    s.data_frames = frames - 1 if first_is_snapshot else frames
    s.data_end = data_end
    s.first_batch = first_batch
    s.last_batch = last_seq if frames else 0
    return s, last_seq


def _next_valid(
    buf: memoryview, data: bytes, start: int, end: int, salt: int, last_seq: int
) -> int | None:
    """The first 8-aligned offset >= start holding a valid, decodable frame."""
    unpack = FRAME_HEADER.unpack_from
    # A frame header holds a non-zero length, so no frame starts in the zeros
    # at the end (a torn tail in a preallocated segment is mostly zeros).
    lim = min(end - FRAME_HEADER_SIZE, len(data.rstrip(b"\0")) - 1)
    p = start
    while p <= lim:
        _crc, length, bseq = unpack(buf, p)
        if length and bseq > last_seq and p + FRAME_HEADER_SIZE + length <= end:
            r = check_frame(buf, p, end, salt, last_seq)
            if type(r) is tuple:
                p0 = p + FRAME_HEADER_SIZE
                try:
                    decode_payload(data, p0, p0 + r[0])
                except DecodeError:
                    pass
                else:
                    return p
        p += 8
    return None


def read_close_marker(directory: Path) -> dict[str, int] | None:
    """The clean-close marker: ``{"segment", "data_end", "last_batch"}``, or None.

    A marker that exists but does not parse still says the journal was
    closed cleanly; it then matches nothing, and any damage is corruption.
    """
    try:
        raw = (directory / CLOSE_MARKER).read_bytes()
    except FileNotFoundError:
        return None
    try:
        d = json.loads(raw)
        return {k: int(d[k]) for k in ("segment", "data_end", "last_batch")}
    except (ValueError, KeyError, TypeError):
        return {"segment": -1, "data_end": -1, "last_batch": -1}


def write_close_marker(directory: Path, segment: int, data_end: int, last_batch: int) -> None:
    d = {"segment": segment, "data_end": data_end, "last_batch": last_batch}
    tmp = directory / (CLOSE_MARKER + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        write_all(fd, json.dumps(d).encode(), 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, directory / CLOSE_MARKER)
    fsync_dir(directory)


def remove_close_marker(directory: Path) -> None:
    """Before anything is written again: a crash from now on may tear a write."""
    try:
        os.unlink(directory / CLOSE_MARKER)
    except FileNotFoundError:
        return
    fsync_dir(directory)


def judge_after_close(last: SegmentScan, closed: dict[str, int]) -> None:
    """After a clean close no write can be torn: damage is corruption, and the
    data must end where close() left it."""
    for d in last.damages:
        if d.kind == TORN:
            d.kind = CORRUPT
            d.reason += _AFTER_CLOSE
    if last.damages:
        return
    if closed["segment"] != last.seq or closed["data_end"] != last.data_end:
        where = f"segment {segment_name(closed['segment'])} offset {closed['data_end']}"
        last.damages.append(
            Damage(
                last.path,
                last.seq,
                last.data_end,
                max(last.data_end, closed["data_end"]),
                CORRUPT,
                f"valid data ends at offset {last.data_end}, but the journal was "
                f"closed cleanly at {where}: frames are missing",
            )
        )


def salvage(data: bytes, start: int, end: int) -> list[Record | Snapshot]:
    """What a damaged region held, as far as its records still decode.

    Frames are followed by their length words where those are plausible; in
    each, records are decoded one by one. Past a record that does not decode
    (a lost or garbled sector) the walk picks up again at the first offset
    where two records in a row decode, or one that ends the frame. The CRC
    failed, so this is a best guess for telling the operator what was lost,
    never something to apply.
    """
    out: list[Record | Snapshot] = []
    p = start
    while p + FRAME_HEADER_SIZE < end:
        (_crc, length, _seq) = FRAME_HEADER.unpack_from(data, p)
        p0 = p + FRAME_HEADER_SIZE
        bound = p0 + length if length > 0 and p0 + length <= end else end
        q = p0
        while q < bound:
            got = _record_at(data, q, bound)
            if got is None:
                q = _resync(data, q + 1, bound)
                continue
            out += got[0]
            q = got[1]
        p = align8(bound) if bound > p0 else end
    return out


def _record_at(data: bytes, q: int, bound: int) -> tuple[list[Any], int] | None:
    """The records decoded from the one record at ``q`` and where it ends."""
    if q + RECORD_HEADER.size > bound:
        return None
    tag, n = RECORD_HEADER.unpack_from(data, q)
    nxt = q + RECORD_HEADER.size + n
    if tag not in TAG_NAMES or n == 0 or nxt > bound:
        return None
    try:
        return [r for r, _b in _decode(data, q, nxt)], nxt
    except DECODE_ERRORS:
        return None


def _resync(data: bytes, q: int, bound: int) -> int:
    """The first offset from ``q`` where decoding can credibly go on, else ``bound``."""
    while q < bound:
        got = _record_at(data, q, bound)
        if got is not None:
            nxt = got[1]
            rest = bound - nxt
            if rest < ALIGN and not any(data[nxt:bound]):  # it ends the frame
                return q
            if _record_at(data, nxt, bound) is not None:
                return q
        q += 1
    return bound


LostKey = tuple[str, int]  # (queue, message id)


def lost_messages(records: list[Record | Snapshot]) -> list[MessageStored]:
    return [r for r in records if type(r) is MessageStored]


def describe_lost(
    records: list[Record | Snapshot], consumed: set[LostKey] | frozenset[LostKey] = frozenset()
) -> str:
    """``N messages (queue 'q' id 5 group 'g', ...); other records: 3 MessageRemoved``.

    Messages in ``consumed`` were removed by a later valid record: gone
    anyway, they are counted apart rather than listed as lost.
    """
    msgs = lost_messages(records)
    gone = [m for m in msgs if (m.queue, m.id) not in consumed]
    others: dict[str, int] = {}
    for r in records:
        if type(r) is not MessageStored and type(r) is not Snapshot:
            name = type(r).__name__
            others[name] = others.get(name, 0) + 1
    text = f"{len(gone)} messages"
    if gone:
        text += (
            " ("
            + ", ".join(
                f"queue {m.queue!r} id {m.id}"
                + (f" group {m.group!r}" if m.group is not None else "")
                for m in gone
            )
            + ")"
        )
    if len(gone) < len(msgs):
        text += f" and {len(msgs) - len(gone)} already consumed"
    if others:
        text += "; other records: " + ", ".join(f"{n} {t}" for t, n in sorted(others.items()))
    return text + " (as far as the damaged bytes still decode)"


def remove_tmp_files(directory: Path) -> list[str]:
    """Delete leftovers of an interrupted segment creation or repair."""
    notes: list[str] = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return notes
    for name in sorted(names):
        if name.endswith(".seg.tmp"):
            os.unlink(directory / name)
            notes.append(f"removed unfinished file {name} (interrupted segment creation or repair)")
    return notes
