"""Subscriptions: what SUBSCRIBE reads of its headers, and closing a consumer.

``Broker.subscribe`` and ``Broker.unsubscribe`` (core.py) are the commands;
the queue a subscription reads (``/queue/``, temporary queues, durable and
private topic subscriptions, DESIGN G14) is ``AddressBook.subscription_queue``.
Closing a consumer sends its unsettled messages back to their groups (G11).
"""

from __future__ import annotations

from typing import cast

from shoal.broker.model import IN_FLIGHT, Consumer
from shoal.broker.queue import Queue
from shoal.errors import InvalidHeader


def int_header(headers: dict[str, str], name: str, default: int) -> int:
    raw = headers.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise InvalidHeader(name, raw, "not an integer") from None


def close_consumer(c: Consumer) -> None:
    """Close a consumer: its unsettled messages go back to their groups (G11)."""
    conn = c.conn
    acks = conn.acks
    if c.unsettled is not None:
        msgs = [m for m in c.unsettled if m.holder is c and m.state == IN_FLIGHT]
        c.unsettled.clear()
    else:
        msgs = [m for m in acks.values() if m.holder is c]
    for m in msgs:
        acks.pop(m.id, None)
    q = cast("Queue", c.queue)
    if q.deleted:
        c.closed = True
        return
    q.remove_consumer(c, msgs)
