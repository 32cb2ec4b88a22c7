"""Offline tools: ``check`` and ``dump`` a journal without changing it; ``repair``.

The CLI wires them to ``shoal journal check|dump|repair DIR`` (ZODB's
``fsdump``/``fsrecover`` play the same role). ``check`` and ``dump`` neither
take the directory lock nor write anything: run on a live journal, a write in
progress may show up as a torn tail. ``repair`` takes the lock (it refuses a
journal a broker has open) and does what ``shoal serve --repair`` does.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

from shoal.records import MessageStored, Record
from shoal.store.journal.codec import Snapshot
from shoal.store.journal.recovery import (
    CORRUPT,
    TORN,
    Damage,
    SegmentScan,
    lost_messages,
    read_close_marker,
    read_file,
    salvage,
    scan,
)
from shoal.store.replay_fold import Replay, queue_to_dict


def check(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """Verify a journal; statistics and the damage found, as JSON-able data.

    ``ok`` is false when there is corruption (``open()`` would raise
    ``CorruptRecordError``); a torn tail alone leaves ``ok`` true, since
    ``open()`` cuts it.
    """
    directory = Path(directory)
    by_type: dict[str, int] = {}
    fold = Replay()
    totals = {"batches": 0, "records": 0, "body_bytes": 0}

    def on_frame(seg: SegmentScan, _pos: int, _b: int, records: list[Any]) -> None:
        totals["batches"] += 1
        for rec, _off in records:
            name = type(rec).__name__
            by_type[name] = by_type.get(name, 0) + 1
            totals["records"] += 1
            if type(rec) is Snapshot:
                fold.load_snapshot(rec.state)
            else:
                if type(rec) is MessageStored:
                    totals["body_bytes"] += rec.body_size if rec.body is None else len(rec.body)
                fold.apply(rec)

    closed = read_close_marker(directory)
    scans = scan(directory, on_frame, closed=closed)
    damages = [d for s in scans for d in s.damages]
    result = fold.result()
    return {
        "directory": str(directory),
        "ok": not any(d.kind == CORRUPT for d in damages),
        "segments": [
            {
                "name": s.path.name,
                "seq": s.seq,
                "bytes": s.size,
                "data_bytes": s.data_end,
                "batches": s.frames,
                "first_batch": s.first_batch,
                "last_batch": s.last_batch,
            }
            for s in scans
        ],
        "bytes": sum(s.size for s in scans),
        "data_bytes": sum(s.data_end for s in scans),
        "batches": totals["batches"],
        "records": totals["records"],
        "records_by_type": dict(sorted(by_type.items())),
        "body_bytes": totals["body_bytes"],
        "queues": len(result.queues),
        "live_messages": sum(len(v) for v in result.messages.values()),
        "live_messages_by_queue": {q: len(v) for q, v in sorted(result.messages.items())},
        "parked_groups": len(result.parked),
        "next_message_id": result.next_message_id,
        "closed_cleanly": closed is not None,
        "torn_tail": [_damage(d) for d in damages if d.kind == TORN],
        "corruption": [_damage(d) for d in damages if d.kind == CORRUPT],
        "damaged_files": sorted(
            n for n in os.listdir(directory) if ".seg.damaged-" in n or ".seg.torn-" in n
        )
        if directory.is_dir()
        else [],
    }


def _damage(d: Damage, data: bytes | None = None) -> dict[str, Any]:
    """A damaged region, with the messages it held as far as they decode."""
    if data is None:
        try:
            data = read_file(d.path)
        except OSError:
            data = b""
    held = lost_messages(salvage(data, d.start, min(d.end, len(data))))
    return {
        "segment": d.path.name,
        "offset": d.start,
        "bytes": d.end - d.start,
        "kind": d.kind,
        "reason": d.reason,
        "messages": [{"queue": m.queue, "id": m.id, "group": m.group} for m in held],
    }


def repair(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """``shoal serve --repair`` offline: cut a torn tail, move damage aside.

    Returns the notes and the messages dropped (queue, id, group). Raises
    StoreError when the directory holds no journal or a broker has it open.
    """
    from shoal.errors import StoreError
    from shoal.store.journal.segment import list_segments
    from shoal.store.journal.writer import JournalStore

    directory = Path(directory)
    if not list_segments(directory):
        raise StoreError(f"{directory} holds no journal segments")
    store = JournalStore(directory, repair=True, lazy_bodies=True)
    recovered = store.open()
    store.close()
    return {
        "directory": str(directory),
        "notes": recovered.notes,
        "dropped_messages": [{"queue": q, "id": i, "group": g} for q, i, g in recovered.lost],
        "dropped": len(recovered.lost),
    }


def record_to_dict(rec: Record | Snapshot, body_bytes: int | None = 64) -> dict[str, Any]:
    """A record as JSON-able data; bodies base64, cut to ``body_bytes`` (None: whole)."""
    if type(rec) is Snapshot:
        return {"type": "Snapshot", **rec.state}
    d: dict[str, Any] = {"type": type(rec).__name__}
    if type(rec).__name__ == "QueueDeclared":
        d.update(queue_to_dict(rec))  # type: ignore[arg-type]
        return d
    for f in fields(rec):  # type: ignore[arg-type]
        v = getattr(rec, f.name)
        if f.name == "body":
            shown = v if body_bytes is None else v[:body_bytes]
            d["body_len"] = len(v)
            d["body_b64"] = base64.b64encode(shown).decode("ascii")
            d["body_truncated"] = len(shown) < len(v)
        elif f.name == "headers":
            d[f.name] = dict(v)
        else:
            d[f.name] = v
    return d


def dump(
    directory: str | os.PathLike[str], body_bytes: int | None = 64
) -> Iterator[dict[str, Any]]:
    """Every record in journal order as a JSON-able dict, damage included.

    Each dict has ``segment``, ``frame_offset`` (of its batch's frame), ``batch``
    (the batch number) and ``type``; damaged regions appear as
    ``{"type": "damage", "kind": "torn"|"corrupt", ...}``. The journal is
    read segment by segment, so memory stays at one segment.
    """
    from shoal.store.journal.recovery import judge_after_close, scan_segment
    from shoal.store.journal.segment import list_segments

    directory = Path(directory)
    segments = list_segments(directory)
    closed = read_close_marker(directory)
    last_seq = 0
    for i, (seq, path) in enumerate(segments):
        out: list[dict[str, Any]] = []

        def on_frame(seg: SegmentScan, pos: int, bseq: int, records: list[Any]) -> None:
            for rec, _off in records:
                d = {"segment": seg.path.name, "frame_offset": pos, "batch": bseq}
                d.update(record_to_dict(rec, body_bytes))
                out.append(d)  # noqa: B023 - called only during this file's scan

        data = read_file(path)
        is_last = i == len(segments) - 1
        s, last_seq = scan_segment(seq, path, data, last_seq, is_last, on_frame)
        if is_last and closed is not None:
            judge_after_close(s, closed)
        damages = sorted(s.damages, key=lambda d: d.start)
        # interleave damage with records by offset
        for d in out:
            while damages and damages[0].start < d["frame_offset"]:
                yield {"type": "damage", **_damage(damages.pop(0), data)}
            yield d
        for dmg in damages:
            yield {"type": "damage", **_damage(dmg, data)}
