"""Shoal's Python client: producers and consumers over STOMP 1.2.

Blocking API (threads)::

    import shoal.client

    with shoal.client.connect("stomp://user:pass@127.0.0.1:61613") as c:
        c.send("/queue/orders", b"buy 10", group="AAPL", persistent=True, receipt=True)

        sub = c.subscribe("/queue/orders", ack="client-individual", prefetch=100)
        for msg in sub:
            handle(msg.group, msg.body)
            msg.ack()                      # or msg.nack(): redelivered, head of its group

        with c.transaction() as tx:        # commit on exit, abort on exception
            tx.send("/queue/fills", b"...")
            tx.ack(msg)

        p = shoal.client.Producer(c, auto_group=True)   # its own random group id
        p.send("/queue/orders", b"...")

asyncio API (same names, ``await``): :mod:`shoal.client.aio`::

    async with shoal.client.aio.connect(url) as c:
        await c.send("/queue/orders", b"x", group="AAPL")
        async for msg in c.subscribe("/queue/orders", ack="client"):
            await msg.ack()

Connection URLs and their options (``?autoGroup=true``, ``?groupID=G``,
``heartbeat=10000,10000``, ``reconnect=true``, ``stomp+ssl://``) are listed
in :mod:`shoal.client.options`. Errors: :mod:`shoal.client.errors`; an ERROR
frame from the broker raises :class:`ServerError` with its message and code.
The management HTTP API has a small client too: :class:`shoal.client.admin.Admin`.

Both clients are built on the sans-I/O protocol in :mod:`shoal.protocol.stomp`.
"""

from shoal.client._core import GROUP_HEADER, GROUP_SEQ_HEADER, Message, Producer, new_group_id
from shoal.client.errors import (
    ClientError,
    ClientTimeout,
    ConnectFailed,
    ConnectionLost,
    InvalidURL,
    ManagementError,
    ServerError,
)
from shoal.client.options import DEFAULT_URL, ClientOptions, parse_url
from shoal.client.sync import Client, Subscription, Transaction, connect

__all__ = [
    "DEFAULT_URL",
    "GROUP_HEADER",
    "GROUP_SEQ_HEADER",
    "Client",
    "ClientError",
    "ClientOptions",
    "ClientTimeout",
    "ConnectFailed",
    "ConnectionLost",
    "InvalidURL",
    "ManagementError",
    "Message",
    "Producer",
    "ServerError",
    "Subscription",
    "Transaction",
    "connect",
    "new_group_id",
    "parse_url",
]
