"""Transactions: BEGIN / COMMIT / ABORT.

A transaction buffers sends and settlements; COMMIT routes the sends and
applies the settlements, ABORT returns what was acked or nacked in it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from mypy_extensions import trait

from shoal.broker.context import BrokerCore
from shoal.broker.model import IN_FLIGHT, Transaction
from shoal.broker.queue import Queue
from shoal.broker.routing import parse_message_headers
from shoal.errors import Conflict, LimitExceeded, NotFound

if TYPE_CHECKING:
    from shoal.broker.model import Connection


@trait
class TransactionsMixin(BrokerCore):
    def _tx(self, conn: Connection, transaction: str | None) -> Transaction | None:
        if transaction is None:
            return None
        tx = conn.txs.get(transaction)
        if tx is None:
            raise NotFound(f"no transaction {transaction!r}")
        if tx.size() >= self.limits.max_transaction_size:
            raise LimitExceeded("max-transaction-size", self.limits.max_transaction_size)
        return tx

    def begin(self, conn_id: int, tx: str, now: float) -> None:
        conn = self._conn(conn_id)
        self._clock(now)
        if tx in conn.txs:
            raise Conflict(f"transaction {tx!r} is already open")
        if len(conn.txs) >= self.limits.max_transactions_per_connection:
            raise LimitExceeded(
                "max-transactions-per-connection", self.limits.max_transactions_per_connection
            )
        conn.txs[tx] = Transaction(tx)

    def commit(self, conn_id: int, tx: str, now: float) -> list[int]:
        """Returns the hold ids of sends waiting for a cluster grouping
        decision (empty on a single node): the COMMIT's RECEIPT waits for
        their ``SendDecided`` effects, and an ERROR answers it if one is
        refused (C3)."""
        conn = self._conn(conn_id)
        self._clock(now)
        t = conn.txs.pop(tx, None)
        if t is None:
            raise NotFound(f"no transaction {tx!r}")
        holds = self.cluster_holds
        holds.clear()
        for destination, headers, body in t.sends:
            try:
                target, base = self._send_target(conn, destination)
            except NotFound:
                continue  # a temporary destination that went away meanwhile
            seq, expires, priority, persistent = parse_message_headers(headers)
            conn.sent += 1
            self._route(target, base, headers, body, seq, expires, priority, persistent, conn_id)
        for m in t.acks:
            q = cast("Queue", m.holder.queue)  # type: ignore[union-attr]
            if not q.deleted and m.state == IN_FLIGHT:
                q.settle(m)
        for m in t.nacks:
            q = cast("Queue", m.holder.queue)  # type: ignore[union-attr]
            if not q.deleted and m.state == IN_FLIGHT:
                q.requeue(m)
        self._flush()
        out = holds[:]
        holds.clear()
        return out

    def _abort(self, t: Transaction) -> None:
        for m in t.acks + t.nacks:
            q = cast("Queue", m.holder.queue)  # type: ignore[union-attr]
            if not q.deleted and m.state == IN_FLIGHT:
                q.requeue(m)

    def abort(self, conn_id: int, tx: str, now: float) -> None:
        conn = self._conn(conn_id)
        self._clock(now)
        t = conn.txs.pop(tx, None)
        if t is None:
            raise NotFound(f"no transaction {tx!r}")
        self._abort(t)
        self._flush()
