"""The broker core's facade: ``Broker`` and the per-round plumbing.

Pure and deterministic: every command takes ``now`` (seconds, float; epoch
ms for message timestamps is ``int(now * 1000)``), mutates in-memory state
and appends effects (:mod:`shoal.broker.effects`) and records
(:mod:`shoal.records`) that the server drains with
:meth:`Broker.take_effects` and :meth:`Broker.take_records`. A command that
raises has changed nothing that was already accepted.

Every command ends with ``_flush()``, which runs dispatch for the queues the
command touched, so the Deliver effects of a command come out with it.

The commands live with their concern, one module each, and ``Broker``
composes them: ``connections``, ``subscriptions``, ``addresses`` (queues and
topics), ``routing`` (SEND), ``settlement`` (ACK/NACK), ``transactions``,
``memory`` (budgets and paging), ``restore``, ``admin`` and ``views``
(read-only, for management). This module owns the state they share, the
delivery rounds (``take_effects``), timers (``tick``) and warnings.
"""

from __future__ import annotations

from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any, cast

from shoal.broker import views
from shoal.broker.addresses import AddressBook
from shoal.broker.admin import Admin
from shoal.broker.cluster_routing import ClusterRouter, ensure_forward_queue
from shoal.broker.connections import ConnectionsMixin
from shoal.broker.memory import MemoryBudget
from shoal.broker.model import DONE, GROUP_STATES, PENDING, Connection, CoreLimits, Topic
from shoal.broker.queue import Queue
from shoal.broker.restore import restore
from shoal.broker.routing import RoutingMixin
from shoal.broker.settings import (
    AddressSettings,
    coerce_settings,
)
from shoal.broker.settlement import SettlementMixin
from shoal.broker.subscriptions import SubscriptionsMixin
from shoal.broker.transactions import Transactions
from shoal.broker.views import Views
from shoal.errors import Conflict

if TYPE_CHECKING:
    from collections.abc import Iterable

    from shoal.broker.effects import Effect, PageIn
    from shoal.broker.model import Consumer, Message
    from shoal.broker.queue_context import AnyQueue, QueueCore
    from shoal.broker.sink import SinkStaging
    from shoal.records import MessageRemoved, Record, Recovered


class Broker(
    ConnectionsMixin,
    SubscriptionsMixin,
    RoutingMixin,
    SettlementMixin,
):
    """The pure broker core. See docs/architecture.md for the contract."""

    def __init__(
        self,
        address_settings: AddressSettings,
        now: float,
        *,
        queues_config: dict[str, dict[str, Any]] | None = None,
        limits: CoreLimits | None = None,
        topics: tuple[str, ...] | list[str] = (),
        global_max_size: int = -1,
        paging: bool = False,
    ) -> None:
        self.address_settings = address_settings
        # The store can read a body back (take_page_ins): only then may
        # ``address-full-policy = "page"`` drop bodies from memory.
        self.paging = paging
        self.page_ins: list[PageIn] = []  # bodies to read back, this round
        self.to_page: list[tuple[Queue, Message]] = []  # paged out in take_records
        self.warnings: list[tuple[int | None, str]] = []  # take_warnings()
        self.batching = False  # batch_begin / batch_end
        self.now = now
        self.now_ms = int(now * 1000)
        self.effects: list[Effect] = []
        self.records: list[Record] = []
        # Auto-ack removals: journaled once their MESSAGE has been written
        # (take_sent_removals), so a crash in between cannot drop the message.
        self.sent_removals: list[MessageRemoved] = []
        self.dirty: list[QueueCore] = []
        self.capped: list[Consumer] = []  # consumers that used up this round's burst
        self.held_queues: dict[Queue, None] = {}
        self.addresses = AddressBook(self)
        # The address book's, read by the server and management.
        self.queues: dict[str, AnyQueue] = self.addresses.queues
        self.topics: dict[str, Topic] = self.addresses.topics
        self._conns: dict[int, Connection] = {}
        self._next_id = 1
        self._exp: list[tuple[int, int, Message]] = []
        self._exp_compact_at = 1024
        self.limits = limits or CoreLimits()
        # global-max-size: bytes of message bodies held by all queues; past it
        # every queue applies its address-full-policy (as Artemis).
        self.total_bytes = 0
        self.global_max = global_max_size
        self.memory = MemoryBudget(self)
        self.transactions = Transactions(self)
        self.admin = Admin(self)
        self.views = Views(self)
        for t in topics:
            self.addresses.topic(t)
        # Routing in a cluster, made when the server sets ``cluster`` (when
        # [cluster] is configured); None on a single node.
        self.router: ClusterRouter | None = None
        self.cluster_holds: list[int] = []  # hold ids of the command being handled (COMMIT)
        # Last published batch id per exactly-once sink (broker/sink.py reads it).
        self.sink_batches: dict[str, int] = {}
        self.sink_staging: SinkStaging | None = None  # created on first use (sink.staging_of)
        for name, raw in (queues_config or {}).items():
            raw = dict(raw)
            address = raw.pop("address", None)
            routing = raw.pop("routing", "anycast")
            subscription = raw.pop("subscription", None)
            own = dict(self._kebab(coerce_settings(raw)))
            self.addresses.make_queue(
                name,
                own,
                address=address or name,
                routing=routing,
                subscription=subscription,
                record=False,
            )

    # -- commands' plumbing: clock, dispatch, delivery rounds ----------------

    def _kebab(self, fields: dict[str, Any]) -> dict[str, Any]:
        return {k.replace("_", "-"): v for k, v in fields.items()}

    def _clock(self, now: float) -> None:
        self.now = now
        self.now_ms = int(now * 1000)

    def _flush(self) -> None:
        if self.batching:
            return  # batch_end dispatches
        d = self.dirty
        while d:
            q = cast("Queue", d.pop())
            q.dirty = False
            q.dispatch()
        if self.memory.blocked and self.total_bytes < self.global_max:
            self.memory.unblock_all()

    def batch_begin(self) -> None:
        """The caller runs several commands in a row (one socket read's frames):
        dispatch once, at ``batch_end``, instead of after every command.

        Same outcomes as the commands one by one, only later: an ACK frees
        credit, the next ACKs free more, then one dispatch pass delivers into
        all of it (fewer heap operations per message when consumers are
        saturated). Effects and records are drained after ``batch_end``.
        """
        self.batching = True

    def batch_end(self) -> None:
        self.batching = False
        if self.dirty or self.memory.blocked:
            self._flush()

    def next_id(self) -> int:
        i = self._next_id
        self._next_id = i + 1
        return i

    def take_effects(self) -> list[Effect]:
        """Drain the effects. This also starts a new delivery round (see Consumer)."""
        out = self.effects
        self.effects = []
        if self.page_ins:
            self.page_ins = []  # the server took them first (take_page_ins)
        if self.capped:
            self._new_round()
        return out

    def _new_round(self) -> None:
        """Refill the burst of capped consumers; their queues dispatch on the next command."""
        capped = self.capped
        self.capped = []
        for c in capped:
            c.burst = c.burst_max
            if c.refresh():
                q = cast("Queue", c.queue)
                q.consumer_ready(c)
                q.touch()

    def take_page_ins(self) -> list[PageIn]:
        """What needs a paged body read from the store: Delivers (among the
        effects not yet taken) and dead-letter/expiry copies (``PagedCopy``).

        The server fills in each one's ``body`` and answers with
        :meth:`bodies_read` before it passes the records of the same round to
        the store, so a removal record never overtakes the read.
        """
        out = self.page_ins
        self.page_ins = []
        return out

    def bodies_read(self, reads: list[PageIn]) -> None:
        """The server read the bodies that :meth:`take_page_ins` asked for:
        the copies that waited for them enter their queues now. A copy whose
        body could not be read enters empty, flagged ``shoal-body-lost``: a
        store error must not undo the dead-letter or expiry move."""
        self.memory.bodies_read(reads)
        self._flush()

    def take_sent_removals(self) -> list[MessageRemoved]:
        """The removals of messages auto-acked by their delivery: for the store
        once the deliveries of this round are written (the server's flush), so
        a crash between the two redelivers the message rather than losing it."""
        out = self.sent_removals
        self.sent_removals = []
        return out

    def take_records(self) -> list[Record]:
        """Drain the records to persist; messages waiting to be paged out go now
        (the caller hands the records to the store, which can then read them)."""
        out = self.records
        self.records = []
        if self.to_page:
            self.memory.page_out()
        return out

    def log_queue(self, name: str) -> Any:
        """The log queue ``name`` (NotFound if there is none, or a classic queue)."""
        return self.addresses.log_queue(name)

    # -- the cluster (docs/cluster.md) ----------------------------------------

    @property
    def cluster(self) -> Any:
        """The node's clustered grouping (``shoal.cluster.grouping.ClusterGrouping``),
        set by the server when [cluster] is configured; None on a single node."""
        router = self.router
        return None if router is None else router.grouping

    @cluster.setter
    def cluster(self, grouping: Any) -> None:
        self.router = None if grouping is None else ClusterRouter(self, grouping)

    def _in_cluster(self) -> ClusterRouter:
        router = self.router
        if router is None:
            raise Conflict("this node is not in a cluster")
        return router

    def binding_decided(self, queue: str, group: str, node: str, now: float) -> None:
        """The grouping handler's answer (C2): route what waited, in order."""
        self._in_cluster().binding_decided(queue, group, node, now)

    def binding_moved(self, queue: str, group: str, node: str | None, now: float) -> None:
        """A binding this node cached changed (``node``) or went (None)."""
        self._in_cluster().binding_moved(queue, group, node, now)

    def binding_released(self, queue: str, group: str, released: bool, now: float) -> None:
        """The answer to this node's ``ReleaseBinding``."""
        self._in_cluster().binding_released(queue, group, released, now)

    def cluster_rebalance(self, queue: str, moves: dict[str, str], now: float) -> int:
        """Cluster rebalance (C7): how many of the plan's groups are this node's."""
        return self._in_cluster().rebalance(queue, moves, now)

    def ensure_forward_queue(self, node: str) -> None:
        """Create the forward queue to ``node`` before its link subscribes to it."""
        ensure_forward_queue(self, node)

    def send_forwarded(
        self, conn_id: int, destination: str, headers: dict[str, str], body: bytes, now: float
    ) -> bool:
        """A message another node forwarded here; False if it was a duplicate (C4)."""
        return self._in_cluster().send_forwarded(conn_id, destination, headers, body, now)

    def cluster_fence(self, now: float) -> None:
        """Stop delivering this node's groups (in-flight messages stay out)."""
        self._in_cluster().fence(now)

    def cluster_recheck_keys(self) -> list[tuple[str, str]]:
        """The (queue, group)s whose binding must be read before unfencing."""
        return self._in_cluster().recheck_keys()

    def cluster_unfence(
        self, now: float, view: dict[tuple[str, str], str | None]
    ) -> list[tuple[str, str]]:
        """Deliver again; returns the groups parked instead (docs/cluster.md)."""
        return self._in_cluster().unfence(now, view)

    # -- transactions ------------------------------------------------------

    def begin(self, conn_id: int, tx: str, now: float) -> None:
        conn = self._conn(conn_id)
        self._clock(now)
        self.transactions.begin(conn, tx)

    def commit(self, conn_id: int, tx: str, now: float) -> list[int]:
        """Returns the hold ids of sends waiting for a cluster grouping
        decision (empty on a single node): the COMMIT's RECEIPT waits for
        their ``SendDecided`` effects, and an ERROR answers it if one is
        refused (C3)."""
        conn = self._conn(conn_id)
        self._clock(now)
        holds = self.transactions.commit(conn, tx)
        self._flush()
        return holds

    def abort(self, conn_id: int, tx: str, now: float) -> None:
        conn = self._conn(conn_id)
        self._clock(now)
        self.transactions.abort(conn, tx)
        self._flush()

    # -- restart ---------------------------------------------------------------

    def restore(self, recovered: Recovered, now: float) -> None:
        """Rebuild queues and messages after ``Store.open()``; emits no records."""
        self._clock(now)
        restore(self, recovered)
        self._flush()

    # -- operator commands (admin.py) ----------------------------------------

    def reset_groups(self, queue: str, group: str | None = None, now: float | None = None) -> int:
        """Free one or all groups; a group with messages in flight moves once drained."""
        return self.admin.reset_groups(queue, group, now)

    def park_group(self, queue: str, group: str, now: float | None = None) -> None:
        self.admin.park_group(queue, group, now)

    def resume_group(self, queue: str, group: str, now: float | None = None) -> None:
        self.admin.resume_group(queue, group, now)

    def create_queue(self, name: str, settings: dict[str, Any], now: float | None = None) -> None:
        self.admin.create_queue(name, settings, now)

    def delete_queue(self, name: str, now: float | None = None) -> None:
        self.admin.delete_queue(name, now)

    def purge_queue(self, name: str, now: float | None = None) -> int:
        return self.admin.purge_queue(name, now)

    # -- read-only views (views.py) ------------------------------------------

    def queue_infos(self) -> list[dict[str, Any]]:
        return self.views.queue_infos()

    def group_infos(
        self, queue: str, now: float | None = None, *, limit: int | None = None
    ) -> list[dict[str, Any]]:
        return self.views.group_infos(queue, now, limit=limit)

    def group_state_counts(self, queue: str) -> dict[str, int]:
        """{state: number of groups} without building a dict per group (metrics)."""
        return self.views.group_state_counts(queue)

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
    ) -> tuple[list[dict[str, Any]], int]:
        """One page of G15 group rows and the number of groups that match.

        ``state``: a state or several (``ready``, ``owned``, ``draining``,
        ``parked``); ``owner``: a consumer id ``conn/sub``, a connection id,
        or ``"none"`` for unowned groups; ``contains``: substring of the group
        name (``#N`` for buckets); ``sort``: ``group``, ``owner``,
        ``backlog``, ``in_flight``, ``oldest_age_ms``, ``state`` or
        ``reassigned`` (ties by group name, nulls first; ``descending``
        reverses the whole order). Rows are built for the page only.
        """
        q = self.addresses.classic(queue)
        now_ms = self.now_ms if now is None else int(now * 1000)
        states: frozenset[str] | None
        if state is None:
            states = None
        elif isinstance(state, str):
            states = frozenset((state,))
        else:
            states = frozenset(state)
        if states is not None and not states <= frozenset(GROUP_STATES):
            raise ValueError(f"group states are {', '.join(GROUP_STATES)}, not {sorted(states)}")
        return views.group_page(
            q,
            now_ms,
            states=states,
            owner=owner,
            contains=contains,
            sort=sort,
            descending=descending,
            offset=max(0, offset),
            limit=max(0, limit),
        )

    def group_info(self, queue: str, group: str, now: float | None = None) -> dict[str, Any] | None:
        return self.views.group_info(queue, group, now)

    def durable_subscription_topic(self, client_id: str | None, name: str) -> str | None:
        return self.views.durable_subscription_topic(client_id, name)

    def consumer_infos(self) -> list[dict[str, Any]]:
        return self.views.consumer_infos()

    def connection_infos(self) -> list[dict[str, Any]]:
        return self.views.connection_infos()

    def browse(self, queue: str, limit: int = 100) -> list[Message]:
        """Pending (not yet delivered) messages in queue order."""
        return self.views.browse(queue, limit)

    def queue(self, name: str) -> Queue:
        """The classic queue object (tests, diagnostics)."""
        return self.views.queue(name)

    # -- warnings for the log ------------------------------------------------

    def warn(self, conn_id: int | None, text: str) -> None:
        """Something the operator should see in the log (``take_warnings``)."""
        w = self.warnings
        if len(w) >= 10_000:  # nobody drains them (a bare core in a test): keep the newest
            del w[:5_000]
        w.append((conn_id, text))

    def take_warnings(self) -> list[tuple[int | None, str]]:
        """Drain ``(conn_id or None, text)`` warnings; the server logs them."""
        out = self.warnings
        self.warnings = []
        return out

    # -- time: expiry and dispatch delays -------------------------------------

    def watch_expiry(self, m: Message) -> None:
        heap = self._exp
        heappush(heap, (m.expires, m.id, m))
        if len(heap) >= self._exp_compact_at:
            live = [e for e in heap if e[2].state != DONE]
            live.sort()  # a sorted list is a heap
            self._exp = live
            self._exp_compact_at = max(1024, 2 * len(live))

    def tick(self, now: float) -> float | None:
        """Expire messages, end dispatch delays; return the next deadline."""
        self._clock(now)
        if self.capped:
            self._new_round()
        for q in list(self.held_queues):
            if now >= q.hold_until:
                q.release_hold()
        router = self.router
        if router is not None:
            if router.grouping.pending:
                router.expire()
            if router.grouping.reap_due(self.now_ms):
                router.reap()
        heap = self._exp
        now_ms = self.now_ms
        while heap and heap[0][0] <= now_ms:
            m = heappop(heap)[2]
            if m.state == PENDING:
                mq = self.queues.get(m.queue)
                if mq is not None and mq.__class__ is Queue and not mq.deleted:
                    mq.expire_pending(m)
        self._flush()
        return self.next_deadline()

    def next_deadline(self) -> float | None:
        """When ``tick`` has work next (pure apart from dropping stale timers)."""
        if self.capped or self.dirty:
            return self.now  # a delivery round is waiting: call tick again soon
        heap = self._exp
        while heap and heap[0][2].state != PENDING:
            heappop(heap)
        dl = heap[0][0] / 1000.0 if heap else None
        for q in self.held_queues:
            if dl is None or q.hold_until < dl:
                dl = q.hold_until
        if self.router is not None:
            cdl = self.router.grouping.next_deadline_ms()
            if cdl is not None and (dl is None or cdl / 1000.0 < dl):
                dl = cdl / 1000.0
        return dl
