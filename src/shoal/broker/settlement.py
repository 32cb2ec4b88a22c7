"""Settlement: what an ACK or NACK covers.

``Broker.ack``, ``nack`` and ``set_credit`` (core.py) are the commands:
client-individual acks settle one message (the hot path); client acks are
cumulative over the subscription (``take_acked``). Settling frees credit
and may make the consumer ready again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shoal.broker.model import IN_FLIGHT
from shoal.errors import NotFound

if TYPE_CHECKING:
    from shoal.broker.model import Connection, Consumer, Message


def take_acked(conn: Connection, ack_id: str) -> tuple[Consumer, list[Message]]:
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
