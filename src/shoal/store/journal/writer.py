"""``JournalStore``: the durable Store (format and rules: ``docs/journal.md``).

Threads and locks (taken in this order, never the other way round):

- ``_sync_lock``: one ``sync()`` / ``close()`` / ``compact()`` at a time. The
  writer state (current segment, write position, batch numbers) belongs to
  whoever holds it.
- ``_index_lock``: the live-message index (``_state``, ``_body``, ``_live``,
  ``_refs``, ``_segments``, ``_fds``), read by ``load_body`` from any thread.
- ``_pending_lock``: the list of encoded batches ``append`` adds to (event
  loop thread) and ``sync`` takes (worker thread), and ``_writing``, the
  batches a sync has taken and not yet put into the index (so ``load_body``
  finds a body in one of the three places). Held for a list operation.
"""

from __future__ import annotations

import errno
import fcntl
import gc
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from operator import itemgetter
from pathlib import Path
from typing import Any, NamedTuple

from shoal.errors import CorruptRecordError, StoreError
from shoal.records import MessageRemoved, MessageStored, QueueDeleted, Record, Recovered
from shoal.store.base import SyncPlan
from shoal.store.journal.codec import Snapshot, encode_batch, encode_snapshot
from shoal.store.journal.record import (
    FRAME_HEADER_SIZE,
    MAX_PAYLOAD,
    frame_parts,
    frame_pieces,
    frame_size,
)
from shoal.store.journal.recovery import (
    CORRUPT,
    TORN,
    LostKey,
    OnFrame,
    SegmentScan,
    describe_lost,
    lost_messages,
    read_close_marker,
    remove_close_marker,
    remove_tmp_files,
    scan,
    write_close_marker,
)
from shoal.store.journal.repair import cut_torn_tail, repair_segment
from shoal.store.journal.segment import (
    SEGMENT_HEADER_SIZE,
    FileOps,
    create_segment,
    fsync_dir,
    new_salt,
)
from shoal.store.replay_fold import Replay

log = logging.getLogger("shoal.store.journal")

MiB = 1024 * 1024
DEFAULT_SEGMENT_SIZE = 64 * MiB
SLOW_SYNC_SECONDS = 1.0  # a sync slower than this is logged (etcd's warnSyncDuration)

# A live message's location, packed in one int: segment << 72 | offset << 32 | length.
_OFF_BITS = 40
_LEN_BITS = 32
_SEG_SHIFT = _OFF_BITS + _LEN_BITS
_OFF_MASK = (1 << _OFF_BITS) - 1
_LEN_MASK = (1 << _LEN_BITS) - 1


ZERO_AHEAD = 1 << 20  # bytes of zeros written ahead of the data in a preallocated segment


class _Round(NamedTuple):
    """One frame to write: ``data`` at ``start``; batches [first_batch, end_batch)."""

    start: int
    data: bytes
    pos: int  # the write position after it (zeros written ahead are not data)
    seq: int  # its batch number
    first_batch: int
    end_batch: int
    offsets: list[int]  # each batch's offset in the frame's payload


def _describe(e: OSError) -> str:
    name = errno.errorcode.get(e.errno or 0, "error")
    return f"{name}: {e.strerror or e}"


class JournalStore:
    """Append-only segment files with group-commit fsync; see ``docs/journal.md``."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        segment_size: int = DEFAULT_SEGMENT_SIZE,
        preallocate: bool = True,
        repair: bool = False,
        lazy_bodies: bool = False,
        file_ops: FileOps | None = None,  # tests: a fault-injecting layer
    ) -> None:
        if segment_size < 4096:
            raise ValueError("segment_size must be at least 4096 bytes")
        self.directory = Path(directory)
        self.segment_size = segment_size
        self.preallocate = preallocate
        self.repair = repair
        # open() leaves queue messages' bodies on disk (body None, body_size
        # set; load_body reads them): a broker with a memory budget then never
        # holds a backlog larger than memory, not even while it recovers.
        self.lazy_bodies = lazy_bodies
        self._io = file_ops or FileOps()
        self._pending: list[tuple[bytes, Sequence[Record], list[int]]] = []
        self._writing: list[tuple[bytes, Sequence[Record], list[int]]] = []
        self._pending_lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._index_lock = threading.Lock()
        self._opened = False
        self._closed = False
        self._lock_fd = -1
        # writer (owned by the _sync_lock holder)
        self._seg = 0  # current segment number
        self._fd = -1
        self._salt = 0
        self._pos = 0
        self._next_batch = 1
        self._seg_has_data = False
        self._dirty_end = 0  # bytes a failed write may have left past _pos
        self._zeroed = 0  # the segment's blocks up to here are written (data or zeros)
        # index (under _index_lock)
        self._state = Replay()
        self._body: dict[int, int] = {}  # message id -> location
        self._live: dict[int, int] = {}  # segment -> live MessageStored count
        self._refs: dict[int, set[int]] = {}  # segment -> older segments it refers to
        self._segments: dict[int, Path] = {}
        self._fds: dict[int, int] = {}  # read fds by segment (incl. the write fd)
        self._maybe_empty = False

    # -- Store protocol --------------------------------------------------------

    def open(self) -> Recovered:
        with self._sync_lock:
            if self._opened:
                raise StoreError(f"journal {self.directory} is already open")
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                self._take_lock()
            except OSError as e:
                why = f"cannot open journal {self.directory}: {_describe(e)}"
                raise StoreError(e.errno, why) from e
            try:
                recovered = self._recover()
            except BaseException:
                self._release()
                raise
            self._opened = True
        self.compact()
        return recovered

    def append(self, records: Sequence[Record]) -> None:
        if not records:
            return
        if self._closed:
            raise StoreError("journal is closed")
        records = tuple(records)  # the caller may reuse its list
        payload, offs = encode_batch(records)
        if len(payload) > MAX_PAYLOAD:
            raise ValueError(f"batch of {len(payload)} bytes is larger than a frame can hold")
        with self._pending_lock:
            self._pending.append((payload, records, offs))

    def sync(self, durable: Callable[[], None] | None = None) -> None:
        with self._sync_lock:
            self._sync_locked(durable)

    def close(self) -> None:
        with self._sync_lock:
            if self._closed or not self._opened:
                self._closed = True
                self._release()
                return
            try:
                self._sync_locked()
                # Only after the last sync: with the marker, recovery knows no
                # write can be torn and calls any damage corruption. Without
                # it (disk full...) recovery is merely less strict: no error.
                try:
                    write_close_marker(self.directory, self._seg, self._pos, self._next_batch - 1)
                except OSError as e:
                    log.warning("cannot write the journal's clean-close marker: %s", _describe(e))
            finally:
                self._closed = True
                with self._index_lock:
                    for fd in self._fds.values():
                        os.close(fd)
                    self._fds.clear()
                self._fd = -1
                self._release()

    def crash(self) -> None:
        """Close without syncing, dropping unsynced appends, as a kill -9 would
        (for tests; ``MemoryStore.crash`` is the same)."""
        with self._sync_lock:
            with self._pending_lock:
                self._pending = []
            self._closed = True
            with self._index_lock:
                for fd in self._fds.values():
                    os.close(fd)
                self._fds.clear()
            self._fd = -1
            self._release()

    # -- extras ---------------------------------------------------------------

    def load_body(self, message_id: int, queue: str | None = None) -> bytes:
        """Read a live message's body back from its segment (one ``pread``).

        With ``queue`` the copy in that queue is read (ids repeated across
        queues); without, any live copy. A message appended but not synced yet
        is found in the pending batches (the broker may page a message out and
        deliver it before its fsync). KeyError if the id is not live.
        """
        with self._index_lock:
            if queue is None:
                loc = self._body.get(message_id)
                if loc is None:
                    # _body names one copy; once that copy is dropped another
                    # queue may still hold one (a topic's copies share an id).
                    # Looked for here, not on every drop.
                    for locations in self._state.messages.values():
                        loc = locations.get(message_id)
                        if loc is not None:
                            break
            else:
                d = self._state.messages.get(queue)
                loc = d.get(message_id) if d else None
            if loc is None:
                # Not in the index: still pending, or taken by a sync that has
                # not indexed it yet (it cannot, while we hold the index lock).
                body = self._unsynced_body(message_id, queue)
                if body is None:
                    raise KeyError(f"message {message_id} is not live in the journal")
                return body
            seg = loc >> _SEG_SHIFT
            off = (loc >> _LEN_BITS) & _OFF_MASK
            n = loc & _LEN_MASK
            try:
                fd = self._fds.get(seg)
                if fd is None:
                    fd = os.open(self._segments[seg], os.O_RDONLY | os.O_CLOEXEC)
                    self._fds[seg] = fd
                data = os.pread(fd, n, off)
            except OSError as e:
                why = f"cannot read message {message_id}: {_describe(e)}"
                raise StoreError(e.errno, why) from e
        if len(data) != n:
            raise StoreError(f"message {message_id}: body cut short in segment {seg}")
        return data

    def _unsynced_body(self, message_id: int, queue: str | None) -> bytes | None:
        with self._pending_lock:
            for batches in (self._writing, self._pending):
                for payload, records, offs in batches:
                    for rec, body in zip(records, offs):
                        if (
                            body >= 0
                            and rec.id == message_id  # type: ignore[union-attr]
                            and (queue is None or rec.queue == queue)  # type: ignore[union-attr]
                        ):
                            # From the encoded bytes, not rec.body: the broker
                            # may have dropped that from memory already.
                            start = body >> 32
                            return payload[start : start + (body & _LEN_MASK)]
        return None

    def compact(self) -> list[Path]:
        """Delete segments that hold no live message (see docs); returns them."""
        with self._sync_lock:
            if not self._opened or self._closed:
                return []
            return self._compact_locked()

    def stats(self) -> dict[str, int]:
        """Cheap numbers for the management API and metrics (any thread)."""
        with self._index_lock:
            paths = list(self._segments.values())
            live = sum(self._live.values())
            seg = self._seg
        size = 0
        for p in paths:
            try:
                size += os.stat(p).st_size
            except OSError:  # deleted by a compaction meanwhile
                pass
        with self._pending_lock:
            pending = len(self._pending)
        return {
            "bytes": size,
            "segments": len(paths),
            "live_messages": live,
            "pending_batches": pending,
            "current_segment": seg,
            "write_offset": self._pos,
            "batches_written": self._next_batch - 1,
        }

    def live_counts(self) -> dict[int, int]:
        """Live messages per segment number (for tests and the tools)."""
        with self._index_lock:
            return {s: self._live.get(s, 0) for s in sorted(self._segments)}

    # -- locking the directory ----------------------------------------------

    def _take_lock(self) -> None:
        fd = os.open(self.directory / "LOCK", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise StoreError(
                    e.errno, f"journal {self.directory} is in use by another process"
                ) from e
            raise
        self._lock_fd = fd

    def _release(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = -1

    # -- recovery ---------------------------------------------------------------

    def _recover(self) -> Recovered:
        # Recovery creates millions of objects and no garbage cycles: the
        # cyclic GC would rescan the growing heap again and again.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._recover_nogc()
        finally:
            if gc_was_enabled:
                gc.enable()

    def _recover_nogc(self) -> Recovered:
        notes = remove_tmp_files(self.directory)
        closed = read_close_marker(self.directory)
        repaired: list[tuple[str, list[Any]]] = []  # (note, records moved aside)
        consumed: set[LostKey] = set()
        for attempt in range(2):
            fold = Replay()
            refs: dict[int, set[int]] = {}
            cur = [0]

            # B023: both closures are called only while this segment is scanned.
            def touch(_q: str, _mid: int, v: Any, refs: dict[int, set[int]] = refs) -> None:
                s = v[1] >> _SEG_SHIFT
                if s != cur[0]:  # noqa: B023
                    refs.setdefault(cur[0], set()).add(s)  # noqa: B023

            fold.on_drop = touch
            fold.on_touch = touch

            def on_frame(
                seg: SegmentScan, pos: int, _b: int, records: list[Any], fold: Replay = fold
            ) -> None:
                cur[0] = seg.seq  # noqa: B023
                base = seg.seq << _OFF_BITS
                msgs = fold.messages
                for rec, boff in records:
                    if boff >= 0:
                        held = rec.body
                        size = rec.body_size if held is None else len(held)
                        value = (rec, ((base | boff) << _LEN_BITS) | size)
                        if rec.bucket >= 0:
                            fold.stored(rec, value)
                            continue
                        # Replay.stored() inlined for the common case (not a
                        # log queue, no on_store hook during recovery): a
                        # million calls fewer when recovering a million messages.
                        mid = rec.id
                        if mid > fold.max_id:
                            fold.max_id = mid
                        d = msgs.get(rec.queue)
                        if d is None:
                            d = msgs[rec.queue] = {}
                        if mid not in d:
                            d[mid] = value
                    elif type(rec) is Snapshot:
                        fold.load_snapshot(rec.state)
                        msgs = fold.messages
                    else:
                        fold.apply(rec)

            keys = {(m.queue, m.id) for _n, recs in repaired for m in lost_messages(recs)}
            if keys:  # after a repair: which lost messages a later record removed anyway
                on_frame = _watch_removals(on_frame, keys, consumed)  # type: ignore[assignment]
            # After a repair the data no longer ends where close() left it.
            scans = scan(self.directory, on_frame, self.lazy_bodies, None if attempt else closed)
            corrupt = [d for s in scans for d in s.damages if d.kind == CORRUPT]
            if not corrupt:
                break
            if not self.repair or attempt:
                d = corrupt[0]
                raise CorruptRecordError(str(d.path), d.start, d.reason)
            for s in scans:
                if s.damages:
                    repaired += repair_segment(
                        s.path, s.seq, s.salt, s.damages, preallocated=self.preallocate
                    )
        if closed is not None:
            try:
                remove_close_marker(self.directory)
            except OSError as e:
                raise StoreError(e.errno, f"cannot open journal: {_describe(e)}") from e
        lost: list[MessageStored] = []
        for note, recs in repaired:
            notes.append(f"{note}; dropped: {describe_lost(recs, consumed)}")
            lost += (m for m in lost_messages(recs) if (m.queue, m.id) not in consumed)
        for s in scans:
            for d in s.damages:  # only torn tails are left
                assert d.kind == TORN
                note, recs = cut_torn_tail(d, preallocated=self.preallocate)
                notes.append(
                    f"{note}; dropped, never acknowledged as stored: {describe_lost(recs)}"
                )
                lost += lost_messages(recs)
                s.data_end = d.start

        # Split the fold: messages for Recovered, locations for the index
        # (map/zip/Counter keep these passes over a million entries in C).
        first, second = itemgetter(0), itemgetter(1)
        locs: dict[str, dict[int, int]] = {}
        live_counter: Counter[int] = Counter()
        body: dict[int, int] = {}
        for q, entries in fold.messages.items():
            ld = locs[q] = dict(zip(entries.keys(), map(second, entries.values())))
            fold.messages[q] = dict(zip(entries.keys(), map(first, entries.values())))
            live_counter.update(map(_SEG_SHIFT.__rrshift__, ld.values()))
            body.update(ld)  # any live copy of an id will do for load_body
        recovered = fold.result(notes)
        recovered.lost = [(m.queue, m.id, m.group) for m in lost]
        fold.messages = locs
        fold.counts = {}
        live = dict(live_counter)
        fold.on_store = self._on_store
        fold.on_drop = self._on_drop
        fold.on_touch = self._on_touch
        self._state = fold
        self._body = body
        self._live = live
        self._refs = refs
        self._segments = {s.seq: s.path for s in scans}
        for s in scans:
            self._live.setdefault(s.seq, 0)
        last_batch = max((s.last_batch for s in scans), default=0)
        self._next_batch = last_batch + 1
        if scans:
            last = scans[-1]
            try:
                self._fd = os.open(last.path, os.O_RDWR | os.O_CLOEXEC)
            except OSError as e:
                raise StoreError(e.errno, f"cannot open {last.path}: {_describe(e)}") from e
            self._fds[last.seq] = self._fd
            self._seg = last.seq
            self._salt = last.salt
            self._pos = self._zeroed = last.data_end
            self._seg_has_data = last.data_frames > 0
        else:
            try:
                self._new_segment(1)
            except OSError as e:
                raise StoreError(e.errno, f"cannot create journal segment: {_describe(e)}") from e
        return recovered

    # -- index hooks (called with _index_lock held, from the sync thread) ------

    def _on_store(self, _q: str, mid: int, loc: int) -> None:
        s = loc >> _SEG_SHIFT
        self._live[s] = self._live.get(s, 0) + 1
        if mid not in self._body:
            self._body[mid] = loc

    def _on_drop(self, _q: str, mid: int, loc: int) -> None:
        s = loc >> _SEG_SHIFT
        n = self._live[s] - 1
        self._live[s] = n
        if n == 0:
            self._maybe_empty = True
        if self._body.get(mid) == loc:
            del self._body[mid]
        if s != self._seg:
            refs = self._refs.get(self._seg)
            if refs is None:
                refs = self._refs[self._seg] = set()
            refs.add(s)

    def _on_touch(self, _q: str, _mid: int, loc: int) -> None:
        s = loc >> _SEG_SHIFT
        if s != self._seg:
            self._refs.setdefault(self._seg, set()).add(s)

    # -- writing ---------------------------------------------------------------

    def _sync_locked(self, durable: Callable[[], None] | None = None) -> None:
        if not self._opened:
            raise StoreError("journal is not open")
        if self._closed:
            raise StoreError("journal is closed")
        with self._pending_lock:
            batches, self._pending = self._pending, []
            self._writing = batches
        if not batches:
            return
        started = time.monotonic()
        i = 0
        try:
            while i < len(batches):
                i = self._write_round(batches, i, durable)
        except OSError as e:
            raise self._not_written(batches[i:], e) from e
        finally:
            if self._writing:
                with self._pending_lock:
                    self._writing = []  # indexed (or back in _pending)
        took = time.monotonic() - started
        if took > SLOW_SYNC_SECONDS:
            log.warning("slow journal sync: %.3f s for %d batches", took, len(batches))
        if self._maybe_empty:
            self._compact_locked()

    def _write_round(
        self,
        batches: list[tuple[bytes, Sequence[Record], list[int]]],
        i: int,
        durable: Callable[[], None] | None = None,
    ) -> int:
        """Write as many batches from ``i`` on as fit the segment as one frame, fsync once.

        One frame per write: a power cut that tears the write fails its one
        CRC, so no later part of it can look valid (docs/journal.md). After
        the round that makes the last batch durable, ``durable()`` is called
        before the index is updated, so receipts need not wait for it.
        """
        r = self._plan_round(batches, i)
        if r is None:
            self._rotate()
            return i
        try:
            self._io.write(self._fd, r.data, r.start)
            self._io.sync(self._fd)
        except OSError:
            self._dirty_end = max(self._dirty_end, r.start + len(r.data))
            raise
        self._commit_round(batches, r, durable if r.end_batch == len(batches) else None)
        return r.end_batch

    def _plan_round(
        self, batches: list[tuple[bytes, Sequence[Record], list[int]]], i: int
    ) -> _Round | None:
        """The frame for the batches from ``i`` on that fit the segment (None:
        the segment is full, rotate first); nothing is written or changed."""
        start = self._pos
        limit = self.segment_size
        has = self._seg_has_data
        payloads: list[bytes] = []
        plan: list[int] = []  # each batch's offset in the frame's payload
        plen = 0
        n = len(batches)
        j = i
        while j < n:
            payload = batches[j][0]
            total = plen + len(payload)
            if plan and total > MAX_PAYLOAD:
                break
            if start + frame_size(total) > limit and (has or plan):
                break
            payloads.append(payload)
            plan.append(plen)
            plen = total
            j += 1
        if not plan:
            return None
        seq = self._next_batch
        pos = start + frame_size(plen)
        if len(payloads) == 1:  # one batch (one waiting producer): the cheaper path
            data = b"".join(frame_parts(self._salt, seq, payloads[0]))
        else:
            data = b"".join(frame_pieces(self._salt, seq, payloads))
        if self._dirty_end > pos:
            data += bytes(self._dirty_end - pos)
        end = start + len(data)
        if self.preallocate and end > self._zeroed:
            # Write zeros ZERO_AHEAD past the data: fallocate leaves unwritten
            # extents, and an fdatasync after writing into one must commit
            # metadata too; after this, most syncs only flush data (measured
            # ~1.6x the fdatasyncs per second on ext4).
            ahead = min(limit, (end // ZERO_AHEAD + 1) * ZERO_AHEAD)
            if ahead > end:
                data += bytes(ahead - end)
        return _Round(start, data, pos, seq, i, j, plan)

    def _commit_round(
        self,
        batches: list[tuple[bytes, Sequence[Record], list[int]]],
        r: _Round,
        durable: Callable[[], None] | None,
    ) -> None:
        """After the round's data is on disk: move the write position, index its records."""
        start = r.start
        self._dirty_end = 0
        self._zeroed = max(self._zeroed, start + len(r.data))
        self._pos = r.pos
        self._next_batch = r.seq + 1
        self._seg_has_data = True
        if durable is not None:
            durable()  # the bodies stay readable from _writing until indexed
        base = self._seg << _OFF_BITS
        p0 = start + FRAME_HEADER_SIZE
        i = r.first_batch
        with self._index_lock:
            # Calls on st itself, not bound methods kept in locals: compiled,
            # those are direct calls; a bound method is a Python call each.
            st = self._state
            for k, boff in enumerate(r.offsets):
                _payload, records, offs = batches[i + k]
                # A body's location is segment << 72 | file offset << 32 | length;
                # with body = offset in the payload << 32 | length (append time),
                # that is this batch's start, shifted, plus body: one addition.
                at = (base | (p0 + boff)) << _LEN_BITS
                for rec, body in zip(records, offs):
                    if body >= 0:
                        m: MessageStored = rec  # type: ignore[assignment]
                        st.stored(m, at + body)
                    elif type(rec) is MessageRemoved:  # an ack: as many as messages
                        st.remove(rec.queue, rec.id)  # what apply() does, two calls fewer
                    else:
                        st.apply(rec)

    # -- a round the caller writes itself (server: io_uring) -------------------

    def plan_sync(self) -> SyncPlan | None:
        """Everything appended so far as one write of ``data`` at ``offset`` in
        ``fd``, for a caller that writes and data-syncs it itself and then calls
        :meth:`finish_sync`. Until then the store is held as by a running
        ``sync()``. None when this round needs ``sync()`` (nothing pending, a
        segment to rotate or compact, more than one frame, a sync running, a
        test's ``file_ops``)."""
        if not self._sync_lock.acquire(blocking=False):
            return None
        planned: SyncPlan | None = None
        try:
            if not self._opened or self._closed:
                return None
            if self._maybe_empty:
                if len(self._segments) > 1:  # one may be dead: sync() compacts after it
                    return None
                self._maybe_empty = False  # only the current one: nothing to compact
            if type(self._io) is not FileOps:  # a test's fault-injecting layer sees every write
                return None
            with self._pending_lock:
                batches = self._pending
                if not batches:
                    return None
                r = self._plan_round(batches, 0)
                if r is None or r.end_batch != len(batches):
                    return None
                self._pending = []
                self._writing = batches
            planned = SyncPlan(self._fd, r.data, r.start, (batches, r, time.monotonic()))
            return planned
        finally:
            if planned is None:
                self._sync_lock.release()

    def _not_written(
        self, unwritten: list[tuple[bytes, Sequence[Record], list[int]]], error: OSError
    ) -> StoreError:
        """Put ``unwritten`` back in front of pending (the next sync retries
        them) and name the failure."""
        with self._pending_lock:
            self._pending[:0] = unwritten
            self._writing = []
        return StoreError(
            error.errno,
            f"journal sync failed in segment {self._seg:016x}: {_describe(error)}; "
            f"{len(unwritten)} batches not written, nothing synced before is lost",
        )

    def finish_sync(self, planned: SyncPlan, error: OSError | None) -> None:
        """The planned write is durable (``error`` None), or failed: then its
        batches go back to pending for the next sync and StoreError is raised,
        as ``sync()`` raises."""
        batches, r, started = planned.token
        try:
            if error is not None:
                self._dirty_end = max(self._dirty_end, r.start + len(r.data))
                raise self._not_written(batches, error) from error
            self._commit_round(batches, r, None)
            with self._pending_lock:
                self._writing = []
        finally:
            self._sync_lock.release()
        took = time.monotonic() - started
        if took > SLOW_SYNC_SECONDS:
            log.warning("slow journal sync: %.3f s for %d batches", took, len(batches))

    def _rotate(self) -> None:
        if self._dirty_end > self._pos:  # zero what a failed write may have left
            self._io.write(self._fd, bytes(self._dirty_end - self._pos), self._pos)
            self._io.sync(self._fd)
            self._dirty_end = 0
        self._new_segment(self._seg + 1)

    def _new_segment(self, seq: int) -> None:
        salt = new_salt()
        with self._index_lock:
            snap = encode_snapshot(self._state.snapshot())
        first = b"".join(frame_parts(salt, self._next_batch, snap))
        fd, path = create_segment(
            self.directory, seq, salt, first, self.segment_size, self.preallocate
        )
        with self._index_lock:
            self._segments[seq] = path
            self._live.setdefault(seq, 0)
            self._fds[seq] = fd
            self._seg = seq
        self._fd = fd
        self._salt = salt
        self._pos = self._zeroed = SEGMENT_HEADER_SIZE + len(first)
        self._next_batch += 1
        self._seg_has_data = False
        self._dirty_end = 0
        self._maybe_empty = True  # the previous segment may be dead already

    def _compact_locked(self) -> list[Path]:
        self._maybe_empty = False
        deleted: list[Path] = []
        with self._index_lock:
            for seq in sorted(self._segments):
                if seq == self._seg or self._live.get(seq, 0):
                    continue
                if any(r in self._segments for r in self._refs.get(seq, ())):
                    continue
                path = self._segments[seq]
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
                except OSError as e:
                    log.warning("cannot delete journal segment %s: %s", path, _describe(e))
                    continue
                fd = self._fds.pop(seq, None)
                if fd is not None:
                    os.close(fd)
                del self._segments[seq]
                self._live.pop(seq, None)
                self._refs.pop(seq, None)
                deleted.append(path)
        if deleted:
            try:
                fsync_dir(self.directory)
            except OSError as e:  # the deletions are an optimisation, not a promise
                log.warning("cannot fsync journal directory: %s", _describe(e))
        return deleted


def _watch_removals(inner: OnFrame, keys: set[LostKey], removed: set[LostKey]) -> OnFrame:
    """``inner``, also noting which of ``keys`` a record removes (repair only)."""
    queues = {q for q, _ in keys}

    def on_frame(seg: SegmentScan, pos: int, bseq: int, records: list[Any]) -> None:
        for rec, _off in records:
            t = type(rec)
            if t is MessageRemoved and (rec.queue, rec.id) in keys:
                removed.add((rec.queue, rec.id))
            elif t is QueueDeleted and rec.name in queues:
                removed.update(k for k in keys if k[0] == rec.name)
        inner(seg, pos, bseq, records)

    return on_frame
