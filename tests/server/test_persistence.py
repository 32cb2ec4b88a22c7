"""The group-commit pipeline: waiters hear of their sync, records nobody waits
for are synced lazily, and the short GIL switch interval is in force only
while someone waits."""

from __future__ import annotations

import asyncio
import sys

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
    assert seen == [before, WAITED_SWITCH_INTERVAL, before, before]
    assert sys.getswitchinterval() == before
    store.crash()  # only what was synced survives
    assert set(store.open().queues) == {"a", "b"}
