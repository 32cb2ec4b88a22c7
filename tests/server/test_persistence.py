"""The group-commit pipeline: waiters hear of their sync, records nobody waits
for are synced lazily, and the short GIL switch interval is in force only
while someone waits."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import sys
import threading
import time
from collections.abc import Callable

import pytest

from shoal.errors import StoreError
from shoal.records import QueueDeclared
from shoal.server.persistence import WAITED_SWITCH_INTERVAL, SyncPipeline
from shoal.store.memory import MemoryStore


def declared(name: str) -> list[QueueDeclared]:
    return [QueueDeclared(name, name, "anycast")]


def test_waiters_get_their_sync_and_the_switch_interval_is_short_only_meanwhile():
    before = sys.getswitchinterval()
    store = MemoryStore()
    store.open()

    async def scenario() -> tuple[list, list[float]]:
        loop = asyncio.get_running_loop()
        pipe = SyncPipeline(store, loop)
        heard: list = []
        seen = [sys.getswitchinterval()]
        done = loop.create_future()
        seq = pipe.append(declared("a"))
        pipe.when_synced(seq, lambda err: (heard.append(err), done.set_result(None)))
        seen.append(sys.getswitchinterval())  # someone waits
        await asyncio.wait_for(done, 5)
        seen.append(sys.getswitchinterval())  # nobody does any more
        pipe.append(declared("b"))  # nobody waits for this one: a lazy sync
        seen.append(sys.getswitchinterval())
        for _ in range(500):
            if pipe.idle:
                break
            await asyncio.sleep(0.01)
        pipe.close()
        return heard, seen

    heard, seen = asyncio.run(scenario())
    assert heard == [None]
    assert seen == pytest.approx([before, WAITED_SWITCH_INTERVAL, before, before], rel=1e-3)
    assert sys.getswitchinterval() == before
    store.crash()  # only what was synced survives
    assert set(store.open().queues) == {"a", "b"}


class SlowBookkeeping(MemoryStore):
    """A store that reports durability, then keeps the sync thread busy
    (its index update) until the test lets it finish, or fails it."""

    def __init__(self, fail_after: BaseException | None = None) -> None:
        super().__init__()
        self.bookkeeping = threading.Event()
        self.finish = threading.Event()
        self.fail_after = fail_after

    def sync(self, durable: Callable[[], None] | None = None) -> None:
        super().sync()
        if durable is not None:
            durable()
        self.bookkeeping.set()
        assert self.finish.wait(10), "the test never let the bookkeeping finish"
        if self.fail_after is not None:
            raise self.fail_after


def run_one_receipted_sync(store: SlowBookkeeping) -> tuple[list, bool, list]:
    """Append, wait for the sync; returns what the waiter heard, whether the
    store was still busy then, and what a second sync's waiter heard."""
    store.open()

    async def scenario() -> tuple[list, bool, list]:
        loop = asyncio.get_running_loop()
        pipe = SyncPipeline(store, loop)
        heard: list = []
        first = loop.create_future()
        pipe.when_synced(
            pipe.append(declared("a")), lambda e: (heard.append(e), first.set_result(None))
        )
        await asyncio.wait_for(first, 5)
        busy = not store.finish.is_set()
        store.finish.set()
        later: list = []
        second = loop.create_future()
        pipe.when_synced(
            pipe.append(declared("b")), lambda e: (later.append(e), second.set_result(None))
        )
        await asyncio.wait_for(second, 5)
        pipe.close()
        return heard, busy, later

    return asyncio.run(scenario())


def test_a_waiter_hears_of_its_sync_before_the_store_finishes_its_bookkeeping():
    store = SlowBookkeeping()
    heard, busy, later = run_one_receipted_sync(store)
    assert heard == [None]
    assert busy  # the receipt did not wait for the index update
    assert later == [None]
    store.crash()
    assert set(store.open().queues) == {"a", "b"}


def test_an_error_after_durable_is_logged_and_does_not_fail_the_waiter(caplog):
    store = SlowBookkeeping(fail_after=RuntimeError("index broken"))
    with caplog.at_level(logging.ERROR, logger="shoal.persistence"):
        heard, _busy, later = run_one_receipted_sync(store)
    assert heard == [None]  # its data is on disk: the promise stands
    assert later == [None]
    assert "bookkeeping after a sync failed" in caplog.text


class FailingSync(MemoryStore):
    def sync(self, durable: Callable[[], None] | None = None) -> None:
        raise StoreError(errno.EIO, "journal sync failed: EIO")


def test_a_failed_sync_fails_fast_waiters_with_the_store_error_and_keeps_the_others():
    store = FailingSync()
    store.open()

    async def scenario() -> tuple[list, list]:
        loop = asyncio.get_running_loop()
        pipe = SyncPipeline(store, loop)
        fast: list = []
        patient: list = []
        told = loop.create_future()
        seq = pipe.append(declared("a"))
        pipe.when_synced(seq, patient.append, fail_fast=False)
        pipe.when_synced(seq, lambda e: (fast.append(e), told.set_result(None)))
        await asyncio.wait_for(told, 5)
        await asyncio.sleep(0.05)
        pipe.close()
        return fast, patient

    fast, patient = asyncio.run(scenario())
    assert len(fast) == 1 and isinstance(fast[0], StoreError) and "EIO" in str(fast[0])
    assert patient == []  # still waiting for a retry that succeeds


class RecordsDurable(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.offered: list[bool] = []

    def sync(self, durable: Callable[[], None] | None = None) -> None:
        self.offered.append(durable is not None)
        super().sync(durable)


def test_only_a_sync_someone_waits_for_reports_before_the_bookkeeping():
    store = RecordsDurable()
    store.open()

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        pipe = SyncPipeline(store, loop)
        pipe.append(declared("lazy"))  # nobody waits: synced within LAZY_SYNC_DELAY
        for _ in range(500):
            if pipe.idle:
                break
            await asyncio.sleep(0.01)
        done = loop.create_future()
        pipe.when_synced(pipe.append(declared("waited")), lambda _e: done.set_result(None))
        await asyncio.wait_for(done, 5)
        pipe.close()

    asyncio.run(scenario())
    assert store.offered == [False, True]


class HeldSync(MemoryStore):
    """A store whose syncs wait for the test's go, and are counted."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()
        self.syncs = 0

    def sync(self, durable: Callable[[], None] | None = None) -> None:
        self.go.wait(10)
        self.syncs += 1
        super().sync(durable)


def test_a_record_appended_while_a_waited_sync_runs_rides_with_the_next_waited_one(
    monkeypatch,
):
    """An ACK's record arrives in the loop iteration that answers the receipt
    whose sync was running: it does not get a round of its own (it would
    delay the next producer's), it waits for the next waited sync."""
    monkeypatch.setattr("shoal.server.persistence.LAZY_SYNC_DELAY", 60.0)  # no lazy round here
    store = HeldSync()
    store.open()

    async def scenario() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        pipe = SyncPipeline(store, loop)
        first = loop.create_future()
        pipe.when_synced(pipe.append(declared("a")), first.set_result)
        await asyncio.sleep(0.05)  # the round runs, held in store.sync
        ack_r, ack_w = os.pipe()
        loop.add_reader(ack_r, lambda: (os.read(ack_r, 1), pipe.append(declared("ack"))))

        def both_ready_in_one_iteration() -> None:
            os.write(ack_w, b"a")  # ready first: handled first
            store.go.set()
            time.sleep(0.2)  # the sync thread finishes and reports meanwhile

        loop.call_soon(both_ready_in_one_iteration)
        assert await asyncio.wait_for(first, 10) is None
        await asyncio.sleep(0.05)
        syncs_before_next = store.syncs
        second = loop.create_future()
        pipe.when_synced(pipe.append(declared("b")), second.set_result)
        assert await asyncio.wait_for(second, 10) is None
        loop.remove_reader(ack_r)
        os.close(ack_r)
        os.close(ack_w)
        pipe.close()
        return syncs_before_next, store.syncs

    before_next, total = asyncio.run(scenario())
    assert before_next == 1  # the ack's record did not start a round by itself
    assert total == 2  # it went with "b"'s
    store.crash()
    assert set(store.open().queues) == {"a", "ack", "b"}
