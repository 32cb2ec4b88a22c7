"""Framing: one batch (one ``Store.append``) is one frame.

```
u32 length L | u32 crc | u64 batch sequence | payload (L bytes) | zero pad to 8
```

Frames start at multiples of 8 so the 8-byte length word never straddles a
sector. The CRC is seeded with the segment's salt and covers L, the sequence
number and the payload. See ``docs/journal.md``.
"""

from __future__ import annotations

import struct
import zlib

FRAME_HEADER = struct.Struct("<IIQ")  # length, crc, batch sequence
FRAME_HEADER_SIZE = FRAME_HEADER.size
assert FRAME_HEADER_SIZE == 16
CRC_PREFIX = struct.Struct("<IQ")  # length, sequence: what the CRC covers before the payload
ALIGN = 8
MAX_PAYLOAD = 0xFFFF_FFFF
ZERO_HEADER = bytes(FRAME_HEADER_SIZE)
_PAD = [b"\0" * i for i in range(ALIGN)]

_crc32 = zlib.crc32


def align8(n: int) -> int:
    return (n + 7) & ~7


def frame_size(payload_len: int) -> int:
    """Bytes a frame with ``payload_len`` bytes of payload takes on disk."""
    return FRAME_HEADER_SIZE + ((payload_len + 7) & ~7)


def frame_crc(salt: int, length: int, seq: int, payload: bytes | memoryview) -> int:
    return _crc32(payload, _crc32(CRC_PREFIX.pack(length, seq), salt))


def frame_parts(salt: int, seq: int, payload: bytes) -> tuple[bytes, bytes, bytes]:
    """The three pieces of a frame (header, payload, padding) for ``b"".join``."""
    n = len(payload)
    crc = _crc32(payload, _crc32(CRC_PREFIX.pack(n, seq), salt))
    return FRAME_HEADER.pack(n, crc, seq), payload, _PAD[-n & 7]


def check_frame(
    buf: bytes | memoryview, pos: int, end: int, salt: int, last_seq: int
) -> tuple[int, int] | str:
    """Validate the frame at ``pos``; ``(payload_len, seq)`` or the reason it is bad.

    ``end`` is the end of the readable data. Decoding the records is the
    caller's business.
    """
    if pos + FRAME_HEADER_SIZE > end:
        return "frame header cut short"
    length, crc, seq = FRAME_HEADER.unpack_from(buf, pos)
    if length == 0:
        return "zero length"
    p0 = pos + FRAME_HEADER_SIZE
    p1 = p0 + length
    stop = p0 + ((length + 7) & ~7)
    if stop > end:
        return f"length {length} runs past the end of the file"
    if _crc32(buf[p0:p1], _crc32(CRC_PREFIX.pack(length, seq), salt)) != crc:
        return "CRC mismatch"
    if stop != p1 and any(buf[p1:stop]):
        return "non-zero padding"
    if seq <= last_seq:
        return f"batch sequence {seq} not after {last_seq}"
    return length, seq
