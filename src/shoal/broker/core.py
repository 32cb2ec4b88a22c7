"""The broker core facade: connections, subscriptions, routing, transactions.

Pure and deterministic: every command takes ``now`` (seconds, float; epoch
ms for message timestamps is ``int(now * 1000)``), mutates in-memory state
and appends effects (:mod:`shoal.broker.effects`) and records
(:mod:`shoal.store.records`) that the server drains with
:meth:`Broker.take_effects` and :meth:`Broker.take_records`. A command that
raises has changed nothing that was already accepted.

Every command ends with ``_flush()``, which runs dispatch for the queues the
command touched, so the Deliver effects of a command come out with it.

Paging (``address-full-policy = "page"``, see ``queue.py``): a persistent
message accepted past its queue's budget is paged out in ``take_records``,
once its MessageStored goes to the store, if it is still pending. A Deliver
may then carry a message whose body is None. :meth:`Broker.take_page_ins` lists those
Delivers; the server fills in ``Deliver.body`` from the store before it hands
the round's records to the store (an auto-ack delivery's MessageRemoved must
not reach the journal before the body was read). ``body_loader`` is the one
way the core itself reads a body back, for the dead-letter or expiry copy of
a paged message; without a loader nothing is ever paged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from heapq import heappop, heappush
from operator import attrgetter
from typing import Any

from shoal.broker.consumer import ACK_MODES, DEFAULT_PREFETCH, Consumer
from shoal.broker.destinations import (
    Destination,
    is_temp_name,
    parse_destination,
    private_subscription_queue_name,
    subscription_queue_name,
    temp_name,
)
from shoal.broker.dispatch import IN_FLIGHT, PENDING
from shoal.broker.effects import CloseConnection, Deliver, Effect, ProducerFlow
from shoal.broker.message import Message
from shoal.broker.queue import GROUP_STATES, Queue, settings_to_kebab
from shoal.broker.settings import (
    SUBSCRIPTION_PARAMETERS,
    AddressSettings,
    QueueSettings,
    coerce_settings,
)
from shoal.errors import (
    Conflict,
    InvalidDestination,
    InvalidHeader,
    LimitExceeded,
    NotFound,
    ResourceFull,
)
from shoal.store.base import Recovered
from shoal.store.records import QueueDeclared, QueueDeleted, Record

_SEQ = "JMSXGroupSeq"
_by_id = attrgetter("id")
# Headers with a meaning for the core beyond "persistent" (send's fast path).
_OPTIONAL_HEADERS = frozenset({_SEQ, "expires", "priority", "reply-to"})
_GLOBAL = "<global-max-size>"  # key in Connection.blocked_on for the broker-wide limit


@dataclass(frozen=True, slots=True)
class CoreLimits:
    """Per-connection limits the core enforces (LimitExceeded names the limit).

    ``Broker(limits=...)`` accepts this or any object with some of these
    attribute names; missing ones take these defaults.
    """

    max_subscriptions_per_connection: int = 10_000
    max_transactions_per_connection: int = 1_000
    max_transaction_size: int = 1_000_000  # sends + acks + nacks buffered in one tx
    # deliveries per round to a consumer without a credit limit (auto-ack, prefetch 0)
    max_delivery_burst: int = 1000


class Connection:
    __slots__ = (
        "id",
        "user",
        "client_id",
        "writable",
        "subs",
        "acks",
        "txs",
        "temps",
        "temp_topics",
        "blocked_on",
        "since",
        "sent",
    )

    def __init__(self, conn_id: int, user: str | None, client_id: str | None, now: float) -> None:
        self.id = conn_id
        self.user = user
        self.client_id = client_id
        self.writable = True
        self.subs: dict[str, Consumer] = {}
        self.acks: dict[int, Message] = {}  # unsettled deliveries by message id
        self.txs: dict[str, Transaction] = {}
        self.temps: dict[str, str] = {}  # short name -> temp queue name
        self.temp_topics: dict[str, str] = {}
        self.blocked_on: dict[Any, None] = {}  # queues that block this producer
        self.since = now
        self.sent = 0


class Transaction:
    __slots__ = ("id", "sends", "acks", "nacks")

    def __init__(self, tx_id: str) -> None:
        self.id = tx_id
        self.sends: list[tuple[str, dict[str, str], bytes]] = []
        self.acks: list[Message] = []
        self.nacks: list[Message] = []

    def size(self) -> int:
        return len(self.sends) + len(self.acks) + len(self.nacks)


class Topic:
    __slots__ = ("name", "subs", "temp_owner")

    def __init__(self, name: str, temp_owner: int | None = None) -> None:
        self.name = name
        self.subs: list[Any] = []  # subscription queues
        self.temp_owner = temp_owner


def _parse_int_header(headers: dict[str, str], name: str, default: int) -> int:
    raw = headers.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise InvalidHeader(name, raw, "not an integer") from None


def parse_message_headers(
    headers: dict[str, str],
) -> tuple[int, int, int, bool | None]:
    """(JMSXGroupSeq, expires, priority, persistent or None) or InvalidHeader."""
    s = headers.get(_SEQ)
    if s is None:
        seq = 0
    else:
        try:
            seq = int(s)
        except ValueError:
            raise InvalidHeader(_SEQ, s, "not an integer") from None
    e = headers.get("expires")
    if e is None:
        expires = 0
    else:
        try:
            expires = int(e)
        except ValueError:
            raise InvalidHeader("expires", e, "not an integer (epoch milliseconds)") from None
        if expires < 0:
            expires = 0
    p = headers.get("priority")
    if p is None:
        priority = 4
    else:
        try:
            priority = min(9, max(0, int(p)))
        except ValueError:
            raise InvalidHeader("priority", p, "not an integer") from None
    ps = headers.get("persistent")
    persistent = None if ps is None else ps.lower() == "true"
    return seq, expires, priority, persistent


class Broker:
    """The pure broker core. See docs/architecture.md for the contract."""

    def __init__(
        self,
        address_settings: AddressSettings,
        now: float,
        *,
        queues_config: dict[str, dict[str, Any]] | None = None,
        limits: Any = None,
        topics: tuple[str, ...] | list[str] = (),
        global_max_size: int = -1,
        body_loader: Callable[[Message], bytes] | None = None,
    ) -> None:
        self.address_settings = address_settings
        # Reads a paged message's body back (the server: JournalStore.load_body).
        self.body_loader = body_loader
        self.page_ins: list[Deliver] = []  # Delivers of paged messages, this round
        self.to_page: list[tuple[Queue, Message]] = []  # paged out in take_records
        self.warnings: list[tuple[int | None, str]] = []  # take_warnings()
        self.batching = False  # batch_begin / batch_end
        self.now = now
        self.now_ms = int(now * 1000)
        self.effects: list[Effect] = []
        self.records: list[Record] = []
        self.dirty: list[Queue] = []
        self.capped: list[Consumer] = []  # consumers that used up this round's burst
        self.held: dict[Queue, None] = {}
        self.queues: dict[str, Any] = {}
        self.topics: dict[str, Topic] = {}
        self._conns: dict[int, Connection] = {}
        self._next_id = 1
        self._send_cache: dict[str, tuple[Any, str]] = {}
        self._exp: list[tuple[int, int, Message]] = []
        self._exp_compact_at = 1024
        defaults = CoreLimits()
        self.limits = CoreLimits(
            **{
                name: getattr(limits, name, getattr(defaults, name))
                for name in CoreLimits.__dataclass_fields__
            }
        )
        # global-max-size: bytes of message bodies held by all queues; past it
        # every queue applies its address-full-policy (as Artemis).
        self.total_bytes = 0
        self.global_max = global_max_size
        self._gblocked: dict[int, None] = {}
        for t in topics:
            self._topic(t)
        # Last published batch id per exactly-once sink (broker/sink.py reads it).
        self.sink_batches: dict[str, int] = {}
        for name, raw in (queues_config or {}).items():
            raw = dict(raw)
            address = raw.pop("address", None)
            routing = raw.pop("routing", "anycast")
            subscription = raw.pop("subscription", None)
            own = {k: v for k, v in self._kebab(coerce_settings(raw)).items()}
            self._make_queue(
                name,
                own,
                address=address or name,
                routing=routing,
                subscription=subscription,
                record=False,
            )

    # ------------------------------------------------------------------ utils

    @staticmethod
    def _kebab(fields: dict[str, Any]) -> dict[str, Any]:
        return {k.replace("_", "-"): v for k, v in fields.items()}

    def _clock(self, now: float) -> None:
        self.now = now
        self.now_ms = int(now * 1000)

    def _conn(self, conn_id: int) -> Connection:
        conn = self._conns.get(conn_id)
        if conn is None:
            raise NotFound(f"no connection {conn_id}")
        return conn

    def _flush(self) -> None:
        if self.batching:
            return  # batch_end dispatches
        d = self.dirty
        while d:
            q = d.pop()
            q.dirty = False
            q.dispatch()
        if self._gblocked and self.total_bytes < self.global_max:
            self._global_unblock()

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
        if self.dirty or self._gblocked:
            self._flush()

    def _global_unblock(self) -> None:
        blocked = list(self._gblocked)
        self._gblocked.clear()
        for conn_id in blocked:
            self.producer_unblocked(conn_id, _GLOBAL)

    def next_id(self) -> int:
        i = self._next_id
        self._next_id = i + 1
        return i

    def take_effects(self) -> list[Effect]:
        """Drain the effects. This also starts a new delivery round (see Consumer)."""
        out = self.effects[:]
        self.effects.clear()  # queues hold a reference to this list
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
                q = c.queue
                q.consumer_ready(c)
                q.touch()

    def take_page_ins(self) -> list[Deliver]:
        """Delivers (among the effects not yet taken) whose message is paged out.

        The server loads their bodies into ``Deliver.body`` before it passes
        the records of the same round to the store; see the module docstring.
        """
        out = self.page_ins
        self.page_ins = []
        return out

    def load_body(self, m: Message) -> bytes:
        """``m``'s body, read back through ``body_loader`` when it is paged."""
        body = m.body
        if body is None:
            if self.body_loader is None:
                raise LookupError(f"message {m.id} is paged and there is no body loader")
            body = self.body_loader(m)
        return body

    def take_records(self) -> list[Record]:
        """Drain the records to persist; messages waiting to be paged out go now
        (the caller hands the records to the store, which can then read them)."""
        out = self.records[:]
        self.records.clear()  # queues and log queues hold a reference
        if self.to_page:
            self._page_out()
        return out

    def _page_out(self) -> None:
        todo = self.to_page
        self.to_page = []
        touched: dict[Queue, None] = {}
        for q, m in todo:
            if m.state == PENDING and m.body is not None and not q.deleted:
                q.page_out(m)
                touched[q] = None
        for q in touched:
            if q.blocked and q.bytes < q.max_bytes:
                q.unblock_producers()
        if self._gblocked and self.total_bytes < self.global_max:
            self._global_unblock()

    # ------------------------------------------------------------ queues

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
    ) -> Any:
        fields = coerce_settings(own)
        settings = self.address_settings.resolve(match or address or name, fields)
        address = address or name
        if settings.queue_type == "log":
            from shoal.broker.logqueue import LogQueue  # another engineer's module

            q: Any = LogQueue(name, settings, self.records)
        else:
            q = Queue(
                self,
                name,
                settings,
                own,
                address=address,
                routing=routing,
                durable=durable,
                temp_owner=temp_owner,
                subscription=subscription,
                client_id=client_id,
            )
        self.queues[name] = q
        if routing == "multicast":
            self._topic(address).subs.append(q)
        if record and durable:
            self.records.append(
                QueueDeclared(name, address, routing, dict(own), subscription, client_id)
            )
        return q

    def _topic(self, name: str, temp_owner: int | None = None) -> Topic:
        t = self.topics.get(name)
        if t is None:
            t = self.topics[name] = Topic(name, temp_owner)
        return t

    def _queue_for(self, name: str, own: dict[str, Any], conn_id: int | None = None) -> Any:
        """/queue/NAME: the queue, auto-created with ``own`` settings on first use."""
        q = self.queues.get(name)
        if q is None:
            q = self._make_queue(name, own)
        elif own:
            self._check_params(q, own, conn_id)
        return q

    def _check_params(self, q: Any, own: dict[str, Any], conn_id: int | None) -> None:
        """Destination parameters that differ from an existing queue's settings are
        ignored with a warning (DESIGN "Destination parameters")."""
        settings = q.settings
        diff = []
        for key, value in own.items():
            if key in SUBSCRIPTION_PARAMETERS:
                continue  # also a per-subscription flag (exclusive consumer)
            current = getattr(settings, key.replace("-", "_"), value)
            if current != value:
                diff.append(f"{key}={value!r} (queue has {current!r})")
        if diff:
            self.warn(
                conn_id,
                f"queue {q.name!r} already exists; destination parameters ignored: "
                + ", ".join(diff),
            )

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

    def _internal_queue(self, name: str) -> Any:
        """Dead-letter and expiry addresses: anycast queues, auto-created."""
        q = self.queues.get(name)
        if q is None:
            q = self._make_queue(name, {})
        return q

    def _temp_queue(self, conn: Connection, name: str, own: dict[str, Any]) -> Any:
        full = conn.temps.get(name)
        if full is not None:
            q = self.queues[full]
            if own:
                self._check_params(q, own, conn.id)
            return q
        q = self.queues.get(name)
        if q is not None and getattr(q, "temp_owner", None) is not None:
            return q  # another connection's temp queue, named in full (reply-to)
        if is_temp_name(name):
            raise NotFound(f"temporary queue {name!r} no longer exists")
        full = temp_name(conn.id, name)
        conn.temps[name] = full
        return self._make_queue(full, own, durable=False, temp_owner=conn.id, record=False)

    def _temp_topic(self, conn: Connection, name: str) -> Topic:
        full = conn.temp_topics.get(name)
        if full is not None:
            return self.topics[full]
        t = self.topics.get(name)
        if t is not None and t.temp_owner is not None:
            return t
        if is_temp_name(name):
            raise NotFound(f"temporary topic {name!r} no longer exists")
        full = temp_name(conn.id, name)
        conn.temp_topics[name] = full
        return self._topic(full, conn.id)

    def _delete_queue(self, q: Any, *, record: bool) -> None:
        """Remove a queue: its consumers are closed, its messages dropped."""
        name = q.name
        if self.queues.get(name) is q:
            del self.queues[name]
        self._send_cache.clear()
        if isinstance(q, Queue):
            for c in list(q.consumers):
                conn = c.conn
                if conn.subs.get(c.sub_id) is c:
                    del conn.subs[c.sub_id]
                self._close_consumer(c)
                if self._conns.get(conn.id) is conn and conn.id != q.temp_owner:
                    self.effects.append(CloseConnection(conn.id, f"queue {name!r} was deleted"))
            # QueueDeleted drops the stored messages with the queue (docs/journal.md).
            for m in q.pending_messages() + q.in_flight_messages():
                m.state = 2
            for g in q.all_fifos():  # no message <-> group cycles left for the GC
                g.head = g.tail = None
            q.deleted = True
            self.total_bytes -= q.bytes
            for conn_id in list(q.blocked):
                self.producer_unblocked(conn_id, q)
            q.blocked.clear()
            self.held.pop(q, None)
        for t in self.topics.values():
            if q in t.subs:
                t.subs.remove(q)
        if record:
            self.records.append(QueueDeleted(name))

    def log_queue(self, name: str) -> Any:
        q = self.queues.get(name)
        if q is None or isinstance(q, Queue):
            raise NotFound(f"no log queue {name!r}")
        return q

    # ----------------------------------------------------------- connections

    def connect(
        self, conn_id: int, now: float, *, user: str | None = None, client_id: str | None = None
    ) -> None:
        self._clock(now)
        if conn_id in self._conns:
            raise Conflict(f"connection {conn_id} already exists")
        self._conns[conn_id] = Connection(conn_id, user, client_id, now)

    def disconnect(self, conn_id: int, now: float) -> None:
        conn = self._conn(conn_id)
        self._clock(now)
        for tx in list(conn.txs.values()):
            self._abort(tx)
        conn.txs.clear()
        for c in list(conn.subs.values()):
            self._close_consumer(c)
            if c.topic_queue:
                self._delete_queue(c.queue, record=False)
        conn.subs.clear()
        del self._conns[conn_id]
        for full in conn.temps.values():
            q = self.queues.get(full)
            if q is not None:
                self._delete_queue(q, record=False)
        for full in conn.temp_topics.values():
            t = self.topics.pop(full, None)
            if t is not None:
                for q in list(t.subs):
                    self._delete_queue(q, record=False)
        for q in list(conn.blocked_on):
            if q is _GLOBAL:
                self._gblocked.pop(conn_id, None)
            else:
                q.blocked.pop(conn_id, None)
        self._flush()

    def set_writable(self, conn_id: int, writable: bool, now: float) -> None:
        conn = self._conn(conn_id)
        self._clock(now)
        if conn.writable == writable:
            return
        conn.writable = writable
        for c in conn.subs.values():
            if writable:
                if c.refresh():
                    q = c.queue
                    q.consumer_ready(c)
                    q.touch()
            else:
                c.ready = False
        self._flush()

    def producer_blocked(self, conn_id: int, q: Any) -> None:
        conn = self._conns.get(conn_id)
        if conn is None:
            return
        if not conn.blocked_on:
            self.effects.append(ProducerFlow(conn_id, True))
        conn.blocked_on[q] = None

    def producer_unblocked(self, conn_id: int, q: Any) -> None:
        conn = self._conns.get(conn_id)
        if conn is None or q not in conn.blocked_on:
            return
        del conn.blocked_on[q]
        if not conn.blocked_on:
            self.effects.append(ProducerFlow(conn_id, False))

    def connections_of(self, q: Any) -> list[Connection]:
        return list(self._conns.values())

    # ------------------------------------------------------------------ send

    def _send_target(self, conn: Connection, destination: str) -> tuple[Any, str]:
        """(Queue | LogQueue | Topic, base destination); may create the queue."""
        hit = self._send_cache.get(destination)
        if hit is not None:
            return hit
        d = parse_destination(destination)
        if d.kind == "queue":
            out: tuple[Any, str] = (self._queue_for(d.name, d.own, conn.id), d.base)
            self._send_cache[destination] = out
            return out
        if d.kind == "topic":
            out = (self._topic(d.name), d.base)
            self._send_cache[destination] = out
            return out
        if d.kind == "temp-queue":
            q = self._temp_queue(conn, d.name, d.own)
            return q, "/temp-queue/" + q.name
        t = self._temp_topic(conn, d.name)
        return t, "/temp-topic/" + t.name

    def _rewrite_reply_to(self, conn: Connection, headers: dict[str, str]) -> dict[str, str]:
        rt = headers["reply-to"]
        d = parse_destination(rt)
        if d.kind == "temp-queue":
            name = self._temp_queue(conn, d.name, d.own).name
        elif d.kind == "temp-topic":
            name = self._temp_topic(conn, d.name).name
        else:
            return headers
        new = f"/{d.kind}/{name}"
        if new == d.base:
            return headers
        headers = dict(headers)
        headers["reply-to"] = new
        return headers

    def send(
        self,
        conn_id: int,
        destination: str,
        headers: dict[str, str],
        body: bytes,
        now: float,
        *,
        transaction: str | None = None,
    ) -> None:
        conn = self._conns.get(conn_id)
        if conn is None:
            raise NotFound(f"no connection {conn_id}")
        self.now = now
        self.now_ms = int(now * 1000)
        tx = None
        if transaction is not None:
            tx = conn.txs.get(transaction)
            if tx is None:
                raise NotFound(f"no transaction {transaction!r}")
            if tx.size() >= self.limits.max_transaction_size:
                raise LimitExceeded("max-transaction-size", self.limits.max_transaction_size)
        # parse_message_headers, inlined for the common case (no optional headers)
        plain = _OPTIONAL_HEADERS.isdisjoint(headers)
        if plain:
            seq = expires = 0
            priority = 4
            ps = headers.get("persistent")
            persistent = None if ps is None else ps.lower() == "true"
        else:
            seq, expires, priority, persistent = parse_message_headers(headers)
        hit = self._send_cache.get(destination)
        target, base = hit if hit is not None else self._send_target(conn, destination)
        if not plain:
            rt = headers.get("reply-to")
            if rt is not None and rt.startswith("/temp-"):
                headers = self._rewrite_reply_to(conn, headers)
        cls = target.__class__
        gmax = self.global_max
        if cls is Queue:
            if target.full_fail and target.max_bytes >= 0:
                self._check_room(target, len(body))
            if gmax >= 0:
                self._check_global(target, len(body))
            if tx is not None:
                tx.sends.append((destination, headers, body))
                return
            conn.sent += 1
            i = self._next_id
            self._next_id = i + 1
            m = target.accept(
                i, base, headers, body, seq, expires, priority, persistent, self.now_ms, conn_id
            )
            d = self.dirty
            if not self.batching:
                while d:
                    q = d.pop()
                    q.dirty = False
                    q.dispatch()
            if gmax >= 0 and not (target.page and m.persistent):
                self._after_global(conn_id)
            return
        if cls is Topic:
            for q in target.subs:
                if q.__class__ is Queue:
                    if q.full_fail and q.max_bytes >= 0:
                        self._check_room(q, len(body))
                    if gmax >= 0:
                        self._check_global(q, len(body))
        if tx is not None:
            tx.sends.append((destination, headers, body))
            return
        conn.sent += 1
        held = self._route(target, base, headers, body, seq, expires, priority, persistent, conn_id)
        self._flush()
        if gmax >= 0 and held:
            self._after_global(conn_id)

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
        conn = self._conns.get(conn_id)
        if conn is None:
            raise NotFound(f"no connection {conn_id}")
        self.now = now
        self.now_ms = int(now * 1000)
        hit = self._send_cache.get(destination)
        target, base = hit if hit is not None else self._send_target(conn, destination)
        if target.__class__ is Queue or target.__class__ is Topic or not rows:
            return 0
        s: QueueSettings = target.settings
        gh = s.group_header
        amq = gh == "JMSXGroupID"
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
            gid = headers.get(gh)
            if gid is None and amq:
                gid = headers.get("_AMQ_GROUP_ID")
            gids.append(gid or default_group)
            seqs.append(seq)
            exps.append(expires)
            prios.append(priority)
        first = self._next_id
        n = target.offer_many(first, base, rows, gids, seqs, exps, prios, self.now_ms)
        self._next_id = first + n
        conn.sent += n
        self._flush()
        if self.global_max >= 0:
            self._after_global(conn_id)
        return n

    def _check_global(self, q: Queue, size: int) -> None:
        if q.full_fail and self.total_bytes + size > self.global_max:
            raise ResourceFull(
                f"broker memory is full (global-max-size {self.global_max}, "
                f"address-full-policy fail on {q.name!r})"
            )

    def _after_global(self, conn_id: int) -> None:
        if self.total_bytes >= self.global_max:
            if conn_id not in self._gblocked:
                self._gblocked[conn_id] = None
                self.producer_blocked(conn_id, _GLOBAL)
        elif self._gblocked:
            self._global_unblock()

    @staticmethod
    def _check_room(q: Queue, size: int) -> None:
        if q.bytes + size > q.max_bytes:
            raise ResourceFull(
                f"queue {q.name!r} is full (max-size-bytes {q.max_bytes}, "
                f"address-full-policy fail)"
            )

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
    ) -> bool:
        """Enqueue into the target's queues; True if some copy stays in memory
        whatever the budget (not pageable), so global-max-size may block."""
        targets = target.subs if target.__class__ is Topic else (target,)
        now_ms = self.now_ms
        held = False
        for q in targets:
            i = self._next_id
            self._next_id = i + 1
            if q.__class__ is Queue:
                m = q.accept(
                    i, base, headers, body, seq, expires, priority, persistent, now_ms, producer
                )
                if not (q.page and m.persistent):
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
        gid = headers.get(s.group_header)
        if gid is None and s.group_header == "JMSXGroupID":
            gid = headers.get("_AMQ_GROUP_ID")
        if not gid:
            gid = s.default_group
        if persistent is None:
            persistent = s.default_persistent
        m = Message(
            mid, q.name, base, headers, body, gid, seq, persistent, expires, priority, self.now_ms
        )
        q.offer(m, self.now)

    def move_copy(self, m: Message, target: str, src: Queue, *, expiry: bool) -> None:
        """Dead-letter / expiry: a copy of ``m`` (new id) enters queue ``target``."""
        q = self._internal_queue(target)
        headers = dict(m.headers)
        headers["original-destination"] = m.destination
        expires = m.expires
        if expiry:
            headers.pop("expires", None)
            expires = 0
        persistent = m.persistent or headers.get("persistent", "").lower() == "true"
        body = m.body
        if body is None:  # paged: the copy needs the bytes (its own MessageStored)
            try:
                body = self.load_body(m)
            except Exception as exc:  # noqa: BLE001 - a store error must not undo the move
                self.warn(None, f"message {m.id} of queue {src.name!r}: body could not be read "
                          f"back for its copy to {q.name!r} ({exc}); the copy is empty")
                body = b""
                headers["shoal-body-lost"] = "true"
        i = self.next_id()
        dest = "/queue/" + q.name
        if q.__class__ is Queue:
            q.accept(i, dest, headers, body, m.group_seq, expires, m.priority, persistent,
                     self.now_ms)
        else:
            self._offer_log(q, i, dest, headers, body, m.group_seq, expires, m.priority,
                            persistent)

    def watch_expiry(self, m: Message) -> None:
        heap = self._exp
        heappush(heap, (m.expires, m.id, m))
        if len(heap) >= self._exp_compact_at:
            live = [e for e in heap if e[2].state != 2]
            live.sort()  # a sorted list is a heap
            self._exp = live
            self._exp_compact_at = max(1024, 2 * len(live))

    # ------------------------------------------------------------- subscribe

    def subscribe(
        self,
        conn_id: int,
        sub_id: str,
        destination: str,
        ack_mode: str,
        headers: dict[str, str],
        now: float,
    ) -> None:
        conn = self._conn(conn_id)
        self._clock(now)
        if sub_id in conn.subs:
            raise Conflict(f"subscription id {sub_id!r} is already used on this connection")
        if ack_mode not in ACK_MODES:
            raise InvalidHeader("ack", ack_mode, "must be auto, client or client-individual")
        if len(conn.subs) >= self.limits.max_subscriptions_per_connection:
            raise LimitExceeded(
                "max-subscriptions-per-connection", self.limits.max_subscriptions_per_connection
            )
        if "prefetch-count" in headers:
            prefetch = _parse_int_header(headers, "prefetch-count", DEFAULT_PREFETCH)
        else:
            prefetch = _parse_int_header(headers, "activemq.prefetchSize", DEFAULT_PREFETCH)
        if prefetch < 0:
            raise InvalidHeader("prefetch-count", str(prefetch), "must not be negative")
        window = _parse_int_header(headers, "consumer-window-size", -1)
        d = parse_destination(destination)
        exclusive = (
            headers.get("activemq.exclusive", "").lower() == "true"
            or d.params.get("exclusive", "").lower() == "true"
        )
        sub_name = headers.get("durable-subscription-name") or headers.get(
            "activemq.subscriptionName"
        )
        q, topic_queue = self._subscription_queue(conn, sub_id, d, sub_name)
        c = Consumer(
            conn, sub_id, q, d.base, ack_mode, prefetch, window, exclusive, now,
            self.limits.max_delivery_burst,
        )
        c.topic_queue = topic_queue
        conn.subs[sub_id] = c
        q.add_consumer(c, now)
        self._flush()

    def _check_not_log(self, name: str, own: dict[str, Any], match: str) -> None:
        q = self.queues.get(name)
        if q is not None:
            if not isinstance(q, Queue):
                raise InvalidDestination("log queues are read over HTTP")
            return
        if self.address_settings.resolve(match, coerce_settings(own)).queue_type == "log":
            raise InvalidDestination("log queues are read over HTTP")

    def _subscription_queue(
        self, conn: Connection, sub_id: str, d: Destination, sub_name: str | None
    ) -> tuple[Queue, bool]:
        if d.kind == "queue":
            self._check_not_log(d.name, d.own, d.name)
            return self._queue_for(d.name, d.own, conn.id), False
        if d.kind == "temp-queue":
            q = self._temp_queue(conn, d.name, d.own)
            if q.__class__ is not Queue:
                raise InvalidDestination("log queues are read over HTTP")
            return q, False
        topic = self._topic(d.name) if d.kind == "topic" else self._temp_topic(conn, d.name)
        if sub_name and d.kind == "topic":
            name = subscription_queue_name(topic.name, sub_name, conn.client_id)
            self._check_not_log(name, d.own, topic.name)
            q = self.queues.get(name)
            if q is None:
                q = self._make_queue(
                    name,
                    d.own,
                    address=topic.name,
                    routing="multicast",
                    subscription=sub_name,
                    client_id=conn.client_id,
                )
            elif q.routing != "multicast" or q.address != topic.name:
                raise Conflict(f"queue {name!r} exists and is not a subscription of {topic.name!r}")
            elif d.own:
                self._check_params(q, d.own, conn.id)
            return q, False
        name = private_subscription_queue_name(topic.name, conn.id, sub_id)
        self._check_not_log(name, d.own, topic.name)
        q = self.queues.get(name)
        if q is not None:
            raise Conflict(f"subscription queue {name!r} already exists")
        q = self._make_queue(
            name, d.own, address=topic.name, routing="multicast", durable=False, record=False
        )
        return q, True

    def _close_consumer(self, c: Consumer) -> None:
        conn = c.conn
        acks = conn.acks
        if c.unsettled is not None:
            msgs = [m for m in c.unsettled if m.holder is c and m.state == IN_FLIGHT]
            c.unsettled.clear()
        else:
            msgs = [m for m in acks.values() if m.holder is c]
        for m in msgs:
            acks.pop(m.id, None)
        q = c.queue
        if q.deleted:
            c.closed = True
            return
        q.remove_consumer(c, msgs)

    def unsubscribe(self, conn_id: int, sub_id: str, now: float, *, durable: bool = False) -> None:
        conn = self._conn(conn_id)
        self._clock(now)
        c = conn.subs.pop(sub_id, None)
        if c is None:
            raise NotFound(f"no subscription {sub_id!r} on this connection")
        self._close_consumer(c)
        q = c.queue
        if c.topic_queue:
            self._delete_queue(q, record=False)
        elif durable and q.subscription is not None and not q.consumers and not q.deleted:
            self._delete_queue(q, record=q.durable)
        self._flush()

    # ------------------------------------------------------------- ack / nack

    def _take_acked(self, conn: Connection, ack_id: str) -> tuple[Consumer, list[Message]]:
        try:
            mid = int(ack_id)
        except (TypeError, ValueError):
            raise NotFound(f"no unacknowledged message {ack_id!r} on this connection") from None
        m = conn.acks.pop(mid, None)
        if m is None:
            raise NotFound(f"no unacknowledged message {ack_id!r} on this connection")
        c: Consumer = m.holder  # type: ignore[assignment]
        un = c.unsettled
        if un is None:
            return c, [m]
        out = []
        acks = conn.acks
        while un:
            x = un.popleft()
            if x.holder is not c or x.state != IN_FLIGHT:
                continue
            out.append(x)
            if x is m:
                break
            acks.pop(x.id, None)
        return c, out

    def _tx(self, conn: Connection, transaction: str | None) -> Transaction | None:
        if transaction is None:
            return None
        tx = conn.txs.get(transaction)
        if tx is None:
            raise NotFound(f"no transaction {transaction!r}")
        if tx.size() >= self.limits.max_transaction_size:
            raise LimitExceeded("max-transaction-size", self.limits.max_transaction_size)
        return tx

    def ack(self, conn_id: int, ack_id: str, now: float, *, transaction: str | None = None) -> None:
        conn = self._conns.get(conn_id)
        if conn is None:
            raise NotFound(f"no connection {conn_id}")
        self.now = now
        self.now_ms = int(now * 1000)
        tx = self._tx(conn, transaction) if transaction is not None else None
        if tx is None:
            # hot path: client-individual, one message
            try:
                m = conn.acks.pop(int(ack_id), None)
            except (TypeError, ValueError):
                m = None
            if m is not None and m.holder.unsettled is None:  # type: ignore[union-attr]
                c: Consumer = m.holder  # type: ignore[assignment]
                q = c.queue
                q.settle(m)
                c.credit += 1
                c.window += m.size
                c.acked += 1
                if not c.ready and c.refresh():
                    q.consumer_ready(c)
                    q.touch()
                if self.dirty or self._gblocked:
                    self._flush()
                return
            if m is not None:
                conn.acks[m.id] = m  # cumulative: take the general path
        self._settle(conn, ack_id, tx, nack=False)

    def nack(self, conn_id: int, ack_id: str, now: float, *, transaction: str | None = None) -> None:
        conn = self._conn(conn_id)
        self._clock(now)
        self._settle(conn, ack_id, self._tx(conn, transaction), nack=True)

    def _settle(self, conn: Connection, ack_id: str, tx: Transaction | None, *, nack: bool) -> None:
        """ACK or NACK what ``ack_id`` covers; in a transaction, only note it."""
        c, msgs = self._take_acked(conn, ack_id)
        q = c.queue
        size = 0
        for m in msgs:
            size += m.size
            if tx is None:
                if nack:
                    q.requeue(m)
                else:
                    q.settle(m)
        if tx is not None:
            (tx.nacks if nack else tx.acks).extend(msgs)
        c.credit += len(msgs)
        c.window += size
        if nack:
            c.nacked += len(msgs)
        else:
            c.acked += len(msgs)
        if not c.ready and c.refresh():
            q.consumer_ready(c)
            q.touch()
        self._flush()

    # ------------------------------------------------------------ transactions

    def begin(self, conn_id: int, tx: str, now: float) -> None:
        conn = self._conn(conn_id)
        self._clock(now)
        if tx in conn.txs:
            raise Conflict(f"transaction {tx!r} is already open")
        if len(conn.txs) >= self.limits.max_transactions_per_connection:
            raise LimitExceeded(
                "max-transactions-per-connection", self.limits.max_transactions_per_connection
            )
        conn.txs[tx] = Transaction(tx)

    def commit(self, conn_id: int, tx: str, now: float) -> None:
        conn = self._conn(conn_id)
        self._clock(now)
        t = conn.txs.pop(tx, None)
        if t is None:
            raise NotFound(f"no transaction {tx!r}")
        for destination, headers, body in t.sends:
            try:
                target, base = self._send_target(conn, destination)
            except NotFound:
                continue  # a temporary destination that went away meanwhile
            seq, expires, priority, persistent = parse_message_headers(headers)
            conn.sent += 1
            self._route(target, base, headers, body, seq, expires, priority, persistent, conn_id)
        for m in t.acks:
            q = m.holder.queue  # type: ignore[union-attr]
            if not q.deleted and m.state == IN_FLIGHT:
                q.settle(m)
        for m in t.nacks:
            q = m.holder.queue  # type: ignore[union-attr]
            if not q.deleted and m.state == IN_FLIGHT:
                q.requeue(m)
        self._flush()

    def _abort(self, t: Transaction) -> None:
        for m in t.acks + t.nacks:
            q = m.holder.queue  # type: ignore[union-attr]
            if not q.deleted and m.state == IN_FLIGHT:
                q.requeue(m)

    def abort(self, conn_id: int, tx: str, now: float) -> None:
        conn = self._conn(conn_id)
        self._clock(now)
        t = conn.txs.pop(tx, None)
        if t is None:
            raise NotFound(f"no transaction {tx!r}")
        self._abort(t)
        self._flush()

    # ------------------------------------------------------------------ time

    def tick(self, now: float) -> float | None:
        """Expire messages, end dispatch delays; return the next deadline."""
        self._clock(now)
        if self.capped:
            self._new_round()
        for q in list(self.held):
            if now >= q.hold_until:
                q.release_hold()
        heap = self._exp
        now_ms = self.now_ms
        while heap and heap[0][0] <= now_ms:
            m = heappop(heap)[2]
            if m.state == PENDING:
                q = self.queues.get(m.queue)
                if q is not None and q.__class__ is Queue and not q.deleted:
                    q.expire_pending(m)
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
        for q in self.held:
            if dl is None or q.hold_until < dl:
                dl = q.hold_until
        return dl

    # --------------------------------------------------------------- restore

    def restore(self, recovered: Recovered, now: float) -> None:
        """Rebuild queues and messages after ``Store.open()``; emits no records."""
        self._clock(now)
        start = len(self.records)
        for name, decl in recovered.queues.items():
            if name in self.queues:
                continue
            self._make_queue(
                name,
                dict(decl.settings),
                address=decl.address,
                routing=decl.routing,
                subscription=decl.subscription,
                client_id=decl.client_id,
                record=False,
            )
        next_id = max(self._next_id, recovered.next_message_id)
        for qname, stored in recovered.messages.items():
            q = self.queues.get(qname)
            if q is None:
                q = self._make_queue(qname, {}, record=False)
            if any(stored[i].id > stored[i + 1].id for i in range(len(stored) - 1)):
                stored = sorted(stored, key=_by_id)
            if stored and stored[-1].id >= next_id:
                next_id = stored[-1].id + 1
            if q.__class__ is Queue:
                restore = q.restore
                for rec in stored:
                    restore(rec)
            else:
                for rec in stored:
                    if rec.bucket >= 0:
                        q.restore_message(rec)
        self._next_id = next_id
        for qname, group in recovered.parked:
            q = self.queues.get(qname)
            if q.__class__ is Queue:
                self._park(q, group, record=False)
        self.sink_batches.update(recovered.sink_batches)
        for (qname, bucket), offset in recovered.log_commits.items():
            q = self.queues.get(qname)
            if q is not None and hasattr(q, "restore_commit"):
                q.restore_commit(bucket, offset)
        del self.records[start:]  # accept() re-emitted MessageStored for restored messages
        if self.to_page:  # the store has these bodies: page past the budget now
            self._page_out()
        self._flush()

    # ------------------------------------------------------------- management

    def _classic(self, name: str) -> Queue:
        q = self.queues.get(name)
        if q is None or q.__class__ is not Queue:
            raise NotFound(f"no queue {name!r}")
        return q

    def queue_infos(self) -> list[dict[str, Any]]:
        out = []
        for q in self.queues.values():
            if q.__class__ is Queue:
                out.append(q.info(self.now_ms))
            else:
                info: dict[str, Any] = {
                    "name": q.name,
                    "address": q.name,
                    "routing": "anycast",
                    "type": "log",
                    "settings": settings_to_kebab(q.settings),
                }
                extra = getattr(q, "info", None)
                if callable(extra):
                    info.update(extra())
                out.append(info)
        return out

    def group_infos(
        self, queue: str, now: float | None = None, *, limit: int | None = None
    ) -> list[dict[str, Any]]:
        q = self._classic(queue)
        now_ms = self.now_ms if now is None else int(now * 1000)
        return q.group_infos(now_ms, limit)

    def group_state_counts(self, queue: str) -> dict[str, int]:
        """{state: number of groups} without building a dict per group (metrics)."""
        return self._classic(queue).group_state_counts()

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
        q = self._classic(queue)
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
        return q.group_page(
            now_ms, states=states, owner=owner, contains=contains, sort=sort,
            descending=descending, offset=max(0, offset), limit=max(0, limit),
        )

    def group_info(self, queue: str, group: str, now: float | None = None) -> dict[str, Any] | None:
        """The row of the group (or, on a bucketed queue, of the bucket) that
        ``group`` names: a group id or a bucket label ``#N``. None when the
        queue tracks nothing for it (an idle group that is not parked)."""
        q = self._classic(queue)
        if q.buckets == 0:
            raise NotFound(f"queue {q.name!r} does not group messages (group-buckets 0)")
        g = q.groups.get(q.key_for_name(group))
        if g is None:
            return None
        now_ms = self.now_ms if now is None else int(now * 1000)
        return q.group_rows([g], now_ms)[0]

    def consumer_infos(self) -> list[dict[str, Any]]:
        out = []
        for conn in self._conns.values():
            for c in conn.subs.values():
                out.append(
                    {
                        "id": c.cid,
                        "connection": conn.id,
                        "subscription": c.sub_id,
                        "queue": c.queue.name,
                        "destination": c.destination,
                        "ack_mode": c.ack_mode,
                        "prefetch": c.prefetch,
                        "window_size": c.window_size,
                        "exclusive": c.exclusive,
                        "active": c.active,
                        "ready": c.ready,
                        "in_flight": c.in_flight,
                        "delivered": c.delivered,
                        "acked": c.acked,
                        "nacked": c.nacked,
                        "groups": c.nbound,
                        "since": c.since,
                    }
                )
        return out

    def connection_infos(self) -> list[dict[str, Any]]:
        return [
            {
                "id": conn.id,
                "user": conn.user,
                "client_id": conn.client_id,
                "writable": conn.writable,
                "blocked": bool(conn.blocked_on),
                "subscriptions": len(conn.subs),
                "in_flight": len(conn.acks),
                "transactions": len(conn.txs),
                "sent": conn.sent,
                "temp_queues": sorted(conn.temps.values()),
                "since": conn.since,
            }
            for conn in self._conns.values()
        ]

    def reset_groups(self, queue: str, group: str | None = None, now: float | None = None) -> int:
        """Free one or all groups; a group with messages in flight moves once drained.

        Returns how many bound groups were freed. Naming rules, shared with
        park/resume: ``group`` is a group id or, on a bucketed queue, a bucket
        label ``#N`` (an id means its bucket); a group the queue does not
        track is idle, unbound and not parked, so resetting it does nothing
        (0). A reset group stays listed, unbound, with its ``reassigned``
        count, until it is evicted like any idle group.
        """
        q = self._classic(queue)
        if now is not None:
            self._clock(now)
        if group is not None:
            if q.buckets == 0:
                raise NotFound(f"queue {q.name!r} does not group messages (group-buckets 0)")
            g = q.groups.get(q.key_for_name(group))
            n = int(q.reset_group(g, keep=True)) if g is not None else 0
        else:
            n = 0
            for g in list(q.groups.values()):
                n += q.reset_group(g, keep=True)
        self._flush()
        return n

    def _park(self, q: Queue, group: str, *, record: bool) -> None:
        if q.buckets == 0:
            raise NotFound(f"queue {q.name!r} does not group messages (group-buckets 0)")
        key = q.key_for_name(group)
        g = q.groups.get(key)
        if g is None:
            g = q.new_group(key)
        q.park(g, record=record)

    def park_group(self, queue: str, group: str, now: float | None = None) -> None:
        """Park a group (or its bucket): nothing of it is delivered until resumed.
        A group the queue does not track yet is created parked, so that its
        future messages wait."""
        q = self._classic(queue)
        if now is not None:
            self._clock(now)
        self._park(q, group, record=True)

    def resume_group(self, queue: str, group: str, now: float | None = None) -> None:
        """Resume a parked group (or bucket); Conflict if it is not parked
        (an untracked group is not parked either)."""
        q = self._classic(queue)
        if now is not None:
            self._clock(now)
        if q.buckets == 0:
            raise NotFound(f"queue {q.name!r} does not group messages (group-buckets 0)")
        g = q.groups.get(q.key_for_name(group))
        if g is None or not g.flags & 1:
            raise Conflict(f"group {group!r} of queue {queue!r} is not parked")
        q.resume(g)
        self._flush()

    def create_queue(self, name: str, settings: dict[str, Any], now: float | None = None) -> None:
        if now is not None:
            self._clock(now)
        if name in self.queues:
            raise Conflict(f"queue {name!r} already exists")
        if not name or "?" in name or name.startswith("/"):
            raise InvalidDestination(f"invalid queue name {name!r}")
        raw = dict(settings)
        address = raw.pop("address", None)
        routing = raw.pop("routing", "anycast")
        if routing not in ("anycast", "multicast"):
            raise InvalidDestination(f"routing must be anycast or multicast, not {routing!r}")
        own = self._kebab(coerce_settings(raw))
        self._make_queue(name, own, address=address or name, routing=routing)
        self._flush()

    def delete_queue(self, name: str, now: float | None = None) -> None:
        if now is not None:
            self._clock(now)
        q = self.queues.get(name)
        if q is None:
            raise NotFound(f"no queue {name!r}")
        self._delete_queue(q, record=getattr(q, "durable", True))
        self._flush()

    def purge_queue(self, name: str, now: float | None = None) -> int:
        if now is not None:
            self._clock(now)
        q = self._classic(name)
        n = q.purge()
        self._flush()
        return n

    def browse(self, queue: str, limit: int = 100) -> list[Message]:
        """Pending (not yet delivered) messages in queue order."""
        q = self._classic(queue)
        return q.pending_messages(limit)

    def queue(self, name: str) -> Queue:
        """The classic queue object (tests, diagnostics)."""
        return self._classic(name)
