"""Settlement: ACK and NACK, outside and inside transactions.

client-individual acks settle one message (the hot path); client acks are
cumulative over the subscription. Settling frees credit and may make the
consumer ready again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from mypy_extensions import trait

from shoal.broker.context import BrokerCore
from shoal.broker.model import IN_FLIGHT
from shoal.broker.queue import Queue
from shoal.errors import NotFound

if TYPE_CHECKING:
    from shoal.broker.model import Connection, Consumer, Message, Transaction


@trait
class SettlementMixin(BrokerCore):
    def _take_acked(self, conn: Connection, ack_id: str) -> tuple[Consumer, list[Message]]:
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

    def ack(
        self,
        conn_id: int,
        ack_id: str,
        now: float,
        *,
        transaction: str | None = None,
        settled_on_send: bool = False,
    ) -> None:
        """``settled_on_send``: the delivery was settled by sending it (AMQP
        pre-settled), so its removal waits for the write like an auto-ack's
        (``take_sent_removals``); the hot path below is the only one it takes."""
        conn = self._conns.get(conn_id)
        if conn is None:
            raise NotFound(f"no connection {conn_id}")
        self._clock(now)
        tx = self.transactions.of(conn, transaction) if transaction is not None else None
        if tx is None:
            # hot path: client-individual, one message
            try:
                m = conn.acks.pop(int(ack_id), None)
            except (TypeError, ValueError):
                m = None
            if m is not None and m.holder.unsettled is None:  # type: ignore[union-attr]
                c: Consumer = m.holder  # type: ignore[assignment]
                q = cast("Queue", c.queue)
                q.settle(m, settled_on_send)
                c.credit += c.refund
                c.window += m.size
                c.acked += 1
                if not c.ready and c.refresh():
                    q.consumer_ready(c)
                    q.touch()
                if self.dirty or self.memory.blocked:
                    self._flush()
                return
            if m is not None:
                conn.acks[m.id] = m  # cumulative: take the general path
        self._settle(conn, ack_id, tx, nack=False)

    def nack(
        self,
        conn_id: int,
        ack_id: str,
        now: float,
        *,
        transaction: str | None = None,
        counted: bool = True,
    ) -> None:
        """Return a delivery; ``counted=False`` (AMQP released) does not count
        it toward max-delivery-attempts (it goes back to the head of its group)."""
        conn = self._conn(conn_id)
        self._clock(now)
        tx = self.transactions.of(conn, transaction) if transaction is not None else None
        self._settle(conn, ack_id, tx, nack=True, counted=counted)

    def set_credit(self, conn_id: int, sub_id: str, credit: int, now: float) -> None:
        """An AMQP consumer link's credit is what its peer granted last."""
        conn = self._conn(conn_id)
        self._clock(now)
        c = conn.subs.get(sub_id)
        if c is None:
            raise NotFound(f"no subscription {sub_id!r} on this connection")
        c.credit = max(0, credit)
        if c.refresh():
            q = cast("Queue", c.queue)
            q.consumer_ready(c)
            q.touch()
        elif c.credit <= 0:
            c.ready = False
        self._flush()

    def _settle(
        self,
        conn: Connection,
        ack_id: str,
        tx: Transaction | None,
        *,
        nack: bool,
        counted: bool = True,
    ) -> None:
        """ACK or NACK what ``ack_id`` covers; in a transaction, only note it."""
        c, msgs = self._take_acked(conn, ack_id)
        q = cast("Queue", c.queue)
        size = 0
        for m in msgs:
            size += m.size
            if tx is None:
                if nack:
                    q.requeue(m, counted)
                else:
                    q.settle(m)
        if tx is not None:
            (tx.nacks if nack else tx.acks).extend(msgs)
        c.credit += len(msgs) * c.refund
        c.window += size
        if nack:
            c.nacked += len(msgs)
        else:
            c.acked += len(msgs)
        if not c.ready and c.refresh():
            q.consumer_ready(c)
            q.touch()
        self._flush()
