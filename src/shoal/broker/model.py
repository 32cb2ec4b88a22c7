"""The core's plain data: a client connection, a consumer (one
subscription, with its credit), a message group of a queue, an open
transaction, a topic, and the per-connection limits.

Consumers and groups point at each other (a group's owner and holder, a
consumer's groups awaiting credit), so they live together here; the behaviour that
binds, dispatches and evicts them is in groups.py and dispatch.py, and the
commands that change the rest live with their concern (connections.py,
subscriptions.py, transactions.py, addresses.py).

Messages
--------
The message as the core holds it.

A plain slotted class rather than a dataclass: one is built per message per
queue on the hot path. A message sent to a topic is copied once per
subscription queue, and every copy has its own ``id``, so ``id`` names one
queue entry everywhere: in ACK frames, in the journal and in the API.

The last four slots belong to the core's queue (``broker/queue.py``): they
thread the message through its group's FIFO and record where it is, so the
hot path allocates nothing per message beyond the Message and its Deliver.

``body`` is None when the message is *paged*: a persistent message of a
queue over its memory budget with ``address-full-policy = "page"``. Its
body lives only in the journal; ``size`` still gives its length. The core
never reads it back: it asks (``Broker.take_page_ins``: a Deliver, a
dead-letter or expiry ``PagedCopy``) and the server answers
(``Broker.bodies_read``) before writing the MESSAGE frame.

Consumers
---------
A consumer: one subscription of one connection on one queue, with credit.

Credit (DESIGN "Prefetch"): ``prefetch-count`` / ``activemq.prefetchSize``
count messages (default 1000, ActiveMQ's), ``consumer-window-size`` counts
bytes (-1 unbounded, as Artemis). A consumer may receive while it has
message credit left, byte credit left (a message larger than the remaining
window still goes when some is left, as Artemis) and its connection is
writable. An AMQP consumer link (``link_credit``) works the other way round: its
credit is what the peer last granted (``Broker.set_credit``), each delivery
uses one, and settling gives none back (``refund`` 0).
Auto-ack deliveries are settled when delivered, so they use no
credit: only writability limits them, and so that one command cannot turn
a deep backlog into an unbounded burst of output, a consumer without a
credit limit (auto-ack, or prefetch 0) receives at most ``burst`` messages
per delivery round (``CoreLimits.max_delivery_burst``, default 1000). A
round ends when the server drains the effects (``Broker.take_effects``) or
calls ``Broker.tick``; ``tick`` asks to be called again at once while a
consumer waits for a new round.

``ready`` caches that condition; whoever changes credit or writability
calls :meth:`refresh` and, on a False -> True edge, tells the queue.

``active``: the queue lets this consumer receive (G13 picks one when the
queue or a consumer is exclusive). ``turn`` and ``pick_entry`` are the
consumer's place among those a new group may go to (``ConsumerSet.pick_for_group``).

Groups
------
See groups.py for the group table's rules and invariants.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mypy_extensions import trait

if TYPE_CHECKING:
    from shoal.broker.selector import Selector


@trait
class QueueRef:
    """What a consumer holds of its queue: the ``Queue`` (queue.py) it reads,
    which extends this trait. Typed so, this module names
    no queue module; code above the queue narrows it with ``cast(Queue, ...)``,
    a type check in compiled code, and reaches the queue natively from there."""

    name: str


@dataclass(frozen=True, slots=True)
class CoreLimits:
    """Per-connection limits the core enforces (LimitExceeded names the limit).

    The server builds them from ``[limits]`` (``shoal.server.config.core_limits``).
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


# -- consumers ---------------------------------------------------------------

DEFAULT_PREFETCH = 1000
UNBOUNDED = 1 << 62

#: A consumer's entry in its queue's ``pickable`` heap: [bound groups, turn, consumer].
PickEntry = list[Any]


class Consumer:
    __slots__ = (
        "conn",
        "conn_id",
        "sub_id",
        "cid",
        "queue",
        "destination",
        "ack_mode",
        "auto",
        "unsettled",
        "prefetch",
        "window_size",
        "credit",
        "window",
        "ready",
        "exclusive",
        "closed",
        "nbound",
        "active",
        "turn",
        "pick_entry",
        "ghead",
        "gtail",
        "awaiting_credit",
        "burst",
        "burst_max",
        "delivered",
        "acked",
        "nacked",
        "since",
        "topic_queue",
        "selector",
        "accepts",
        "selwait",
        "selwait_max",
        "refund",
    )

    def __init__(
        self,
        conn: Connection,
        sub_id: str,
        queue: QueueRef,
        destination: str,
        ack_mode: str,
        prefetch: int,
        window_size: int,
        exclusive: bool,
        now: float,
        burst: int = 1000,
        selector: Selector | None = None,
        link_credit: bool = False,
    ) -> None:
        self.conn = conn
        self.conn_id: int = conn.id
        self.sub_id = sub_id
        self.cid = f"{conn.id}/{sub_id}"
        self.queue = queue
        self.destination = destination
        self.ack_mode = ack_mode
        self.auto = ack_mode == "auto"
        # client mode: delivery order, for cumulative ACK/NACK. client-individual
        # needs none (the connection's ack map finds a message in O(1)).
        self.unsettled: deque[Message] | None = deque() if ack_mode == "client" else None
        self.prefetch = prefetch
        self.window_size = window_size
        if self.auto:
            self.credit = UNBOUNDED
            self.window = UNBOUNDED
        else:
            self.credit = prefetch if prefetch > 0 else UNBOUNDED
            self.window = window_size if window_size >= 0 else UNBOUNDED
        # deliveries left in this round (only consumers without a credit limit)
        self.burst_max = burst if (self.auto or prefetch <= 0) and burst > 0 else UNBOUNDED
        self.burst = self.burst_max
        self.ready = False
        self.exclusive = exclusive
        self.closed = False
        self.nbound = 0  # groups whose owner this is (draining ones included)
        self.active = False  # set by the queue (G13)
        self.turn = 0  # when a group was last bound to it (G6 ties)
        self.pick_entry: PickEntry | None = None  # its live entry there
        self.ghead: Group | None = None  # intrusive list of those groups
        self.gtail: Group | None = None
        # bound groups waiting for credit: a heap by head message id (G16)
        self.awaiting_credit: list[tuple[int, Group]] = []
        self.delivered = 0
        self.acked = 0
        self.nacked = 0
        self.since = now
        self.topic_queue = False  # a non-durable topic subscription owns its queue
        # The SUBSCRIBE selector; ``accepts(headers)`` is None when it takes everything.
        self.selector = selector
        self.accepts = selector.matches if selector is not None else None
        # Unbound groups whose head this consumer's selector accepts and that
        # found no accepting consumer with credit (dispatch.wait_for_acceptor).
        self.selwait: list[tuple[int, Group]] | None = None  # a heap, like ``awaiting_credit``
        self.selwait_max = 64  # compact stale entries past this (doubles)
        self.refund = 1  # credit a settlement gives back
        if link_credit:
            self.refund = 0
            self.credit = 0  # nothing until the peer grants some
            self.burst_max = self.burst = UNBOUNDED
        self.refresh()

    def refresh(self) -> bool:
        """Recompute ``ready``; True on a False -> True edge."""
        was = self.ready
        now = self.ready = (
            not self.closed
            and self.conn.writable
            and self.credit > 0
            and self.window > 0
            and self.burst > 0
        )
        return now and not was

    @property
    def in_flight(self) -> int:
        if self.auto:
            return 0
        if not self.refund:  # link credit says nothing about what is unsettled
            return sum(1 for m in self.conn.acks.values() if m.holder is self)
        limit = self.prefetch if self.prefetch > 0 else UNBOUNDED
        return limit - self.credit

    def __hash__(self) -> int:  # __lt__ would make a compiled class unhashable
        return id(self)

    def __lt__(self, other: Consumer) -> bool:
        # ``pickable`` entries (bound groups, turn, consumer): only a stale and
        # a live entry of one consumer can tie on the first two.
        return False

    def __repr__(self) -> str:
        return f"Consumer({self.cid}, queue={getattr(self.queue, 'name', None)!r})"


# -- groups ------------------------------------------------------------------

# Where a group currently sits in the dispatch structures (dispatch.py).
POS_NONE = 0  # nowhere: idle, blocked (draining/parked) or being dispatched
POS_HEAP = 1  # in the queue's ready heap
POS_OWNER = 2  # in its owner's ``awaiting_credit`` heap (owner has no credit)
POS_ANY = 3  # in the queue's ``wait_any`` deque (unbound, no consumer had credit)
POS_SEL_WAIT = 4  # unbound, in the ``selwait`` deques of the consumers whose selector accepts it
POS_SEL_NONE = 5  # unbound, in the queue's ``wait_sel``: no consumer's selector accepts its head

# Group flags.
F_PARKED = 1  # poison policy "park" or an operator: nothing is dispatched
F_CLOSING = 2  # a closing message (negative JMSXGroupSeq) went out: unbind once settled
F_RESET = 4  # reset / lost eligibility: unbind once settled (draining)
F_FIRST = 8  # the next delivery carries group-first-key (G7)
F_IN_LRU = 16  # on the queue's idle LRU list
F_GONE = 32  # dropped from the table (stale references ignore it)
F_FIFO = 64  # a queue's ungrouped FIFO (one per priority): never retired

F_RELEASE = F_CLOSING | F_RESET


# G15 states, in their display order (Group.state).
GROUP_STATES = ("ready", "owned", "draining", "parked")
STATE_ORDER = {s: i for i, s in enumerate(GROUP_STATES)}


class Group:
    """One message group of one queue (key: group id, or bucket number)."""

    __slots__ = (
        "key",
        "head",
        "tail",
        "backlog",
        "in_flight",
        "owner",
        "holder",
        "pos",
        "flags",
        "binds",
        "cprev",
        "cnext",
        "iprev",
        "inext",
    )

    def __init__(self, key: Any) -> None:
        self.key = key
        self.head: Message | None = None
        self.tail: Message | None = None
        self.backlog = 0
        self.in_flight = 0
        self.owner: Consumer | None = None
        self.holder: Consumer | None = None
        self.pos = POS_NONE
        self.flags = 0
        self.binds = 0
        self.cprev: Group | None = None
        self.cnext: Group | None = None
        self.iprev: Group | None = None
        self.inext: Group | None = None

    def __hash__(self) -> int:  # __lt__ would make a compiled class unhashable
        return id(self)

    def __lt__(self, other: Group) -> bool:
        # Heap entries are (head id, group); ids are unique, so this only
        # breaks ties between a group's stale and fresh entries.
        return False

    @property
    def name(self) -> str:
        key = self.key
        return key if isinstance(key, str) else f"#{key}"

    @property
    def reassigned(self) -> int:
        return self.binds - 1 if self.binds > 1 else 0

    def state(self) -> str:
        """G15 state: parked, draining, owned or ready."""
        if self.flags & F_PARKED:
            return "parked"
        if self.in_flight and (self.flags & F_RELEASE or self.holder is not self.owner):
            return "draining"
        if self.owner is not None:
            return "owned"
        return "ready"

    def __repr__(self) -> str:
        return (
            f"Group({self.name!r}, backlog={self.backlog}, in_flight={self.in_flight}, "
            f"owner={getattr(self.owner, 'cid', None)}, state={self.state()})"
        )


# -- messages ----------------------------------------------------------------

# Message.state values.
PENDING = 0  # in its group's FIFO
IN_FLIGHT = 1  # delivered, not settled
DONE = 2  # settled, expired, dead-lettered, purged or dropped with its queue


class Message:
    __slots__ = (
        "id",
        "queue",
        "destination",
        "headers",
        "body",
        "group",
        "group_seq",
        "persistent",
        "expires",
        "priority",
        "timestamp",
        "delivery_count",
        "size",
        # core bookkeeping (broker/queue.py), not part of the message's content:
        "link",  # next message in the same group FIFO (intrusive singly linked list)
        "state",  # PENDING / IN_FLIGHT / DONE (broker/queue.py constants)
        "holder",  # the Consumer holding it unsettled, else None
        "grp",  # the Group it belongs to in its queue, None when ungrouped
    )

    def __init__(
        self,
        id: int,  # noqa: A002 - the broker-wide id of this queue entry
        queue: str,
        destination: str,
        headers: dict[str, str],
        body: bytes,
        group: str | None,
        group_seq: int,
        persistent: bool,
        expires: int,  # epoch ms; 0 means never
        priority: int,
        timestamp: int,  # epoch ms when the broker accepted it
        delivery_count: int = 0,  # deliveries before the next one
    ) -> None:
        self.id = id
        self.queue = queue
        self.destination = destination
        self.headers = headers
        self.body: bytes | None = body  # None once paged (see module docstring)
        self.group = group
        self.group_seq = group_seq
        self.persistent = persistent
        self.expires = expires
        self.priority = priority
        self.timestamp = timestamp
        self.delivery_count = delivery_count
        self.size = len(body)
        self.link: Message | None = None
        self.state = PENDING
        self.holder: Consumer | None = None
        self.grp: Group | None = None

    def __repr__(self) -> str:
        return f"Message(id={self.id}, queue={self.queue!r}, group={self.group!r})"
