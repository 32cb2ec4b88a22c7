"""Addresses: creating, finding and deleting queues and topics.

Auto-creation with destination parameters, temporary queues and topics,
dead-letter and expiry queues, and queue deletion (its consumers closed,
its messages dropped).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mypy_extensions import trait

from shoal.broker.context import BrokerCore
from shoal.broker.destinations import is_temp_name, temp_name
from shoal.broker.effects import CloseConnection
from shoal.broker.model import DONE, Topic
from shoal.broker.queue import Queue
from shoal.broker.settings import SUBSCRIPTION_PARAMETERS, coerce_settings
from shoal.errors import NotFound
from shoal.records import QueueDeclared, QueueDeleted

if TYPE_CHECKING:
    from shoal.broker.model import Connection
    from shoal.broker.queue_context import AnyQueue


@trait
class AddressesMixin(BrokerCore):
    def _make_queue(
        self,
        name: str,
        own: dict[str, Any],
        *,
        match: str | None = None,
        address: str | None = None,
        routing: str = "anycast",
        durable: bool = True,
        temp_owner: int | None = None,
        subscription: str | None = None,
        client_id: str | None = None,
        record: bool = True,
    ) -> Any:
        fields = coerce_settings(own)
        settings = self.address_settings.resolve(match or address or name, fields)
        address = address or name
        if settings.queue_type == "log":
            from shoal.broker.logqueue import LogQueue  # another engineer's module

            q: Any = LogQueue(name, settings, self)
        else:
            q = Queue(
                self,
                name,
                settings,
                own,
                address=address,
                routing=routing,
                durable=durable,
                temp_owner=temp_owner,
                subscription=subscription,
                client_id=client_id,
            )
            if self.cluster is not None and self.cluster.fenced and self.fenceable(q):
                q.fenced = True  # a queue made while fenced (docs/cluster.md)
        self.queues[name] = q
        if routing == "multicast":
            self._topic(address).subs.append(q)
        if record and durable:
            self.records.append(
                QueueDeclared(name, address, routing, dict(own), subscription, client_id)
            )
        return q

    def _topic(self, name: str, temp_owner: int | None = None) -> Topic:
        t = self.topics.get(name)
        if t is None:
            t = self.topics[name] = Topic(name, temp_owner)
        return t

    def _queue_for(self, name: str, own: dict[str, Any], conn_id: int | None = None) -> Any:
        """/queue/NAME: the queue, auto-created with ``own`` settings on first use."""
        q = self.queues.get(name)
        if q is None:
            q = self._make_queue(name, own)
        elif own:
            self._check_params(q, own, conn_id)
        return q

    def _check_params(self, q: Any, own: dict[str, Any], conn_id: int | None) -> None:
        """Destination parameters that differ from an existing queue's settings are
        ignored with a warning (DESIGN "Destination parameters")."""
        settings = q.settings
        diff = []
        for key, value in own.items():
            if key in SUBSCRIPTION_PARAMETERS:
                continue  # also a per-subscription flag (exclusive consumer)
            current = getattr(settings, key.replace("-", "_"), value)
            if current != value:
                diff.append(f"{key}={value!r} (queue has {current!r})")
        if diff:
            self.warn(
                conn_id,
                f"queue {q.name!r} already exists; destination parameters ignored: "
                + ", ".join(diff),
            )

    def _internal_queue(self, name: str) -> Any:
        """Dead-letter and expiry addresses: anycast queues, auto-created."""
        q = self.queues.get(name)
        if q is None:
            q = self._make_queue(name, {})
        return q

    def _temp_queue(self, conn: Connection, name: str, own: dict[str, Any]) -> Any:
        q: AnyQueue | None
        full = conn.temps.get(name)
        if full is not None:
            q = self.queues[full]
            if own:
                self._check_params(q, own, conn.id)
            return q
        q = self.queues.get(name)
        if q is not None and getattr(q, "temp_owner", None) is not None:
            return q  # another connection's temp queue, named in full (reply-to)
        if is_temp_name(name):
            raise NotFound(f"temporary queue {name!r} no longer exists")
        full = temp_name(conn.id, name)
        conn.temps[name] = full
        return self._make_queue(full, own, durable=False, temp_owner=conn.id, record=False)

    def _temp_topic(self, conn: Connection, name: str) -> Topic:
        full = conn.temp_topics.get(name)
        if full is not None:
            return self.topics[full]
        t = self.topics.get(name)
        if t is not None and t.temp_owner is not None:
            return t
        if is_temp_name(name):
            raise NotFound(f"temporary topic {name!r} no longer exists")
        full = temp_name(conn.id, name)
        conn.temp_topics[name] = full
        return self._topic(full, conn.id)

    def _delete_queue(self, q: Any, *, record: bool) -> None:
        """Remove a queue: its consumers are closed, its messages dropped."""
        name = q.name
        if self.queues.get(name) is q:
            del self.queues[name]
        self._send_cache.clear()
        if isinstance(q, Queue):
            for c in list(q.consumers):
                conn = c.conn
                if conn.subs.get(c.sub_id) is c:
                    del conn.subs[c.sub_id]
                self._close_consumer(c)
                if self._conns.get(conn.id) is conn and conn.id != q.temp_owner:
                    self.effects.append(CloseConnection(conn.id, f"queue {name!r} was deleted"))
            # QueueDeleted drops the stored messages with the queue (docs/journal.md).
            for m in q.pending_messages() + q.in_flight_messages():
                m.state = DONE
            for g in q.all_fifos():  # no message <-> group cycles left for the GC
                g.head = g.tail = None
            q.deleted = True
            self.total_bytes -= q.bytes
            for conn_id in list(q.blocked):
                self.producer_unblocked(conn_id, q)
            q.blocked.clear()
            self.held_queues.pop(q, None)
        for t in self.topics.values():
            if q in t.subs:
                t.subs.remove(q)
        if record:
            self.records.append(QueueDeleted(name))

    def log_queue(self, name: str) -> Any:
        q = self.queues.get(name)
        if q is None or isinstance(q, Queue):
            raise NotFound(f"no log queue {name!r}")
        return q
