"""The broker: ``Broker``, the facade of commands the server calls.

Pure and deterministic: every command takes ``now`` (seconds, float; epoch
ms for message timestamps is ``int(now * 1000)``), mutates in-memory state
and appends effects (:mod:`shoal.broker.effects`) and records
(:mod:`shoal.records`) that the server drains with
:meth:`Broker.take_effects` and :meth:`Broker.take_records`. A command that
raises has changed nothing that was already accepted.

Every command ends with ``dispatch_touched()``, which runs dispatch for the queues the
command touched, so the Deliver effects of a command come out with it.

The commands (connect, subscribe, send, ack, nack, begin, commit, ...) are
``Broker`` methods, here; each finds what it works on and hands it to the
component that owns that state, a typed attribute of the broker:

* ``addresses``: ``AddressBook`` (addresses.py), the queues and topics by name;
* ``memory``: ``MemoryBudget`` (memory.py), global-max-size and paging;
* ``transactions``: ``Transactions`` (transactions.py), COMMIT and ABORT;
* ``router``: ``ClusterRouter`` (cluster_routing.py), None on a single node;
* ``admin`` and ``views``: operator commands and read-only views.

The broker itself owns the connections, the round's outputs (effects,
records, page-ins: what a queue may use of it, ``QueueContext``), the
delivery rounds (``take_effects``), timers (``tick``) and warnings.
"""

from __future__ import annotations

from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any, cast

from shoal.broker import views
from shoal.broker.addresses import AddressBook
from shoal.broker.admin import Admin
from shoal.broker.cluster_routing import ClusterRouter, ensure_forward_queue
from shoal.broker.destinations import parse_destination
from shoal.broker.dispatch import dispatch
from shoal.broker.effects import PagedCopy, ProducerFlow
from shoal.broker.memory import GLOBAL_LIMIT, MemoryBudget, check_room
from shoal.broker.model import (
    DEFAULT_PREFETCH,
    DONE,
    GROUP_STATES,
    PENDING,
    Connection,
    Consumer,
    CoreLimits,
    Message,
    Topic,
)
from shoal.broker.queue import Queue
from shoal.broker.queue_context import QueueContext
from shoal.broker.restore import restore
from shoal.broker.routing import GROUP_SEQ, parse_message_headers
from shoal.broker.selector import compile_selector
from shoal.broker.settings import AddressSettings, by_config_name, coerce_settings, group_id_of
from shoal.broker.settlement import take_acked
from shoal.broker.subscriptions import close_consumer, int_header
from shoal.broker.transactions import Transactions
from shoal.broker.views import Views
from shoal.errors import Conflict, InvalidHeader, LimitExceeded, NotFound
from shoal.protocol.stomp.frames import ACK_MODES

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from shoal.broker.effects import Effect, PageIn
    from shoal.broker.model import QueueRef, Transaction
    from shoal.broker.queue_context import AnyQueue
    from shoal.broker.settings import QueueSettings
    from shoal.broker.sink import SinkStaging
    from shoal.records import MessageRemoved, Record, Recovered


class Broker(QueueContext):
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
        self.dirty: list[QueueRef] = []
        self.burst_spent: list[Consumer] = []  # consumers that used up this round's burst
        self.dispatch_delayed: dict[Queue, None] = {}
        self.addresses = AddressBook(self)
        # The address book's, read by the server and management.
        self.queues: dict[str, AnyQueue] = self.addresses.queues
        self.topics: dict[str, Topic] = self.addresses.topics
        self.connections: dict[int, Connection] = {}
        self.next_message_id = 1
        # Messages with an expiry, a heap of (expires ms, id, message); messages
        # that were settled meanwhile stay until popped or compacted away.
        self.expiry_heap: list[tuple[int, int, Message]] = []
        self.expiry_compact_at = 1024
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
            own = by_config_name(coerce_settings(raw))
            self.addresses.make_queue(
                name,
                own,
                address=address or name,
                routing=routing,
                subscription=subscription,
                record=False,
            )

    # -- commands' plumbing: clock, dispatch, delivery rounds ----------------

    def set_clock(self, now: float) -> None:
        self.now = now
        self.now_ms = int(now * 1000)

    def dispatch_touched(self) -> None:
        if self.batching:
            return  # batch_end dispatches
        d = self.dirty
        while d:
            q = cast("Queue", d.pop())
            q.dirty = False
            dispatch(q)
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
            self.dispatch_touched()

    def next_id(self) -> int:
        i = self.next_message_id
        self.next_message_id = i + 1
        return i

    def take_effects(self) -> list[Effect]:
        """Drain the effects. This also starts a new delivery round (see Consumer)."""
        out = self.effects
        self.effects = []
        if self.page_ins:
            self.page_ins = []  # the server took them first (take_page_ins)
        if self.burst_spent:
            self._new_round()
        return out

    def _new_round(self) -> None:
        """Refill the burst of the consumers that spent it; their queues dispatch next command."""
        spent = self.burst_spent
        self.burst_spent = []
        for c in spent:
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
        self.dispatch_touched()

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

    # -- connections ---------------------------------------------------------

    def connection(self, conn_id: int) -> Connection:
        conn = self.connections.get(conn_id)
        if conn is None:
            raise NotFound(f"no connection {conn_id}")
        return conn

    def connect(
        self,
        conn_id: int,
        now: float,
        *,
        user: str | None = None,
        client_id: str | None = None,
    ) -> None:
        self.set_clock(now)
        if conn_id in self.connections:
            raise Conflict(f"connection {conn_id} already exists")
        self.connections[conn_id] = Connection(conn_id, user, client_id, now)

    def disconnect(self, conn_id: int, now: float) -> None:
        conn = self.connection(conn_id)
        self.set_clock(now)
        for tx in list(conn.txs.values()):
            self.transactions.roll_back(tx)
        conn.txs.clear()
        for c in list(conn.subs.values()):
            close_consumer(c)
            if c.topic_queue:
                self.addresses.delete_queue(c.queue, record=False)
        conn.subs.clear()
        del self.connections[conn_id]
        for full in conn.temps.values():
            q = self.queues.get(full)
            if q is not None:
                self.addresses.delete_queue(q, record=False)
        for full in conn.temp_topics.values():
            t = self.topics.pop(full, None)
            if t is not None:
                for q in list(t.subs):
                    self.addresses.delete_queue(q, record=False)
        for q in list(conn.blocked_on):
            if q is GLOBAL_LIMIT:
                self.memory.blocked.pop(conn_id, None)
            else:
                q.blocked.pop(conn_id, None)
        self.dispatch_touched()

    def set_writable(self, conn_id: int, writable: bool, now: float) -> None:
        conn = self.connection(conn_id)
        self.set_clock(now)
        if conn.writable == writable:
            return
        conn.writable = writable
        for c in conn.subs.values():
            if writable:
                if c.refresh():
                    q = cast("Queue", c.queue)
                    q.consumer_ready(c)
                    q.touch()
            else:
                c.ready = False
        self.dispatch_touched()

    def producer_blocked(self, conn_id: int, q: Any) -> None:
        conn = self.connections.get(conn_id)
        if conn is None:
            return
        if not conn.blocked_on:
            self.effects.append(ProducerFlow(conn_id, True))
        conn.blocked_on[q] = None

    def producer_unblocked(self, conn_id: int, q: Any) -> None:
        conn = self.connections.get(conn_id)
        if conn is None or q not in conn.blocked_on:
            return
        del conn.blocked_on[q]
        # Also while still blocked elsewhere: its SENDs held for q may go on.
        self.effects.append(ProducerFlow(conn_id, False))

    def connections_of(self, q: Any) -> list[Connection]:
        return list(self.connections.values())

    # -- subscriptions -------------------------------------------------------

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
    ) -> None:
        """``link_credit``: an AMQP consumer link, whose credit comes from ``set_credit``."""
        conn = self.connection(conn_id)
        self.set_clock(now)
        if sub_id in conn.subs:
            raise Conflict(f"subscription id {sub_id!r} is already used on this connection")
        if ack_mode not in ACK_MODES:
            raise InvalidHeader("ack", ack_mode, "must be auto, client or client-individual")
        if len(conn.subs) >= self.limits.max_subscriptions_per_connection:
            raise LimitExceeded(
                "max-subscriptions-per-connection", self.limits.max_subscriptions_per_connection
            )
        if "prefetch-count" in headers:
            prefetch = int_header(headers, "prefetch-count", DEFAULT_PREFETCH)
        else:
            prefetch = int_header(headers, "activemq.prefetchSize", DEFAULT_PREFETCH)
        if prefetch < 0:
            raise InvalidHeader("prefetch-count", str(prefetch), "must not be negative")
        window = int_header(headers, "consumer-window-size", -1)
        text = headers.get("selector")
        # Compiled (or refused) before anything is created; cached by text.
        selector = compile_selector(text) if text else None
        d = parse_destination(destination)
        exclusive = (
            headers.get("activemq.exclusive", "").lower() == "true"
            or d.params.get("exclusive", "").lower() == "true"
        )
        sub_name = headers.get("durable-subscription-name") or headers.get(
            "activemq.subscriptionName"
        )
        q, topic_queue = self.addresses.subscription_queue(conn, sub_id, d, sub_name)
        c = Consumer(
            conn,
            sub_id,
            q,
            d.base,
            ack_mode,
            prefetch,
            window,
            exclusive,
            now,
            self.limits.max_delivery_burst,
            selector,
            link_credit,
        )
        c.topic_queue = topic_queue
        if topic_queue and selector is not None:
            # The subscription's own queue: what its one consumer rejects is never kept.
            q.filter = selector.matches
        conn.subs[sub_id] = c
        q.add_consumer(c, now)
        self.dispatch_touched()

    def unsubscribe(self, conn_id: int, sub_id: str, now: float, *, durable: bool = False) -> None:
        conn = self.connection(conn_id)
        self.set_clock(now)
        c = conn.subs.pop(sub_id, None)
        if c is None:
            raise NotFound(f"no subscription {sub_id!r} on this connection")
        close_consumer(c)
        q = cast("Queue", c.queue)
        if c.topic_queue:
            self.addresses.delete_queue(q, record=False)
        elif durable and q.subscription is not None and not q.consumers and not q.deleted:
            self.addresses.delete_queue(q, record=q.durable)
        self.dispatch_touched()

    # -- routing: SEND -> the queues of an address --------------------------

    def send_blocked(self, conn_id: int, destination: str) -> bool:
        """Whether a SEND from this connection to ``destination`` must wait:
        the connection is blocked on the address (or on global-max-size).

        Only full addresses hold a producer back: its SENDs elsewhere go on.
        An address never sent to, or a bad one, is not blocked (``send``
        reports a bad one).
        """
        conn = self.connections.get(conn_id)
        if conn is None or not conn.blocked_on:
            return False
        if GLOBAL_LIMIT in conn.blocked_on:
            return True
        target = self.addresses.send_cache.get(destination)
        if target is None:
            return False  # not an address this producer filled
        q = target[0]
        if q.__class__ is Topic:
            return any(sub in conn.blocked_on for sub in q.subs)
        return q in conn.blocked_on

    def commit_blocked(self, conn_id: int, transaction: str) -> bool:
        """Whether committing would send to an address this connection is blocked on."""
        conn = self.connections.get(conn_id)
        if conn is None or not conn.blocked_on:
            return False
        tx = conn.txs.get(transaction)
        return tx is not None and any(
            self.send_blocked(conn_id, destination) for destination, _h, _b in tx.sends
        )

    def send(
        self,
        conn_id: int,
        destination: str,
        headers: dict[str, str],
        body: bytes,
        now: float,
        *,
        transaction: str | None = None,
    ) -> int | None:
        """Route one SEND. Returns None, or in a cluster a hold id when the
        message waits for its group's binding (C2): a ``SendDecided`` effect
        with that id says later whether it was routed or refused."""
        conn = self.connections.get(conn_id)
        if conn is None:
            raise NotFound(f"no connection {conn_id}")
        self.set_clock(now)
        tx = None
        if transaction is not None:
            tx = conn.txs.get(transaction)
            if tx is None:
                raise NotFound(f"no transaction {transaction!r}")
            if tx.size() >= self.limits.max_transaction_size:
                raise LimitExceeded("max-transaction-size", self.limits.max_transaction_size)
        # parse_message_headers, inlined for the common case (no optional headers)
        # The headers with a meaning for the core beyond "persistent", one
        # lookup each (cheaper than a frozenset's isdisjoint walking the dict).
        plain = (
            GROUP_SEQ not in headers
            and "expires" not in headers
            and "priority" not in headers
            and "reply-to" not in headers
        )
        if plain:
            seq = expires = 0
            priority = 4
            ps = headers.get("persistent")
            persistent = None if ps is None else ps.lower() == "true"
        else:
            seq, expires, priority, persistent = parse_message_headers(headers)
        hit = self.addresses.send_cache.get(destination)
        target, base = hit if hit is not None else self.addresses.send_target(conn, destination)
        if not plain:
            rt = headers.get("reply-to")
            if rt is not None and rt.startswith("/temp-"):
                headers = self.addresses.rewrite_reply_to(conn, headers)
        cls = target.__class__
        gmax = self.global_max
        if cls is Queue:
            tq: Queue = target  # typed: compiled code calls it directly
            if tq.full_fail and tq.max_bytes >= 0:
                check_room(tq, len(body))
            if gmax >= 0:
                self.memory.check_global(tq, len(body))
            if tx is not None:
                tx.sends.append((destination, headers, body))
                return None
            conn.sent += 1
            router = self.router
            if router is not None:
                hold = router.route(
                    target, base, headers, body, seq, expires, priority, persistent, conn_id
                )
                self.dispatch_touched()
                return hold
            i = self.next_message_id
            self.next_message_id = i + 1
            m = tq.accept(
                i, base, headers, body, seq, expires, priority, persistent, self.now_ms, conn_id
            )
            d = self.dirty
            if not self.batching:
                while d:
                    dq = cast("Queue", d.pop())
                    dq.dirty = False
                    dispatch(dq)
            if gmax >= 0 and not (tq.can_page and m.persistent):
                self.memory.after_send(conn_id)
            return None
        if cls is Topic:
            for q in target.subs:
                if q.__class__ is Queue:
                    if q.full_fail and q.max_bytes >= 0:
                        check_room(q, len(body))
                    if gmax >= 0:
                        self.memory.check_global(q, len(body))
        if tx is not None:
            tx.sends.append((destination, headers, body))
            return None
        conn.sent += 1
        held = self.route(target, base, headers, body, seq, expires, priority, persistent, conn_id)
        self.dispatch_touched()
        if gmax >= 0 and held:
            self.memory.after_send(conn_id)
        return None

    def send_many(
        self,
        conn_id: int,
        destination: str,
        rows: Sequence[tuple[str | None, dict[str, str], bytes]],
        now: float,
    ) -> int:
        """Send ``rows`` of ``(group, headers, body)`` to a log queue in one go.

        All or nothing: every row's headers are parsed before any message is
        appended, so a bad header (InvalidHeader) sends none. Returns how many
        rows were sent: ``len(rows)``, or 0 when ``destination`` is not a log
        queue (a queue or a topic applies its limits message by message: the
        caller sends those one at a time with :meth:`send`). As in ``send``,
        the queue's group header names the group, not the row's first field.
        """
        conn = self.connections.get(conn_id)
        if conn is None:
            raise NotFound(f"no connection {conn_id}")
        self.set_clock(now)
        hit = self.addresses.send_cache.get(destination)
        target, base = hit if hit is not None else self.addresses.send_target(conn, destination)
        if target.__class__ is Queue or target.__class__ is Topic or not rows:
            return 0
        s: QueueSettings = target.settings
        gh = s.group_header
        default_group = s.default_group
        # one pass that may raise, before anything is appended; the fields go
        # in parallel lists (no tuple per row)
        gids: list[str | None] = []
        seqs: list[int] = []
        exps: list[int] = []
        prios: list[int] = []
        for _g, headers, _b in rows:
            rt = headers.get("reply-to")
            if rt is not None and rt.startswith("/temp-"):
                return 0  # send() rewrites it for the connection: one at a time
            seq, expires, priority, _p = parse_message_headers(headers)
            gids.append(group_id_of(headers, gh, default_group))
            seqs.append(seq)
            exps.append(expires)
            prios.append(priority)
        first = self.next_message_id
        n: int = target.offer_many(first, base, rows, gids, seqs, exps, prios, self.now_ms)
        self.next_message_id = first + n
        conn.sent += n
        self.dispatch_touched()
        if self.global_max >= 0:
            self.memory.after_send(conn_id)
        return n

    def route(
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
    ) -> bool:
        """Enqueue into the target's queues; True if some copy stays in memory
        whatever the budget (not pageable), so global-max-size may block."""
        targets = target.subs if target.__class__ is Topic else (target,)
        now_ms = self.now_ms
        held = False
        router = self.router
        for q in targets:
            if q.__class__ is Queue and q.filter is not None and not q.filter(headers):
                continue  # a non-durable topic subscriber's selector rejects it
            if router is not None and q.__class__ is Queue and target.__class__ is Queue:
                hold = router.route(
                    q, base, headers, body, seq, expires, priority, persistent, producer
                )
                if hold is not None:
                    self.cluster_holds.append(hold)  # commit() hands them to the session
                held = True
                continue
            i = self.next_message_id
            self.next_message_id = i + 1
            if q.__class__ is Queue:
                m = q.accept(
                    i, base, headers, body, seq, expires, priority, persistent, now_ms, producer
                )
                if not (q.can_page and m.persistent):
                    held = True
            else:
                self._offer_log(q, i, base, headers, body, seq, expires, priority, persistent)
                held = True
        return held

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
    ) -> None:
        s: QueueSettings = q.settings
        gid = group_id_of(headers, s.group_header, s.default_group)
        if persistent is None:
            persistent = s.default_persistent
        m = Message(
            mid, q.name, base, headers, body, gid, seq, persistent, expires, priority, self.now_ms
        )
        q.offer(m, self.now)

    def move_copy(self, m: Message, target: str, src: QueueRef, *, expiry: bool) -> None:
        """Dead-letter / expiry: a copy of ``m`` (new id) enters queue ``target``."""
        q = self.addresses.internal_queue(target)
        headers = dict(m.headers)
        headers["original-destination"] = m.destination
        expires = m.expires
        if expiry:
            headers.pop("expires", None)
            expires = 0
        persistent = m.persistent or headers.get("persistent", "").lower() == "true"
        if m.body is None:  # paged: the copy needs the bytes (its own MessageStored)
            self.page_ins.append(PagedCopy(m, q.name, src.name, headers, expires, persistent))
            return
        self.enter_copy(q, m, headers, m.body, expires, persistent)

    def enter_copy(
        self,
        q: Any,
        m: Message,
        headers: dict[str, str],
        body: bytes,
        expires: int,
        persistent: bool,
    ) -> None:
        i = self.next_id()
        dest = "/queue/" + q.name
        if q.__class__ is Queue:
            q.accept(
                i, dest, headers, body, m.group_seq, expires, m.priority, persistent, self.now_ms
            )
        else:
            self._offer_log(q, i, dest, headers, body, m.group_seq, expires, m.priority, persistent)

    # -- settlement: ACK and NACK --------------------------------------------

    def ack(
        self,
        conn_id: int,
        ack_id: str,
        now: float,
        *,
        transaction: str | None = None,
        settled_on_send: bool = False,
    ) -> None:
        """``settled_on_send``: the delivery was settled by sending it (AMQP
        pre-settled), so its removal waits for the write like an auto-ack's
        (``take_sent_removals``); the hot path below is the only one it takes."""
        conn = self.connections.get(conn_id)
        if conn is None:
            raise NotFound(f"no connection {conn_id}")
        self.set_clock(now)
        tx = self.transactions.of(conn, transaction) if transaction is not None else None
        if tx is None:
            # hot path: client-individual, one message
            try:
                m = conn.acks.pop(int(ack_id), None)
            except (TypeError, ValueError):
                m = None
            if m is not None and m.holder.unsettled is None:  # type: ignore[union-attr]
                c: Consumer = m.holder  # type: ignore[assignment]
                q = cast("Queue", c.queue)
                q.settle(m, settled_on_send)
                c.credit += c.refund
                c.window += m.size
                c.acked += 1
                if not c.ready and c.refresh():
                    q.consumer_ready(c)
                    q.touch()
                if self.dirty or self.memory.blocked:
                    self.dispatch_touched()
                return
            if m is not None:
                conn.acks[m.id] = m  # cumulative: take the general path
        self._settle(conn, ack_id, tx, nack=False)

    def nack(
        self,
        conn_id: int,
        ack_id: str,
        now: float,
        *,
        transaction: str | None = None,
        counted: bool = True,
    ) -> None:
        """Return a delivery; ``counted=False`` (AMQP released) does not count
        it toward max-delivery-attempts (it goes back to the head of its group)."""
        conn = self.connection(conn_id)
        self.set_clock(now)
        tx = self.transactions.of(conn, transaction) if transaction is not None else None
        self._settle(conn, ack_id, tx, nack=True, counted=counted)

    def set_credit(self, conn_id: int, sub_id: str, credit: int, now: float) -> None:
        """An AMQP consumer link's credit is what its peer granted last."""
        conn = self.connection(conn_id)
        self.set_clock(now)
        c = conn.subs.get(sub_id)
        if c is None:
            raise NotFound(f"no subscription {sub_id!r} on this connection")
        c.credit = max(0, credit)
        if c.refresh():
            q = cast("Queue", c.queue)
            q.consumer_ready(c)
            q.touch()
        elif c.credit <= 0:
            c.ready = False
        self.dispatch_touched()

    def _settle(
        self,
        conn: Connection,
        ack_id: str,
        tx: Transaction | None,
        *,
        nack: bool,
        counted: bool = True,
    ) -> None:
        """ACK or NACK what ``ack_id`` covers; in a transaction, only note it."""
        c, msgs = take_acked(conn, ack_id)
        q = cast("Queue", c.queue)
        size = 0
        for m in msgs:
            size += m.size
            if tx is None:
                if nack:
                    q.requeue(m, counted)
                else:
                    q.settle(m)
        if tx is not None:
            (tx.nacks if nack else tx.acks).extend(msgs)
        c.credit += len(msgs) * c.refund
        c.window += size
        if nack:
            c.nacked += len(msgs)
        else:
            c.acked += len(msgs)
        if not c.ready and c.refresh():
            q.consumer_ready(c)
            q.touch()
        self.dispatch_touched()

    # -- transactions ------------------------------------------------------

    def begin(self, conn_id: int, tx: str, now: float) -> None:
        conn = self.connection(conn_id)
        self.set_clock(now)
        self.transactions.begin(conn, tx)

    def commit(self, conn_id: int, tx: str, now: float) -> list[int]:
        """Returns the hold ids of sends waiting for a cluster grouping
        decision (empty on a single node): the COMMIT's RECEIPT waits for
        their ``SendDecided`` effects, and an ERROR answers it if one is
        refused (C3)."""
        conn = self.connection(conn_id)
        self.set_clock(now)
        holds = self.transactions.commit(conn, tx)
        self.dispatch_touched()
        return holds

    def abort(self, conn_id: int, tx: str, now: float) -> None:
        conn = self.connection(conn_id)
        self.set_clock(now)
        self.transactions.abort(conn, tx)
        self.dispatch_touched()

    # -- restart ---------------------------------------------------------------

    def restore(self, recovered: Recovered, now: float) -> None:
        """Rebuild queues and messages after ``Store.open()``; emits no records."""
        self.set_clock(now)
        restore(self, recovered)
        self.dispatch_touched()

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
        heap = self.expiry_heap
        heappush(heap, (m.expires, m.id, m))
        if len(heap) >= self.expiry_compact_at:
            live = [e for e in heap if e[2].state != DONE]
            live.sort()  # a sorted list is a heap
            self.expiry_heap = live
            self.expiry_compact_at = max(1024, 2 * len(live))

    def tick(self, now: float) -> float | None:
        """Expire messages, end dispatch delays; return the next deadline."""
        self.set_clock(now)
        if self.burst_spent:
            self._new_round()
        for q in list(self.dispatch_delayed):
            if now >= q.hold_until:
                q.release_hold()
        router = self.router
        if router is not None:
            if router.grouping.pending:
                router.expire()
            if router.grouping.reap_due(self.now_ms):
                router.reap()
        heap = self.expiry_heap
        now_ms = self.now_ms
        while heap and heap[0][0] <= now_ms:
            m = heappop(heap)[2]
            if m.state == PENDING:
                mq = self.queues.get(m.queue)
                if mq is not None and mq.__class__ is Queue and not mq.deleted:
                    mq.expire_pending(m)
        self.dispatch_touched()
        return self.next_deadline()

    def next_deadline(self) -> float | None:
        """When ``tick`` has work next (pure apart from dropping stale timers)."""
        if self.burst_spent or self.dirty:
            return self.now  # a delivery round is waiting: call tick again soon
        heap = self.expiry_heap
        while heap and heap[0][2].state != PENDING:
            heappop(heap)
        dl = heap[0][0] / 1000.0 if heap else None
        for q in self.dispatch_delayed:
            if dl is None or q.hold_until < dl:
                dl = q.hold_until
        if self.router is not None:
            cdl = self.router.grouping.next_deadline_ms()
            if cdl is not None and (dl is None or cdl / 1000.0 < dl):
                dl = cdl / 1000.0
        return dl
