"""Producers' receipts sent by the kernel right after their journal write
(server/persistence.py, "rides"): a real broker, real stomp.py clients.

Where io_uring works, a receipted persistent SEND's RECEIPT is a send linked
behind the round's journal write. These tests check what a client sees: every
receipt, in order, on connections that only produce and on one that also
consumes, and a DISCONNECT receipt after them.
"""

from __future__ import annotations

import threading

import stomp

from shoal.server.uring import open_ring
from support import http_json, wait_for

PRODUCERS = 4
PER_PRODUCER = 150


class Recorder(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, str]] = []  # ("receipt", id) / ("message", body)
        self.errors: list[str] = []

    def on_receipt(self, frame) -> None:
        with self.lock:
            self.events.append(("receipt", frame.headers["receipt-id"]))

    def on_message(self, frame) -> None:
        with self.lock:
            self.events.append(("message", frame.body))

    def on_error(self, frame) -> None:
        self.errors.append(frame.body)

    def receipts(self) -> list[str]:
        with self.lock:
            return [value for kind, value in self.events if kind == "receipt"]

    def messages(self) -> list[str]:
        with self.lock:
            return [value for kind, value in self.events if kind == "message"]


def connect(port: int) -> tuple[stomp.Connection12, Recorder]:
    conn = stomp.Connection12([("127.0.0.1", port)], heartbeats=(0, 0))
    recorder = Recorder()
    conn.set_listener("r", recorder)
    conn.connect(wait=True)
    return conn, recorder


def ring_works() -> bool:
    ring = open_ring()
    if ring is None:
        return False
    ring.close()
    return True


def test_every_receipt_arrives_in_order_on_producers_and_a_consuming_producer(shoal_server):
    srv = shoal_server()
    port = srv.stomp_port
    conns = [connect(port) for _ in range(PRODUCERS)]
    # One connection consumes the queue it sends to: its RECEIPTs and MESSAGEs
    # share the socket, and the kernel's sends must not jumble them.
    mixed, mixed_rec = connect(port)
    mixed.subscribe("/queue/rides", id="s", ack="auto")

    def produce(conn: stomp.Connection12, name: str) -> None:
        for i in range(PER_PRODUCER):
            conn.send(
                "/queue/rides",
                f"{name}-{i}",
                headers={"persistent": "true", "receipt": f"{name}-{i}", "JMSXGroupID": name},
            )

    threads = [
        threading.Thread(target=produce, args=(conn, f"p{n}")) for n, (conn, _r) in enumerate(conns)
    ]
    threads.append(threading.Thread(target=produce, args=(mixed, "mixed")))
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for n, (_conn, rec) in enumerate(conns):
        wait_for(lambda rec=rec: len(rec.receipts()) == PER_PRODUCER, timeout=60)
        assert rec.receipts() == [f"p{n}-{i}" for i in range(PER_PRODUCER)]
        assert rec.errors == []
    total = (PRODUCERS + 1) * PER_PRODUCER
    wait_for(lambda: len(mixed_rec.receipts()) == PER_PRODUCER, timeout=60)
    wait_for(lambda: len(mixed_rec.messages()) == total, timeout=60)
    assert mixed_rec.receipts() == [f"mixed-{i}" for i in range(PER_PRODUCER)]
    assert sorted(mixed_rec.messages()) == sorted(
        f"{name}-{i}"
        for name in [*(f"p{n}" for n in range(PRODUCERS)), "mixed"]
        for i in range(PER_PRODUCER)
    )
    assert mixed_rec.errors == []
    # One SEND at a time: each round has one receipt waiting, which rides.
    conn, rec = conns[0]
    for i in range(5):
        conn.send("/queue/rides", f"one-{i}", headers={"persistent": "true", "receipt": f"one-{i}"})
        wait_for(lambda i=i: rec.receipts()[-1:] == [f"one-{i}"], timeout=30)
    # A DISCONNECT receipt comes after the last SEND's, then the socket closes.
    conn.send("/queue/rides", "last", headers={"persistent": "true", "receipt": "last"})
    conn.disconnect(receipt="bye")
    assert rec.receipts()[-2:] == ["last", "bye"]
    status, info = http_json(f"{srv.http_url}/api/broker")
    assert status == 200
    journal = info["journal"]
    if ring_works():
        assert journal["receipts_io_uring"] > 0
    else:
        assert journal["receipts_io_uring"] == 0
    for c, _r in conns[1:]:
        c.disconnect()
    mixed.disconnect()
