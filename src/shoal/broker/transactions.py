"""Transactions: BEGIN / COMMIT / ABORT.

A transaction buffers sends and settlements; COMMIT routes the sends and
applies the settlements, ABORT returns what was acked or nacked in it. The
open transactions of a connection are its ``Connection.txs``; ``Transactions``
applies the limits and carries out COMMIT and ABORT.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from shoal.broker.model import IN_FLIGHT, Transaction
from shoal.broker.queue import Queue
from shoal.broker.routing import parse_message_headers
from shoal.errors import Conflict, LimitExceeded, NotFound

if TYPE_CHECKING:
    from shoal.broker.core import Broker
    from shoal.broker.model import Connection


class Transactions:
    """BEGIN, COMMIT and ABORT of the broker's connections."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def of(self, conn: Connection, transaction: str) -> Transaction:
        """The open transaction a SEND, ACK or NACK names, with room for one more."""
        tx = conn.txs.get(transaction)
        if tx is None:
            raise NotFound(f"no transaction {transaction!r}")
        limits = self.broker.limits
        if tx.size() >= limits.max_transaction_size:
            raise LimitExceeded("max-transaction-size", limits.max_transaction_size)
        return tx

    def begin(self, conn: Connection, tx: str) -> None:
        if tx in conn.txs:
            raise Conflict(f"transaction {tx!r} is already open")
        limits = self.broker.limits
        if len(conn.txs) >= limits.max_transactions_per_connection:
            raise LimitExceeded(
                "max-transactions-per-connection", limits.max_transactions_per_connection
            )
        conn.txs[tx] = Transaction(tx)

    def commit(self, conn: Connection, tx: str) -> list[int]:
        """Route the sends and apply the settlements; the hold ids of sends
        waiting for a cluster grouping decision (``Broker.commit``)."""
        t = conn.txs.pop(tx, None)
        if t is None:
            raise NotFound(f"no transaction {tx!r}")
        b = self.broker
        holds = b.cluster_holds
        holds.clear()
        for destination, headers, body in t.sends:
            try:
                target, base = b.addresses.send_target(conn, destination)
            except NotFound:
                continue  # a temporary destination that went away meanwhile
            seq, expires, priority, persistent = parse_message_headers(headers)
            conn.sent += 1
            b.route(target, base, headers, body, seq, expires, priority, persistent, conn.id)
        for m in t.acks:
            q = cast("Queue", m.holder.queue)  # type: ignore[union-attr]
            if not q.deleted and m.state == IN_FLIGHT:
                q.settle(m)
        for m in t.nacks:
            q = cast("Queue", m.holder.queue)  # type: ignore[union-attr]
            if not q.deleted and m.state == IN_FLIGHT:
                q.requeue(m)
        out = holds[:]
        holds.clear()
        return out

    def abort(self, conn: Connection, tx: str) -> None:
        t = conn.txs.pop(tx, None)
        if t is None:
            raise NotFound(f"no transaction {tx!r}")
        self.roll_back(t)

    @staticmethod
    def roll_back(t: Transaction) -> None:
        """What was acked or nacked in ``t`` goes back to its queue."""
        for m in t.acks + t.nacks:
            q = cast("Queue", m.holder.queue)  # type: ignore[union-attr]
            if not q.deleted and m.state == IN_FLIGHT:
                q.requeue(m)
