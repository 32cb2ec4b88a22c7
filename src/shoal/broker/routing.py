"""Routing: the headers of a SEND that decide where and how it is queued.

``Broker.send`` (core.py) routes a SEND: its destination resolves to a queue,
a log queue or a topic (``AddressBook.send_target``; each of a topic's
subscription queues gets a copy), and in a cluster ``ClusterRouter.route``
decides which node's queue a grouped message enters.
"""

from __future__ import annotations

from typing import Final

from shoal.errors import InvalidHeader

GROUP_SEQ: Final = "JMSXGroupSeq"


def parse_message_headers(
    headers: dict[str, str],
) -> tuple[int, int, int, bool | None]:
    """(JMSXGroupSeq, expires, priority, persistent or None) or InvalidHeader."""
    s = headers.get(GROUP_SEQ)
    if s is None:
        seq = 0
    else:
        try:
            seq = int(s)
        except ValueError:
            raise InvalidHeader(GROUP_SEQ, s, "not an integer") from None
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
