"""Idle timeouts, what a message keeps through the broker, and amqps://, with real clients."""

from __future__ import annotations

import contextlib
import socket
import struct
import time
import uuid

import pytest
import stomp
from proton import (
    Connection,
    ConnectionException,
    Message,
    SSLDomain,
    Timeout,
    Transport,
    symbol,
    ulong,
)
from proton.utils import BlockingConnection

from skips import needs_tools
from support import self_signed_cert, wait_for

pytestmark = pytest.mark.e2e


def url(server) -> str:
    return f"amqp://127.0.0.1:{server.amqp_port}"


class Collect(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.frames: list = []

    def on_message(self, frame) -> None:
        self.frames.append(frame)


# --- idle timeouts --------------------------------------------------------------------


def test_a_client_that_goes_silent_is_dropped_by_the_amqp_idle_timeout(shoal_server):
    # We want traffic every 0.4 s; the AMQP idle-time-out is three times that.
    server = shoal_server(config="[broker]\nheartbeat = [1000, 400]\n")
    silent = BlockingConnection(url(server))  # does I/O only inside its own calls
    busy = BlockingConnection(url(server))
    try:
        receiver = busy.create_receiver("alive", credit=1)
        # The busy client runs its I/O (answering with empty frames) for 3 s; the
        # silent one sends nothing meanwhile, not even an empty frame.
        with contextlib.suppress(Timeout):
            busy.wait(lambda: False, timeout=3)
        with pytest.raises(ConnectionException) as info:
            silent.create_sender("x")
        assert "idle-timeout expired" in str(info.value)
        busy.create_sender("alive").send(Message(body="still here"))  # other clients unhurt
        assert receiver.receive(timeout=10).body == "still here"
    finally:
        busy.close()
        with contextlib.suppress(ConnectionException):
            silent.close()


def _frames(data: bytes) -> list[bytes]:
    """AMQP frames after the 8-byte protocol header (each: size, doff, type, channel, body)."""
    frames, at = [], 8
    while at + 4 <= len(data):
        (size,) = struct.unpack_from(">I", data, at)
        if at + size > len(data):
            break
        frames.append(data[at : at + size])
        at += size
    return frames


def test_the_broker_keeps_a_quiet_client_alive_with_empty_frames(shoal_server):
    """A client asking for traffic within 1 s gets empty frames while nothing else happens."""
    server = shoal_server()
    engine = Transport()  # a Proton client engine, no SASL layer (no users configured)
    engine.idle_timeout = 1.0
    conn = Connection()
    engine.bind(conn)
    conn.open()
    with socket.create_connection(("127.0.0.1", server.amqp_port), timeout=10) as s:
        s.sendall(engine.peek(engine.pending()))
        s.settimeout(0.1)
        data = b""
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(4096)
            except TimeoutError:
                continue
            assert chunk, "the broker closed the connection"
            data += chunk
    frames = _frames(data)
    assert frames and frames[0][5] == 0  # the broker's open
    empty = [f for f in frames if len(f) == 8]
    assert len(empty) >= 3, f"{len(empty)} empty frames in 3 s"


def test_idle_timeout_closes_a_connection_that_consumes_nothing(shoal_server):
    """The broker's idle-timeout, as on STOMP: no consumer link, nothing sent."""
    server = shoal_server(config="[broker]\nheartbeat = [0, 0]\nidle-timeout = 1\n")
    idle = BlockingConnection(url(server))
    consumer = BlockingConnection(url(server))
    try:
        receiver = consumer.create_receiver("waiting", credit=1)
        time.sleep(2.5)
        with pytest.raises(ConnectionException) as info:
            idle.create_sender("x")
        assert "idle-timeout" in str(info.value)
        producer = BlockingConnection(url(server))
        producer.create_sender("waiting").send(Message(body="late"))
        producer.close()
        assert receiver.receive(timeout=10).body == "late"  # a consumer is never idle
    finally:
        consumer.close()


# --- what a message keeps -----------------------------------------------------------


PROPS = {"count": 42, "ok": True, "price": 9.75, "name": "x", "digits": "007"}


def _full_message(mid: object) -> Message:
    return Message(
        id=mid,
        correlation_id="corr-1",
        reply_to="replies",
        subject="order",
        content_type="application/json",
        user_id=b"alice",
        group_id="g",
        group_sequence=1,
        properties=dict(PROPS),
        body=b'{"n": 1}',
        durable=True,
    )


def _assert_kept(m: Message, mid: object) -> None:
    assert m.id == mid and type(m.id) is type(mid if not isinstance(mid, int) else 0)
    assert m.correlation_id == "corr-1"
    assert (m.reply_to, m.subject, str(m.content_type)) == ("replies", "order", "application/json")
    assert bytes(m.user_id) == b"alice" and (m.group_id, m.group_sequence) == ("g", 1)
    assert m.properties == PROPS
    assert {k: type(v) for k, v in m.properties.items()} == {k: type(v) for k, v in PROPS.items()}


@pytest.mark.parametrize("mid", ["order-17", ulong(17), uuid.UUID(int=17)], ids=str)
def test_message_fields_and_property_types_survive_amqp_to_amqp(shoal_server, mid):
    server = shoal_server()
    conn = BlockingConnection(url(server))
    try:
        conn.create_sender("kept").send(_full_message(mid))
        receiver = conn.create_receiver("kept", credit=1)
        _assert_kept(receiver.receive(timeout=10), mid)
        receiver.accept()
    finally:
        conn.close()


def test_annotations_and_reply_to_group_id_stay_with_the_first_key_and_a_redelivery(
    shoal_server,
):
    """Sent over AMQP, passed on as sent: the broker writes only the header (and
    the group-first-key property into the application properties)."""
    server = shoal_server(config='[queues.kept]\ngroup-first-key = "JMSXGroupFirstForConsumer"\n')
    conn = BlockingConnection(url(server))
    try:
        sent = Message(
            body=b"a",
            group_id="g",
            reply_to_group_id="answers",
            properties={"n": 1},
            ttl=60,
            durable=True,
        )
        sent.annotations = {symbol("x-opt-origin"): "proton"}
        sent.instructions = {symbol("x-opt-hop"): "first"}  # delivery annotations: one hop
        conn.create_sender("kept").send(sent)
        receiver = conn.create_receiver("kept", credit=1)
        first = receiver.receive(timeout=10)
        assert first.properties == {"n": 1, "JMSXGroupFirstForConsumer": True}
        assert first.annotations == {symbol("x-opt-origin"): "proton"}
        assert not first.instructions
        assert (first.reply_to_group_id, first.group_id, bytes(first.body)) == (
            "answers",
            "g",
            b"a",
        )
        assert first.durable and first.first_acquirer and first.delivery_count == 0
        assert 0 < first.ttl <= 60
        receiver.release(delivered=False)  # released: back, not counted
        again = receiver.receive(timeout=10)
        assert again.annotations == {symbol("x-opt-origin"): "proton"}
        assert again.reply_to_group_id == "answers" and again.properties["n"] == 1
        assert again.delivery_count == 0  # a release is not counted (Artemis too)
        receiver.accept()
    finally:
        conn.close()


def test_message_fields_reach_stomp_and_come_back_to_amqp(shoal_server):
    """AMQP -> STOMP consumer (headers as Artemis names them) -> STOMP SEND -> AMQP."""
    server = shoal_server()
    conn = BlockingConnection(url(server))
    s = stomp.Connection([("127.0.0.1", server.stomp_port)])
    s.connect(wait=True)
    try:
        conn.create_sender("to-stomp").send(_full_message(ulong(17)))
        listener = Collect()
        s.set_listener("c", listener)
        s.subscribe("/queue/to-stomp", id="1", ack="auto")
        wait_for(lambda: listener.frames)
        (frame,) = listener.frames
        h = frame.headers
        assert h["JMSMessageID"] == "ID:AMQP_ULONG:17" and h["correlation-id"] == "corr-1"
        assert (h["reply-to"], h["subject"], h["content-type"]) == (
            "/queue/replies",
            "order",
            "application/json",
        )
        assert (h["JMSXUserID"], h["JMSXGroupID"], h["JMSXGroupSeq"]) == ("alice", "g", "1")
        assert (h["count"], h["ok"], h["price"], h["digits"]) == ("42", "true", "9.75", "007")
        assert h["message-id"] != h["JMSMessageID"]  # STOMP's own message-id is the ack id
        # A STOMP client forwards it with the headers it got: the AMQP consumer sees the
        # message as first sent, types included.
        keep = {
            k: v
            for k, v in h.items()
            if k not in ("destination", "message-id", "subscription", "ack", "content-length")
        }
        s.send("/queue/back", frame.body, headers=keep)
        receiver = conn.create_receiver("back", credit=1)
        m = receiver.receive(timeout=10)
        _assert_kept(m, 17)
        receiver.accept()
        # Headers a STOMP producer sets are strings: numbers stay strings.
        s.send("/queue/plain", "p", headers={"count": "42", "ok": "true", "JMSMessageID": "m-1"})
        receiver = conn.create_receiver("plain", credit=1)
        m = receiver.receive(timeout=10)
        assert m.properties == {"count": "42", "ok": "true"} and m.id == "m-1"
        receiver.accept()
    finally:
        s.disconnect()
        conn.close()


# --- amqps:// ---------------------------------------------------------------------------


@needs_tools("openssl")
def test_amqps_listener_with_a_proton_ssl_client(shoal_server, tmp_path):
    cert, key = self_signed_cert(tmp_path)
    server = shoal_server(
        args=["--amqp-tls", "127.0.0.1:0", "--tls-cert", str(cert), "--tls-key", str(key)]
    )
    port = server.ports["amqp-tls"]
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_trusted_ca_db(str(cert))
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER)  # the certificate, not the name
    conn = BlockingConnection(f"amqps://127.0.0.1:{port}", ssl_domain=domain)
    try:
        conn.create_sender("secure").send(Message(body="over tls", group_id="g", durable=True))
        receiver = conn.create_receiver("secure", credit=1)
        m = receiver.receive(timeout=10)
        assert (m.body, m.group_id) == ("over tls", "g")
        receiver.accept()
    finally:
        conn.close()
    # The plain listener does not speak TLS, and the TLS one refuses plain AMQP.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"AMQP\x00\x01\x00\x00")
        s.settimeout(10)
        try:
            reply = s.recv(4096)
        except ConnectionResetError:
            reply = b""
        assert not reply.startswith(b"AMQP")
