"""What a queue may use of the broker it belongs to (``QueueContext``), what
its dispatch, group-table and consumer mixins see of it (``QueueCore``), what
every queue has (``AnyQueue``) and where log queues and the sink append
records (``RecordLog``): traits and Protocols that queue.py, dispatch.py,
groups.py, consumers.py, logqueue.py and sink.py depend on. Nothing here
imports those modules back, not even for a type: the broker's mixins narrow
a ``QueueCore`` to ``Queue`` where they need it (docs/architecture.md).
``core.Broker`` implements ``QueueContext``.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Any, Protocol

from mypy_extensions import trait

from shoal.broker.model import QueueRef

if TYPE_CHECKING:
    from shoal.broker.effects import Effect, PageIn
    from shoal.broker.model import Connection, Consumer, Group, Message, PickEntry
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
    ``Broker`` implements it (a trait, as ``QueueCore``)."""

    now_ms: int
    paging: bool
    effects: list[Effect]
    records: list[Record]
    sent_removals: list[MessageRemoved]
    page_ins: list[PageIn]
    to_page: list[tuple[Any, Message]]  # (Queue, Message)
    dirty: list[QueueCore]  # queues to dispatch
    capped: list[Consumer]
    held_queues: dict[Any, None]  # queues whose dispatch is held
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
    def move_copy(self, m: Message, target: str, src: QueueCore, *, expiry: bool) -> None: ...


@trait
class QueueCore(QueueRef):
    """What the dispatch, group-table and consumer mixins (dispatch.py,
    groups.py, consumers.py) use of the ``Queue`` they are mixed into: its
    state, declared in ``Queue.__slots__``, and its methods, which one of the
    mixins or ``Queue`` defines. The mixins extend it: a trait rather than a
    Protocol, so that compiled code reaches a queue's fields directly. No
    ``__slots__ = ()`` here or on the mixins: mypyc then refuses their stores
    to Queue's fields, so a pure-Python Queue has a ``__dict__`` (the compiled
    run still rejects a misspelled field)."""

    acked: int
    bindings_max: int
    blocked: dict[int, None]
    broker: QueueContext
    buckets: int
    bytes: int
    consumers: dict[Consumer, None]
    dirty: bool  # in the broker's dirty list
    default_group: str | None
    deleted: bool
    delivered: int
    depth: int
    dispatch_held: bool
    fenced: bool
    expired: int
    first_key: str | None
    groups: dict[Any, Group]
    consumers_before_dispatch: int
    delay_ms: int
    exclusive: bool
    exclusive_consumers: dict[Consumer, None]
    rebalance: bool
    in_flight: int
    lineup: list[Consumer]
    lru_head: Group | None
    lru_on: bool
    lru_tail: Group | None
    max_bytes: int
    nactive: int
    paged: int
    paged_bytes: int
    persist_delivery_count: bool
    pickable: list[PickEntry]
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
    @abstractmethod
    def place(self, g: Group) -> None: ...
    @abstractmethod
    def reposition(self, g: Group) -> None: ...
    @abstractmethod
    def consumer_ready(self, c: Consumer) -> None: ...
    @abstractmethod
    def _unwait(self, heap: list[tuple[int, Group]], k: int, owner: Consumer | None) -> int: ...
    @abstractmethod
    def pull_earlier(self, c: Consumer, mid: int) -> bool: ...
    @abstractmethod
    def push_pick(self, c: Consumer) -> None: ...
    @abstractmethod
    def compact_pickable(self) -> None: ...
    @abstractmethod
    def pick_for_group(self) -> Consumer | None: ...
    @abstractmethod
    def next_round_robin(self) -> Consumer | None: ...
    @abstractmethod
    def dispatch(self) -> None: ...
    @abstractmethod
    def _dispatch_ready(self) -> None: ...
    @abstractmethod
    def _dispatch_ungrouped(self, u: Group, now_ms: int) -> None: ...
    @abstractmethod
    def pick_accepting(
        self, headers: dict[str, str], *, grouped: bool
    ) -> Consumer | bool | None: ...
    @abstractmethod
    def wait_for_acceptor(self, g: Group, m: Message) -> None: ...
    @abstractmethod
    def selwait_requeue(self, g: Group) -> None: ...
    @abstractmethod
    def selwait_ready(self, c: Consumer, k: int) -> bool: ...
    @abstractmethod
    def pull_selwait(self, c: Consumer, mid: int) -> bool: ...
    @abstractmethod
    def release_selector_waits(self, c: Consumer | None = None) -> None: ...
    @abstractmethod
    def peek_head(self, g: Group, now_ms: int) -> Message | None: ...
    @abstractmethod
    def earlier_for(self, c: Consumer, mid: int) -> bool: ...
    @abstractmethod
    def _dispatch_ready_sel(self) -> None: ...
    @abstractmethod
    def _dispatch_ungrouped_sel(self, u: Group, now_ms: int) -> None: ...
    @abstractmethod
    def pop_head(self, g: Group, now_ms: int) -> Message | None: ...
    @abstractmethod
    def deliver(self, m: Message, g: Group, c: Consumer) -> None: ...
    @abstractmethod
    def key_for_name(self, name: str) -> Any: ...
    @abstractmethod
    def new_group(self, key: Any) -> Group: ...
    @abstractmethod
    def bind(self, g: Group, c: Consumer) -> None: ...
    @abstractmethod
    def unbind(self, g: Group) -> None: ...
    @abstractmethod
    def groups_of(self, c: Consumer) -> list[Group]: ...
    @abstractmethod
    def retire(self, g: Group) -> None: ...
    @abstractmethod
    def keep_idle(self, g: Group) -> None: ...
    @abstractmethod
    def lru_start(self, new: Group) -> None: ...
    @abstractmethod
    def lru_append(self, g: Group) -> None: ...
    @abstractmethod
    def lru_unlink(self, g: Group) -> None: ...
    @abstractmethod
    def evict(self) -> None: ...
    @abstractmethod
    def drop_group(self, g: Group) -> None: ...
    @abstractmethod
    def park(self, g: Group, *, record: bool = True) -> None: ...

    @staticmethod
    def _compact_selwait(c: Consumer) -> None: ...

    # consumers.py
    @abstractmethod
    def add_consumer(self, c: Consumer, now: float) -> None: ...
    @abstractmethod
    def remove_consumer(self, c: Consumer, returned: list[Message]) -> None: ...
    @abstractmethod
    def sole_consumer(self) -> Consumer | None: ...
    @abstractmethod
    def update_active(self, joined: Consumer | None) -> None: ...
    @abstractmethod
    def active_consumers(self) -> list[Consumer]: ...
    @abstractmethod
    def enter_lineup(self, c: Consumer) -> None: ...
    @abstractmethod
    def leave_lineup(self, c: Consumer) -> None: ...
    @abstractmethod
    def release_groups_of(self, c: Consumer) -> None: ...
    @abstractmethod
    def after_unbind(self, g: Group) -> None: ...
    @abstractmethod
    def release_hold(self) -> None: ...
    @abstractmethod
    def rebalance_to(self, n: Consumer) -> int: ...
    @abstractmethod
    def accepts_head(self, c: Consumer, g: Group) -> bool: ...
    @abstractmethod
    def move_group(self, g: Group, to: Consumer) -> None: ...
    @abstractmethod
    def reset_group(self, g: Group, *, keep: bool = False) -> bool: ...
    @abstractmethod
    def resume(self, g: Group) -> None: ...

    # queue.py
    @abstractmethod
    def hold_dispatch(self, now: float) -> None: ...
    @abstractmethod
    def touch(self) -> None: ...
    @abstractmethod
    def requeue(self, m: Message, counted: bool = True) -> None: ...
    @abstractmethod
    def end_selectors(self) -> None: ...
    @abstractmethod
    def expire_done(self, m: Message) -> None: ...
    @abstractmethod
    def unblock_producers(self) -> None: ...
