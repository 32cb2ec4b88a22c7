"""Segment files: naming, the 32-byte header, creation, directory fsync.

```
offset 0  8s magic "SHOALJNL" | u16 version | u16 header size | u32 salt
offset 16 u64 segment sequence | u32 reserved | u32 CRC-32 of bytes 0..28
```
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import struct
import zlib
from pathlib import Path

MAGIC = b"SHOALJNL"
VERSION = 1
SEGMENT_HEADER = struct.Struct("<8sHHIQII")
SEGMENT_HEADER_SIZE = SEGMENT_HEADER.size
assert SEGMENT_HEADER_SIZE == 32
SUFFIX = ".seg"
TMP_SUFFIX = ".seg.tmp"
_NAME = re.compile(r"^([0-9a-f]{16})\.seg$")


def segment_name(seq: int) -> str:
    return f"{seq:016x}{SUFFIX}"


def parse_name(name: str) -> int | None:
    m = _NAME.match(name)
    return int(m.group(1), 16) if m else None


def list_segments(directory: Path) -> list[tuple[int, Path]]:
    """``(seq, path)`` of every segment file, in sequence order."""
    out = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    for name in names:
        seq = parse_name(name)
        if seq is not None:
            out.append((seq, directory / name))
    out.sort()
    return out


def new_salt() -> int:
    return secrets.randbits(32)


def pack_header(seq: int, salt: int) -> bytes:
    head = SEGMENT_HEADER.pack(MAGIC, VERSION, SEGMENT_HEADER_SIZE, salt, seq, 0, 0)
    return head[:28] + struct.pack("<I", zlib.crc32(head[:28]))


def parse_header(data: bytes | memoryview, seq: int) -> tuple[int, str | None]:
    """``(salt, problem)``: the salt as stored, and what is wrong, if anything."""
    if len(data) < SEGMENT_HEADER_SIZE:
        return 0, "segment header cut short"
    magic, version, hsize, salt, hseq, _res, crc = SEGMENT_HEADER.unpack_from(data, 0)
    if zlib.crc32(data[:28]) != crc:
        return salt, "segment header CRC mismatch"
    if magic != MAGIC:
        return salt, f"bad magic {magic!r}"
    if version != VERSION or hsize != SEGMENT_HEADER_SIZE:
        return salt, f"unsupported format version {version} (header size {hsize})"
    if hseq != seq:
        return salt, f"header says segment {hseq}, file name says {seq}"
    return salt, None


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def preallocate(fd: int, size: int) -> None:
    """Reserve ``size`` bytes of zeros (posix_fallocate, else ftruncate)."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
        if os.fstat(fd).st_size < size:
            os.ftruncate(fd, size)


def write_all(fd: int, data: bytes | memoryview, pos: int) -> None:
    """``pwrite`` all of ``data`` at ``pos`` (short writes are continued)."""
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, pos)
        if n <= 0:  # pragma: no cover - pwrite raises instead
            raise OSError(errno.EIO, "pwrite wrote nothing")
        view = view[n:]
        pos += n


class FileOps:
    """How the writer writes and syncs a segment's data: a seam for tests.

    The fault-injection tests (``tests/store/faultfs.py``) put a layer here
    that keeps unsynced writes aside and tears them on a simulated power cut.
    """

    def write(self, fd: int, data: bytes | memoryview, pos: int) -> None:
        write_all(fd, data, pos)

    def sync(self, fd: int) -> None:
        # Looked up at call time so failure-injection tests can patch os.fdatasync.
        getattr(os, "fdatasync", os.fsync)(fd)


def create_segment(
    directory: Path, seq: int, salt: int, first: bytes, size: int, prealloc: bool
) -> tuple[int, Path]:
    """Create segment ``seq`` holding header + ``first`` (the snapshot frame).

    Written as ``NAME.tmp``, synced, renamed, directory synced: a ``.seg``
    file is never half made. Returns ``(fd opened read-write, path)``.
    """
    path = directory / segment_name(seq)
    tmp = directory / (segment_name(seq)[: -len(SUFFIX)] + TMP_SUFFIX)
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        head = pack_header(seq, salt)
        if prealloc:
            preallocate(fd, max(size, SEGMENT_HEADER_SIZE + len(first)))
        write_all(fd, head + first, 0)
        os.fsync(fd)
        os.rename(tmp, path)
        fsync_dir(directory)
    except BaseException:
        os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return fd, path
