"""A durable write submitted from the event loop: Linux io_uring through ctypes.

The journal's sync round is one write of one frame (``Store.plan_sync``).
Submitted here as an ``IORING_OP_WRITE`` with ``RWF_DSYNC`` (the data is
durable when it completes, as write + fdatasync), the kernel does the write
and the sync in its own worker, and the completion wakes the loop through an
eventfd. No Python thread takes part, so no GIL hand-off and no thread wake-up
sit between a receipted SEND and its fsync (they were most of a W6 round trip
after the fsync itself: docs/benchmark-history.md, "What profiling found"). A frozen or hung disk
blocks the kernel's worker, never the loop: the write goes straight to a
worker (``IOSQE_ASYNC``), since a durable write would wait anyway and trying
it inline first only costs the loop time.

Only what that needs: one ring, one write in flight, no SQPOLL. The ring's
layout is the kernel's ABI (include/uapi/linux/io_uring.h). Stores into the
shared rings are plain memory writes in program order, which x86-64 keeps in
order for the kernel to see; on other architectures ``open_ring`` declines
and the worker thread stays.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os
import platform
import re
import struct
from collections.abc import Sequence
from typing import Any, Final

log = logging.getLogger("shoal.persistence")

# Final: compiled, these are constants, not a module dict lookup each.
_NR_SETUP: Final = 425  # x86-64 syscall numbers
_NR_ENTER: Final = 426
_NR_REGISTER: Final = 427
_OP_WRITE: Final = 23
_SQE_ASYNC: Final = 1 << 4
_REGISTER_EVENTFD: Final = 4
_ENTER_GETEVENTS: Final = 1
_FEAT_SINGLE_MMAP: Final = 1
_OFF_SQ_RING: Final = 0
_OFF_SQES: Final = 0x10000000
_SQE_SIZE: Final = 64  # struct io_uring_sqe
_CQE_SIZE: Final = 16  # struct io_uring_cqe: user_data (u64), res (i32), flags (u32)
_ENTRIES: Final = 64  # the ring's size; one write is in flight at a time
WRITE: Final = 0  # the write's token in ``complete``'s results


# struct io_uring_params, 120 bytes: sq_entries, cq_entries, flags,
# sq_thread_cpu, sq_thread_idle, features, wq_fd, resv[3]; then struct
# io_sqring_offsets (head, tail, ring_mask, ring_entries, flags, dropped, array,
# resv1, user_addr) and struct io_cqring_offsets (head, tail, ring_mask,
# ring_entries, overflow, cqes, flags, resv1, user_addr). Read with struct, not
# ctypes.Structure: mypyc compiles this module and mis-links ctypes' classes.
_PARAMS: Final = struct.Struct("<10I8IQ8IQ")
_P_SQ_ENTRIES: Final = 0
_P_CQ_ENTRIES: Final = 1
_P_FEATURES: Final = 5
_P_SQ: Final = 10  # sq_off's fields from here, in the order above
_P_CQ: Final = 19  # cq_off's fields from here


_libc = ctypes.CDLL(None, use_errno=True)  # CDLL: the GIL is released in each call
_syscall: Any = _libc.syscall
_syscall.restype = ctypes.c_long


def _bytes_data_offset() -> int | None:
    """Where CPython keeps a bytes object's data, from the object's address
    (``PyBytesObject.ob_sval``, inline): an entry's buffer address without
    three ctypes objects per entry. None where a probe disagrees."""
    offset = bytes.__basicsize__ - 1  # the struct ends with the data's first byte
    probe = bytes(range(48))
    address = ctypes.cast(ctypes.c_char_p(probe), ctypes.c_void_p).value
    return offset if address == id(probe) + offset else None


_BYTES_DATA = _bytes_data_offset()


def _address(data: bytes) -> int:
    if _BYTES_DATA is not None and type(data) is bytes:
        return id(data) + _BYTES_DATA
    return ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value or 0


def _check(result: int) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


class DsyncRing:
    """One io_uring with an eventfd: ``submit`` a durable write, wait for
    ``eventfd`` to be readable, ``complete`` it."""

    def __init__(self) -> None:
        # What the kernel may still read, by token: kept alive until its completion.
        self._buffers: dict[int, bytes] = {}
        self._maps: list[mmap.mmap] = []  # what close() unmaps
        self._views: list[memoryview] = []  # released before that
        raw = ctypes.create_string_buffer(_PARAMS.size)
        self.fd = _check(_syscall(_NR_SETUP, _ENTRIES, raw))
        self.eventfd = -1
        try:
            params: tuple[int, ...] = _PARAMS.unpack(raw.raw)
            if not params[_P_FEATURES] & _FEAT_SINGLE_MMAP:  # open_ring asks for 5.6 anyway
                raise OSError(0, "io_uring without IORING_FEAT_SINGLE_MMAP (kernel < 5.4)")
            sq_entries, cq_entries = params[_P_SQ_ENTRIES], params[_P_CQ_ENTRIES]
            sq_tail, sq_mask, sq_array = params[_P_SQ + 1], params[_P_SQ + 2], params[_P_SQ + 6]
            cq_head, cq_tail = params[_P_CQ], params[_P_CQ + 1]
            cq_mask, cqes = params[_P_CQ + 2], params[_P_CQ + 5]
            size = max(sq_array + sq_entries * 4, cqes + cq_entries * _CQE_SIZE)
            size = (size + 7) & ~7  # whole u64 words for the views below (the map is pages)
            prot = mmap.PROT_READ | mmap.PROT_WRITE
            rings = mmap.mmap(self.fd, size, mmap.MAP_SHARED, prot, offset=_OFF_SQ_RING)
            self._maps.append(rings)
            sqes = mmap.mmap(
                self.fd, sq_entries * _SQE_SIZE, mmap.MAP_SHARED, prot, offset=_OFF_SQES
            )
            self._maps.append(sqes)
            # The rings and entries as arrays of words: an item read or written
            # costs less than a struct call (the hot paths run once a receipt).
            # The kernel's offsets are aligned to their fields' sizes.
            self._u32 = memoryview(rings).cast("I")
            self._views.append(self._u32)
            self._i32 = memoryview(rings).cast("i")
            self._views.append(self._i32)
            self._u64 = memoryview(rings).cast("Q")
            self._views.append(self._u64)
            self._sqe_words = memoryview(sqes).cast("Q")  # 8 a struct io_uring_sqe
            self._views.append(self._sqe_words)
            # indexes of the fields in those arrays
            self._sq_tail: int = sq_tail >> 2
            self._cq_head: int = cq_head >> 2
            self._cq_tail: int = cq_tail >> 2
            self._cqes: int = cqes >> 2  # a CQE is 4 u32s: user_data (2), res, flags
            self._sq_mask_value: int = self._u32[sq_mask >> 2]
            self._cq_mask_value: int = self._u32[cq_mask >> 2]
            # The SQ array maps ring slots to SQEs; one to one, set once.
            for i in range(sq_entries):
                self._u32[(sq_array >> 2) + i] = i
            self.eventfd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
            efd = ctypes.c_int32(self.eventfd)
            _check(_syscall(_NR_REGISTER, self.fd, _REGISTER_EVENTFD, ctypes.byref(efd), 1))
        except BaseException:
            self.close()
            raise

    @property
    def busy(self) -> bool:
        """A write is in flight."""
        return WRITE in self._buffers

    @property
    def idle(self) -> bool:
        """Nothing at all in flight."""
        return not self._buffers

    def submit(self, fd: int, data: bytes, offset: int) -> None:
        """Write ``data`` at ``offset`` of ``fd`` with RWF_DSYNC (one at a time)."""
        assert WRITE not in self._buffers, "one write in flight at a time"
        tail: int = self._u32[self._sq_tail]
        self._put(tail, _OP_WRITE, _SQE_ASYNC, fd, offset, data, os.RWF_DSYNC, WRITE)
        self._buffers[WRITE] = data
        if self._enter(tail, [WRITE]) == 0:
            raise OSError(errno.EAGAIN, "io_uring took no entries")

    def _enter(self, tail: int, tokens: Sequence[int]) -> int:
        """Submit the entries put from ``tail`` on, one per token; returns how
        many the kernel took. What it did not take is taken back, so that a
        later enter never submits stale entries whose buffers are gone (no
        SQPOLL: the kernel reads the ring only inside enter)."""
        count = len(tokens)
        self._u32[self._sq_tail] = (tail + count) & 0xFFFFFFFF  # after the SQEs
        taken = 0
        try:
            taken = _check(_syscall(_NR_ENTER, self.fd, count, 0, 0, None, 0))
        finally:
            if taken < count:
                self._u32[self._sq_tail] = (tail + taken) & 0xFFFFFFFF
                for token in tokens[taken:]:
                    self._buffers.pop(token, None)
        return taken

    def _put(
        self,
        slot: int,
        op: int,
        flags: int,
        fd: int,
        offset: int,
        data: bytes,
        op_flags: int,
        token: int,
    ) -> None:
        # struct io_uring_sqe as 8 little-endian u64 words: opcode, flags,
        # ioprio (0) and fd; off; addr; len and the op's flags; user_data.
        # Words 5-7 (buf_index, personality, addr3...) stay zero: nothing
        # here writes them and the kernel only reads SQEs.
        words = self._sqe_words
        base = (slot & self._sq_mask_value) * 8
        words[base] = op | flags << 8 | (fd & 0xFFFFFFFF) << 32
        words[base + 1] = offset
        words[base + 2] = _address(data)
        words[base + 3] = len(data) | op_flags << 32  # the write's rw_flags
        words[base + 4] = token

    def complete(self, wait: bool = False) -> list[tuple[int, int]]:
        """The finished operations as ``(token, result)`` in the kernel's order:
        bytes written, or -errno (``wait``: block until nothing is in
        flight)."""
        if wait:
            while len(self._buffers) > self._ready():
                try:
                    _check(_syscall(_NR_ENTER, self.fd, 0, 1, _ENTER_GETEVENTS, None, 0))
                except InterruptedError:
                    continue
        try:
            os.eventfd_read(self.eventfd)
        except BlockingIOError:
            pass
        done: list[tuple[int, int]] = []
        u32 = self._u32
        head: int = u32[self._cq_head]
        tail: int = u32[self._cq_tail]
        while head != tail:
            at = self._cqes + (head & self._cq_mask_value) * 4
            token: int = self._u64[at >> 1]
            res: int = self._i32[at + 2]
            head = (head + 1) & 0xFFFFFFFF
            self._buffers.pop(token, None)
            done.append((token, res))
        u32[self._cq_head] = head
        return done

    def _ready(self) -> int:
        """How many completions wait in the CQ ring."""
        head: int = self._u32[self._cq_head]
        tail: int = self._u32[self._cq_tail]
        return (tail - head) & 0xFFFFFFFF

    def close(self) -> None:
        if self._buffers and len(self._maps) == 2:
            self.complete(wait=True)  # the kernel may still read the buffers
        for view in self._views:
            view.release()
        self._views.clear()
        for mapped in reversed(self._maps):
            mapped.close()
        self._maps.clear()
        if self.eventfd >= 0:
            os.close(self.eventfd)
            self.eventfd = -1
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


_MIN_KERNEL = (5, 6)  # IORING_OP_WRITE; 5.4 and 5.5 have rings but answer it with EINVAL


def kernel_has_write_op(release: str) -> bool:
    """Whether a kernel release string (``os.uname().release``) is 5.6 or later."""
    numbers = re.findall(r"\d+", release)[:2]
    if len(numbers) < 2:
        return False
    return (int(numbers[0]), int(numbers[1])) >= _MIN_KERNEL


def open_ring() -> DsyncRing | None:
    """A ring, or None where io_uring cannot be used (the fsync thread does the
    syncs then): not x86-64 Linux, a kernel before 5.6, io_uring disabled
    (``kernel.io_uring_disabled``), a seccomp filter, or ``SHOAL_IO_URING=0``."""
    if os.environ.get("SHOAL_IO_URING", "").strip().lower() in ("0", "false", "no", "off"):
        return None
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return None
    if not kernel_has_write_op(os.uname().release):
        return None
    if not hasattr(os, "eventfd") or not hasattr(os, "RWF_DSYNC"):
        return None
    try:
        return DsyncRing()
    except OSError as exc:
        log.info("io_uring not available (%s): journal syncs run on a worker thread", exc)
        return None
