"""Group commit: many appends, one fsync, receipts released after it.

The event loop thread appends the core's records to the store; a single
worker thread runs ``Store.sync()``. While one sync runs, new appends pile
up and the next sync covers them all, so concurrent producers share fsyncs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Sequence

from shoal.errors import StoreError
from shoal.store.base import Store
from shoal.store.records import Record

log = logging.getLogger("shoal.persistence")

Waiter = Callable[[StoreError | None], None]

RETRY_AFTER_FAILURE = 0.5  # s between sync attempts while the disk refuses writes


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
        self._syncing = False
        self._executor = concurrent.futures.ThreadPoolExecutor(1, "shoal-fsync")
        self.sync_count = 0
        self.sync_seconds: list[float] = []  # recent fsync durations, for metrics

    def append(self, records: Sequence[Record]) -> int:
        """Buffer one atomic unit; returns the sequence a waiter can wait for."""
        if not records:
            return self.appended_seq
        self.store.append(records)
        self.appended_seq += 1
        self._maybe_start()
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
        self._maybe_start()

    def _maybe_start(self) -> None:
        self._retry = None
        if not self._syncing and self.appended_seq > self.synced_seq:
            self._syncing = True
            target = self.appended_seq
            fut = self.loop.run_in_executor(self._executor, self._timed_sync)
            fut.add_done_callback(lambda f, t=target: self._done(f, t))

    def _timed_sync(self) -> float:
        import time

        start = time.perf_counter()
        self.store.sync()
        return time.perf_counter() - start

    def _done(self, fut: asyncio.Future, target: int) -> None:
        self._syncing = False
        exc = fut.exception()
        if exc is not None:
            error = exc if isinstance(exc, StoreError) else StoreError(f"journal sync failed: {exc}")
            if self.failed is None:
                log.error("journal sync failed: %s", error)
            self.failed = error
            failing = [w for s, w, fast in self._waiters if fast and s <= target]
            self._waiters = [e for e in self._waiters if not (e[2] and e[0] <= target)]
            for waiter in failing:
                waiter(error)
            if self._retry is None:
                self._retry = self.loop.call_later(RETRY_AFTER_FAILURE, self._maybe_start)
            return
        self.sync_count += 1
        self.sync_seconds.append(fut.result())
        if len(self.sync_seconds) > 4096:
            del self.sync_seconds[:2048]
        if self.failed is not None:
            log.warning("journal sync works again")
        self.failed = None
        self.synced_seq = target
        ready = [w for s, w, _fast in self._waiters if s <= target]
        self._waiters = [e for e in self._waiters if e[0] > target]
        for waiter in ready:
            waiter(None)
        self._maybe_start()

    async def drain(self, timeout: float) -> None:
        """Wait until everything appended is synced (used at shutdown)."""
        deadline = self.loop.time() + timeout
        while not self.idle and self.loop.time() < deadline:
            done = self.loop.create_future()
            self.when_synced(self.appended_seq, lambda _e, d=done: d.done() or d.set_result(None))
            try:
                await asyncio.wait_for(done, max(0.01, deadline - self.loop.time()))
            except TimeoutError:
                break

    def close(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
        self._executor.shutdown(wait=True)
