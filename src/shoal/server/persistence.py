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


class SyncPipeline:
    def __init__(self, store: Store, loop: asyncio.AbstractEventLoop) -> None:
        self.store = store
        self.loop = loop
        self.appended_seq = 0  # one per append() call
        self.synced_seq = 0
        self.failed: StoreError | None = None
        self._waiters: list[tuple[int, Waiter]] = []
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

    def when_synced(self, seq: int, waiter: Waiter) -> None:
        """Call ``waiter(None)`` once ``seq`` is durable, or ``waiter(error)``."""
        if seq <= self.synced_seq:
            waiter(None)
            return
        self._waiters.append((seq, waiter))
        self._maybe_start()

    def _maybe_start(self) -> None:
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
        error: StoreError | None = None
        exc = fut.exception()
        if exc is not None:
            error = exc if isinstance(exc, StoreError) else StoreError(f"journal sync failed: {exc}")
            log.error("journal sync failed: %s", error)
            self.failed = error
        else:
            self.sync_count += 1
            self.sync_seconds.append(fut.result())
            if len(self.sync_seconds) > 4096:
                del self.sync_seconds[:2048]
            self.failed = None
        self.synced_seq = target
        ready = [w for s, w in self._waiters if s <= target]
        self._waiters = [(s, w) for s, w in self._waiters if s > target]
        for waiter in ready:
            waiter(error)
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
        self._executor.shutdown(wait=True)
