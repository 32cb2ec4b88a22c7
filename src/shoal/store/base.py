"""The one storage interface. The core never touches files; the server
hands the core's records to a Store and releases receipts after ``sync``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from shoal.store.records import MessageStored, QueueDeclared, Record


@dataclass(slots=True)
class Recovered:
    """The state a store rebuilds on open, ready for ``Broker.restore``."""

    queues: dict[str, QueueDeclared] = field(default_factory=dict)
    # Per queue, live messages in original order, delivery counts applied.
    messages: dict[str, list[MessageStored]] = field(default_factory=dict)
    parked: set[tuple[str, str]] = field(default_factory=set)
    log_commits: dict[tuple[str, int], int] = field(default_factory=dict)
    sink_batches: dict[str, int] = field(default_factory=dict)
    next_message_id: int = 1
    notes: list[str] = field(default_factory=list)  # e.g. "truncated torn tail at ..."
    # (queue, message id, group) of the messages a torn-tail cut or a repair dropped
    lost: list[tuple[str, int, str | None]] = field(default_factory=list)


class Store(Protocol):
    def open(self) -> Recovered:
        """Recover. Raises CorruptRecordError for damage before the tail."""

    def append(self, records: Sequence[Record]) -> None:
        """Buffer one atomic unit. Called on the event loop thread; cheap."""

    def sync(self) -> None:
        """Make everything appended so far durable (one fsync per call).

        Runs in a worker thread while ``append`` may go on concurrently.
        Raises StoreError (disk full, I/O error).
        """

    def close(self) -> None: ...
