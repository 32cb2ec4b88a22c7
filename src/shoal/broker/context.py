"""What the core's command modules share: the state and commands of the
broker, as a trait (a mypyc trait: an interface compiled code calls directly).

``Broker`` (core.py) is composed of one mixin per concern (connections.py,
subscriptions.py, addresses.py, routing.py, settlement.py, transactions.py,
memory.py, restore.py, admin.py, views.py). Each mixin extends
``BrokerCore``, so a concern depends on this description of the whole
rather than on the class that assembles it: no module imports core.py but
its users. What a queue sees of the broker is ``queue_context.QueueContext``,
which this extends.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Any

from mypy_extensions import trait

from shoal.broker.queue_context import QueueContext

if TYPE_CHECKING:
    from collections.abc import Sequence

    from shoal.broker.addresses import AddressBook
    from shoal.broker.cluster_routing import ClusterRouter
    from shoal.broker.destinations import Destination
    from shoal.broker.effects import Effect, PageIn
    from shoal.broker.memory import MemoryBudget
    from shoal.broker.model import (
        Connection,
        Consumer,
        CoreLimits,
        Message,
        Topic,
        Transaction,
    )
    from shoal.broker.queue import Queue
    from shoal.broker.queue_context import AnyQueue
    from shoal.broker.settings import AddressSettings
    from shoal.broker.sink import SinkStaging
    from shoal.broker.transactions import Transactions
    from shoal.records import MessageRemoved, Record


@trait
class BrokerCore(QueueContext):
    """The broker as its command modules see it: what a queue sees, and the rest."""

    address_settings: AddressSettings
    limits: CoreLimits
    now: float
    batching: bool
    warnings: list[tuple[int | None, str]]
    queues: dict[str, AnyQueue]
    sink_staging: SinkStaging | None
    topics: dict[str, Topic]
    sink_batches: dict[str, int]
    _conns: dict[int, Connection]
    _next_id: int
    _exp: list[tuple[int, int, Message]]
    _exp_compact_at: int
    memory: MemoryBudget
    addresses: AddressBook
    transactions: Transactions
    router: ClusterRouter | None
    cluster_holds: list[int]

    # core.py
    @abstractmethod
    def _kebab(self, fields: dict[str, Any]) -> dict[str, Any]: ...
    @abstractmethod
    def _clock(self, now: float) -> None: ...
    @abstractmethod
    def _flush(self) -> None: ...
    @abstractmethod
    def batch_begin(self) -> None: ...
    @abstractmethod
    def batch_end(self) -> None: ...
    @abstractmethod
    def next_id(self) -> int: ...
    @abstractmethod
    def take_effects(self) -> list[Effect]: ...
    @abstractmethod
    def begin(self, conn_id: int, tx: str, now: float) -> None: ...
    @abstractmethod
    def commit(self, conn_id: int, tx: str, now: float) -> list[int]: ...
    @abstractmethod
    def abort(self, conn_id: int, tx: str, now: float) -> None: ...
    @abstractmethod
    def take_page_ins(self) -> list[PageIn]: ...
    @abstractmethod
    def bodies_read(self, reads: list[PageIn]) -> None: ...
    @abstractmethod
    def _new_round(self) -> None: ...
    @abstractmethod
    def take_records(self) -> list[Record]: ...
    @abstractmethod
    def take_sent_removals(self) -> list[MessageRemoved]: ...
    @abstractmethod
    def warn(self, conn_id: int | None, text: str) -> None: ...
    @abstractmethod
    def take_warnings(self) -> list[tuple[int | None, str]]: ...
    @abstractmethod
    def tick(self, now: float) -> float | None: ...
    @abstractmethod
    def next_deadline(self) -> float | None: ...

    # connections.py
    @abstractmethod
    def _conn(self, conn_id: int) -> Connection: ...
    @abstractmethod
    def connect(
        self, conn_id: int, now: float, *, user: str | None = None, client_id: str | None = None
    ) -> None: ...
    @abstractmethod
    def disconnect(self, conn_id: int, now: float) -> None: ...
    @abstractmethod
    def set_writable(self, conn_id: int, writable: bool, now: float) -> None: ...

    # subscriptions.py
    @abstractmethod
    def subscribe(
        self,
        conn_id: int,
        sub_id: str,
        destination: str,
        ack_mode: str,
        headers: dict[str, str],
        now: float,
        *,
        link_credit: bool = False,
    ) -> None: ...
    @abstractmethod
    def _check_not_log(self, name: str, own: dict[str, Any], match: str) -> None: ...
    @abstractmethod
    def _subscription_queue(
        self, conn: Connection, sub_id: str, d: Destination, sub_name: str | None
    ) -> tuple[Queue, bool]: ...
    @abstractmethod
    def _close_consumer(self, c: Consumer) -> None: ...
    @abstractmethod
    def unsubscribe(
        self, conn_id: int, sub_id: str, now: float, *, durable: bool = False
    ) -> None: ...

    # routing.py
    @abstractmethod
    def send_blocked(self, conn_id: int, destination: str) -> bool: ...
    @abstractmethod
    def commit_blocked(self, conn_id: int, transaction: str) -> bool: ...
    @abstractmethod
    def send(
        self,
        conn_id: int,
        destination: str,
        headers: dict[str, str],
        body: bytes,
        now: float,
        *,
        transaction: str | None = None,
    ) -> int | None: ...
    @abstractmethod
    def send_many(
        self,
        conn_id: int,
        destination: str,
        rows: Sequence[tuple[str | None, dict[str, str], bytes]],
        now: float,
    ) -> int: ...
    @abstractmethod
    def _route(
        self,
        target: Any,
        base: str,
        headers: dict[str, str],
        body: bytes,
        seq: int,
        expires: int,
        priority: int,
        persistent: bool | None,
        producer: int | None,
    ) -> bool: ...
    @abstractmethod
    def _offer_log(
        self,
        q: Any,
        mid: int,
        base: str,
        headers: dict[str, str],
        body: bytes,
        seq: int,
        expires: int,
        priority: int,
        persistent: bool | None,
    ) -> None: ...
    # settlement.py
    @abstractmethod
    def _take_acked(self, conn: Connection, ack_id: str) -> tuple[Consumer, list[Message]]: ...
    @abstractmethod
    def ack(
        self,
        conn_id: int,
        ack_id: str,
        now: float,
        *,
        transaction: str | None = None,
        settled_on_send: bool = False,
    ) -> None: ...
    @abstractmethod
    def nack(
        self,
        conn_id: int,
        ack_id: str,
        now: float,
        *,
        transaction: str | None = None,
        counted: bool = True,
    ) -> None: ...
    @abstractmethod
    def set_credit(self, conn_id: int, sub_id: str, credit: int, now: float) -> None: ...
    @abstractmethod
    def _settle(
        self,
        conn: Connection,
        ack_id: str,
        tx: Transaction | None,
        *,
        nack: bool,
        counted: bool = True,
    ) -> None: ...
