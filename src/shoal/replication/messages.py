"""What the two processes of a pair say to each other, and its bytes.

Five messages, plain slotted classes. Every one carries ``epoch``: the term
of the sender's view (the live process's term for what a primary sends, the
highest term a backup has heard of for its Hello and Stale; for an Ack, the
term whose batches it counts, which is older while a backup that heard of a
new term waits for its copy).

- ``Hello(epoch, term, seq)``, backup -> primary: "I hold the records of
  term ``term`` up to and including batch ``seq``" (``term`` 0: nothing the
  primary can stream onto). Sent when the backup starts, when it learns of a
  new term, and again while it hears nothing.
- ``Data(epoch, seq, payload)``, primary -> backup: one batch of journal
  records, opaque bytes. Batch numbers start at 1 in every term and grow by
  one.
- ``Copy(epoch, upto, image)``, primary -> backup: an image of the primary's
  store holding every batch up to ``upto`` (catch-up by copying); streaming
  goes on at ``upto + 1``.
- ``Ack(epoch, received, durable)``, backup -> primary: cumulative; every
  batch up to ``received`` is in the backup's memory, up to ``durable`` on
  its disk.
- ``Stale(epoch)``: "your term is over, the current one is ``epoch``"; the
  answer to a message of an older term.

Bytes. A stream of frames; all integers little-endian:

```
offset 0   u32 L: length of what follows (1 <= L <= MAX_FRAME_BYTES)
offset 4   u8 kind: 1 Hello, 2 Data, 3 Copy, 4 Ack, 5 Stale
offset 5   u64 epoch
offset 13  the kind's fields:
             Hello  u64 term, u64 seq
             Data   u64 seq, then the payload (the rest of the frame)
             Copy   u64 upto, then the image (the rest of the frame)
             Ack    u64 received, u64 durable
             Stale  nothing
```

A frame whose kind is unknown, whose length does not fit its kind (Hello,
Ack and Stale have exact lengths), or that is longer than
``MAX_FRAME_BYTES`` is a ``ReplicationProtocolError``: the connection is
dropped, never the process. Integrity is the transport's (TCP); the journal
keeps its own CRCs inside payloads and images.
"""

from __future__ import annotations

import struct

from shoal.errors import RemoteProtocolError

MAX_FRAME_BYTES = 1 << 30  # one Data batch or one Copy image, and its header

HEAD = struct.Struct("<IBQ")  # length, kind, epoch
ONE = struct.Struct("<Q")
TWO = struct.Struct("<QQ")
HELLO, DATA, COPY, ACK, STALE = 1, 2, 3, 4, 5


class ReplicationProtocolError(RemoteProtocolError):
    """The peer sent bytes that are not a replication frame."""


class Plain:
    """A plain value: equality and a readable repr from ``FIELDS`` (bytes show
    as their length)."""

    __slots__ = ()
    FIELDS: tuple[str, ...] = ()

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, f) for f in self.FIELDS)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._values() == other._values()

    def __hash__(self) -> int:
        return hash((type(self), self._values()))

    def __repr__(self) -> str:
        shown = (
            f"{len(v)} bytes" if isinstance(v, bytes) else f"{f}={v}"
            for f, v in zip(self.FIELDS, self._values())
        )
        return f"{type(self).__name__}({', '.join(shown)})"


class Hello(Plain):
    __slots__ = FIELDS = ("epoch", "term", "seq")

    def __init__(self, epoch: int, term: int, seq: int) -> None:
        self.epoch, self.term, self.seq = epoch, term, seq


class Data(Plain):
    __slots__ = FIELDS = ("epoch", "seq", "payload")

    def __init__(self, epoch: int, seq: int, payload: bytes) -> None:
        self.epoch, self.seq, self.payload = epoch, seq, payload


class Copy(Plain):
    __slots__ = FIELDS = ("epoch", "upto", "image")

    def __init__(self, epoch: int, upto: int, image: bytes) -> None:
        self.epoch, self.upto, self.image = epoch, upto, image


class Ack(Plain):
    __slots__ = FIELDS = ("epoch", "received", "durable")

    def __init__(self, epoch: int, received: int, durable: int) -> None:
        self.epoch, self.received, self.durable = epoch, received, durable


class Stale(Plain):
    __slots__ = FIELDS = ("epoch",)

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch


Message = Hello | Data | Copy | Ack | Stale


def _frame(kind: int, epoch: int, fields: bytes, rest: bytes = b"") -> bytes:
    length = HEAD.size - 4 + len(fields) + len(rest)
    if length > MAX_FRAME_BYTES:
        raise ValueError(f"a replication frame of {length} bytes is over {MAX_FRAME_BYTES}")
    return HEAD.pack(length, kind, epoch) + fields + rest


def encode(msg: Message) -> bytes:
    """One frame. Raises ValueError for a number that does not fit a u64."""
    try:
        if type(msg) is Data:
            return _frame(DATA, msg.epoch, ONE.pack(msg.seq), msg.payload)
        if type(msg) is Ack:
            return _frame(ACK, msg.epoch, TWO.pack(msg.received, msg.durable))
        if type(msg) is Hello:
            return _frame(HELLO, msg.epoch, TWO.pack(msg.term, msg.seq))
        if type(msg) is Copy:
            return _frame(COPY, msg.epoch, ONE.pack(msg.upto), msg.image)
        if type(msg) is Stale:
            return _frame(STALE, msg.epoch, b"")
    except struct.error as e:
        raise ValueError(f"{msg!r} does not fit its frame: {e}") from None
    raise TypeError(f"not a replication message: {msg!r}")


def _decode(kind: int, epoch: int, body: memoryview) -> Message:
    n = len(body)
    if kind in (HELLO, ACK):
        if n != TWO.size:
            raise ReplicationProtocolError(f"a frame of kind {kind} must hold 16 bytes, not {n}")
        a, b = TWO.unpack(body)
        return Hello(epoch, a, b) if kind == HELLO else Ack(epoch, a, b)
    if kind in (DATA, COPY):
        if n < ONE.size:
            raise ReplicationProtocolError(f"a frame of kind {kind} is {n} bytes, too short")
        (seq,) = ONE.unpack_from(body)
        rest = bytes(body[ONE.size :])
        return Data(epoch, seq, rest) if kind == DATA else Copy(epoch, seq, rest)
    if kind == STALE:
        if n:
            raise ReplicationProtocolError(f"a Stale frame holds nothing, not {n} bytes")
        return Stale(epoch)
    raise ReplicationProtocolError(f"unknown replication frame kind {kind}")


class Decoder:
    """Bytes in, messages out: ``receive_data(chunk)``, then ``next_message()``
    until it returns None (a frame is not complete yet)."""

    def __init__(self, max_frame: int = MAX_FRAME_BYTES) -> None:
        self.max_frame = max_frame
        self._buf = bytearray()
        self._pos = 0

    def receive_data(self, data: bytes) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def next_message(self) -> Message | None:
        buf, pos = self._buf, self._pos
        if len(buf) - pos < HEAD.size:
            return None
        length, kind, epoch = HEAD.unpack_from(buf, pos)
        if length < HEAD.size - 4 or length > self.max_frame:
            raise ReplicationProtocolError(
                f"replication frame length {length} is outside 9..{self.max_frame}"
            )
        end = pos + 4 + length
        if len(buf) < end:
            return None
        with memoryview(buf) as view:
            msg = _decode(kind, epoch, view[pos + HEAD.size : end])
        self._pos = end
        return msg
