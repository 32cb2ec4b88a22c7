"""Hardening end to end: flow control that cannot deadlock, and what a peer
may cost the broker before (and without) authenticating."""

from __future__ import annotations

import time

import pytest
import stomp

from support import RawStomp, wait_for

pytestmark = pytest.mark.e2e


def _users(tmp_path, throttle: int = 100) -> str:
    from shoal.security import add_user

    users = tmp_path / "users.json"
    add_user(users, "alice", "pw", ["app"])
    return (
        f'[broker]\nusers-file = "{users}"\n'
        f"[limits]\nmax-auth-failures-per-minute = {throttle}\n"
        '[[permissions]]\nmatch = "#"\nsend = ["app"]\nconsume = ["app"]\n'
    )


class Worker(stomp.ConnectionListener):
    """Turns each job into a follow-up job on the same queue, then acks it,
    all on one connection (from the listener thread)."""

    def __init__(self, conn: stomp.Connection12, generations: int) -> None:
        self.conn = conn
        self.generations = generations
        self.bodies: list[str] = []
        self.errors: list[str] = []

    def on_message(self, frame) -> None:
        self.bodies.append(frame.body[:4])
        name, gen = frame.body[:2], int(frame.body[2:4])
        if gen < self.generations:
            self.conn.send("/queue/jobs", f"{name}{gen + 1:02d}".ljust(200, "."))
        time.sleep(0.05)  # the ACK arrives in a later read than the SEND
        self.conn.ack(frame.headers["ack"])

    def on_error(self, frame) -> None:
        self.errors.append(frame.headers.get("message", ""))


_BLOCK = (
    '[address-settings."jobs"]\nmax-size-bytes = 1000\naddress-full-policy = "block"\n'
    '[address-settings."full"]\nmax-size-bytes = 100\naddress-full-policy = "block"\n'
)


def test_worker_that_acks_and_sends_on_one_connection_completes(shoal_server):
    """Its SEND fills the queue it consumes: its ACKs must still be read, or
    nothing ever drains the queue (the old pause of the whole connection)."""
    srv = shoal_server(config=_BLOCK)
    seeder = RawStomp(srv.stomp_port)
    assert seeder.connect()[0] == "CONNECTED"
    for job in range(5):  # 5 x 200 B: the queue is full
        seeder.frame("SEND", {"destination": "/queue/jobs"}, f"j{job}00".ljust(200, ".").encode())
    conn = stomp.Connection12([("127.0.0.1", srv.stomp_port)])
    worker = Worker(conn, generations=3)
    conn.set_listener("w", worker)
    conn.connect(wait=True)
    conn.subscribe("/queue/jobs", id="s", ack="client-individual")
    expected = sorted(f"j{job}{gen:02d}" for job in range(5) for gen in range(4))
    wait_for(lambda: len(worker.bodies) >= len(expected), timeout=20)
    assert sorted(worker.bodies) == expected
    assert worker.errors == []
    conn.disconnect()
    seeder.close()


def test_a_full_address_holds_only_its_own_senders_sends(shoal_server):
    srv = shoal_server(config=_BLOCK)
    producer = RawStomp(srv.stomp_port)
    assert producer.connect()[0] == "CONNECTED"
    producer.frame("SEND", {"destination": "/queue/full", "receipt": "f1"}, b"x" * 200)
    assert producer.read_frame()[1]["receipt-id"] == "f1"  # accepted; now blocked on "full"
    # The same connection still reaches another queue...
    producer.frame("SEND", {"destination": "/queue/other", "receipt": "o1"}, b"y")
    assert producer.read_frame()[1]["receipt-id"] == "o1"
    # ...and so does another producer.
    other = RawStomp(srv.stomp_port)
    assert other.connect()[0] == "CONNECTED"
    other.frame("SEND", {"destination": "/queue/other", "receipt": "o2"}, b"z")
    assert other.read_frame()[1]["receipt-id"] == "o2"
    # A second SEND to the full queue waits; once a consumer drains it, it goes on.
    producer.frame("SEND", {"destination": "/queue/full", "receipt": "f2"}, b"second")
    producer.frame("SEND", {"destination": "/queue/other", "receipt": "o3"}, b"after")
    consumer = RawStomp(srv.stomp_port)
    assert consumer.connect()[0] == "CONNECTED"
    consumer.frame(
        "SUBSCRIBE", {"destination": "/queue/full", "id": "s", "ack": "client-individual"}
    )
    command, headers, body = consumer.read_frame()
    assert command == "MESSAGE" and body == b"x" * 200
    consumer.frame("ACK", {"id": headers["ack"]})
    assert consumer.read_frame()[2] == b"second"
    # Held frames are answered in the order they were sent.
    assert [producer.read_frame()[1]["receipt-id"] for _ in range(2)] == ["f2", "o3"]
    for peer in (producer, other, consumer):
        peer.close()


def test_handshake_timeout_closes_a_silent_socket(shoal_server):
    srv = shoal_server(config="[broker]\nhandshake-timeout = 0.5\n")
    raw = RawStomp(srv.stomp_port)
    raw.send(b"CONN")  # never completes CONNECT
    command, headers, _ = raw.read_frame()
    assert command == "ERROR" and "handshake-timeout" in headers["message"]
    assert raw.closed_by_peer()


def test_unauthenticated_sockets_have_their_own_cap(shoal_server):
    srv = shoal_server(
        config="[limits]\nmax-unauthenticated-connections = 3\nmax-connections = 1\n"
    )
    strangers = [RawStomp(srv.stomp_port) for _ in range(2)]
    for s in strangers:
        s.send(b"CONN")  # never completes CONNECT
    # The strangers do not count against max-connections...
    client = RawStomp(srv.stomp_port)
    assert client.connect()[0] == "CONNECTED"
    second = RawStomp(srv.stomp_port)
    command, headers, _ = second.connect()
    assert command == "ERROR" and "max-connections" in headers["message"]
    assert second.closed_by_peer()
    # ...but against their own cap.
    strangers.append(RawStomp(srv.stomp_port))

    def refused() -> bool:
        extra = RawStomp(srv.stomp_port)
        try:
            command, headers, _ = extra.read_frame()
        except (ConnectionError, TimeoutError):
            return False
        finally:
            extra.close()
        return command == "ERROR" and "max-unauthenticated-connections" in headers["message"]

    wait_for(refused)  # once the broker has seen the second client go
    for s in strangers + [client]:
        s.close()


def test_frames_before_connect_are_small(shoal_server):
    srv = shoal_server()
    raw = RawStomp(srv.stomp_port)
    big = b"x" * (100 * 1024)
    raw.send(b"CONNECT\naccept-version:1.2\n\n" + big)  # no NUL yet: still arriving
    command, headers, _ = raw.read_frame()
    assert command == "ERROR" and "max-unauthenticated-frame-bytes" in headers["message"]
    assert raw.closed_by_peer()
    ok = RawStomp(srv.stomp_port)
    assert ok.connect()[0] == "CONNECTED"
    ok.frame("SEND", {"destination": "/queue/big", "receipt": "r"}, big)  # fine once connected
    assert ok.read_frame()[1]["receipt-id"] == "r"
    ok.close()


def test_failed_logins_are_throttled_per_address(shoal_server, tmp_path):
    srv = shoal_server(config=_users(tmp_path, throttle=2))
    for _ in range(2):
        raw = RawStomp(srv.stomp_port)
        command, headers, _ = raw.connect(login="alice", passcode="bad")
        assert command == "ERROR" and "wrong login" in headers["message"]
        raw.close()
    raw = RawStomp(srv.stomp_port)
    command, headers, _ = raw.connect(login="alice", passcode="pw")  # right, but too soon
    assert command == "ERROR" and "max-auth-failures-per-minute" in headers["message"]
    assert raw.closed_by_peer()


def test_logins_checked_off_the_loop_keep_pipelined_frames_in_order(shoal_server, tmp_path):
    srv = shoal_server(config=_users(tmp_path))
    raw = RawStomp(srv.stomp_port)
    raw.send(
        b"CONNECT\naccept-version:1.2\nlogin:alice\npasscode:pw\n\n\x00"
        b"SEND\ndestination:/queue/p\nreceipt:1\n\none\x00"
        b"SEND\ndestination:/queue/p\nreceipt:2\n\ntwo\x00"
    )
    assert raw.read_frame()[0] == "CONNECTED"
    assert [raw.read_frame()[1]["receipt-id"] for _ in range(2)] == ["1", "2"]
    raw.frame("SUBSCRIBE", {"destination": "/queue/p", "id": "s"})
    assert [raw.read_frame()[2] for _ in range(2)] == [b"one", b"two"]
    raw.close()


def test_long_destinations_are_refused_by_name(shoal_server, tmp_path):
    srv = shoal_server(config=_users(tmp_path))
    raw = RawStomp(srv.stomp_port)
    assert raw.connect(login="alice", passcode="pw")[0] == "CONNECTED"
    raw.frame("SEND", {"destination": "/queue/" + "a." * 1000 + "b", "receipt": "r"}, b"x")
    command, headers, _ = raw.read_frame()
    assert command == "ERROR" and "max-destination-bytes" in headers["message"]


def test_idle_connection_without_subscription_is_closed(shoal_server):
    srv = shoal_server(config="[broker]\nidle-timeout = 0.5\nheartbeat = [0, 0]\n")
    idle = RawStomp(srv.stomp_port)
    assert idle.connect()[0] == "CONNECTED"  # no heart-beat header: (0, 0)
    consumer = RawStomp(srv.stomp_port)
    assert consumer.connect()[0] == "CONNECTED"
    consumer.frame("SUBSCRIBE", {"destination": "/queue/i", "id": "s"})
    command, headers, _ = idle.read_frame()
    assert command == "ERROR" and "idle-timeout" in headers["message"]
    assert idle.closed_by_peer()
    # The subscribed one, as quiet, is still served.
    producer = RawStomp(srv.stomp_port)
    assert producer.connect()[0] == "CONNECTED"
    producer.frame("SEND", {"destination": "/queue/i"}, b"still here")
    assert consumer.read_frame()[2] == b"still here"
    for peer in (consumer, producer):
        peer.close()
