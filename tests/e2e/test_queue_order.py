"""G16 end to end: one consumer (or an exclusive one) receives in queue order
across groups, with a prefetch window smaller than the backlog, as on
ActiveMQ. stomp.py against a real `shoal serve`; every message is acked as
it arrives, so credit comes back one message at a time."""

from __future__ import annotations

import threading

import pytest
import stomp

from support import wait_for

pytestmark = pytest.mark.e2e


class AckingListener(stomp.ConnectionListener):
    """Records bodies in arrival order and acks each one (client-individual)."""

    def __init__(self, conn: stomp.Connection12) -> None:
        self.conn = conn
        self.bodies: list[str] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()

    def on_message(self, frame) -> None:
        with self.lock:
            self.bodies.append(frame.body)
        self.conn.ack(frame.headers["ack"])  # STOMP 1.2: the ack header alone

    def on_error(self, frame) -> None:
        self.errors.append(frame.body)


def connect(port: int) -> tuple[stomp.Connection12, AckingListener]:
    conn = stomp.Connection12([("127.0.0.1", port)])
    listener = AckingListener(conn)
    conn.set_listener("acker", listener)
    conn.connect(wait=True)
    return conn, listener


def send_all(port: int, destination: str, groups: list[str | None]) -> None:
    """Send one message per entry (body = its index), receipted, in order."""
    conn = stomp.Connection12([("127.0.0.1", port)])
    done = stomp.listener.TestListener(receipt="last")
    conn.set_listener("p", done)
    conn.connect(wait=True)
    for i, group in enumerate(groups):
        headers = {} if group is None else {"JMSXGroupID": group}
        if i == len(groups) - 1:
            headers["receipt"] = "last"
        conn.send(destination, str(i), headers=headers)
    done.wait_on_receipt()
    conn.disconnect()


def amqp_bodies(port: int, address: str, n: int, credit: int) -> list[str]:
    """An AMQP consumer (Proton): credit ``credit`` kept topped up, each message accepted."""
    from proton.utils import BlockingConnection

    conn = BlockingConnection(f"amqp://127.0.0.1:{port}")
    try:
        receiver = conn.create_receiver(address, credit=credit)
        bodies = []
        for _ in range(n):
            message = receiver.receive(timeout=20)  # its body is a view into it: keep it
            body = message.body
            bodies.append(body if isinstance(body, str) else bytes(body).decode())
            receiver.accept()
        return bodies
    finally:
        conn.close()


@pytest.mark.parametrize("consumer", ["stomp", "amqp"])
def test_prefetch_ten_two_groups_alternating_arrive_in_send_order(shoal_server, consumer):
    srv = shoal_server(data=None)
    send_all(srv.stomp_port, "/queue/order.alt", ["AB"[i % 2] for i in range(100)])
    if consumer == "amqp":  # the credit is the prefetch
        assert amqp_bodies(srv.amqp_port, "order.alt", 100, 10) == [str(i) for i in range(100)]
        return
    conn, got = connect(srv.stomp_port)
    conn.subscribe(
        "/queue/order.alt", id="s1", ack="client-individual", headers={"prefetch-count": "10"}
    )
    wait_for(lambda: len(got.bodies) >= 100, timeout=20)
    conn.disconnect()
    assert got.bodies == [str(i) for i in range(100)]
    assert not got.errors


def test_exclusive_consumer_gets_grouped_and_ungrouped_in_send_order(shoal_server):
    srv = shoal_server(data=None)
    # odd messages ungrouped, even ones A, B, A, B...
    send_all(
        srv.stomp_port,
        "/queue/order.exclusive_consumers",
        [None if i % 2 else "AB"[i // 2 % 2] for i in range(60)],
    )
    conn, got = connect(srv.stomp_port)
    conn.subscribe(
        "/queue/order.exclusive_consumers",
        id="s1",
        ack="client-individual",
        headers={"prefetch-count": "10", "activemq.exclusive": "true"},
    )
    other, other_got = connect(srv.stomp_port)
    other.subscribe(
        "/queue/order.exclusive_consumers",
        id="s2",
        ack="client-individual",
        headers={"prefetch-count": "10"},
    )
    wait_for(lambda: len(got.bodies) >= 60, timeout=20)
    conn.disconnect()
    other.disconnect()
    assert got.bodies == [str(i) for i in range(60)]
    assert other_got.bodies == [] or other_got.bodies[0] not in got.bodies
    assert not got.errors and not other_got.errors
