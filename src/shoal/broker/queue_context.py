"""What a queue may use of the broker it belongs to (``QueueContext``), what
its dispatch and group-table mixins see of it (``QueueCore``), what every
queue has (``AnyQueue``) and where log queues and the sink append records
(``RecordLog``): Protocols that import no queue, so queue.py, dispatch.py,
groups.py, logqueue.py and sink.py depend on them and nothing here depends
on those modules back. ``context.BrokerCore`` extends ``QueueContext``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from shoal.broker.effects import Effect, PageIn
    from shoal.broker.model import Connection, Consumer, Group, Message
    from shoal.broker.settings import QueueSettings
    from shoal.records import Record


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


class QueueContext(Protocol):
    """What a queue may use of the broker it belongs to: the round's outputs
    (effects, records, bodies to read back), the broker-wide memory budget,
    expiry timers, producer flow control and dead-letter/expiry copies."""

    now_ms: int
    paging: bool
    effects: list[Effect]
    records: list[Record]
    page_ins: list[PageIn]
    to_page: list[tuple[Any, Message]]  # (Queue, Message)
    dirty: list[Any]  # queues to dispatch
    capped: list[Consumer]
    held_queues: dict[Any, None]  # queues whose dispatch is held
    total_bytes: int
    global_max: int

    def watch_expiry(self, m: Message) -> None: ...
    def producer_blocked(self, conn_id: int, q: Any) -> None: ...
    def producer_unblocked(self, conn_id: int, q: Any) -> None: ...
    def connections_of(self, q: Any) -> list[Connection]: ...
    def move_copy(self, m: Message, target: str, src: Any, *, expiry: bool) -> None: ...


class QueueCore(Protocol):
    """What the dispatch and group-table mixins (dispatch.py, groups.py) use of
    the ``Queue`` they are mixed into: its state, declared in ``Queue.__slots__``,
    and its methods. The mixins' methods take ``self: QueueCore``."""

    acked: int
    bindings_max: int
    blocked: dict[int, None]
    broker: QueueContext
    buckets: int
    bytes: int
    consumers: dict[Consumer, None]
    default_group: str | None
    deleted: bool
    delivered: int
    depth: int
    dispatch_held: bool
    fenced: bool
    expired: int
    first_key: str | None
    groups: dict[Any, Group]
    in_flight: int
    lineup: list[Consumer]
    lru_head: Group | None
    lru_on: bool
    lru_tail: Group | None
    max_bytes: int
    nactive: int
    name: str
    paged: int
    paged_bytes: int
    persist_delivery_count: bool
    pickable: list[tuple[int, int, Consumer]]
    priority_step: int
    ready: list[tuple[int, Group]]
    redelivered: int
    refill: list[Consumer]
    round_robin_at: int
    selector_consumers: int
    selwaiters: dict[Consumer, None]
    shared: bool
    singles: dict[Group, None]
    turns: int
    ungrouped: Group
    wait_any: list[tuple[int, Group]]
    wait_sel: list[Group]

    # dispatch.py, groups.py
    def place(self, g: Group) -> None: ...
    def reposition(self, g: Group) -> None: ...
    def consumer_ready(self, c: Consumer) -> None: ...
    def _unwait(self, heap: list[tuple[int, Group]], k: int, owner: Consumer | None) -> int: ...
    def pull_earlier(self, c: Consumer, mid: int) -> bool: ...
    def push_pick(self, c: Consumer) -> None: ...
    def compact_pickable(self) -> None: ...
    def pick_for_group(self) -> Consumer | None: ...
    def next_round_robin(self) -> Consumer | None: ...
    def dispatch(self) -> None: ...
    def _dispatch_ready(self) -> None: ...
    def _dispatch_ungrouped(self, u: Group, now_ms: int) -> None: ...
    def pick_accepting(
        self, headers: dict[str, str], *, grouped: bool
    ) -> Consumer | bool | None: ...
    def wait_for_acceptor(self, g: Group, m: Message) -> None: ...
    def selwait_requeue(self, g: Group) -> None: ...
    def selwait_ready(self, c: Consumer, k: int) -> bool: ...
    def pull_selwait(self, c: Consumer, mid: int) -> bool: ...
    def release_selector_waits(self, c: Consumer | None = None) -> None: ...
    def peek_head(self, g: Group, now_ms: int) -> Message | None: ...
    def earlier_for(self, c: Consumer, mid: int) -> bool: ...
    def _dispatch_ready_sel(self) -> None: ...
    def _dispatch_ungrouped_sel(self, u: Group, now_ms: int) -> None: ...
    def pop_head(self, g: Group, now_ms: int) -> Message | None: ...
    def deliver(self, m: Message, g: Group, c: Consumer) -> None: ...
    def key_for_name(self, name: str) -> Any: ...
    def new_group(self, key: Any) -> Group: ...
    def bind(self, g: Group, c: Consumer) -> None: ...
    def unbind(self, g: Group) -> None: ...
    def groups_of(self, c: Consumer) -> list[Group]: ...
    def retire(self, g: Group) -> None: ...
    def keep_idle(self, g: Group) -> None: ...
    def lru_start(self, new: Group) -> None: ...
    def lru_append(self, g: Group) -> None: ...
    def lru_unlink(self, g: Group) -> None: ...
    def evict(self) -> None: ...
    def drop_group(self, g: Group) -> None: ...
    def park(self, g: Group, *, record: bool = True) -> None: ...

    @staticmethod
    def _compact_selwait(c: Consumer) -> None: ...

    # queue.py
    def touch(self) -> None: ...
    def expire_done(self, m: Message) -> None: ...
    def unblock_producers(self) -> None: ...
