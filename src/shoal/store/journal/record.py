"""Framing: one write (one ``sync()`` round: one or more batches) is one frame.

```
u32 crc | u32 length L | u64 batch sequence | payload (L bytes) | zero pad to 8
```

Frames start at multiples of 8 so the 8-byte length word (crc + L) never
straddles a sector. The CRC is seeded with the segment's salt and covers
bytes 4.. of the frame: L, the sequence number and the payload, one
contiguous run (one ``crc32`` call when reading). See ``docs/journal.md``.

A frame is the unit of one ``pwrite`` + ``fdatasync``: a power cut that tears
that write (any of its sectors missing) fails the one CRC, so recovery sees
the whole write or none of it, never a valid later part of it.
"""

from __future__ import annotations

import struct
import zlib

FRAME_HEADER = struct.Struct("<IIQ")  # crc, length, batch sequence
FRAME_HEADER_SIZE = FRAME_HEADER.size
assert FRAME_HEADER_SIZE == 16
_TAIL = struct.Struct("<IQ")  # length, sequence: the header bytes the CRC covers
_CRC = struct.Struct("<I")
ALIGN = 8
MAX_PAYLOAD = 0xFFFF_FFFF
_PAD = [b"\0" * i for i in range(ALIGN)]

_crc32 = zlib.crc32


def align8(n: int) -> int:
    return (n + 7) & ~7


def frame_size(payload_len: int) -> int:
    """Bytes a frame with ``payload_len`` bytes of payload takes on disk."""
    return FRAME_HEADER_SIZE + ((payload_len + 7) & ~7)


def frame_parts(salt: int, seq: int, payload: bytes) -> tuple[bytes, bytes, bytes]:
    """The three pieces of a frame (header, payload, padding) for ``b"".join``."""
    n = len(payload)
    tail = _TAIL.pack(n, seq)
    crc = _crc32(payload, _crc32(tail, salt))
    return _CRC.pack(crc) + tail, payload, _PAD[-n & 7]


def frame_pieces(salt: int, seq: int, payloads: list[bytes]) -> list[bytes]:
    """A frame whose payload is ``payloads`` back to back, as pieces for ``b"".join``.

    The CRC runs over the pieces one by one: the payload is never copied
    before the single join of the write.
    """
    n = sum(map(len, payloads))
    tail = _TAIL.pack(n, seq)
    crc = _crc32(tail, salt)
    for p in payloads:
        crc = _crc32(p, crc)
    return [_CRC.pack(crc) + tail, *payloads, _PAD[-n & 7]]


def check_frame(
    buf: bytes | memoryview, pos: int, end: int, salt: int, last_seq: int
) -> tuple[int, int] | str:
    """Validate the frame at ``pos``; ``(payload_len, seq)`` or the reason it is bad.

    ``end`` is the end of the readable data. Decoding the records is the
    caller's business.
    """
    if pos + FRAME_HEADER_SIZE > end:
        return "frame header cut short"
    crc, length, seq = FRAME_HEADER.unpack_from(buf, pos)
    if length == 0:
        return "zero length"
    p0 = pos + FRAME_HEADER_SIZE
    p1 = p0 + length
    stop = p0 + ((length + 7) & ~7)
    if stop > end:
        return f"length {length} runs past the end of the file"
    if _crc32(buf[pos + 4 : p1], salt) != crc:
        return "CRC mismatch"
    if stop != p1 and any(buf[p1:stop]):
        return "non-zero padding"
    if seq <= last_seq:
        return f"batch sequence {seq} not after {last_seq}"
    return length, seq
