"""Group commit: concurrent receipted producers share fsyncs.

The README promises it; this shows it, deterministically. The journal's first
fdatasync is held at a barrier while N-1 more producers append and wait for
their receipts; when it is let go, one more fdatasync must cover all of them.
A pipeline that synced per append (or a journal that fsynced per batch) would
make N or more.
"""

from __future__ import annotations

import asyncio
import threading

from store_helpers import ids, msg

from shoal.server.persistence import SyncPipeline
from shoal.store.journal import JournalStore
from shoal.store.journal.segment import FileOps

PRODUCERS = 16


class HeldSync(FileOps):
    """Counts fdatasyncs; the first one waits until the test lets it go."""

    def __init__(self) -> None:
        self.syncs = 0
        self.entered = threading.Event()
        self.release = threading.Event()

    def sync(self, fd: int) -> None:
        if self.syncs == 0:
            self.entered.set()
            assert self.release.wait(10), "the held fdatasync was never released"
        super().sync(fd)
        self.syncs += 1


def test_concurrent_receipted_producers_share_fsyncs(tmp_path):
    ops = HeldSync()
    store = JournalStore(tmp_path, file_ops=ops)
    store.open()

    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        pipeline = SyncPipeline(store, loop)
        receipts: list[int] = []
        done = loop.create_future()

        def producer(i: int) -> None:
            seq = pipeline.append([msg(i)])

            def receipt(error: object) -> None:
                assert error is None
                receipts.append(i)
                if len(receipts) == PRODUCERS and not done.done():
                    done.set_result(None)

            pipeline.when_synced(seq, receipt)

        producer(1)  # its sync starts and is held inside fdatasync
        assert await loop.run_in_executor(None, ops.entered.wait, 10)
        for i in range(2, PRODUCERS + 1):  # they arrive while the disk is busy
            producer(i)
            await asyncio.sleep(0)
        ops.release.set()
        await asyncio.wait_for(done, 10)
        pipeline.close()
        return receipts

    receipts = asyncio.run(main())
    assert sorted(receipts) == list(range(1, PRODUCERS + 1))
    assert ops.syncs < PRODUCERS  # the promise
    assert ops.syncs == 2  # the held one, then one for the other fifteen
    store.close()
    again = JournalStore(tmp_path)
    assert ids(again.open()) == list(range(1, PRODUCERS + 1))
    again.close()
