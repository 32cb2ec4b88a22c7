"""Record encodings inside a frame's payload (tables in ``docs/journal.md``).

Every record is ``u8 tag, u32 n, n bytes``. ``MessageStored`` (tag 3) is the
hot path: one ``struct`` for the fixed fields, one NUL-joined UTF-8 block for
the strings, then the raw body. Rare records and values that do not fit the
compact forms use JSON (tags 1, 10, 11).
"""

from __future__ import annotations

import json
import struct
import sys
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from shoal.records import (
    AmqpHeaders,
    DeliveryCounted,
    GroupBound,
    GroupParked,
    GroupResumed,
    LogCommitted,
    MessageRemoved,
    MessageStored,
    QueueDeclared,
    QueueDeleted,
    Record,
    SinkBatchPublished,
)
from shoal.store.replay_fold import queue_from_dict, queue_to_dict

# -- tags ---------------------------------------------------------------------

T_QUEUE_DECLARED = 1
T_QUEUE_DELETED = 2
T_MESSAGE = 3
T_REMOVED = 4
T_COUNTED = 5
T_PARKED = 6
T_RESUMED = 7
T_LOG_COMMITTED = 8
T_SINK = 9
T_MESSAGE_WIDE = 10
T_WIDE = 11
T_BOUND = 12
T_SNAPSHOT = 32

TAG_NAMES = {
    T_QUEUE_DECLARED: "QueueDeclared",
    T_QUEUE_DELETED: "QueueDeleted",
    T_MESSAGE: "MessageStored",
    T_REMOVED: "MessageRemoved",
    T_COUNTED: "DeliveryCounted",
    T_PARKED: "GroupParked",
    T_RESUMED: "GroupResumed",
    T_LOG_COMMITTED: "LogCommitted",
    T_SINK: "SinkBatchPublished",
    T_MESSAGE_WIDE: "MessageStored",
    T_WIDE: "(wide)",
    T_BOUND: "GroupBound",
    T_SNAPSHOT: "Snapshot",
}

# -- structs ------------------------------------------------------------------

RECORD_HEADER = struct.Struct("<BI")  # tag, n
RH = RECORD_HEADER.size
assert RH == 5
# tag, n, id, group_seq, expires, timestamp, offset, priority, delivery_count,
# bucket, flags, text length
MESSAGE = struct.Struct("<BIQqqqqiiiBI")
assert MESSAGE.size == 62
MESSAGE_FIXED = MESSAGE.size - RH  # 57: counted in n
F_GROUP = 1
F_AMQP = 2  # the AMQP encoding as received follows the text block
_KEPT = struct.Struct("<Ii")  # its parts' lengths: before, after (-1: None)
_ID = struct.Struct("<BIQ")  # MessageRemoved
_ID_COUNT = struct.Struct("<BIQq")  # DeliveryCounted
_U32 = struct.Struct("<BII")  # GroupParked / GroupResumed (len of queue)
_QQ = struct.Struct("<BIqq")  # LogCommitted
_Q = struct.Struct("<BIq")  # SinkBatchPublished
_J = struct.Struct("<BII")  # wide message: json length
_U32U32 = struct.Struct("<BIII")  # GroupBound (lens of queue and group)

_UTF8 = "utf-8"
_SP = "surrogatepass"


class DecodeError(ValueError):
    """A payload whose CRC is good but whose records do not decode."""


class Snapshot:
    """The small-state record that opens every segment (not a core Record)."""

    __slots__ = ("state",)

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Snapshot) and other.state == self.state

    def __repr__(self) -> str:
        return f"Snapshot({self.state!r})"


# -- encoding -----------------------------------------------------------------

_NOT_WIDE = frozenset({"body", "body_size"})  # the body follows the JSON; its size is implied


def _s(s: str) -> bytes:
    return s.encode(_UTF8, _SP)


def _wide(rec: Record) -> bytes:
    d = {"type": type(rec).__name__}
    for f in fields(rec):
        d[f.name] = getattr(rec, f.name)
    b = json.dumps(d, separators=(",", ":")).encode()
    return RECORD_HEADER.pack(T_WIDE, len(b)) + b


def _message_wide(m: MessageStored) -> list[bytes]:
    d = {f.name: getattr(m, f.name) for f in fields(m) if f.name not in _NOT_WIDE}
    j = json.dumps(d, separators=(",", ":")).encode()
    body = m.body
    assert body is not None  # only a lazily recovered record lacks it; never rewritten
    return [_J.pack(T_MESSAGE_WIDE, 4 + len(j) + len(body), len(j)), j, body]


def encode_batch(records: Sequence[Record]) -> tuple[bytes, list[int]]:
    """Encode one batch: ``(payload, bodies)``.

    ``bodies[i]`` is ``offset << 32 | length`` of record ``i``'s body in the
    payload when it is a ``MessageStored``, else -1. (Taken now: records are
    mutable, and the broker may drop a body from memory once it is stored.)

    Written for mypyc (``src/shoal/_native.py`` compiles this module): plain
    loops instead of ``chain``, the two hot record types inline.
    """
    parts: list[bytes] = []
    offs: list[int] = []
    size = 0
    pack_msg = MESSAGE.pack
    pack_id = _ID.pack
    queues: dict[str, bytes] = {}  # MessageRemoved: each queue's name encoded once a batch
    for rec in records:
        # Typed reads: compiled, a record's fields are slots of a native class,
        # read without Python's attribute lookup (an untyped read took ~200
        # instructions a field). The types hold: the class checks them on
        # assignment, compiled; pure, pack and join raise as they would.
        if type(rec) is MessageStored:
            m = rec
            try:
                g = m.group
                h: dict[str, str] = m.headers
                body = m.body
                strs: list[Any] = [m.queue, m.destination, "" if g is None else g]
                for k, v in h.items():
                    strs.append(k)
                    strs.append(v)
                text = "\0".join(strs)
                if text.count("\0") != len(strs) - 1 or type(body) is not bytes:
                    raise TypeError
                tb = text.encode(_UTF8, _SP)
                flags = 0 if g is None else F_GROUP
                kept = b""
                if type(h) is AmqpHeaders:
                    before, after = h.encoding
                    kept = _KEPT.pack(len(before), -1 if after is None else len(after)) + before
                    if after is not None:
                        kept += after
                    flags |= F_AMQP
                head = pack_msg(
                    T_MESSAGE,
                    MESSAGE_FIXED + len(tb) + len(kept) + len(body),
                    m.id,
                    m.group_seq,
                    m.expires,
                    m.timestamp,
                    m.offset,
                    m.priority,
                    m.delivery_count,
                    m.bucket,
                    flags,
                    len(tb),
                )
            except (TypeError, struct.error):
                p = _message_wide(rec)
                size += len(p[0]) + len(p[1])
                offs.append(size << 32 | len(p[2]))
                parts += p
                size += len(p[2])
                continue
            parts.append(head)
            parts.append(tb)
            if kept:
                parts.append(kept)
            size += 62 + len(tb) + len(kept)
            offs.append(size << 32 | len(body))
            parts.append(body)
            size += len(body)
            continue
        offs.append(-1)
        if type(rec) is MessageRemoved:
            r = rec
            try:
                q = queues.get(r.queue)
                if q is None:
                    q = queues[r.queue] = _s(r.queue)
                parts.append(pack_id(T_REMOVED, 8 + len(q), r.id))
            except (struct.error, TypeError, AttributeError):
                b = _wide(rec)
                parts.append(b)
                size += len(b)
                continue
            parts.append(q)
            size += 13 + len(q)
            continue
        b = _encode_small(rec)
        parts.append(b)
        size += len(b)
    return b"".join(parts), offs


def _encode_small(rec: Record) -> bytes:
    """The rare records (``MessageRemoved`` is encoded in ``encode_batch``)."""
    t = type(rec)
    try:
        if t is DeliveryCounted:
            q = _s(rec.queue)  # type: ignore[union-attr]
            head = _ID_COUNT.pack(T_COUNTED, 16 + len(q), rec.id, rec.count)  # type: ignore[union-attr]
            return head + q
        if t is QueueDeclared:
            d = queue_to_dict(rec)  # type: ignore[arg-type]
            b = json.dumps(d, separators=(",", ":")).encode()
            return RECORD_HEADER.pack(T_QUEUE_DECLARED, len(b)) + b
        if t is QueueDeleted:
            b = _s(rec.name)  # type: ignore[union-attr]
            return RECORD_HEADER.pack(T_QUEUE_DELETED, len(b)) + b
        if t is GroupParked or t is GroupResumed:
            q = _s(rec.queue)  # type: ignore[union-attr]
            g = _s(rec.group)  # type: ignore[union-attr,arg-type]
            tag = T_PARKED if t is GroupParked else T_RESUMED
            return _U32.pack(tag, 4 + len(q) + len(g), len(q)) + q + g
        if t is LogCommitted:
            q = _s(rec.queue)  # type: ignore[union-attr]
            head = _QQ.pack(T_LOG_COMMITTED, 16 + len(q), rec.bucket, rec.offset)  # type: ignore[union-attr]
            return head + q
        if t is SinkBatchPublished:
            s = _s(rec.sink_id)  # type: ignore[union-attr]
            return _Q.pack(T_SINK, 8 + len(s), rec.batch_id) + s  # type: ignore[union-attr]
        if t is GroupBound:
            q = _s(rec.queue)  # type: ignore[union-attr]
            g = _s(rec.group)  # type: ignore[union-attr,arg-type]
            n = _s(rec.node)  # type: ignore[union-attr]
            head = _U32U32.pack(T_BOUND, 8 + len(q) + len(g) + len(n), len(q), len(g))
            return head + q + g + n
    except (struct.error, AttributeError, TypeError):  # TypeError: compiled, a field's type
        return _wide(rec)
    raise TypeError(f"not a store record: {rec!r}")


def encode_snapshot(state: dict[str, Any]) -> bytes:
    b = json.dumps(state, separators=(",", ":")).encode()
    return RECORD_HEADER.pack(T_SNAPSHOT, len(b)) + b


# -- decoding -----------------------------------------------------------------

_WIDE_TYPES: dict[str, type] = {
    c.__name__: c
    for c in (
        QueueDeleted,
        MessageRemoved,
        DeliveryCounted,
        GroupParked,
        GroupResumed,
        LogCommitted,
        SinkBatchPublished,
        GroupBound,
    )
}


def decode_payload(buf: bytes, start: int, end: int) -> list[tuple[Record | Snapshot, int]]:
    """Decode the records of the payload ``buf[start:end]``.

    Returns ``(record, body_offset)`` pairs; ``body_offset`` is the body's
    position in ``buf`` for messages, else -1. Raises DecodeError. ``buf`` is
    the segment's bytes (slicing bytes is cheaper than slicing a memoryview
    for the small pieces taken here).
    """
    try:
        return _decode(buf, start, end)
    except DecodeError:
        raise
    except DECODE_ERRORS as e:
        raise DecodeError(f"undecodable record: {e}") from e


# What a payload that does not decode raises (DecodeError is a ValueError).
DECODE_ERRORS = (struct.error, UnicodeDecodeError, ValueError, KeyError, TypeError, IndexError)


def _decode(
    buf: bytes,
    start: int,
    end: int,
    lazy: bool = False,  # leave queue messages' bodies in buf (body None, body_size set)
    # Bound once as defaults: this runs once per frame, a million times in a
    # recovery, and setting up these locals on every call costs more than it
    # looks.
    unpack_msg: Any = MESSAGE.unpack_from,
    unpack_rh: Any = RECORD_HEADER.unpack_from,
    unpack_kept: Any = _KEPT.unpack_from,
    intern: Any = sys.intern,
    Msg: Any = MessageStored,
) -> list[tuple[Record | Snapshot, int]]:
    out: list[tuple[Record | Snapshot, int]] = []
    append = out.append
    pos = start
    while pos < end:
        if buf[pos] == 3:  # T_MESSAGE (literals: no global lookups per message)
            (_, n, mid, gseq, exp, ts, off, prio, dc, bucket, flags, tl) = unpack_msg(buf, pos)
            t0 = pos + 62
            b0 = t0 + tl
            pos += 5 + n  # RH
            if b0 > pos or pos > end:
                raise DecodeError("message record lengths do not add up")
            parts = buf[t0:b0].decode("utf-8", "surrogatepass").split("\0")
            np = len(parts)
            if np < 3 or not np & 1:
                raise DecodeError("message text block is malformed")
            # Header names repeat from message to message: interned, a million
            # messages share one copy of each (values are left alone).
            headers = dict(zip(map(intern, parts[3::2]), parts[4::2])) if np > 3 else {}
            if flags & 2:  # F_AMQP: the encoding as received, then the body
                if b0 + 8 > pos:
                    raise DecodeError("message record lengths do not add up")
                before_n, after_n = unpack_kept(buf, b0)
                k0 = b0 + 8 + before_n
                kept = AmqpHeaders(headers)
                kept.encoding = (
                    bytes(buf[b0 + 8 : k0]),
                    None if after_n < 0 else bytes(buf[k0 : k0 + after_n]),
                )
                headers = kept
                b0 = k0 + max(after_n, 0)
                if b0 > pos:
                    raise DecodeError("message record lengths do not add up")
            # Log queues serve their records from memory: their bodies always come.
            body = None if lazy and bucket < 0 else buf[b0:pos]
            m = Msg(
                intern(parts[0]),
                mid,
                intern(parts[1]),
                headers,
                body,
                intern(parts[2]) if flags & 1 else None,  # F_GROUP
                gseq,
                exp,
                prio,
                ts,
                dc,
                bucket,
                off,
            )
            if body is None:
                m.body_size = pos - b0
            append((m, b0))
            continue
        tag, n = unpack_rh(buf, pos)
        p0 = pos + RH
        pos = p0 + n
        if pos > end:
            raise DecodeError(f"record (tag {tag}) runs past the end of its batch")
        if tag == T_REMOVED:
            (mid,) = _UQ.unpack_from(buf, p0)
            append((MessageRemoved(intern(_str(buf, p0 + 8, pos)), mid), -1))
        elif tag == T_COUNTED:
            mid, count = _UQq.unpack_from(buf, p0)
            append((DeliveryCounted(intern(_str(buf, p0 + 16, pos)), mid, count), -1))
        elif tag == T_QUEUE_DECLARED:
            append((queue_from_dict(json.loads(buf[p0:pos])), -1))
        elif tag == T_QUEUE_DELETED:
            append((QueueDeleted(_str(buf, p0, pos)), -1))
        elif tag in (T_PARKED, T_RESUMED):
            (ql,) = _UI.unpack_from(buf, p0)
            if p0 + 4 + ql > pos:
                raise DecodeError("group record lengths do not add up")
            q = _str(buf, p0 + 4, p0 + 4 + ql)
            g = _str(buf, p0 + 4 + ql, pos)
            append(((GroupParked if tag == T_PARKED else GroupResumed)(q, g), -1))
        elif tag == T_LOG_COMMITTED:
            b, o = _Uqq.unpack_from(buf, p0)
            append((LogCommitted(_str(buf, p0 + 16, pos), b, o), -1))
        elif tag == T_SINK:
            (bid,) = _Uq.unpack_from(buf, p0)
            append((SinkBatchPublished(_str(buf, p0 + 8, pos), bid), -1))
        elif tag == T_BOUND:
            ql, gl = _UII.unpack_from(buf, p0)
            if p0 + 8 + ql + gl > pos:
                raise DecodeError("binding record lengths do not add up")
            q = _str(buf, p0 + 8, p0 + 8 + ql)
            g = _str(buf, p0 + 8 + ql, p0 + 8 + ql + gl)
            append((GroupBound(q, g, _str(buf, p0 + 8 + ql + gl, pos)), -1))
        elif tag == T_MESSAGE_WIDE:
            (jl,) = _UI.unpack_from(buf, p0)
            b0 = p0 + 4 + jl
            if b0 > pos:
                raise DecodeError("wide message lengths do not add up")
            d = json.loads(buf[p0 + 4 : b0])
            append((MessageStored(body=buf[b0:pos], **d), b0))
        elif tag == T_WIDE:
            d = json.loads(buf[p0:pos])
            cls = _WIDE_TYPES[d.pop("type")]
            append((cls(**d), -1))
        elif tag == T_SNAPSHOT:
            append((Snapshot(json.loads(buf[p0:pos])), -1))
        else:
            raise DecodeError(f"unknown record tag {tag}")
    if pos != end:
        raise DecodeError("records run past the end of their batch")
    return out


_UQ = struct.Struct("<Q")
_UQq = struct.Struct("<Qq")
_UI = struct.Struct("<I")
_UII = struct.Struct("<II")
_Uqq = struct.Struct("<qq")
_Uq = struct.Struct("<q")


def _str(buf: bytes, a: int, b: int) -> str:
    # b < a is "" as in Python: a record too short for its fixed fields (damaged
    # bytes, salvage) must decode here as it does pure; mypyc's compiled bytes
    # slice raises SystemError (a negative size) instead of returning b"".
    return buf[a:b].decode(_UTF8, _SP) if a < b else ""
