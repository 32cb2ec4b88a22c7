"""The one storage interface. The core never touches files; the server
hands the core's records to a Store and releases receipts after ``sync``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

from shoal.records import Record, Recovered


class Store(Protocol):
    def open(self) -> Recovered:
        """Recover. Raises CorruptRecordError for damage before the tail."""

    def append(self, records: Sequence[Record]) -> None:
        """Buffer one atomic unit. Called on the event loop thread; cheap."""

    def sync(self, durable: Callable[[], None] | None = None) -> None:
        """Make everything appended so far durable (one fsync per call).

        Runs in a worker thread while ``append`` may go on concurrently.
        Raises StoreError (disk full, I/O error). A store may call
        ``durable()`` (at most once, from this thread) as soon as the data is
        on disk, before its own bookkeeping after it; an error raised after
        that does not undo the promise.
        """

    def close(self) -> None: ...


class SyncPlan(NamedTuple):
    """One sync round as a single write: ``data`` at ``offset`` in ``fd``, to be
    made durable (write + data sync) by the caller. ``token`` is the store's."""

    fd: int
    data: bytes
    offset: int
    token: Any


@runtime_checkable
class PlannedSync(Protocol):
    """A store that lets the server do a sync round's I/O itself (io_uring from
    the event loop, no worker thread): ``plan_sync`` hands out the write, or
    None when the round needs ``sync()``; ``finish_sync`` is called once the
    write is durable or failed (then it raises StoreError, as ``sync`` does)."""

    def plan_sync(self) -> SyncPlan | None: ...

    def finish_sync(self, planned: SyncPlan, error: OSError | None) -> None: ...
