"""What the pure core asks the outside world to do.

The core appends effects to ``Broker.effects`` while it handles a command;
the server drains them with ``Broker.take_effects()`` once per loop
iteration and turns them into bytes on sockets. Records to persist are
drained separately with ``Broker.take_records()``.
"""

from __future__ import annotations

from dataclasses import dataclass

from shoal.broker.message import Message


@dataclass(slots=True)
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


Effect = Deliver | CloseConnection | ProducerFlow
