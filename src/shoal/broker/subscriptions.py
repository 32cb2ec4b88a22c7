"""Subscriptions: SUBSCRIBE / UNSUBSCRIBE and the queue each one reads.

Queues for ``/queue/``, temporary queues, durable and private topic
subscriptions (DESIGN G14), and closing a consumer (its unsettled messages
go back to their groups, G11).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from mypy_extensions import trait

from shoal.broker.context import BrokerCore
from shoal.broker.destinations import (
    Destination,
    parse_destination,
    private_subscription_queue_name,
    subscription_queue_name,
)
from shoal.broker.model import DEFAULT_PREFETCH, IN_FLIGHT, Consumer
from shoal.broker.queue import Queue
from shoal.broker.selector import compile_selector
from shoal.broker.settings import coerce_settings
from shoal.errors import Conflict, InvalidDestination, InvalidHeader, LimitExceeded, NotFound
from shoal.protocol.stomp.frames import ACK_MODES

if TYPE_CHECKING:
    from shoal.broker.model import Connection


def _parse_int_header(headers: dict[str, str], name: str, default: int) -> int:
    raw = headers.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise InvalidHeader(name, raw, "not an integer") from None


@trait
class SubscriptionsMixin(BrokerCore):
    def subscribe(
        self,
        conn_id: int,
        sub_id: str,
        destination: str,
        ack_mode: str,
        headers: dict[str, str],
        now: float,
        *,
        link_credit: bool = False,
    ) -> None:
        """``link_credit``: an AMQP consumer link, whose credit comes from ``set_credit``."""
        conn = self._conn(conn_id)
        self._clock(now)
        if sub_id in conn.subs:
            raise Conflict(f"subscription id {sub_id!r} is already used on this connection")
        if ack_mode not in ACK_MODES:
            raise InvalidHeader("ack", ack_mode, "must be auto, client or client-individual")
        if len(conn.subs) >= self.limits.max_subscriptions_per_connection:
            raise LimitExceeded(
                "max-subscriptions-per-connection", self.limits.max_subscriptions_per_connection
            )
        if "prefetch-count" in headers:
            prefetch = _parse_int_header(headers, "prefetch-count", DEFAULT_PREFETCH)
        else:
            prefetch = _parse_int_header(headers, "activemq.prefetchSize", DEFAULT_PREFETCH)
        if prefetch < 0:
            raise InvalidHeader("prefetch-count", str(prefetch), "must not be negative")
        window = _parse_int_header(headers, "consumer-window-size", -1)
        text = headers.get("selector")
        # Compiled (or refused) before anything is created; cached by text.
        selector = compile_selector(text) if text else None
        d = parse_destination(destination)
        exclusive = (
            headers.get("activemq.exclusive", "").lower() == "true"
            or d.params.get("exclusive", "").lower() == "true"
        )
        sub_name = headers.get("durable-subscription-name") or headers.get(
            "activemq.subscriptionName"
        )
        q, topic_queue = self._subscription_queue(conn, sub_id, d, sub_name)
        c = Consumer(
            conn,
            sub_id,
            q,
            d.base,
            ack_mode,
            prefetch,
            window,
            exclusive,
            now,
            self.limits.max_delivery_burst,
            selector,
            link_credit,
        )
        c.topic_queue = topic_queue
        if topic_queue and selector is not None:
            # The subscription's own queue: what its one consumer rejects is never kept.
            q.filter = selector.matches
        conn.subs[sub_id] = c
        q.add_consumer(c, now)
        self._flush()

    def _check_not_log(self, name: str, own: dict[str, Any], match: str) -> None:
        q = self.queues.get(name)
        if q is not None:
            if not isinstance(q, Queue):
                raise InvalidDestination("log queues are read over HTTP")
            return
        if self.address_settings.resolve(match, coerce_settings(own)).queue_type == "log":
            raise InvalidDestination("log queues are read over HTTP")

    def _subscription_queue(
        self, conn: Connection, sub_id: str, d: Destination, sub_name: str | None
    ) -> tuple[Queue, bool]:
        if d.kind == "queue":
            self._check_not_log(d.name, d.own, d.name)
            return self.addresses.queue_for(d.name, d.own, conn.id), False
        if d.kind == "temp-queue":
            q = self.addresses.temp_queue(conn, d.name, d.own)
            if q.__class__ is not Queue:
                raise InvalidDestination("log queues are read over HTTP")
            return q, False
        topic = (
            self.addresses.topic(d.name)
            if d.kind == "topic"
            else self.addresses.temp_topic(conn, d.name)
        )
        if sub_name and d.kind == "topic":
            name = subscription_queue_name(topic.name, sub_name, conn.client_id)
            self._check_not_log(name, d.own, topic.name)
            q = cast("Queue | None", self.queues.get(name))  # _check_not_log: not a log queue
            if q is None:
                q = self.addresses.make_queue(
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
                self.addresses.check_params(q, d.own, conn.id)
            return q, False
        name = private_subscription_queue_name(topic.name, conn.id, sub_id)
        self._check_not_log(name, d.own, topic.name)
        q = self.queues.get(name)
        if q is not None:
            raise Conflict(f"subscription queue {name!r} already exists")
        q = self.addresses.make_queue(
            name, d.own, address=topic.name, routing="multicast", durable=False, record=False
        )
        return q, True

    def _close_consumer(self, c: Consumer) -> None:
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

    def unsubscribe(self, conn_id: int, sub_id: str, now: float, *, durable: bool = False) -> None:
        conn = self._conn(conn_id)
        self._clock(now)
        c = conn.subs.pop(sub_id, None)
        if c is None:
            raise NotFound(f"no subscription {sub_id!r} on this connection")
        self._close_consumer(c)
        q = cast("Queue", c.queue)
        if c.topic_queue:
            self.addresses.delete_queue(q, record=False)
        elif durable and q.subscription is not None and not q.consumers and not q.deleted:
            self.addresses.delete_queue(q, record=q.durable)
        self._flush()
