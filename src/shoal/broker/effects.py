"""What the pure core asks the outside world to do.

The core appends effects to ``Broker.effects`` while it handles a command;
the server drains them with ``Broker.take_effects()`` once per loop
iteration and turns them into bytes on sockets. Records to persist are
drained separately with ``Broker.take_records()``.
"""

from __future__ import annotations

from dataclasses import dataclass

from shoal.broker.model import Message


# Its own __init__ (init=False): compiled, a dataclass's generated __init__
# stays interpreted, and one Deliver is built per message delivered.
@dataclass(slots=True, init=False)
class Deliver:
    """Send ``message`` to subscription ``sub_id`` of connection ``conn_id``.

    ``ack_id`` is what the client echoes back (the 1.2 ``ack`` header; the
    ``message-id`` for 1.0/1.1). ``first_key`` is the queue's
    ``group-first-key`` when this is the first message of a group newly
    assigned to this consumer, else None.

    ``body`` is filled in by the server for a paged message (``message.body``
    is None): it loads the body from the store before it persists the
    records of the same round (``Broker.take_page_ins``), so a removal record
    can never overtake the read. The core never sets it.
    """

    conn_id: int
    sub_id: str
    ack_id: str
    message: Message
    redelivered: bool
    first_key: str | None = None
    body: bytes | None = None

    def __init__(
        self,
        conn_id: int,
        sub_id: str,
        ack_id: str,
        message: Message,
        redelivered: bool,
        first_key: str | None = None,
        body: bytes | None = None,
    ) -> None:
        self.conn_id = conn_id
        self.sub_id = sub_id
        self.ack_id = ack_id
        self.message = message
        self.redelivered = redelivered
        self.first_key = first_key
        self.body = body


@dataclass(slots=True)
class CloseConnection:
    """The core wants a connection gone (e.g. its temporary queue was deleted)."""

    conn_id: int
    reason: str


@dataclass(slots=True)
class ProducerFlow:
    """A producer connection filled an address (blocked=True, once, when it
    first becomes blocked) or an address it was blocked on has room again
    (blocked=False). The server holds the connection's SENDs to blocked
    addresses (``Broker.send_blocked``) and retries them on blocked=False."""

    conn_id: int
    blocked: bool


@dataclass(slots=True)
class ProposeBinding:
    """Cluster (C2): ask the grouping handler to bind ``group`` of ``queue`` to
    node ``proposal``; the answer comes back as ``Broker.binding_decided``."""

    queue: str
    group: str
    proposal: str


@dataclass(slots=True)
class SendDecided:
    """Cluster: SEND ``hold_id`` of ``conn_id``, held for a grouping decision,
    was routed (``error`` None: its RECEIPT may go once synced) or refused
    (``error`` names the group and the timeout: an ERROR frame, C3)."""

    conn_id: int
    hold_id: int
    error: str | None


@dataclass(slots=True)
class PagedCopy:
    """A dead-letter or expiry copy of a paged message waits for its body.

    The core never reads a file: it lists this among the page-ins
    (``Broker.take_page_ins``); the server reads ``message``'s body from the
    store into ``body`` (or sets ``error``) and answers with
    ``Broker.bodies_read``, which makes the copy. Both happen before the
    round's records go to the store, so the copy and the removal of the
    original reach the journal together.
    """

    message: Message
    target: str  # queue name
    source: str  # queue name, for the warning if the body cannot be read
    headers: dict[str, str]
    expires: int
    persistent: bool
    body: bytes | None = None
    error: str | None = None


@dataclass(slots=True)
class RestoredBody:
    """A message recovered without its body (a lazy journal) that its queue
    keeps in memory: the server reads the body back into ``body`` (or sets
    ``error``) and answers with ``Broker.bodies_read``."""

    message: Message
    body: bytes | None = None
    error: str | None = None


# What the server reads back from the store for the core (``take_page_ins``).
PageIn = Deliver | PagedCopy | RestoredBody


@dataclass(slots=True)
class TouchBinding:
    """Cluster (C5): refresh this node's lease on the binding of ``group``
    (its last use in ZooKeeper); the answer comes back as
    ``Broker.binding_decided`` (still bound) or ``Broker.binding_moved``."""

    queue: str
    group: str


@dataclass(slots=True)
class ReleaseBinding:
    """Cluster (C5, C7): remove this node's binding of ``group`` if ZooKeeper
    saw no use of it for ``idle_ms``; the answer is ``Broker.binding_released``.
    With ``to`` (cluster rebalance), that node is bound in its place."""

    queue: str
    group: str
    idle_ms: int
    to: str = ""


Effect = (
    Deliver
    | CloseConnection
    | ProducerFlow
    | ProposeBinding
    | SendDecided
    | TouchBinding
    | ReleaseBinding
)
