"""A consumer: one subscription of one connection on one queue, with credit.

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
consumer's place among those a new group may go to (``Queue.pick_for_group``).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shoal.broker.groups import Group
    from shoal.broker.message import Message
    from shoal.broker.selector import Selector

DEFAULT_PREFETCH = 1000
UNBOUNDED = 1 << 62

ACK_MODES = ("auto", "client", "client-individual")


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
        "waiting",
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
        conn: Any,
        sub_id: str,
        queue: Any,
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
        self.pick_entry: tuple[int, int, Consumer] | None = None  # its live entry there
        self.ghead: Group | None = None  # intrusive list of those groups
        self.gtail: Group | None = None
        # bound groups waiting for credit: a heap by head message id (G16)
        self.waiting: list[tuple[int, Group]] = []
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
        self.selwait: list[tuple[int, Group]] | None = None  # a heap, like ``waiting``
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

    def __lt__(self, other: Consumer) -> bool:
        # ``pickable`` entries (bound groups, turn, consumer): only a stale and
        # a live entry of one consumer can tie on the first two.
        return False

    def __repr__(self) -> str:
        return f"Consumer({self.cid}, queue={getattr(self.queue, 'name', None)!r})"
