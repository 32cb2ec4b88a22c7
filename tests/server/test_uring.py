"""The loop's durable writes through io_uring (server/uring.py) and the sync
pipeline that uses them: a real ring, a real journal, real files."""

from __future__ import annotations

import asyncio
import ctypes
import errno
import logging
import os
import platform
import select
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "store"))
from store_helpers import ids, msg

from shoal.errors import StoreError
from shoal.records import MessageRemoved
from shoal.server.persistence import SyncPipeline
from shoal.server.uring import WRITE, _address, kernel_has_write_op, open_ring
from shoal.store.journal import JournalStore
from skips import kernel

RING = open_ring()


def _no_ring() -> str:
    """Why RING is None: the variable that turns io_uring off, else the kernel."""
    if os.environ.get("SHOAL_IO_URING", "").strip().lower() in ("0", "false", "no", "off"):
        return "SHOAL_IO_URING turns io_uring off"
    return kernel(
        f"io_uring is unavailable ({platform.system()} {platform.release()} on "
        f"{platform.machine()}: before Linux 5.6, kernel.io_uring_disabled, or a seccomp filter)"
    )


needs_ring = pytest.mark.skipif(RING is None, reason=_no_ring())


class _Bytes(bytes):
    pass


@pytest.mark.parametrize(
    "data",
    [b"", b"x", b"RECEIPT\nreceipt-id:7\n\n\x00", bytes(range(256)) * 300, _Bytes(b"sub")],
    ids=["empty", "one", "receipt", "large", "subclass"],
)
def test_the_address_given_to_the_kernel_holds_the_bytes(data):
    # the fast path (an offset from id()) and ctypes' answer must agree
    address = _address(data)
    assert address == ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value
    assert ctypes.string_at(address, len(data)) == data


@needs_ring
def test_a_submitted_write_lands_and_reports_its_size(tmp_path):
    ring = open_ring()
    assert ring is not None
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        ring.submit(fd, b"x" * 5000, 100)
        assert ring.busy
        assert select.select([ring.eventfd], [], [], 10)[0], "no completion in 10 s"
        assert ring.complete() == [(WRITE, 5000)]
        assert not ring.busy and ring.idle
        assert os.pread(fd, 5100, 0) == bytes(100) + b"x" * 5000
        ring.submit(fd, b"y", 0)
        assert ring.complete(wait=True) == [(WRITE, 1)]
    finally:
        os.close(fd)
        ring.close()


@needs_ring
def test_a_failed_write_reports_the_errno():
    ring = open_ring()
    assert ring is not None
    r, w = os.pipe()
    os.close(w)
    try:
        ring.submit(r, b"z", 0)  # a read-only end
        assert ring.complete(wait=True) == [(WRITE, -errno.EBADF)]
    finally:
        os.close(r)
        ring.close()


@needs_ring
def test_a_submit_the_kernel_refused_leaves_nothing_behind_in_the_ring(tmp_path):
    """Entries the kernel never read are taken back: a later submit must not
    submit them with it (their buffers are gone)."""
    ring = open_ring()
    assert ring is not None
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    real = ring.fd
    try:
        ring.fd = 999_999  # io_uring_enter fails: EBADF
        with pytest.raises(OSError):
            ring.submit(fd, b"stale", 0)
        ring.fd = real
        assert ring.idle
        ring.submit(fd, b"good", 100)
        assert ring.complete(wait=True) == [(WRITE, 4)]
        assert os.pread(fd, 5, 0) == bytes(5)  # the stale write never ran
    finally:
        ring.fd = real
        os.close(fd)
        ring.close()


def _run_producers(store: JournalStore, producers: int) -> tuple[list[int], SyncPipeline]:
    async def main() -> tuple[list[int], SyncPipeline]:
        loop = asyncio.get_running_loop()
        pipeline = SyncPipeline(store, loop)
        receipts: list[int] = []
        done = loop.create_future()

        def receipt(i: int, error: object) -> None:
            assert error is None, error
            receipts.append(i)
            if len(receipts) == producers and not done.done():
                done.set_result(None)

        for i in range(1, producers + 1):  # all in one loop iteration
            seq = pipeline.append([msg(i)])
            pipeline.when_synced(seq, lambda e, i=i: receipt(i, e))
        await asyncio.wait_for(done, 30)
        pipeline.close()
        return receipts, pipeline

    return asyncio.run(main())


@needs_ring
def test_receipted_producers_share_one_ring_write(tmp_path):
    store = JournalStore(tmp_path)
    store.open()
    receipts, pipeline = _run_producers(store, 16)
    assert sorted(receipts) == list(range(1, 17))
    assert pipeline.sync_count == pipeline.ring_syncs == 1  # one ring write covered all 16
    store.crash()  # nothing more is written: what the ring wrote is what survives
    again = JournalStore(tmp_path)
    assert ids(again.open()) == list(range(1, 17))
    again.close()


def test_rounds_that_need_a_new_segment_go_through_the_sync_thread(tmp_path):
    """Small segments: some rounds rotate (the thread), the rest use the ring."""
    store = JournalStore(tmp_path, segment_size=4096)
    store.open()

    async def main() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        pipeline = SyncPipeline(store, loop)
        for i in range(1, 201):
            seq = pipeline.append([msg(i, body=b"b" * 100)])
            done = loop.create_future()
            pipeline.when_synced(seq, done.set_result)
            assert await asyncio.wait_for(done, 30) is None
        counts = pipeline.sync_count, pipeline.ring_syncs
        pipeline.close()
        return counts

    syncs, ring_syncs = asyncio.run(main())
    assert syncs == 200
    if RING is not None:
        assert 0 < ring_syncs < syncs  # the ring, and the thread for each rotation
    store.crash()
    again = JournalStore(tmp_path, segment_size=4096)
    assert ids(again.open()) == list(range(1, 201))
    again.close()


def test_a_failed_planned_write_goes_back_to_pending(tmp_path):
    store = JournalStore(tmp_path, segment_size=64 * 1024)
    store.open()
    store.append([msg(1)])
    store.sync()
    store.append([msg(2)])
    planned = store.plan_sync()
    assert planned is not None
    assert store.plan_sync() is None  # the store is held until it is finished
    os.pwrite(planned.fd, planned.data[: len(planned.data) // 2], planned.offset)  # torn
    with pytest.raises(StoreError, match="ENOSPC"):
        store.finish_sync(planned, OSError(errno.ENOSPC, "No space left on device"))
    assert store.load_body(2) == b"body-2"  # still readable: pending again
    store.append([msg(3)])
    store.sync()  # writes 2 and 3 over the torn bytes
    store.crash()
    again = JournalStore(tmp_path, segment_size=64 * 1024)
    rec = again.open()
    assert ids(rec) == [1, 2, 3] and rec.notes == []
    again.close()


def test_a_planned_write_made_durable_by_the_caller_is_recovered(tmp_path):
    store = JournalStore(tmp_path)
    store.open()
    store.append([msg(1)])
    store.append([msg(2), msg(3)])
    planned = store.plan_sync()
    assert planned is not None
    os.pwritev(planned.fd, [planned.data], planned.offset, os.RWF_DSYNC)
    store.finish_sync(planned, None)
    store.crash()
    again = JournalStore(tmp_path)
    assert ids(again.open()) == [1, 2, 3]
    again.close()


@needs_ring
def test_close_finishes_the_round_in_the_ring(tmp_path):
    """A shutdown with a write in flight waits for it: the store can then close,
    and a round a waiter starts meanwhile goes to the sync thread."""
    store = JournalStore(tmp_path)
    store.open()
    heard: list[object] = []

    async def main() -> SyncPipeline:
        pipeline = SyncPipeline(store, asyncio.get_running_loop())

        def receipt(error: object) -> None:
            heard.append(error)
            if len(heard) == 1:  # a producer that sends again as shutdown begins
                pipeline.when_synced(pipeline.append([msg(2)]), heard.append)

        pipeline.when_synced(pipeline.append([msg(1)]), receipt)
        await asyncio.sleep(0)  # the round is submitted
        assert pipeline._planned is not None
        pipeline.close()
        return pipeline

    before = sys.getswitchinterval()
    pipeline = asyncio.run(main())
    assert heard[0] is None and pipeline.ring_syncs == 1
    assert sys.getswitchinterval() == before  # the thread's short interval is not left behind
    store.close()  # would wait forever for a round never finished
    again = JournalStore(tmp_path)
    assert ids(again.open()) == [1, 2]
    again.close()


@needs_ring
def test_acked_messages_do_not_send_rounds_to_the_thread(tmp_path):
    """Send, ack, send, ack... (W6): an ack that empties the only segment
    leaves nothing to compact, so every round stays in the ring."""
    store = JournalStore(tmp_path)
    store.open()

    async def main() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        pipeline = SyncPipeline(store, loop)
        for i in range(1, 11):
            for records in ([msg(i)], [MessageRemoved("q", i)]):
                done = loop.create_future()
                pipeline.when_synced(pipeline.append(records), done.set_result)
                assert await asyncio.wait_for(done, 30) is None
        counts = pipeline.sync_count, pipeline.ring_syncs
        pipeline.close()
        return counts

    syncs, ring_syncs = asyncio.run(main())
    assert syncs == ring_syncs == 20
    store.crash()
    again = JournalStore(tmp_path)
    assert ids(again.open()) == []
    again.close()


def test_the_ring_needs_a_kernel_with_its_write_op():
    """io_uring exists from 5.1, IORING_OP_WRITE from 5.6: before, every round
    would fail with EINVAL, so those kernels keep the sync thread."""
    assert not kernel_has_write_op("5.4.0-150-generic")
    assert not kernel_has_write_op("5.5.19")
    assert kernel_has_write_op("5.6.0")
    assert kernel_has_write_op("6.18.44-fc-v657")
    assert kernel_has_write_op("10.0")
    assert not kernel_has_write_op("4.19.0-25-amd64")
    assert not kernel_has_write_op("weird")


@needs_ring
def test_a_ring_round_answers_its_waiters_before_the_store_indexes_it(tmp_path):
    """The receipt goes out first; the body is readable meanwhile, and the
    index has the message once the round's callback is over."""
    store = JournalStore(tmp_path)
    store.open()

    async def main() -> tuple[int, bytes, int, int]:
        loop = asyncio.get_running_loop()
        pipeline = SyncPipeline(store, loop)
        seen: list[tuple[int, bytes]] = []
        done = loop.create_future()

        def receipt(error: object) -> None:
            assert error is None, error
            seen.append((store.stats()["live_messages"], store.load_body(1, "q")))
            loop.call_soon(lambda: done.set_result(store.stats()["live_messages"]))

        pipeline.when_synced(pipeline.append([msg(1)]), receipt)
        after = await asyncio.wait_for(done, 30)
        rings = pipeline.ring_syncs
        pipeline.close()
        ((live_in_waiter, body),) = seen
        return live_in_waiter, body, after, rings

    live_in_waiter, body, after, rings = asyncio.run(main())
    assert rings == 1
    assert (live_in_waiter, body) == (0, b"body-1")
    assert after == 1
    store.close()


@needs_ring
def test_a_waiter_that_raises_keeps_the_news_from_no_one(tmp_path, caplog):
    """A waiter's own bug is logged; the waiters of the same round and later
    rounds still hear of their syncs."""
    store = JournalStore(tmp_path)
    store.open()

    async def main() -> list[object]:
        loop = asyncio.get_running_loop()
        pipeline = SyncPipeline(store, loop)

        def broken(_error: object) -> None:
            raise RuntimeError("a waiter's own bug")

        pipeline.when_synced(pipeline.append([msg(1)]), broken)
        heard: list[object] = []
        for i in (2, 3):
            done = loop.create_future()
            pipeline.when_synced(pipeline.append([msg(i)]), done.set_result)
            heard.append(await asyncio.wait_for(done, 30))
        pipeline.close()
        return heard

    with caplog.at_level(logging.ERROR, logger="shoal.persistence"):
        assert asyncio.run(main()) == [None, None]
    assert "a journal sync waiter failed" in caplog.text
    store.crash()
    again = JournalStore(tmp_path)
    assert ids(again.open()) == [1, 2, 3]
    again.close()
