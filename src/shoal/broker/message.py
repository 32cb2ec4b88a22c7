"""The message as the core holds it.

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
"""

from __future__ import annotations

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
        self.holder: object = None
        self.grp: object = None

    def __repr__(self) -> str:
        return f"Message(id={self.id}, queue={self.queue!r}, group={self.group!r})"
