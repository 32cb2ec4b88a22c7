"""Qpid Proton's Python clients (blocking and reactor) against a real `shoal serve`."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import pytest
import stomp
from proton import ConnectionException, Disposition, Message, Timeout
from proton.handlers import MessagingHandler
from proton.reactor import Container
from proton.utils import BlockingConnection, LinkDetached, SendException

pytestmark = pytest.mark.e2e

GROUPS = ("a", "b", "c")


def url(server) -> str:
    return f"amqp://127.0.0.1:{server.amqp_port}"


def stomp_conn(server) -> stomp.Connection:
    c = stomp.Connection([("127.0.0.1", server.stomp_port)])
    c.connect(wait=True)
    return c


class Collect(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.frames: list = []

    def on_message(self, frame) -> None:
        self.frames.append(frame)


def send_groups(sender, n: int, *, durable: bool = True) -> None:
    for i in range(n):
        for g in GROUPS:
            sender.send(Message(body=f"{g}-{i}", group_id=g, group_sequence=i + 1, durable=durable))


def test_blocking_groups_in_order_and_stomp_sees_the_group_id(shoal_server):
    server = shoal_server()
    conn = BlockingConnection(url(server))
    try:
        sender = conn.create_sender("orders")
        send_groups(sender, 5)  # each send waits for its accepted outcome
        receiver = conn.create_receiver("queue://orders", credit=20)
        got: dict[str, list[str]] = {}
        for _ in range(15):
            m = receiver.receive(timeout=10)
            assert m.group_id in GROUPS and m.durable
            got.setdefault(m.group_id, []).append(m.body)
            receiver.accept()
        assert got == {g: [f"{g}-{i}" for i in range(5)] for g in GROUPS}
        # STOMP JMSXGroupID -> AMQP group-id, and AMQP -> STOMP
        s = stomp_conn(server)
        s.send(
            "/queue/mixed",
            "from-stomp",
            headers={
                "JMSXGroupID": "g1",
                "JMSXGroupSeq": "1",
                "colour": "blue",
                "persistent": "true",
            },
        )
        r2 = conn.create_receiver("mixed", credit=5)
        m = r2.receive(timeout=10)
        assert (m.group_id, m.group_sequence, m.properties["colour"], m.durable) == (
            "g1",
            1,
            "blue",
            True,
        )
        assert m.body in (b"from-stomp", "from-stomp")
        assert m.delivery_count == 0 and m.first_acquirer
        r2.accept()
        conn.create_sender("back").send(
            Message(body="from-amqp", group_id="g2", properties={"colour": "red"}, durable=True)
        )
        listener = Collect()
        s.set_listener("c", listener)
        s.subscribe("/queue/back", id="1", ack="client-individual")
        deadline = time.monotonic() + 10
        while not listener.frames and time.monotonic() < deadline:
            time.sleep(0.02)
        (frame,) = listener.frames
        assert frame.body == "from-amqp"
        assert frame.headers["JMSXGroupID"] == "g2" and frame.headers["colour"] == "red"
        s.disconnect()
    finally:
        conn.close()


def test_outcomes_released_uncounted_rejected_counted(shoal_server):
    server = shoal_server(config='[address-settings."#"]\nmax-delivery-attempts = 2\n')
    conn = BlockingConnection(url(server))
    try:
        sender = conn.create_sender("poison")
        sender.send(Message(body="p", group_id="g", durable=True))
        receiver = conn.create_receiver("poison", credit=1)
        for _ in range(3):  # released: back to the head, not counted
            m = receiver.receive(timeout=10)
            assert m.body == "p" and m.delivery_count == 0 and m.first_acquirer
            receiver.release(delivered=False)
        m = receiver.receive(timeout=10)
        receiver.reject()  # counted
        m = receiver.receive(timeout=10)
        assert m.body == "p" and m.delivery_count == 1 and not m.first_acquirer
        receiver.release(delivered=True)  # modified, delivery-failed unset: not counted
        m = receiver.receive(timeout=10)
        assert m.body == "p" and m.delivery_count == 1
        delivery = receiver.fetcher.unsettled[0]
        delivery.local.failed = True  # modified(delivery-failed): counted -> dead-lettered
        receiver.release(delivered=True)
        dead = conn.create_receiver("DLQ", credit=1).receive(timeout=10)
        assert dead.body == "p" and dead.group_id == "g"
    finally:
        conn.close()


def test_refusals_name_the_reason(shoal_server):
    server = shoal_server(
        config='[queues.small]\nmax-size-bytes = 10\naddress-full-policy = "fail"\n'
    )
    conn = BlockingConnection(url(server))
    try:
        sender = conn.create_sender("small")
        sender.send(Message(body="01234567", durable=True))
        with pytest.raises(SendException) as info:
            sender.send(Message(body="more than ten bytes", durable=True))
        assert info.value.state == Disposition.REJECTED
        assert "full" in Rejections.run(url(server), "small")
        with pytest.raises(LinkDetached) as bad:
            conn.create_receiver("orders?no-such-setting=1")
        assert "no-such-setting" in str(bad.value)
        # A coordinator link is taken (transactions: tests/amqp/test_transactions.py).
        conn.create_sender(None, name="tx", options=_Coordinator()).close()
    finally:
        conn.close()


class Rejections(MessagingHandler):
    """Sends one message; keeps the rejection's condition (BlockingSender hides it)."""

    def __init__(self, address: str, target: str) -> None:
        super().__init__()
        self.address, self.target = address, target
        self.condition = ""
        self.sent = False

    @classmethod
    def run(cls, address: str, target: str) -> str:
        handler = cls(address, target)
        thread = threading.Thread(target=Container(handler).run, daemon=True)
        thread.start()
        thread.join(20)
        return handler.condition

    def on_start(self, event) -> None:
        conn = event.container.connect(self.address)
        event.container.create_sender(conn, self.target)

    def on_sendable(self, event) -> None:
        if not self.sent:
            self.sent = True
            event.sender.send(Message(body="refused", durable=True))

    def on_rejected(self, event) -> None:
        cond = event.delivery.remote.condition
        self.condition = f"{cond.name} {cond.description}"
        event.connection.close()

    def on_accepted(self, event) -> None:
        self.condition = "accepted"
        event.connection.close()


class _Coordinator:
    def apply(self, link) -> None:
        from proton import Terminus

        link.target.type = Terminus.COORDINATOR
        link.target.address = None

    def test(self, link) -> bool:
        return True


def test_sasl_plain_against_the_broker_users(shoal_server, tmp_path):
    from shoal.security import add_user

    users = tmp_path / "users.json"
    add_user(users, "alice", "secret", ["app"])
    add_user(users, "bob", "pw", ["reader"])
    config = (
        f'[broker]\nusers-file = "{users}"\n'
        '[[permissions]]\nmatch = "#"\nsend = ["app"]\nconsume = ["app", "reader"]\n'
    )
    server = shoal_server(config=config)
    ok = BlockingConnection(url(server), user="alice", password="secret", allowed_mechs="PLAIN")
    ok.create_sender("q1").send(Message(body="x", durable=True))
    ok.close()
    with pytest.raises(ConnectionException) as bad:
        BlockingConnection(
            url(server), user="alice", password="wrong", allowed_mechs="PLAIN", timeout=10
        )
    assert "auth" in str(bad.value).lower()
    with pytest.raises(ConnectionException):  # users configured -> no ANONYMOUS
        BlockingConnection(url(server), allowed_mechs="ANONYMOUS", timeout=10)
    reader = BlockingConnection(url(server), user="bob", password="pw", allowed_mechs="PLAIN")
    with pytest.raises(LinkDetached) as refused:  # permissions as STOMP: bob may not send
        reader.create_sender("q1")
    assert "forbidden" in str(refused.value)
    reader.create_receiver("q1", credit=1).receive(timeout=10)
    reader.close()


def test_malformed_bytes_close_that_connection_only(shoal_server):
    server = shoal_server()
    conn = BlockingConnection(url(server))
    sender = conn.create_sender("steady")
    for data in (
        b"GET / HTTP/1.1\r\n\r\n",
        b"AMQP\x00\x01\x00\x00\x00\x00\x00\x0c\x02\x00\x00\x00garbage!",
    ):
        with socket.create_connection(("127.0.0.1", server.amqp_port), timeout=10) as s:
            s.sendall(data)
            reply = b""
            while chunk := s.recv(4096):
                reply += chunk
            assert reply.startswith(b"AMQP")  # the header we speak, then the close
    sender.send(Message(body="still here", durable=True))
    m = conn.create_receiver("steady", credit=1).receive(timeout=10)
    assert m.body == "still here"
    conn.close()


def test_large_transfer_closes_its_link_only(shoal_server):
    server = shoal_server()  # max-frame-bytes: 10 MiB by default
    conn = BlockingConnection(url(server))
    other = BlockingConnection(url(server))
    try:
        big = conn.create_sender("big")
        with pytest.raises((LinkDetached, SendException)) as info:
            big.send(Message(body=b"x" * 100_000_000, durable=True))  # 100 MB
        assert "message-size-exceeded" in str(info.value) or "larger" in str(info.value)
        conn.create_sender("big2").send(Message(body=b"small", durable=True))
        other.create_sender("big3").send(Message(body=b"other client", durable=True))
    finally:
        conn.close()
        other.close()


def test_a_link_that_never_grants_credit_holds_no_group(shoal_server):
    server = shoal_server()
    conn = BlockingConnection(url(server))
    try:
        conn.create_receiver("stuck", credit=0)  # attached, never any credit
        sender = conn.create_sender("stuck")
        send_groups(sender, 3)
        s = stomp_conn(server)
        listener = Collect()
        s.set_listener("c", listener)
        s.subscribe("/queue/stuck", id="1", ack="auto")
        deadline = time.monotonic() + 10
        while len(listener.frames) < 9 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert sorted(f.body for f in listener.frames) == sorted(
            f"{g}-{i}" for g in GROUPS for i in range(3)
        )
        s.disconnect()
    finally:
        conn.close()


class GroupConsumer(MessagingHandler):
    """A reactor client: sends 3 groups, consumes them in order, then stops."""

    def __init__(self, address: str, n: int) -> None:
        super().__init__(prefetch=10)
        self.address = address
        self.n = n
        self.got: dict[str, list[str]] = {}
        self.sent = 0
        self.error: str | None = None

    def on_start(self, event) -> None:
        conn = event.container.connect(self.address)
        event.container.create_receiver(conn, "reactor")
        self.sender = event.container.create_sender(conn, "reactor")

    def on_sendable(self, event) -> None:
        while event.sender.credit and self.sent < self.n * len(GROUPS):
            i, g = divmod(self.sent, len(GROUPS))
            event.sender.send(Message(body=f"{GROUPS[g]}-{i}", group_id=GROUPS[g], durable=True))
            self.sent += 1

    def on_message(self, event) -> None:
        m = event.message
        self.got.setdefault(m.group_id, []).append(m.body)
        if sum(map(len, self.got.values())) == self.n * len(GROUPS):
            event.connection.close()

    def on_transport_error(self, event) -> None:
        self.error = str(event.transport.condition)


def test_reactor_client_groups_in_order(shoal_server):
    server = shoal_server()
    handler = GroupConsumer(url(server), 20)
    thread = threading.Thread(target=Container(handler).run, daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive() and handler.error is None
    assert handler.got == {g: [f"{g}-{i}" for i in range(20)] for g in GROUPS}


def test_management_shows_the_protocol(shoal_server):
    import json
    import urllib.request

    server = shoal_server()
    conn = BlockingConnection(url(server))
    s = stomp_conn(server)
    try:
        with urllib.request.urlopen(f"{server.http_url}/api/connections", timeout=10) as r:
            rows = json.load(r)
        rows = rows.get("connections", rows) if isinstance(rows, dict) else rows
        assert sorted(row["protocol"] for row in rows) == ["amqp", "stomp"]
        with urllib.request.urlopen(f"{server.http_url}/metrics", timeout=10) as r:
            lines = r.read().decode().splitlines()
        assert 'shoal_protocol_connections{protocol="amqp"} 1' in lines
        assert 'shoal_protocol_connections{protocol="stomp"} 1' in lines
    finally:
        s.disconnect()
        conn.close()


def test_shared_groups_over_amqp(shoal_server):
    """Qpid's shared groups: a group moves on only once its holder settled everything."""
    server = shoal_server(config='[queues.shared]\ngroup-mode = "shared"\n')
    conn = BlockingConnection(url(server))
    try:
        sender = conn.create_sender("shared")
        a = conn.create_receiver("shared", credit=1, name="a")
        sender.send(Message(body="g-1", group_id="g", durable=True))
        assert a.receive(timeout=10).body == "g-1"
        b = conn.create_receiver("shared", credit=5, name="b")
        sender.send(Message(body="g-2", group_id="g", durable=True))
        sender.send(Message(body="h-1", group_id="h", durable=True))
        assert b.receive(timeout=10).body == "h-1"  # g is held by a: b gets only h
        b.accept()
        a.accept()  # g's holder settled: its next message may go to anyone
        got = []
        for receiver in (a, b):
            with contextlib.suppress(Timeout):  # the other one had it
                got.append(receiver.receive(timeout=2).body)
                receiver.accept()
        assert got == ["g-2"]
    finally:
        conn.close()


def test_a_full_address_holds_transfers_until_it_has_room(shoal_server):
    """address-full-policy = block: transfers wait (no outcome, no credit), then go in order."""
    server = shoal_server(
        config='[queues.tight]\nmax-size-bytes = 10\naddress-full-policy = "block"\n'
    )
    producer = BlockingConnection(url(server))
    consumer = BlockingConnection(url(server))
    try:
        sender = producer.create_sender("tight")
        done: list[int] = []

        def send_all() -> None:
            for i in range(4):
                sender.send(Message(body=f"m{i}-xxxx", group_id="g", durable=True))
                done.append(i)

        thread = threading.Thread(target=send_all, daemon=True)
        thread.start()
        time.sleep(1.0)
        assert len(done) < 4 and thread.is_alive()  # held behind the full queue
        receiver = consumer.create_receiver("tight", credit=1)
        got = []
        for _ in range(4):
            got.append(receiver.receive(timeout=10).body)
            receiver.accept()
        thread.join(10)
        assert done == [0, 1, 2, 3] and got == [f"m{i}-xxxx" for i in range(4)]
    finally:
        producer.close()
        consumer.close()


def test_a_silent_connection_is_closed_after_handshake_timeout(shoal_server):
    server = shoal_server(config="[broker]\nhandshake-timeout = 0.5\n")
    with socket.create_connection(("127.0.0.1", server.amqp_port), timeout=10) as s:
        s.sendall(b"AMQP\x03\x01\x00\x00")  # SASL header, then nothing
        reply = b""
        while chunk := s.recv(4096):
            reply += chunk
        assert reply.startswith(b"AMQP\x03\x01\x00\x00")  # mechanisms, then closed
    conn = BlockingConnection(url(server))  # an ordinary client is not hurt
    conn.create_sender("x").send(Message(body="ok"))
    conn.close()


def test_failed_logins_are_throttled_per_address(shoal_server, tmp_path):
    from shoal.security import add_user

    users = tmp_path / "users.json"
    add_user(users, "alice", "secret", ["app"])
    config = (
        f'[broker]\nusers-file = "{users}"\n[limits]\nmax-auth-failures-per-minute = 2\n'
        '[[permissions]]\nmatch = "#"\nsend = ["app"]\n'
    )
    server = shoal_server(config=config)
    for _ in range(2):
        with pytest.raises(ConnectionException):
            BlockingConnection(
                url(server), user="alice", password="wrong", allowed_mechs="PLAIN", timeout=10
            )
    with pytest.raises(ConnectionException):  # the right password too, until the bucket refills
        BlockingConnection(
            url(server), user="alice", password="secret", allowed_mechs="PLAIN", timeout=10
        )


def test_drain_sends_what_there_is_then_ends(shoal_server):
    server = shoal_server()
    conn = BlockingConnection(url(server))
    try:
        sender = conn.create_sender("drained")
        for i in range(2):
            sender.send(Message(body=f"d{i}", group_id="g"))
        receiver = conn.create_receiver("drained", credit=0)
        receiver.link.drain(10)
        # The broker answers a drain once it has sent what there is: the
        # link's credit used up (an engine left draining never gets here).
        conn.wait(lambda: not receiver.link.draining(), timeout=10, msg="drain")
        assert [receiver.receive(timeout=5).body for _ in range(2)] == ["d0", "d1"]
        receiver.accept()
    finally:
        conn.close()


def test_topic_addresses_and_capabilities_fan_out(shoal_server):
    server = shoal_server()
    conn = BlockingConnection(url(server))
    try:
        by_prefix = conn.create_receiver("topic://prices", credit=5)
        by_capability = conn.create_receiver("prices", credit=5, options=_TopicCapability())
        conn.create_sender("topic://prices").send(Message(body="IBM 1"))
        assert by_prefix.receive(timeout=10).body == "IBM 1"
        assert by_capability.receive(timeout=10).body == "IBM 1"
    finally:
        conn.close()


class _TopicCapability:
    def apply(self, link) -> None:
        link.source.capabilities.put_array(False, 19)  # Data.SYMBOL
        link.source.capabilities.enter()
        link.source.capabilities.put_symbol("topic")
        link.source.capabilities.exit()

    def test(self, link) -> bool:
        return True
