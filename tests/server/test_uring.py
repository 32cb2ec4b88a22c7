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
import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "store"))
from store_helpers import ids, msg

from shoal.errors import StoreError
from shoal.records import MessageRemoved
from shoal.server.persistence import MAX_RIDERS, SyncPipeline
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
        assert ring.submit(fd, b"x" * 5000, 100) == []
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
    send them with it (their buffers are gone)."""
    ring = open_ring()
    assert ring is not None
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    a, b = socket.socketpair()
    b.setblocking(False)
    real = ring.fd
    try:
        ring.fd = 999_999  # io_uring_enter fails: EBADF
        with pytest.raises(OSError):
            ring.submit(fd, b"stale", 0, [(a.fileno(), b"STALE RECEIPT")])
        ring.fd = real
        assert ring.idle
        assert ring.submit(fd, b"good", 100) == []
        assert ring.complete(wait=True) == [(WRITE, 4)]
        assert os.pread(fd, 5, 0) == bytes(5)  # the stale write never ran
        with pytest.raises(BlockingIOError):
            b.recv(100)
    finally:
        ring.fd = real
        a.close()
        b.close()
        os.close(fd)
        ring.close()


@needs_ring
def test_linked_sends_go_out_after_the_write(tmp_path):
    ring = open_ring()
    assert ring is not None
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    pairs = [socket.socketpair() for _ in range(3)]
    try:
        sends = [(a.fileno(), f"RECEIPT {i}".encode()) for i, (a, _b) in enumerate(pairs)]
        tokens = ring.submit(fd, b"journal", 0, sends)
        assert len(tokens) == 3 and WRITE not in tokens
        done = ring.complete(wait=True)
        assert done[0] == (WRITE, 7)  # the write completes first: the sends wait for it
        assert sorted(done[1:]) == sorted((t, 9) for t in tokens)
        assert ring.idle
        for i, (_a, b) in enumerate(pairs):
            assert b.recv(100) == f"RECEIPT {i}".encode()
        assert os.pread(fd, 7, 0) == b"journal"
    finally:
        for a, b in pairs:
            a.close()
            b.close()
        os.close(fd)
        ring.close()


@needs_ring
def test_sends_made_in_one_enter_are_done_when_it_returns():
    ring = open_ring()
    assert ring is not None
    pairs = [socket.socketpair() for _ in range(3)]
    full_a, full_b = pairs[2]
    full_a.setblocking(False)
    try:
        while True:  # the third peer reads nothing: its socket is full
            full_a.send(b"x" * 65536)
    except BlockingIOError:
        pass
    try:
        sends = [(a.fileno(), f"RECEIPT {i}".encode()) for i, (a, _b) in enumerate(pairs)]
        tokens = ring.send_now(sends)
        assert len(tokens) == 3 and WRITE not in tokens and min(tokens) > 0
        done = ring.complete()  # no waiting: a non-blocking send answers inside the enter
        assert sorted(done) == sorted([(tokens[0], 9), (tokens[1], 9), (tokens[2], -errno.EAGAIN)])
        assert ring.idle
        for _a, b in pairs[:2]:
            assert b.recv(100).startswith(b"RECEIPT ")
    finally:
        for a, b in pairs:
            a.close()
            b.close()
        ring.close()


@needs_ring
def test_a_failed_write_cancels_its_linked_sends():
    """The receipts of a write that did not land are never sent."""
    ring = open_ring()
    assert ring is not None
    r, w = os.pipe()
    a, b = socket.socketpair()
    b.setblocking(False)
    try:
        (token,) = ring.submit(r, b"z", 0, [(a.fileno(), b"RECEIPT")])  # a read-only end
        assert ring.complete(wait=True) == [(WRITE, -errno.EBADF), (token, -errno.ECANCELED)]
        with pytest.raises(BlockingIOError):
            b.recv(100)
    finally:
        for f in (r, w):
            os.close(f)
        a.close()
        b.close()
        ring.close()


@needs_ring
def test_one_peers_broken_socket_does_not_cancel_the_others_receipts(tmp_path):
    ring = open_ring()
    assert ring is not None
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    gone_a, gone_b = socket.socketpair()
    gone_b.close()  # the peer went away: its send fails (EPIPE, no SIGPIPE)
    a, b = socket.socketpair()
    try:
        t_gone, t_ok = ring.submit(fd, b"j", 0, [(gone_a.fileno(), b"R1"), (a.fileno(), b"R2")])
        done = dict(ring.complete(wait=True))
        assert done[WRITE] == 1
        assert done[t_gone] in (-errno.EPIPE, -errno.ECONNRESET)
        assert done[t_ok] == 2 and b.recv(10) == b"R2"
    finally:
        for s in (gone_a, a, b):
            s.close()
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


class SocketRider:
    """A Rider (server/persistence.py) on one end of a socket pair."""

    def __init__(self, target_seq: int, data: bytes) -> None:
        self.ours, self.peer = socket.socketpair()
        self.peer.setblocking(False)
        self.target_seq = target_seq
        self.data = data
        self.boarded = 0
        self.results: list[int] = []
        self.results_when_told: list[int] | None = None  # what its waiter saw

    def board(self, target: int) -> tuple[int, bytes] | None:
        if target < self.target_seq:
            return None
        self.boarded += 1
        return self.ours.fileno(), self.data

    def ride_done(self, result: int) -> None:
        self.results.append(result)

    def close(self) -> None:
        self.ours.close()
        self.peer.close()


def _round_with_riders(store: JournalStore, count: int) -> tuple[list[SocketRider], SyncPipeline]:
    async def main() -> tuple[list[SocketRider], SyncPipeline]:
        loop = asyncio.get_running_loop()
        pipeline = SyncPipeline(store, loop)
        riders = []
        done = loop.create_future()
        for i in range(count):  # one loop iteration: one round for all
            seq = pipeline.append([msg(i + 1)])
            rider = SocketRider(seq, f"RECEIPT {i}".encode())
            riders.append(rider)

            def told(e: object, rider: SocketRider = rider) -> None:
                rider.results_when_told = list(rider.results)
                if not done.done():
                    done.set_result(e)

            pipeline.when_synced(seq, told)
            pipeline.offer_ride(rider)
        assert await asyncio.wait_for(done, 30) is None
        pipeline.close()  # waits for the sends in flight
        return riders, pipeline

    return asyncio.run(main())


@needs_ring
def test_a_lone_waiting_receipt_rides_on_the_write(tmp_path):
    store = JournalStore(tmp_path)
    store.open()
    (rider,), pipeline = _round_with_riders(store, 1)
    try:
        assert pipeline.ring_syncs == 1 and pipeline.receipts_sent == 1
        assert rider.results == [len(rider.data)]
        assert rider.peer.recv(100) == rider.data
    finally:
        rider.close()
        store.close()


@needs_ring
def test_a_round_many_producers_wait_on_sends_their_receipts_once_durable(tmp_path):
    """Past MAX_RIDERS the kernel's worker would hold the next write behind
    linked sends: the receipts go out in one enter after the round, before
    the waiters hear of it."""
    store = JournalStore(tmp_path)
    store.open()
    riders, pipeline = _round_with_riders(store, MAX_RIDERS + 3)
    try:
        assert pipeline.ring_syncs == 1 and pipeline.receipts_sent == len(riders)
        assert all(r.boarded == 1 for r in riders)
        assert [r.results for r in riders] == [[len(r.data)] for r in riders]
        assert all(r.results_when_told == [len(r.data)] for r in riders)
        for r in riders:
            assert r.peer.recv(100) == r.data
    finally:
        for r in riders:
            r.close()
        store.close()


@needs_ring
def test_a_failed_round_sends_no_receipt_after_it(tmp_path):
    store = JournalStore(tmp_path)
    store.open()

    async def main() -> tuple[list[SocketRider], list[object]]:
        loop = asyncio.get_running_loop()
        pipeline = SyncPipeline(store, loop)
        ring = pipeline._ring
        assert ring is not None
        ring_fd, ring.fd = ring.fd, -1  # io_uring_enter fails: the round fails
        riders = []
        heard: list[object] = []
        for i in range(MAX_RIDERS + 2):
            seq = pipeline.append([msg(i + 1)])
            riders.append(SocketRider(seq, f"RECEIPT {i}".encode()))
            pipeline.when_synced(seq, heard.append)
            pipeline.offer_ride(riders[-1])
        while len(heard) < len(riders):
            await asyncio.sleep(0.01)
        ring.fd = ring_fd
        pipeline.close()
        return riders, heard

    riders, heard = asyncio.run(main())
    try:
        assert all(isinstance(e, StoreError) for e in heard)
        assert [r.boarded for r in riders] == [0] * len(riders)
        for r in riders:
            with pytest.raises(BlockingIOError):
                r.peer.recv(100)
    finally:
        for r in riders:
            r.close()
        store.crash()
