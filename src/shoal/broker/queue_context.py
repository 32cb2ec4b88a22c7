"""What a queue may use of the broker it belongs to (``QueueContext``), what
every queue has (``AnyQueue``) and where log queues and the sink append
records (``RecordLog``): a trait and Protocols that queue.py, logqueue.py and
sink.py depend on. Nothing here imports those modules back, not even for a
type: the broker narrows a ``QueueRef`` to ``Queue`` where it needs it
(docs/architecture.md). ``core.Broker`` implements ``QueueContext``.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Any, Protocol

from mypy_extensions import trait

from shoal.broker.model import QueueRef

if TYPE_CHECKING:
    from shoal.broker.effects import Effect, PageIn
    from shoal.broker.model import Connection, Consumer, Message
    from shoal.broker.settings import QueueSettings
    from shoal.records import MessageRemoved, Record


class AnyQueue(Protocol):
    """What every queue in ``Broker.queues`` has, a classic ``Queue`` or a
    ``LogQueue`` (Spark's source): narrow with ``isinstance`` for the rest."""

    kind: str  # "classic" or "log"
    name: str
    settings: QueueSettings
    durable: bool


class RecordLog(Protocol):
    """Where a log queue or the sink appends its records (the broker)."""

    records: list[Record]


@trait
class QueueContext:
    """What a queue may use of the broker it belongs to: the round's outputs
    (effects, records, bodies to read back), the broker-wide memory budget,
    expiry timers, producer flow control and dead-letter/expiry copies.
    ``Broker`` implements it (a trait: compiled code reaches its fields directly)."""

    now_ms: int
    paging: bool
    effects: list[Effect]
    records: list[Record]
    sent_removals: list[MessageRemoved]
    page_ins: list[PageIn]
    to_page: list[tuple[Any, Message]]  # (Queue, Message)
    dirty: list[QueueRef]  # queues to dispatch (each a Queue)
    burst_spent: list[Consumer]
    dispatch_delayed: dict[Any, None]  # queues whose dispatch delay is running
    total_bytes: int
    global_max: int

    @abstractmethod
    def watch_expiry(self, m: Message) -> None: ...
    @abstractmethod
    def producer_blocked(self, conn_id: int, q: Any) -> None: ...
    @abstractmethod
    def producer_unblocked(self, conn_id: int, q: Any) -> None: ...
    @abstractmethod
    def connections_of(self, q: Any) -> list[Connection]: ...
    @abstractmethod
    def move_copy(self, m: Message, target: str, src: QueueRef, *, expiry: bool) -> None: ...
