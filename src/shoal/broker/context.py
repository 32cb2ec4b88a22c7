"""What the core's command modules share: the state and commands of the
broker, as a protocol.

``Broker`` (core.py) is composed of one mixin per concern (connections.py,
subscriptions.py, addresses.py, routing.py, settlement.py, transactions.py,
memory.py, restore.py, admin.py, views.py). Each mixin's methods take
``self: BrokerCore``, so a concern depends on this description of the whole
rather than on the class that assembles it: no module imports core.py but
its users. What a queue sees of the broker is ``queue_context.QueueContext``,
which this extends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from shoal.broker.queue_context import QueueContext

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from shoal.broker.destinations import Destination
    from shoal.broker.effects import Effect, PageIn, RestoredBody
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
    from shoal.cluster.grouping import Pending
    from shoal.records import Record, Recovered


class BrokerCore(QueueContext, Protocol):
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
    _send_cache: dict[str, tuple[Any, str]]
    _exp: list[tuple[int, int, Message]]
    _exp_compact_at: int
    _gblocked: dict[int, None]
    cluster: Any  # shoal.cluster.grouping.ClusterGrouping, None on a single node
    cluster_holds: list[int]

    # core.py
    @staticmethod
    def _kebab(fields: dict[str, Any]) -> dict[str, Any]: ...
    def _clock(self, now: float) -> None: ...
    def _flush(self) -> None: ...
    def batch_begin(self) -> None: ...
    def batch_end(self) -> None: ...
    def next_id(self) -> int: ...
    def take_effects(self) -> list[Effect]: ...
    def _new_round(self) -> None: ...
    def take_records(self) -> list[Record]: ...
    def warn(self, conn_id: int | None, text: str) -> None: ...
    def take_warnings(self) -> list[tuple[int | None, str]]: ...
    def tick(self, now: float) -> float | None: ...
    def next_deadline(self) -> float | None: ...

    # connections.py
    def _conn(self, conn_id: int) -> Connection: ...
    def connect(
        self, conn_id: int, now: float, *, user: str | None = None, client_id: str | None = None
    ) -> None: ...
    def disconnect(self, conn_id: int, now: float) -> None: ...
    def set_writable(self, conn_id: int, writable: bool, now: float) -> None: ...

    # subscriptions.py
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
    def _check_not_log(self, name: str, own: dict[str, Any], match: str) -> None: ...
    def _subscription_queue(
        self, conn: Connection, sub_id: str, d: Destination, sub_name: str | None
    ) -> tuple[Queue, bool]: ...
    def _close_consumer(self, c: Consumer) -> None: ...
    def unsubscribe(
        self, conn_id: int, sub_id: str, now: float, *, durable: bool = False
    ) -> None: ...

    # addresses.py
    def _make_queue(
        self,
        name: str,
        own: dict[str, Any],
        *,
        match: str | None = None,
        address: str | None = None,
        routing: str = "anycast",
        durable: bool = True,
        temp_owner: int | None = None,
        subscription: str | None = None,
        client_id: str | None = None,
        record: bool = True,
    ) -> Any: ...
    def _topic(self, name: str, temp_owner: int | None = None) -> Topic: ...
    def _queue_for(self, name: str, own: dict[str, Any], conn_id: int | None = None) -> Any: ...
    def _check_params(self, q: Any, own: dict[str, Any], conn_id: int | None) -> None: ...
    def _internal_queue(self, name: str) -> Any: ...
    def _temp_queue(self, conn: Connection, name: str, own: dict[str, Any]) -> Any: ...
    def _temp_topic(self, conn: Connection, name: str) -> Topic: ...
    def _delete_queue(self, q: Any, *, record: bool) -> None: ...
    def log_queue(self, name: str) -> Any: ...

    # routing.py
    def send_blocked(self, conn_id: int, destination: str) -> bool: ...
    def commit_blocked(self, conn_id: int, transaction: str) -> bool: ...
    def _send_target(self, conn: Connection, destination: str) -> tuple[Any, str]: ...
    def _rewrite_reply_to(self, conn: Connection, headers: dict[str, str]) -> dict[str, str]: ...
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
    def send_many(
        self,
        conn_id: int,
        destination: str,
        rows: Sequence[tuple[str | None, dict[str, str], bytes]],
        now: float,
    ) -> int: ...
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
    def _cluster_route(
        self,
        q: Queue,
        base: str,
        headers: dict[str, str],
        body: bytes,
        seq: int,
        expires: int,
        priority: int,
        persistent: bool | None,
        producer: int | None,
    ) -> int | None: ...
    @staticmethod
    def _group_of(q: Any, headers: dict[str, str]) -> str | None: ...
    def _accept_local(
        self,
        q: Queue,
        base: str,
        headers: dict[str, str],
        body: bytes,
        seq: int,
        expires: int,
        priority: int,
        persistent: bool | None,
        producer: int | None,
        delivery_count: int = 0,
    ) -> None: ...
    def _forward(
        self,
        node: str,
        q: Queue,
        base: str,
        headers: dict[str, str],
        body: bytes,
        seq: int,
        expires: int,
        priority: int,
        persistent: bool | None,
        producer: int | None,
    ) -> None: ...
    def ensure_forward_queue(self, node: str) -> None: ...
    def _make_forward_queue(self, node: str) -> Queue: ...
    def binding_decided(self, queue: str, group: str, node: str, now: float) -> None: ...
    def _release(self, pending: Pending, node: str) -> None: ...
    def _cluster_expire(self) -> None: ...
    def _cluster_hold(
        self,
        q: Queue,
        gid: str,
        base: str,
        headers: dict[str, str],
        body: bytes,
        seq: int,
        expires: int,
        priority: int,
        persistent: bool | None,
        producer: int | None,
        source: Any = None,
    ) -> int: ...
    def binding_moved(self, queue: str, group: str, node: str | None, now: float) -> None: ...
    def _take_back(self, old: str, queue: str, group: str) -> None: ...
    def _send_stranded(self, queue: str, group: str) -> bool: ...
    def _cluster_route_entry(
        self, q: Queue, group: str, headers: dict[str, str], m: Message, fq: Queue
    ) -> None: ...
    def binding_released(self, queue: str, group: str, released: bool, now: float) -> None: ...
    def _cluster_reap(self) -> None: ...
    def _group_drained(self, queue: str, group: str) -> bool: ...
    def _cluster_moves(self, drained: Any) -> None: ...
    def cluster_rebalance(self, queue: str, moves: dict[str, str], now: float) -> int: ...
    def send_forwarded(
        self, conn_id: int, destination: str, headers: dict[str, str], body: bytes, now: float
    ) -> bool: ...
    @staticmethod
    def fenceable(q: Any) -> bool: ...
    def _fenceable_queues(self) -> list[Queue]: ...
    def cluster_fence(self, now: float) -> None: ...
    def cluster_recheck_keys(self) -> list[tuple[str, str]]: ...
    def cluster_unfence(
        self, now: float, view: dict[tuple[str, str], str | None]
    ) -> list[tuple[str, str]]: ...
    def _enter_copy(
        self,
        q: Any,
        m: Message,
        headers: dict[str, str],
        body: bytes,
        expires: int,
        persistent: bool,
    ) -> None: ...

    # settlement.py
    def _take_acked(self, conn: Connection, ack_id: str) -> tuple[Consumer, list[Message]]: ...
    def ack(
        self, conn_id: int, ack_id: str, now: float, *, transaction: str | None = None
    ) -> None: ...
    def nack(
        self,
        conn_id: int,
        ack_id: str,
        now: float,
        *,
        transaction: str | None = None,
        counted: bool = True,
    ) -> None: ...
    def set_credit(self, conn_id: int, sub_id: str, credit: int, now: float) -> None: ...
    def _settle(
        self,
        conn: Connection,
        ack_id: str,
        tx: Transaction | None,
        *,
        nack: bool,
        counted: bool = True,
    ) -> None: ...

    # transactions.py
    def _tx(self, conn: Connection, transaction: str | None) -> Transaction | None: ...
    def begin(self, conn_id: int, tx: str, now: float) -> None: ...
    def commit(self, conn_id: int, tx: str, now: float) -> list[int]: ...
    def _abort(self, t: Transaction) -> None: ...
    def abort(self, conn_id: int, tx: str, now: float) -> None: ...

    # memory.py
    def _global_unblock(self) -> None: ...
    def take_page_ins(self) -> list[PageIn]: ...
    def bodies_read(self, reads: list[PageIn]) -> None: ...
    def _restored_body(self, r: RestoredBody) -> None: ...
    def _page_out(self) -> None: ...
    def _check_global(self, q: Queue, size: int) -> None: ...
    def _after_global(self, conn_id: int) -> None: ...
    @staticmethod
    def _check_room(q: Queue, size: int) -> None: ...

    # restore.py
    def restore(self, recovered: Recovered, now: float) -> None: ...

    # admin.py
    def reset_groups(
        self, queue: str, group: str | None = None, now: float | None = None
    ) -> int: ...
    def _park(self, q: Queue, group: str, *, record: bool) -> None: ...
    def park_group(self, queue: str, group: str, now: float | None = None) -> None: ...
    def resume_group(self, queue: str, group: str, now: float | None = None) -> None: ...
    def create_queue(
        self, name: str, settings: dict[str, Any], now: float | None = None
    ) -> None: ...
    def delete_queue(self, name: str, now: float | None = None) -> None: ...
    def purge_queue(self, name: str, now: float | None = None) -> int: ...

    # views.py
    def _classic(self, name: str) -> Queue: ...
    def queue_infos(self) -> list[dict[str, Any]]: ...
    def group_infos(
        self, queue: str, now: float | None = None, *, limit: int | None = None
    ) -> list[dict[str, Any]]: ...
    def group_state_counts(self, queue: str) -> dict[str, int]: ...
    def group_page(
        self,
        queue: str,
        *,
        state: str | Iterable[str] | None = None,
        owner: str | None = None,
        contains: str | None = None,
        sort: str = "group",
        descending: bool = False,
        offset: int = 0,
        limit: int = 100,
        now: float | None = None,
    ) -> tuple[list[dict[str, Any]], int]: ...
    def group_info(
        self, queue: str, group: str, now: float | None = None
    ) -> dict[str, Any] | None: ...
    def consumer_infos(self) -> list[dict[str, Any]]: ...
    def connection_infos(self) -> list[dict[str, Any]]: ...
    def browse(self, queue: str, limit: int = 100) -> list[Message]: ...
    def queue(self, name: str) -> Queue: ...
