"""Group commit: many appends, one fsync, receipts released after it.

The event loop thread appends the core's records to the store; a sync round
makes them durable. While one round runs, new appends pile up and the next
round covers them all, so concurrent producers share fsyncs. A round is one
durable write the loop submits to io_uring (``uring.py``) where the store
plans it (``PlannedSync``: a journal round that needs no new segment), or
``Store.sync()`` on a single worker thread (rotation, compaction, a memory
store, no io_uring).

A sync starts at once only when someone waits for it (a RECEIPT, a held
delivery, shutdown). Records nobody waits for (acks without receipts,
pipelined sends) ride along with the next one, or are synced LAZY_SYNC_DELAY
later: an fsync per consumer ACK would halve what receipted producers get.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence

from shoal.errors import StoreError
from shoal.records import Record
from shoal.server.uring import WRITE, DsyncRing, open_ring
from shoal.store.base import PlannedSync, Store, SyncPlan

log = logging.getLogger("shoal.persistence")

Waiter = Callable[[StoreError | None], None]

RETRY_AFTER_FAILURE = 0.5  # s between sync attempts while the disk refuses writes
LAZY_SYNC_DELAY = 0.01  # s: the longest an appended record waits when nobody waits on it
LAZY_SYNC_APPENDS = 4096  # ...or this many appends nobody waits on
# GIL switch interval while a sync someone waits for runs. Woken to start a
# sync, and again after its fdatasync, the sync thread needs the GIL, and a busy
# loop thread holds it for up to the switch interval (CPython: 5 ms) each time:
# with one receipted producer, 0.5 ms still left the thread ~90 us from its kick
# to its write, 50 us cut that to ~35. Only waited-for syncs get the short
# one: for lazy syncs the sync thread's bookkeeping would ping-pong with the
# loop (pipelined persistent sends measured ~20% slower at 0.5 ms).
WAITED_SWITCH_INTERVAL = 0.00005


class SyncPipeline:
    def __init__(self, store: Store, loop: asyncio.AbstractEventLoop) -> None:
        self.store = store
        self.loop = loop
        self.appended_seq = 0  # one per append() call
        self.synced_seq = 0
        self.failed: StoreError | None = None
        # (seq, waiter, fail_fast): fail-fast waiters hear of a failed sync at
        # once; the others wait for the retry that succeeds (the store keeps
        # unwritten batches pending).
        self._waiters: list[tuple[int, Waiter, bool]] = []
        self._retry: asyncio.TimerHandle | None = None
        self._lazy: asyncio.TimerHandle | None = None
        self._soon = False  # a _start_now() is scheduled
        self._syncing = False
        self._target = 0  # appended_seq covered by the running sync
        # Whether someone waits for the running sync: only then does it report
        # before the store's bookkeeping (for a lazy sync that would only have
        # the loop contend with the index update for the GIL).
        self._waited = False
        # The sync thread is poked through one pipe and answers through
        # another: two one-byte writes per sync, far cheaper than an executor
        # future and call_soon_threadsafe (measured: ~3x the receipted SENDs
        # per second with one producer).
        self._kick_r, self._kick_w = os.pipe()
        self._done_r, self._done_w = os.pipe()
        self._outcome: float | BaseException = 0.0
        # The loop's own durable writes, where the store plans them and io_uring works.
        self._planner = store if isinstance(store, PlannedSync) else None
        self._ring: DsyncRing | None = open_ring() if self._planner is not None else None
        self._planned: SyncPlan | None = None  # the round in the ring
        self._planned_at = 0.0
        if self._ring is not None:
            loop.add_reader(self._ring.eventfd, self._on_ring_done)
        self._syncer = threading.Thread(target=self._sync_thread, name="shoal-fsync", daemon=True)
        self._syncer.start()
        loop.add_reader(self._done_r, self._on_done)
        self.sync_count = 0
        self.ring_syncs = 0  # of sync_count: rounds io_uring wrote
        self.sync_seconds: list[float] = []  # recent fsync durations, for metrics
        self._switch_interval = sys.getswitchinterval()  # restored when nobody waits
        self._fast_switch = False

    def append(self, records: Sequence[Record]) -> int:
        """Buffer one atomic unit; returns the sequence a waiter can wait for."""
        if not records:
            return self.appended_seq
        self.store.append(records)
        self.appended_seq += 1
        if self._waiters or self.appended_seq - self.synced_seq >= LAZY_SYNC_APPENDS:
            self._start_soon()
        elif self._lazy is None and self._retry is None:
            self._lazy = self.loop.call_later(LAZY_SYNC_DELAY, self._maybe_start)
        return self.appended_seq

    @property
    def idle(self) -> bool:
        return self.synced_seq >= self.appended_seq

    def when_synced(self, seq: int, waiter: Waiter, *, fail_fast: bool = True) -> None:
        """Call ``waiter(None)`` once ``seq`` is durable.

        With ``fail_fast`` a failed sync calls ``waiter(error)`` instead (a
        producer must hear that its message was not stored); without it the
        waiter waits through retries until the sync succeeds.
        """
        if seq <= self.synced_seq:
            waiter(None)
            return
        self._waiters.append((seq, waiter, fail_fast))
        if self._ring is None:  # the sync thread's GIL hand-offs (see WAITED_SWITCH_INTERVAL)
            self._set_fast_switch(True)
        self._start_soon()

    def _start_soon(self) -> None:
        """Start a sync once this loop iteration has read every socket that is ready.

        The SENDs of several producers that arrive together then share one
        fsync, instead of the first going alone and the rest waiting for the
        next one.
        """
        if not self._soon:
            self._soon = True
            self.loop.call_soon(self._start_now)

    def _start_now(self) -> None:
        self._soon = False
        # If the waiter that asked was answered meanwhile, what is left is lazy:
        # _next_round (or append) has armed the lazy round for it.
        if self._waiters or self.appended_seq - self.synced_seq >= LAZY_SYNC_APPENDS:
            self._maybe_start()

    def _maybe_start(self) -> None:
        self._retry = None
        if self._lazy is not None:
            self._lazy.cancel()
            self._lazy = None
        if not self._syncing and self.appended_seq > self.synced_seq:
            self._syncing = True
            self._target = self.appended_seq
            self._waited = bool(self._waiters)
            if self._ring is not None and self._submit_planned():
                return
            os.write(self._kick_w, b"s")

    def _submit_planned(self) -> bool:
        """Hand the round to io_uring if the store can plan it as one write."""
        assert self._ring is not None and self._planner is not None
        planned = self._planner.plan_sync()
        if planned is None:
            return False
        self._planned_at = time.perf_counter()
        try:
            self._ring.submit(planned.fd, planned.data, planned.offset)
        except OSError as exc:
            self._finish_planned(planned, exc)
            return True
        self._planned = planned
        return True

    def _on_ring_done(self) -> None:
        if self._ring is not None:
            self._on_completions(self._ring.complete())

    def _on_completions(self, done: list[tuple[int, int]]) -> None:
        for token, res in done:
            if token == WRITE:
                self._on_ring_result(res)

    def _on_ring_result(self, res: int | None) -> None:
        planned = self._planned
        if res is None or planned is None:
            return
        self._planned = None
        error: OSError | None = None
        if res < 0:
            error = OSError(-res, os.strerror(-res))
        elif res < len(planned.data):  # no room for all of it: what ENOSPC means here
            error = OSError(errno.ENOSPC, f"short write ({res} of {len(planned.data)} bytes)")
        self._finish_planned(planned, error)

    def _finish_planned(self, planned: SyncPlan, error: OSError | None) -> None:
        assert self._planner is not None
        if error is None:
            # The data is durable: its waiters hear it before the store indexes
            # the round (the bodies stay readable meanwhile), as with the sync
            # thread's early report. Nothing else runs on the loop in between.
            self.ring_syncs += 1
            self._release(time.perf_counter() - self._planned_at, self._target)
            try:
                self._planner.finish_sync(planned, None)
            except BaseException:  # the data is on disk: the store's own trouble
                log.exception("journal bookkeeping after a sync failed")
            self._next_round()
            return
        try:
            self._planner.finish_sync(planned, error)
        except BaseException as exc:  # StoreError: the batches are pending again
            self._done(exc, self._target)
            return
        self._done(StoreError(f"journal sync failed: {error}"), self._target)

    def _sync_thread(self) -> None:
        told = False
        start = 0.0

        def durable() -> None:
            # The loop releases receipts while the store updates its index.
            nonlocal told
            told = True
            self._outcome = time.perf_counter() - start
            os.write(self._done_w, b"d")

        while os.read(self._kick_r, 1) == b"s":
            told = False
            start = time.perf_counter()
            try:
                self.store.sync(durable if self._waited else None)
            except BaseException as exc:  # handed to the loop thread
                if told:  # the data is on disk: the store's own trouble
                    log.error("journal bookkeeping after a sync failed", exc_info=exc)
                    continue
                self._outcome = exc
            else:
                if told:
                    continue
                self._outcome = time.perf_counter() - start
            os.write(self._done_w, b"d")

    def _on_done(self) -> None:
        if not os.read(self._done_r, 1):
            return
        self._done(self._outcome, self._target)

    def _done(self, outcome: float | BaseException, target: int) -> None:
        if isinstance(outcome, BaseException):
            self._syncing = False
            exc = outcome
            error = (
                exc if isinstance(exc, StoreError) else StoreError(f"journal sync failed: {exc}")
            )
            if self.failed is None:
                log.error("journal sync failed: %s", error)
            self.failed = error
            failing = [w for s, w, fast in self._waiters if fast and s <= target]
            self._waiters = [e for e in self._waiters if not (e[2] and e[0] <= target)]
            self._tell(failing, error)
            if self._retry is None:
                self._retry = self.loop.call_later(RETRY_AFTER_FAILURE, self._maybe_start)
            return
        self._release(outcome, target)
        self._next_round()

    def _release(self, seconds: float, target: int) -> None:
        """A sync of everything up to ``target`` succeeded: tell its waiters."""
        self.sync_count += 1
        self.sync_seconds.append(seconds)
        if len(self.sync_seconds) > 4096:
            del self.sync_seconds[:2048]
        if self.failed is not None:
            log.warning("journal sync works again")
        self.failed = None
        self.synced_seq = target
        ready = [w for s, w, _fast in self._waiters if s <= target]
        self._waiters = [e for e in self._waiters if e[0] > target]
        self._tell(ready, None)

    @staticmethod
    def _tell(waiters: list[Waiter], error: StoreError | None) -> None:
        """Call each waiter; one that raises (a bug of its own) is logged and
        does not keep the news from the others."""
        for waiter in waiters:
            try:
                waiter(error)
            except Exception:
                log.exception("a journal sync waiter failed")

    def _next_round(self) -> None:
        """After a successful round: start the next one if someone waits."""
        self._syncing = False
        if self._waiters:
            self._maybe_start()
        else:
            self._set_fast_switch(False)
            if self.appended_seq > self.synced_seq and self._lazy is None:
                self._lazy = self.loop.call_later(LAZY_SYNC_DELAY, self._maybe_start)

    def _set_fast_switch(self, fast: bool) -> None:
        if fast is not self._fast_switch:
            self._fast_switch = fast
            sys.setswitchinterval(WAITED_SWITCH_INTERVAL if fast else self._switch_interval)

    async def drain(self, timeout: float) -> None:
        """Wait until everything appended is synced (used at shutdown)."""
        deadline = self.loop.time() + timeout
        while not self.idle and self.loop.time() < deadline:
            done = self.loop.create_future()

            def wake(_e: object, d: asyncio.Future[None] = done) -> None:
                if not d.done():
                    d.set_result(None)

            self.when_synced(self.appended_seq, wake)
            try:
                await asyncio.wait_for(done, max(0.01, deadline - self.loop.time()))
            except TimeoutError:
                break

    def close(self) -> None:
        for timer in (self._retry, self._lazy):
            if timer is not None:
                timer.cancel()
        ring, self._ring = self._ring, None  # rounds its waiters start go to the thread
        if ring is not None:
            self.loop.remove_reader(ring.eventfd)
            if not ring.idle:  # finish the round: the store waits for it
                self._on_completions(ring.complete(wait=True))
            ring.close()
        os.write(self._kick_w, b"q")  # after a running sync: the thread reads in order
        self._syncer.join()
        self.loop.remove_reader(self._done_r)
        for fd in (self._kick_r, self._kick_w, self._done_r, self._done_w):
            os.close(fd)
        self._set_fast_switch(False)  # last: a waiter called above may have asked for it
