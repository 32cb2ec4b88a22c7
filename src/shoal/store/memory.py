"""A Store that keeps its state in memory: tests and non-persistent brokers.

It behaves like the journal as seen through the ``Store`` protocol: appends
are buffered, ``sync()`` makes them "durable" (applies them to the replay
fold), ``open()`` returns what a restart would recover. Memory stays bounded
by the live state: synced records are folded, not kept.
``crash()`` drops what was appended but not synced, as a kill -9 would.

Records are mutable, so messages are copied on the way in and on the way out
(as the journal's bytes would be): a broker that changes a message it
appended, or one it got back from ``open()``, does not change what the store
holds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from shoal.errors import StoreError
from shoal.records import MessageStored, Record, Recovered
from shoal.store.replay_fold import Replay


def _copy(m: MessageStored) -> MessageStored:
    return MessageStored(
        m.queue,
        m.id,
        m.destination,
        dict(m.headers),
        m.body,
        m.group,
        m.group_seq,
        m.expires,
        m.priority,
        m.timestamp,
        m.delivery_count,
        m.bucket,
        m.offset,
    )


class MemoryStore:
    def __init__(self) -> None:
        self._state = Replay()
        self._pending: list[Sequence[Record]] = []
        self._lock = threading.Lock()  # pending list
        self._sync_lock = threading.Lock()  # the fold
        self._open = False

    def open(self) -> Recovered:
        with self._sync_lock:
            if self._open:
                raise StoreError("store is already open")
            self._open = True
            rec = self._state.result()
        rec.messages = {q: [_copy(m) for m in ms] for q, ms in rec.messages.items()}
        return rec

    def append(self, records: Sequence[Record]) -> None:
        if records:
            batch = tuple(_copy(r) if type(r) is MessageStored else r for r in records)
            with self._lock:
                self._pending.append(batch)

    def sync(self, durable: Callable[[], None] | None = None) -> None:
        with self._sync_lock:
            with self._lock:
                pending, self._pending = self._pending, []
            apply_all = self._state.apply_all
            for batch in pending:
                apply_all(batch)

    def close(self) -> None:
        self.sync()
        with self._sync_lock:
            self._open = False

    def crash(self) -> None:
        """Forget unsynced appends and close, as if the process had died."""
        with self._lock:
            self._pending = []
        with self._sync_lock:
            self._open = False
