"""Records the core asks the store to keep, and what a store gives back on
open (``Recovered``): the data the broker core and the store share, so that
neither depends on the other.

They are plain data, not frozen: one is built per persistent message on the
hot path, and frozen construction costs more. The store knows nothing of
queues or groups beyond these fields. Each ``Store.append(records)`` call is one atomic unit: after a
crash, recovery sees all of its records or none of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class QueueDeclared:
    """A queue created at run time (or a durable topic subscription's queue)."""

    name: str
    address: str  # the address it is bound to: queue name, or the topic name
    routing: str  # "anycast" (queue) or "multicast" (topic subscription)
    settings: dict[str, Any] = field(default_factory=dict)  # kebab-case overrides
    subscription: str | None = None  # durable subscription name, if any
    client_id: str | None = None


@dataclass(slots=True)
class QueueDeleted:
    name: str


class AmqpHeaders(dict[str, str]):
    """A message's headers as the core keeps them, which also carry the
    message's encoding as an AMQP producer sent it (server/amqp_mapping.py),
    so that AMQP consumers get it as sent. A plain dict to everything else:
    the core copies headers before it changes them, and a copy is a plain
    dict. The journal stores the encoding with the message (docs/journal.md).
    """

    __slots__ = ("encoding",)

    # (before, after) around the body bytes, or (everything, None): the
    # sections from message annotations on (MessageCodec.kept_encoding).
    encoding: tuple[bytes, bytes | None]


# The three records a persistent message makes (stored, delivered again,
# removed) write their own __init__ (init=False): compiled, a dataclass's
# generated __init__ stays interpreted and cost more than the rest of the
# record's life (callgrind, W6: ~4,500 instructions per MessageStored).
@dataclass(slots=True, init=False)
class MessageStored:
    """A persistent message entered ``queue`` (``id`` is unique broker-wide).

    ``body`` is None only in what a journal opened with ``lazy_bodies``
    returns: the body stays on disk, ``body_size`` long, for ``load_body``.
    """

    queue: str
    id: int
    destination: str
    headers: dict[str, str]
    body: bytes | None
    group: str | None
    group_seq: int
    expires: int  # epoch ms, 0 = never
    priority: int
    timestamp: int  # epoch ms
    delivery_count: int = 0
    bucket: int = -1  # log queues: bucket and dense offset
    offset: int = -1
    # Set only when a journal recovered the record without its body (body is
    # None, see JournalStore's lazy_bodies): the body's length in the journal.
    body_size: int = field(default=-1, compare=False, repr=False)

    def __init__(
        self,
        queue: str,
        id: int,  # noqa: A002 - the field's name
        destination: str,
        headers: dict[str, str],
        body: bytes | None,
        group: str | None,
        group_seq: int,
        expires: int,
        priority: int,
        timestamp: int,
        delivery_count: int = 0,
        bucket: int = -1,
        offset: int = -1,
        body_size: int = -1,
    ) -> None:
        self.queue = queue
        self.id = id
        self.destination = destination
        self.headers = headers
        self.body = body
        self.group = group
        self.group_seq = group_seq
        self.expires = expires
        self.priority = priority
        self.timestamp = timestamp
        self.delivery_count = delivery_count
        self.bucket = bucket
        self.offset = offset
        self.body_size = body_size


@dataclass(slots=True, init=False)
class MessageRemoved:
    """Acked, expired, dead-lettered (a MessageStored in the DLQ goes with it) or purged."""

    queue: str
    id: int

    def __init__(self, queue: str, id: int) -> None:  # noqa: A002 - the field's name
        self.queue = queue
        self.id = id


@dataclass(slots=True, init=False)
class DeliveryCounted:
    """The message was delivered ``count`` times so far (so redelivered survives restart)."""

    queue: str
    id: int
    count: int

    def __init__(self, queue: str, id: int, count: int) -> None:  # noqa: A002 - the field's name
        self.queue = queue
        self.id = id
        self.count = count


@dataclass(slots=True)
class GroupParked:
    queue: str
    group: str


@dataclass(slots=True)
class GroupResumed:
    queue: str
    group: str


@dataclass(slots=True)
class LogCommitted:
    """A log queue's reader committed ``bucket`` up to (not including) ``offset``."""

    queue: str
    bucket: int
    offset: int


@dataclass(slots=True)
class SinkBatchPublished:
    """Exactly-once sink: ``batch_id`` of ``sink_id`` (a Spark query id) is published."""

    sink_id: str
    batch_id: int


@dataclass(slots=True)
class GroupBound:
    """Clustered grouping, ``local`` handler: ``group`` of ``queue`` is bound to
    cluster node ``node`` (``""``: the binding was released). Only the node that
    decides (docs/cluster.md) writes these."""

    queue: str
    group: str
    node: str


Record = (
    QueueDeclared
    | QueueDeleted
    | MessageStored
    | MessageRemoved
    | DeliveryCounted
    | GroupParked
    | GroupResumed
    | LogCommitted
    | SinkBatchPublished
    | GroupBound
)


@dataclass(slots=True)
class Recovered:
    """The state a store rebuilds on open, ready for ``Broker.restore``."""

    queues: dict[str, QueueDeclared] = field(default_factory=dict)
    # Per queue, live messages in original order, delivery counts applied.
    messages: dict[str, list[MessageStored]] = field(default_factory=dict)
    parked: set[tuple[str, str]] = field(default_factory=set)
    log_commits: dict[tuple[str, int], int] = field(default_factory=dict)
    sink_batches: dict[str, int] = field(default_factory=dict)
    bindings: dict[tuple[str, str], str] = field(default_factory=dict)  # GroupBound
    next_message_id: int = 1
    notes: list[str] = field(default_factory=list)  # e.g. "truncated torn tail at ..."
    # (queue, message id, group) of the messages a torn-tail cut or a repair dropped
    lost: list[tuple[str, int, str | None]] = field(default_factory=list)
