"""Connections: who is connected, their writability and producer flow control.

A ``Connection`` holds what one client connection owns in the core: its
subscriptions, unsettled deliveries by message id, open transactions,
temporary destinations and the queues that currently block it as a producer.
"""

from __future__ import annotations

from typing import Any, cast

from mypy_extensions import trait

from shoal.broker.context import BrokerCore
from shoal.broker.effects import ProducerFlow
from shoal.broker.memory import GLOBAL_LIMIT
from shoal.broker.model import Connection
from shoal.broker.queue import Queue
from shoal.errors import Conflict, NotFound


@trait
class ConnectionsMixin(BrokerCore):
    def _conn(self, conn_id: int) -> Connection:
        conn = self._conns.get(conn_id)
        if conn is None:
            raise NotFound(f"no connection {conn_id}")
        return conn

    def connect(
        self,
        conn_id: int,
        now: float,
        *,
        user: str | None = None,
        client_id: str | None = None,
    ) -> None:
        self._clock(now)
        if conn_id in self._conns:
            raise Conflict(f"connection {conn_id} already exists")
        self._conns[conn_id] = Connection(conn_id, user, client_id, now)

    def disconnect(self, conn_id: int, now: float) -> None:
        conn = self._conn(conn_id)
        self._clock(now)
        for tx in list(conn.txs.values()):
            self.transactions.roll_back(tx)
        conn.txs.clear()
        for c in list(conn.subs.values()):
            self._close_consumer(c)
            if c.topic_queue:
                self.addresses.delete_queue(c.queue, record=False)
        conn.subs.clear()
        del self._conns[conn_id]
        for full in conn.temps.values():
            q = self.queues.get(full)
            if q is not None:
                self.addresses.delete_queue(q, record=False)
        for full in conn.temp_topics.values():
            t = self.topics.pop(full, None)
            if t is not None:
                for q in list(t.subs):
                    self.addresses.delete_queue(q, record=False)
        for q in list(conn.blocked_on):
            if q is GLOBAL_LIMIT:
                self.memory.blocked.pop(conn_id, None)
            else:
                q.blocked.pop(conn_id, None)
        self._flush()

    def set_writable(self, conn_id: int, writable: bool, now: float) -> None:
        conn = self._conn(conn_id)
        self._clock(now)
        if conn.writable == writable:
            return
        conn.writable = writable
        for c in conn.subs.values():
            if writable:
                if c.refresh():
                    q = cast("Queue", c.queue)
                    q.consumer_ready(c)
                    q.touch()
            else:
                c.ready = False
        self._flush()

    def producer_blocked(self, conn_id: int, q: Any) -> None:
        conn = self._conns.get(conn_id)
        if conn is None:
            return
        if not conn.blocked_on:
            self.effects.append(ProducerFlow(conn_id, True))
        conn.blocked_on[q] = None

    def producer_unblocked(self, conn_id: int, q: Any) -> None:
        conn = self._conns.get(conn_id)
        if conn is None or q not in conn.blocked_on:
            return
        del conn.blocked_on[q]
        # Also while still blocked elsewhere: its SENDs held for q may go on.
        self.effects.append(ProducerFlow(conn_id, False))

    def connections_of(self, q: Any) -> list[Connection]:
        return list(self._conns.values())
