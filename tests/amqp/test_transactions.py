"""AMQP 1.0 transactions with Qpid Proton's reactor client against a real `shoal serve`."""

from __future__ import annotations

import pytest
from proton import Message
from proton.handlers import MessagingHandler, TransactionHandler
from proton.reactor import Container
from proton.utils import BlockingConnection

pytestmark = pytest.mark.e2e


def url(server) -> str:
    return f"amqp://127.0.0.1:{server.amqp_port}"


class TransactedSend(MessagingHandler, TransactionHandler):
    """Declares a transaction, sends ``count`` messages in it, then discharges it:
    committed, rolled back (``abort``), or with a txn-id the broker never gave."""

    def __init__(self, address: str, queue: str, count: int, *, discharge: str) -> None:
        super().__init__()
        self.address, self.queue, self.count, self.discharge = address, queue, count, discharge
        self.sent = 0
        self.accepted = 0
        self.txn = None
        self.result: str | None = None

    def on_start(self, event) -> None:
        self.conn = event.container.connect(self.address)
        self.sender = event.container.create_sender(self.conn, self.queue)
        event.container.declare_transaction(self.conn, handler=self)

    def on_transaction_declared(self, event) -> None:
        self.txn = event.transaction
        self._send()

    def on_sendable(self, event) -> None:
        self._send()

    def _send(self) -> None:
        while self.txn is not None and self.sent < self.count and self.sender.credit:
            self.sent += 1
            self.txn.send(self.sender, Message(body=f"m{self.sent}", group_id="g"))

    def on_settled(self, event) -> None:
        if event.delivery.link != self.sender:
            return
        self.accepted += 1
        if self.accepted == self.count:
            if self.discharge == "commit":
                self.txn.commit()
            elif self.discharge == "abort":
                self.txn.abort()
            else:  # a txn-id this connection never declared
                self.txn.id = b"not-a-txn"
                self.txn.commit()

    def _done(self, result: str) -> None:
        self.result = result
        self.conn.close()

    def on_transaction_committed(self, event) -> None:
        self._done("committed")

    def on_transaction_aborted(self, event) -> None:
        self._done("aborted")

    def on_transaction_commit_failed(self, event) -> None:
        self._done(f"commit failed: {event.delivery.remote.condition.name}")

    def on_transaction_declare_failed(self, event) -> None:
        self._done("declare failed")


def run(server, queue: str, count: int, discharge: str) -> str | None:
    handler = TransactedSend(url(server), queue, count, discharge=discharge)
    Container(handler).run()
    return handler.result


def drain(server, queue: str) -> list[str]:
    conn = BlockingConnection(url(server))
    try:
        receiver = conn.create_receiver(f"queue://{queue}", credit=10)
        got = []
        while True:
            try:
                m = receiver.receive(timeout=0.5)
            except Exception:  # proton.Timeout: nothing more
                return got
            got.append(m.body)
            receiver.accept()
    finally:
        conn.close()


def test_committed_sends_are_visible_in_order(shoal_server):
    server = shoal_server()
    assert run(server, "tx-commit", 3, "commit") == "committed"
    assert drain(server, "tx-commit") == ["m1", "m2", "m3"]


def test_rolled_back_sends_store_nothing(shoal_server):
    server = shoal_server()
    assert run(server, "tx-abort", 3, "abort") == "aborted"
    assert drain(server, "tx-abort") == []


def test_a_discharge_of_an_unknown_txn_id_is_rejected(shoal_server):
    server = shoal_server()
    assert run(server, "tx-unknown", 2, "unknown") == ("commit failed: amqp:transaction:unknown-id")
    assert drain(server, "tx-unknown") == []  # the declared one ended with the connection
