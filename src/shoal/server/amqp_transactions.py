"""An AMQP connection's transactions (part 4): its coordinator links and the
txn-ids declared on them, each naming one core transaction.

A peer attaches a coordinator link and sends Declare and Discharge on it
(``protocol/amqp/coordinator.py`` reads them off the wire). A Declare begins
a core transaction and answers with a fresh txn-id; a Discharge commits it
(answered once its sends are synced, as a transfer is) or rolls it back.
Transfers and outcomes that name a txn-id join that transaction. A
coordinator link that detaches rolls back the transactions it declared.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from shoal.errors import BrokerError

if TYPE_CHECKING:
    from shoal.protocol.amqp import AmqpConnection, DeclareReceived, DischargeReceived
    from shoal.server.session_api import ServerState

COORDINATOR_CREDIT = 100  # declares and discharges a coordinator link may have outstanding
UNKNOWN_TXN = "amqp:transaction:unknown-id"

#: Settles a delivery once everything journaled so far is synced:
#: ``answer(delivery id, description, condition)``; accepted when condition is None.
Answer = Callable[[int, "str | None", "str | None"], None]
#: Error condition and description of a refusal, from a core error.
ConditionOf = Callable[[BrokerError], "tuple[str, str]"]


def core_tx(txn_id: bytes) -> str:
    """The core transaction an AMQP txn-id names (per connection, as STOMP's)."""
    return f"amqp-{txn_id.hex()}"


class TransactionCoordinator:
    """The coordinator links of one connection and the transactions declared on them."""

    def __init__(
        self,
        server: ServerState,
        conn_id: int,
        conn: AmqpConnection,
        answer: Answer,
        condition_of: ConditionOf,
    ) -> None:
        self.server = server
        self.conn_id = conn_id
        self.conn = conn
        self._answer = answer
        self._condition_of = condition_of
        self.links: set[int] = set()  # coordinator links
        self.declared: dict[bytes, int] = {}  # declared txn-id -> its coordinator link
        self.count = 0  # transactions declared so far: the next txn-id

    def core_tx(self, txn_id: bytes) -> str | None:
        """The core transaction of ``txn_id`` if it is declared here, else None."""
        return core_tx(txn_id) if txn_id in self.declared else None

    def attached(self, link_id: int) -> None:
        """The peer attached a coordinator: open it, with credit for its controls."""
        self.links.add(link_id)
        self.conn.accept_coordinator(link_id, COORDINATOR_CREDIT)

    def detached(self, link_id: int, connected: bool) -> None:
        """A link detached: if a coordinator, its open transactions roll back (part 4.2)."""
        if link_id not in self.links:
            return
        self.links.discard(link_id)
        for txn_id, owner in list(self.declared.items()):
            if owner == link_id:
                del self.declared[txn_id]
                if connected:
                    self.server.broker.abort(self.conn_id, core_tx(txn_id), time.time())

    def declare(self, event: DeclareReceived) -> None:
        self.count += 1
        txn_id = self.count.to_bytes(8, "big")
        try:
            self.server.broker.begin(self.conn_id, core_tx(txn_id), time.time())
        except BrokerError as exc:
            condition, description = self._condition_of(exc)
            self.conn.settle(
                event.delivery_id, "rejected", condition=condition, description=description
            )
        else:
            self.declared[txn_id] = event.link_id
            self.conn.declared(event.delivery_id, txn_id)
        self._top_up(event.link_id)

    def discharge(self, event: DischargeReceived) -> None:
        """Commit (answered once its sends are synced) or roll back a transaction."""
        self._top_up(event.link_id)
        if self.declared.pop(event.txn_id, None) is None:
            self.refuse_unknown(event.delivery_id, event.txn_id)
            return
        broker = self.server.broker
        if event.fail:
            broker.abort(self.conn_id, core_tx(event.txn_id), time.time())
            self.conn.settle(event.delivery_id, "accepted")
            return
        broker.commit(self.conn_id, core_tx(event.txn_id), time.time())
        self._answer(event.delivery_id, None, None)

    def refuse_unknown(self, delivery_id: int, txn_id: bytes) -> None:
        """Reject a delivery naming a transaction this connection has not declared."""
        self.conn.settle(
            delivery_id,
            "rejected",
            condition=UNKNOWN_TXN,
            description=f"no transaction {txn_id.hex()} on this connection",
        )

    def _top_up(self, link_id: int) -> None:
        credit = self.conn.credit(link_id)
        if credit < COORDINATOR_CREDIT // 2:
            self.conn.grant_credit(link_id, COORDINATOR_CREDIT - credit)
