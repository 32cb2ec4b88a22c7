"""Conformance on both builds: every STOMP version and AMQP's optional fields,
each optional header or field absent and present, against a real `shoal serve`
running the compiled modules and one running the pure-Python ones.

The compiled build turns every annotation into a run-time check, so a value
the pure build tolerates (a header left out, read as None) can fail there
only. Each broker is strict (tests/support.py): an unexpected exception in
its log fails the test that caused it, and a broker that died by a signal
fails the module.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
import stomp
from proton import Message
from proton.utils import BlockingConnection, SendException

from support import BUILDS, RawStomp, ShoalProcess, StompFrame

pytestmark = pytest.mark.e2e

VERSIONS = ("1.0", "1.1", "1.2")


@pytest.fixture(scope="module", params=BUILDS)
def broker(request, tmp_path_factory) -> Iterator[ShoalProcess]:
    proc = ShoalProcess(
        tmp_path_factory.mktemp(f"conformance-{request.param}"), build=request.param
    )
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(autouse=True)
def no_broker_bug(broker: ShoalProcess) -> Iterator[None]:
    """Name the test that made the broker log an unexpected exception."""
    before = len(broker.run_log())
    yield
    found = broker.problems(since=before)
    assert not found, f"{'; '.join(found)}:\n{broker.run_log()[before:][-6000:]}"


def unique(prefix: str) -> str:
    return f"/queue/{prefix}-{uuid.uuid4().hex[:10]}"


# --- stomp.py, each version ---------------------------------------------------------


CONNECTIONS = {"1.0": stomp.Connection10, "1.1": stomp.Connection11, "1.2": stomp.Connection12}


@pytest.mark.parametrize("version", VERSIONS)
def test_stomp_py_send_subscribe_receive(broker, version):
    """stomp.py's own test_s10 testsend10 flow (SUBSCRIBE without id in 1.0)."""
    queue = unique("stomppy")
    conn = CONNECTIONS[version]([("127.0.0.1", broker.stomp_port)])
    listener = stomp.listener.TestListener("123", print_to_log=False)
    conn.set_listener("", listener)
    conn.connect(wait=True)
    if version == "1.0":
        conn.subscribe(destination=queue, ack="auto")
    else:
        conn.subscribe(destination=queue, id="1", ack="auto")
    conn.send(body="this is a test", destination=queue, receipt="123")
    listener.wait_on_receipt()
    listener.wait_for_message()
    conn.disconnect(receipt=None)
    assert (listener.connections, listener.messages, listener.errors) == (1, 1, 0)
    assert listener.get_latest_message()[1] == "this is a test"


def test_stomp_py_1_0_unsubscribe_by_destination_then_resubscribe(broker):
    queue = unique("unsub10")
    conn = stomp.Connection10([("127.0.0.1", broker.stomp_port)])
    listener = stomp.listener.TestListener(print_to_log=False)
    conn.set_listener("", listener)
    conn.connect(wait=True)
    conn.subscribe(destination=queue, ack="client")
    conn.unsubscribe(destination=queue)
    conn.subscribe(destination=queue, ack="client")  # the id is free again
    conn.send(body="again", destination=queue)
    listener.wait_for_message()
    headers = listener.get_latest_message()[0]
    conn.ack(headers["message-id"])
    conn.disconnect()
    assert listener.errors == 0


# --- raw frames: each optional header absent and present ------------------------------

FUTURE_MS = str(int(time.time() * 1000) + 3_600_000)
SEND_OPTIONAL = {
    "receipt": "s",
    "transaction": "tx",
    "content-type": "text/plain",
    "content-length": "",  # filled in with the body's length
    "persistent": "true",
    "priority": "7",
    "expires": FUTURE_MS,
    "JMSXGroupID": "g",
    "JMSXGroupSeq": "1",
    "reply-to": "/queue/replies",
    "correlation-id": "c-1",
}
SUBSCRIBE_OPTIONAL = {
    "id": "sub-1",  # optional in 1.0 only
    "ack": "client-individual",
    "selector": "colour = 'blue'",
    "prefetch-count": "5",
    "activemq.prefetchSize": "5",
    "activemq.exclusive": "true",
    "receipt": "sub",
}
ACK_OPTIONAL = {"subscription": "", "transaction": "atx", "receipt": "a"}  # subscription: its id
UNSUBSCRIBE_OPTIONAL = {"receipt": "u"}
DISCONNECT_OPTIONAL = {"receipt": "bye"}
OPTIONAL = {
    "SEND": SEND_OPTIONAL,
    "SUBSCRIBE": SUBSCRIBE_OPTIONAL,
    "ACK": ACK_OPTIONAL,
    "UNSUBSCRIBE": UNSUBSCRIBE_OPTIONAL,
    "DISCONNECT": DISCONNECT_OPTIONAL,
}
# What a version requires whatever the variant: 1.1 and 1.2 SUBSCRIBE needs an id,
# a 1.1 ACK its subscription.
REQUIRED = {("SUBSCRIBE", "id"): ("1.1", "1.2"), ("ACK", "subscription"): ("1.1",)}
VARIANTS = [
    "none",
    "all",
    *(f"{command}:{name}" for command, names in OPTIONAL.items() for name in names),
]


def chosen(variant: str, command: str, version: str) -> set[str]:
    """The optional headers of ``command`` the variant puts in its frame."""
    names = set(OPTIONAL[command])
    if variant == "all":
        picked = names
    elif variant == "none":
        picked = set()
    else:
        wanted_command, _, name = variant.partition(":")
        picked = {name} if wanted_command == command else set()
    picked |= {n for (c, n), versions in REQUIRED.items() if c == command and version in versions}
    return picked


class Peer(RawStomp):
    """A raw STOMP peer that fails the test on any ERROR frame. A receipt and a
    MESSAGE may come in either order (a receipt waits for its sync): frames of
    another command than the one expected wait for their turn."""

    def __init__(self, port: int) -> None:
        super().__init__(port)
        self.waiting: list[StompFrame] = []

    def expect(self, command: str, **headers: str) -> StompFrame:
        for frame in self.waiting:
            if frame[0] == command:
                self.waiting.remove(frame)
                break
        else:
            while True:
                frame = self.read_frame()
                assert frame[0] != "ERROR", f"ERROR from the broker: {frame}"
                if frame[0] == command:
                    break
                self.waiting.append(frame)
        for name, value in headers.items():
            assert frame[1].get(name) == value, (name, frame)
        return frame


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("version", VERSIONS)
def test_optional_headers_absent_and_present(broker, version, variant):
    queue = unique("optional")
    peer = Peer(broker.stomp_port)
    try:
        connected = peer.connect(version)
        assert connected[0] == "CONNECTED", connected
        assert connected[1].get("version", "1.0") == version

        sub = {"destination": queue}
        picked = chosen(variant, "SUBSCRIBE", version)
        sub |= {n: v for n, v in SUBSCRIBE_OPTIONAL.items() if n in picked}
        peer.frame("SUBSCRIBE", sub)
        if "receipt" in sub:
            peer.expect("RECEIPT", **{"receipt-id": "sub"})

        body = b"payload \xe2\x82\xac"
        send = {"destination": queue, "colour": "blue"}
        picked = chosen(variant, "SEND", version)
        send |= {n: v for n, v in SEND_OPTIONAL.items() if n in picked}
        if "content-length" in send:
            send["content-length"] = str(len(body))
        if "transaction" in send:
            peer.frame("BEGIN", {"transaction": "tx"})
        peer.frame("SEND", send, body)
        if "transaction" in send:
            peer.frame("COMMIT", {"transaction": "tx", "receipt": "c"})
        if "receipt" in send:
            peer.expect("RECEIPT", **{"receipt-id": "s"})
        if "transaction" in send:
            peer.expect("RECEIPT", **{"receipt-id": "c"})

        _, headers, got = peer.expect("MESSAGE", destination=queue)
        assert got == body
        assert headers["subscription"] == sub.get("id", queue)  # 1.0 without id: its destination
        if sub.get("ack", "auto") != "auto":
            ack: dict[str, str] = {}
            if version == "1.2":
                ack["id"] = headers["ack"]
            else:
                ack["message-id"] = headers["message-id"]
            picked = chosen(variant, "ACK", version)
            if "subscription" in picked:
                ack["subscription"] = headers.get("subscription", sub.get("id", queue))
            ack |= {n: v for n, v in ACK_OPTIONAL.items() if n in picked and n != "subscription"}
            if "transaction" in ack:
                peer.frame("BEGIN", {"transaction": "atx"})
            peer.frame("ACK", ack)
            if "transaction" in ack:
                peer.frame("COMMIT", {"transaction": "atx"})
            if "receipt" in ack:
                peer.expect("RECEIPT", **{"receipt-id": "a"})

        unsub = {"id": sub["id"]} if "id" in sub else {"destination": queue}
        picked = chosen(variant, "UNSUBSCRIBE", version)
        unsub |= {n: v for n, v in UNSUBSCRIBE_OPTIONAL.items() if n in picked}
        peer.frame("UNSUBSCRIBE", unsub)
        if "receipt" in unsub:
            peer.expect("RECEIPT", **{"receipt-id": "u"})

        picked = chosen(variant, "DISCONNECT", version)
        bye = {n: v for n, v in DISCONNECT_OPTIONAL.items() if n in picked}
        peer.frame("DISCONNECT", bye)
        if "receipt" in bye:
            peer.expect("RECEIPT", **{"receipt-id": "bye"})
        assert peer.closed_by_peer()
    finally:
        peer.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_connect_optional_headers_absent_and_present(broker, version):
    bare = Peer(broker.stomp_port)
    full = Peer(broker.stomp_port)
    try:
        if version == "1.0":  # no accept-version, no host: a 1.0 client
            bare.frame("CONNECT")
        else:
            bare.frame("CONNECT", {"accept-version": version})
        bare.expect("CONNECTED")
        full.frame(
            "STOMP" if version != "1.0" else "CONNECT",
            {
                "accept-version": version,
                "host": "localhost",
                "login": "guest",
                "passcode": "guest",
                "heart-beat": "0,0",
                "client-id": f"conformance-{uuid.uuid4().hex[:8]}",
                "receipt": "hello",
            },
        )
        full.expect("CONNECTED")
        full.expect("RECEIPT", **{"receipt-id": "hello"})
    finally:
        bare.close()
        full.close()


@pytest.mark.parametrize("version", ("1.1", "1.2"))
@pytest.mark.parametrize("optional", ("none", "all"))
def test_nack_optional_headers(broker, version, optional):
    queue = unique("nack")
    peer = Peer(broker.stomp_port)
    try:
        peer.connect(version)
        peer.frame("SUBSCRIBE", {"destination": queue, "id": "n", "ack": "client-individual"})
        peer.frame("SEND", {"destination": queue, "receipt": "s"}, b"x")
        peer.expect("RECEIPT")
        _, headers, _ = peer.expect("MESSAGE")
        nack = {"id": headers["ack"]} if version == "1.2" else {"message-id": headers["message-id"]}
        if version == "1.1" or optional == "all":
            nack["subscription"] = "n"
        if optional == "all":
            nack |= {"transaction": "ntx", "receipt": "nk"}
            peer.frame("BEGIN", {"transaction": "ntx"})
        peer.frame("NACK", nack)
        if optional == "all":
            peer.frame("COMMIT", {"transaction": "ntx"})
            peer.expect("RECEIPT", **{"receipt-id": "nk"})
        peer.frame("DISCONNECT", {"receipt": "bye"})
        peer.expect("RECEIPT", **{"receipt-id": "bye"})
    finally:
        peer.close()


# --- AMQP: each optional field of a message absent and present -------------------------

NOW_MS = int(time.time() * 1000)
AMQP_FIELDS = {
    "id": "m-1",
    "int_id": 42,
    "uuid_id": uuid.UUID(int=7),
    "bytes_id": b"raw-id",
    "user_id": b"guest",
    "subject": "subj",
    "reply_to": "replies",
    "correlation_id": "c-1",
    "content_type": "text/plain",
    "content_encoding": "utf-8",
    "expiry_time": float(NOW_MS + 3_600_000) / 1000,
    "creation_time": float(NOW_MS) / 1000,
    "group_id": "g",
    "group_sequence": 3,
    "reply_to_group_id": "rg",
    "priority": 7,
    "ttl": 3600.0,
    "durable": True,
    "first_acquirer": True,
    "delivery_count": 1,
    "properties": {"colour": "blue", "n": 3, "flag": True, "none": None},
    "annotations": {"x-opt-custom": "a"},
    "instructions": {"x-opt-ins": "i"},
}
AMQP_BODIES = {
    "str": "text",
    "bytes": b"\x00\x01 bytes",
    "none": None,
    "map": {"a": 1},
    "list": [1, "two"],
}
REFUSED_BODIES = ("map", "list")  # docs/amqp.md: a data section or a string only


def amqp_message(fields: set[str], body: object) -> Message:
    m = Message(body=body)
    for name in fields:
        value = AMQP_FIELDS[name]
        if name.endswith("_id") and name in ("int_id", "uuid_id", "bytes_id"):
            m.id = value
        else:
            setattr(m, name, value)
    return m


AMQP_VARIANTS = ["none", "all", *AMQP_FIELDS, *(f"body:{b}" for b in AMQP_BODIES)]


@pytest.mark.parametrize("variant", AMQP_VARIANTS)
def test_amqp_optional_fields_absent_and_present(broker, variant):
    address = unique("amqp").removeprefix("/queue/")
    body: object = "text"
    if variant == "all":
        fields = set(AMQP_FIELDS) - {"int_id", "uuid_id", "bytes_id"}
    elif variant == "none":
        fields = set()
    elif variant.startswith("body:"):
        fields, body = set(), AMQP_BODIES[variant.removeprefix("body:")]
    else:
        fields = {variant}
    conn = BlockingConnection(f"amqp://127.0.0.1:{broker.amqp_port}", timeout=10)
    if variant.removeprefix("body:") in REFUSED_BODIES:
        try:  # refused with an outcome, the connection open
            with pytest.raises(SendException):
                conn.create_sender(address).send(amqp_message(fields, body))
            conn.create_sender(address + "-ok").send(Message(body="still open"))
        finally:
            conn.close()
        return
    try:
        sender = conn.create_sender(address)
        # Read it back over AMQP and over STOMP (a second copy): both mappings.
        sender.send(amqp_message(fields, body))
        sender.send(amqp_message(fields, body))
        receiver = conn.create_receiver(address, credit=1)
        got = receiver.receive(timeout=10)
        receiver.accept()
        assert got.body == body or (isinstance(body, str) and got.body == body.encode())
        for name in fields & {"subject", "group_id", "correlation_id", "reply_to"}:
            assert getattr(got, name) == AMQP_FIELDS[name], name
        receiver.close()
    finally:
        conn.close()
    peer = Peer(broker.stomp_port)
    try:
        peer.connect("1.2")
        peer.frame("SUBSCRIBE", {"destination": f"/queue/{address}", "id": "1"})
        peer.expect("MESSAGE")
        peer.frame("DISCONNECT", {"receipt": "bye"})
        peer.expect("RECEIPT")
    finally:
        peer.close()


LINK_VARIANTS = ("anonymous-sender", "dynamic-receiver", "selector", "named-links")


@pytest.mark.parametrize("variant", LINK_VARIANTS)
def test_amqp_optional_link_fields_absent_and_present(broker, variant):
    """Link attach fields a client may leave out or set: no target (the
    anonymous relay), a dynamic source, a selector filter, link names."""
    from proton.reactor import Selector

    address = unique("link").removeprefix("/queue/")
    conn = BlockingConnection(f"amqp://127.0.0.1:{broker.amqp_port}", timeout=10)
    try:
        if variant == "anonymous-sender":
            conn.create_sender(None).send(Message(address=address, body="relayed"))
            receiver = conn.create_receiver(address, credit=1)
            assert receiver.receive(timeout=10).body == "relayed"
            receiver.accept()
        elif variant == "dynamic-receiver":
            try:  # a temporary queue named by the broker, or a clear refusal
                receiver = conn.create_receiver(None, dynamic=True, credit=1)
            except Exception as exc:
                assert "internal" not in str(exc), exc
            else:
                reply_to = receiver.link.remote_source.address
                assert reply_to
                conn.create_sender(reply_to).send(Message(body="to-temp"))
                assert receiver.receive(timeout=10).body == "to-temp"
                receiver.accept()
        elif variant == "selector":
            sender = conn.create_sender(address)
            sender.send(Message(body="red", properties={"colour": "red"}))
            sender.send(Message(body="blue", properties={"colour": "blue"}))
            receiver = conn.create_receiver(address, credit=2, options=Selector("colour = 'blue'"))
            assert receiver.receive(timeout=10).body == "blue"
            receiver.accept()
        else:
            conn.create_sender(address, name="named-sender").send(Message(body="n"))
            receiver = conn.create_receiver(address, name="named-receiver", credit=1)
            assert receiver.receive(timeout=10).body == "n"
            receiver.accept()
    finally:
        conn.close()
