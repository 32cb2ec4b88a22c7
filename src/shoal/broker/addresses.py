"""Addresses: creating, finding and deleting queues and topics.

``AddressBook`` owns the broker's queues and topics by name and the cache of
resolved SEND destinations. Auto-creation with destination parameters,
temporary queues and topics, dead-letter and expiry queues, and queue
deletion (its consumers closed, its messages dropped).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from shoal.broker.destinations import (
    Destination,
    is_temp_name,
    parse_destination,
    private_subscription_queue_name,
    subscription_queue_name,
    temp_name,
)
from shoal.broker.effects import CloseConnection
from shoal.broker.model import DONE, Topic
from shoal.broker.queue import Queue
from shoal.broker.settings import SUBSCRIPTION_PARAMETERS, coerce_settings
from shoal.broker.subscriptions import close_consumer
from shoal.errors import Conflict, InvalidDestination, NotFound
from shoal.records import QueueDeclared, QueueDeleted

if TYPE_CHECKING:
    from shoal.broker.core import Broker
    from shoal.broker.model import Connection
    from shoal.broker.queue_context import AnyQueue


class AddressBook:
    """The broker's queues and topics, by name."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.queues: dict[str, AnyQueue] = {}
        self.topics: dict[str, Topic] = {}
        # SEND destination string -> (Queue | LogQueue | Topic, base destination)
        self.send_cache: dict[str, tuple[Any, str]] = {}

    def make_queue(
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
        b = self.broker
        fields = coerce_settings(own)
        settings = b.address_settings.resolve(match or address or name, fields)
        address = address or name
        if settings.queue_type == "log":
            from shoal.broker.logqueue import LogQueue  # another engineer's module

            q: Any = LogQueue(name, settings, b)
        else:
            q = Queue(
                b,
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
            if b.router is not None and b.router.grouping.fenced and b.router.fenceable(q):
                q.fenced = True  # a queue made while fenced (docs/cluster.md)
        self.queues[name] = q
        if routing == "multicast":
            self.topic(address).subs.append(q)
        if record and durable:
            self.broker.records.append(
                QueueDeclared(name, address, routing, dict(own), subscription, client_id)
            )
        return q

    def topic(self, name: str, temp_owner: int | None = None) -> Topic:
        t = self.topics.get(name)
        if t is None:
            t = self.topics[name] = Topic(name, temp_owner)
        return t

    def queue_for(self, name: str, own: dict[str, Any], conn_id: int | None = None) -> Any:
        """/queue/NAME: the queue, auto-created with ``own`` settings on first use."""
        q = self.queues.get(name)
        if q is None:
            q = self.make_queue(name, own)
        elif own:
            self.check_params(q, own, conn_id)
        return q

    def check_params(self, q: Any, own: dict[str, Any], conn_id: int | None) -> None:
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
            self.broker.warn(
                conn_id,
                f"queue {q.name!r} already exists; destination parameters ignored: "
                + ", ".join(diff),
            )

    def internal_queue(self, name: str) -> Any:
        """Dead-letter and expiry addresses: anycast queues, auto-created."""
        q = self.queues.get(name)
        if q is None:
            q = self.make_queue(name, {})
        return q

    def temp_queue(self, conn: Connection, name: str, own: dict[str, Any]) -> Any:
        q: AnyQueue | None
        full = conn.temps.get(name)
        if full is not None:
            q = self.queues[full]
            if own:
                self.check_params(q, own, conn.id)
            return q
        q = self.queues.get(name)
        if q is not None and getattr(q, "temp_owner", None) is not None:
            return q  # another connection's temp queue, named in full (reply-to)
        if is_temp_name(name):
            raise NotFound(f"temporary queue {name!r} no longer exists")
        full = temp_name(conn.id, name)
        conn.temps[name] = full
        return self.make_queue(full, own, durable=False, temp_owner=conn.id, record=False)

    def temp_topic(self, conn: Connection, name: str) -> Topic:
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
        return self.topic(full, conn.id)

    def delete_queue(self, q: Any, *, record: bool) -> None:
        """Remove a queue: its consumers are closed, its messages dropped."""
        name = q.name
        if self.queues.get(name) is q:
            del self.queues[name]
        self.send_cache.clear()
        if isinstance(q, Queue):
            for c in list(q.consumers):
                conn = c.conn
                if conn.subs.get(c.sub_id) is c:
                    del conn.subs[c.sub_id]
                close_consumer(c)
                if self.broker.connections.get(conn.id) is conn and conn.id != q.temp_owner:
                    self.broker.effects.append(
                        CloseConnection(conn.id, f"queue {name!r} was deleted")
                    )
            # QueueDeleted drops the stored messages with the queue (docs/journal.md).
            for m in q.pending_messages() + q.in_flight_messages():
                m.state = DONE
            for g in q.all_fifos():  # no message <-> group cycles left for the GC
                g.head = g.tail = None
            q.deleted = True
            self.broker.total_bytes -= q.bytes
            for conn_id in list(q.blocked):
                self.broker.producer_unblocked(conn_id, q)
            q.blocked.clear()
            self.broker.dispatch_delayed.pop(q, None)
        for t in self.topics.values():
            if q in t.subs:
                t.subs.remove(q)
        if record:
            self.broker.records.append(QueueDeleted(name))

    def classic(self, name: str) -> Queue:
        """The classic queue ``name`` (NotFound if there is none, or a log queue)."""
        q = self.queues.get(name)
        if q is None or q.__class__ is not Queue:
            raise NotFound(f"no queue {name!r}")
        return q

    def log_queue(self, name: str) -> Any:
        q = self.queues.get(name)
        if q is None or isinstance(q, Queue):
            raise NotFound(f"no log queue {name!r}")
        return q

    def send_target(self, conn: Connection, destination: str) -> tuple[Any, str]:
        """(Queue | LogQueue | Topic, base destination); may create the queue."""
        hit = self.send_cache.get(destination)
        if hit is not None:
            return hit
        d = parse_destination(destination)
        if d.kind == "queue":
            out: tuple[Any, str] = (self.queue_for(d.name, d.own, conn.id), d.base)
            self.send_cache[destination] = out
            return out
        if d.kind == "topic":
            out = (self.topic(d.name), d.base)
            self.send_cache[destination] = out
            return out
        if d.kind == "temp-queue":
            q = self.temp_queue(conn, d.name, d.own)
            return q, "/temp-queue/" + q.name
        t = self.temp_topic(conn, d.name)
        return t, "/temp-topic/" + t.name

    def rewrite_reply_to(self, conn: Connection, headers: dict[str, str]) -> dict[str, str]:
        rt = headers["reply-to"]
        d = parse_destination(rt)
        if d.kind == "temp-queue":
            name = self.temp_queue(conn, d.name, d.own).name
        elif d.kind == "temp-topic":
            name = self.temp_topic(conn, d.name).name
        else:
            return headers
        new = f"/{d.kind}/{name}"
        if new == d.base:
            return headers
        headers = dict(headers)
        headers["reply-to"] = new
        return headers

    def check_not_log(self, name: str, own: dict[str, Any], match: str) -> None:
        q = self.queues.get(name)
        if q is not None:
            if not isinstance(q, Queue):
                raise InvalidDestination("log queues are read over HTTP")
            return
        if self.broker.address_settings.resolve(match, coerce_settings(own)).queue_type == "log":
            raise InvalidDestination("log queues are read over HTTP")

    def subscription_queue(
        self, conn: Connection, sub_id: str, d: Destination, sub_name: str | None
    ) -> tuple[Queue, bool]:
        if d.kind == "queue":
            self.check_not_log(d.name, d.own, d.name)
            return self.queue_for(d.name, d.own, conn.id), False
        if d.kind == "temp-queue":
            q = self.temp_queue(conn, d.name, d.own)
            if q.__class__ is not Queue:
                raise InvalidDestination("log queues are read over HTTP")
            return q, False
        topic = self.topic(d.name) if d.kind == "topic" else self.temp_topic(conn, d.name)
        if sub_name and d.kind == "topic":
            name = subscription_queue_name(topic.name, sub_name, conn.client_id)
            self.check_not_log(name, d.own, topic.name)
            q = cast("Queue | None", self.queues.get(name))  # _check_not_log: not a log queue
            if q is None:
                q = self.make_queue(
                    name,
                    d.own,
                    address=topic.name,
                    routing="multicast",
                    subscription=sub_name,
                    client_id=conn.client_id,
                )
            elif q.routing != "multicast" or q.address != topic.name:
                raise Conflict(f"queue {name!r} exists and is not a subscription of {topic.name!r}")
            elif d.own:
                self.check_params(q, d.own, conn.id)
            return q, False
        name = private_subscription_queue_name(topic.name, conn.id, sub_id)
        self.check_not_log(name, d.own, topic.name)
        q = self.queues.get(name)
        if q is not None:
            raise Conflict(f"subscription queue {name!r} already exists")
        q = self.make_queue(
            name, d.own, address=topic.name, routing="multicast", durable=False, record=False
        )
        return q, True
