"""(event, bytes) tables, checked in both directions, for every frame and version."""

from __future__ import annotations

import pytest

from shoal.errors import LocalProtocolError
from shoal.protocol.stomp import (
    Abort,
    Ack,
    Begin,
    Commit,
    Connect,
    Connected,
    Disconnect,
    Error,
    Event,
    Heartbeat,
    Message,
    Nack,
    Receipt,
    Role,
    Send,
    StompConnection,
    Subscribe,
    Unsubscribe,
    encode_frame,
    encode_message,
)

from .helpers import drain, open_conn, receive_all

CLIENT, SERVER = Role.CLIENT, Role.SERVER

# (version, role that sends it, event, bytes). Events carry every header the
# frame carries, so that decoding gives back an equal event.
SIMPLE_CASES: list[tuple[str, Role, Event, bytes]] = []


def case(versions: str, sender: Role, event: Event, data: bytes) -> None:
    for version in versions.split():
        SIMPLE_CASES.append((version, sender, event, data))


# --- frames every version shares -------------------------------------------
case(
    "1.0 1.1 1.2",
    CLIENT,
    Send("/queue/a", b"hello", headers={"destination": "/queue/a", "content-length": "5"}),
    b"SEND\ndestination:/queue/a\ncontent-length:5\n\nhello\x00",
)
case(
    "1.0 1.1 1.2",
    CLIENT,
    Send(
        "/queue/orders",
        b"",
        receipt="r-1",
        transaction="tx-1",
        headers={
            "destination": "/queue/orders",
            "receipt": "r-1",
            "transaction": "tx-1",
            "JMSXGroupID": "g-1",
            "content-length": "0",
        },
    ),
    b"SEND\ndestination:/queue/orders\nreceipt:r-1\ntransaction:tx-1\nJMSXGroupID:g-1\n"
    b"content-length:0\n\n\x00",
)
case(
    "1.0 1.1 1.2",
    CLIENT,
    Subscribe(
        "sub-0",
        "/topic/t",
        "client",
        {"id": "sub-0", "destination": "/topic/t", "ack": "client", "receipt": "r-2"},
        receipt="r-2",
    ),
    b"SUBSCRIBE\nid:sub-0\ndestination:/topic/t\nack:client\nreceipt:r-2\n\n\x00",
)
case(
    "1.1 1.2",
    CLIENT,
    Subscribe(
        "7",
        "/queue/a",
        "client-individual",
        {"id": "7", "destination": "/queue/a", "ack": "client-individual", "prefetch-count": "5"},
    ),
    b"SUBSCRIBE\nid:7\ndestination:/queue/a\nack:client-individual\nprefetch-count:5\n\n\x00",
)
case(
    "1.0 1.1 1.2",
    CLIENT,
    Unsubscribe("sub-0", {"id": "sub-0"}),
    b"UNSUBSCRIBE\nid:sub-0\n\n\x00",
)
for cls, cmd in ((Begin, b"BEGIN"), (Commit, b"COMMIT"), (Abort, b"ABORT")):
    case(
        "1.0 1.1 1.2",
        CLIENT,
        cls("tx-1", headers={"transaction": "tx-1"}),
        cmd + b"\ntransaction:tx-1\n\n\x00",
    )
    case(
        "1.2",
        CLIENT,
        cls("tx-2", "r-9", {"transaction": "tx-2", "receipt": "r-9"}),
        cmd + b"\ntransaction:tx-2\nreceipt:r-9\n\n\x00",
    )
case("1.0 1.1 1.2", CLIENT, Disconnect(), b"DISCONNECT\n\n\x00")
case(
    "1.0 1.1 1.2",
    CLIENT,
    Disconnect("bye", {"receipt": "bye"}),
    b"DISCONNECT\nreceipt:bye\n\n\x00",
)
case(
    "1.0 1.1 1.2",
    SERVER,
    Receipt("r-1", {"receipt-id": "r-1"}),
    b"RECEIPT\nreceipt-id:r-1\n\n\x00",
)
case(
    "1.0 1.1 1.2",
    SERVER,
    Error(
        "bad frame",
        b"details",
        "r-3",
        {"message": "bad frame", "receipt-id": "r-3", "content-length": "7"},
    ),
    b"ERROR\nmessage:bad frame\nreceipt-id:r-3\ncontent-length:7\n\ndetails\x00",
)

# --- 1.0 --------------------------------------------------------------------
case(
    "1.0",
    CLIENT,
    Subscribe(None, "/queue/a", "auto", {"destination": "/queue/a", "ack": "auto"}),
    b"SUBSCRIBE\ndestination:/queue/a\nack:auto\n\n\x00",
)
case(
    "1.0",
    CLIENT,
    Unsubscribe(None, {"destination": "/queue/a"}, destination="/queue/a"),
    b"UNSUBSCRIBE\ndestination:/queue/a\n\n\x00",
)
case(
    "1.0",
    CLIENT,
    Ack("m-1", headers={"message-id": "m-1"}),
    b"ACK\nmessage-id:m-1\n\n\x00",
)
case(
    "1.0",
    CLIENT,
    Ack("m-1", None, "tx-1", headers={"message-id": "m-1", "transaction": "tx-1"}),
    b"ACK\nmessage-id:m-1\ntransaction:tx-1\n\n\x00",
)
case(
    "1.0",
    SERVER,
    Message(
        "/queue/a",
        "m-1",
        body=b"hi",
        headers={"destination": "/queue/a", "message-id": "m-1", "content-length": "2"},
    ),
    b"MESSAGE\ndestination:/queue/a\nmessage-id:m-1\ncontent-length:2\n\nhi\x00",
)

# --- 1.1 --------------------------------------------------------------------
for cls, cmd in ((Ack, b"ACK"), (Nack, b"NACK")):
    case(
        "1.1",
        CLIENT,
        cls("m-1", "sub-0", headers={"message-id": "m-1", "subscription": "sub-0"}),
        cmd + b"\nmessage-id:m-1\nsubscription:sub-0\n\n\x00",
    )
    case(
        "1.2",
        CLIENT,
        cls("a-1", headers={"id": "a-1"}),
        cmd + b"\nid:a-1\n\n\x00",
    )
    case(
        "1.2",
        CLIENT,
        cls("a-2", None, "tx", "r", {"id": "a-2", "transaction": "tx", "receipt": "r"}),
        cmd + b"\nid:a-2\ntransaction:tx\nreceipt:r\n\n\x00",
    )
case(
    "1.1 1.2",
    SERVER,
    Message(
        "/queue/a",
        "m-1",
        "sub-0",
        body=b"hi",
        headers={
            "destination": "/queue/a",
            "message-id": "m-1",
            "subscription": "sub-0",
            "JMSXGroupID": "g",
            "content-length": "2",
        },
    ),
    b"MESSAGE\ndestination:/queue/a\nmessage-id:m-1\nsubscription:sub-0\nJMSXGroupID:g\n"
    b"content-length:2\n\nhi\x00",
)

# --- 1.2 --------------------------------------------------------------------
case(
    "1.2",
    SERVER,
    Message(
        "/queue/a",
        "m-1",
        "sub-0",
        "ack-1",
        b"",
        {
            "destination": "/queue/a",
            "message-id": "m-1",
            "subscription": "sub-0",
            "ack": "ack-1",
            "content-length": "0",
        },
    ),
    b"MESSAGE\ndestination:/queue/a\nmessage-id:m-1\nsubscription:sub-0\nack:ack-1\n"
    b"content-length:0\n\n\x00",
)

# --- escaping ---------------------------------------------------------------
_ESCAPED_VALUE = "a:b\nc\\d"
case(
    "1.1 1.2",
    CLIENT,
    Send(
        "/queue/a",
        b"",
        headers={"destination": "/queue/a", "x:y": _ESCAPED_VALUE, "content-length": "0"},
    ),
    b"SEND\ndestination:/queue/a\nx\\cy:a\\cb\\nc\\\\d\ncontent-length:0\n\n\x00",
)
case(
    "1.2",
    SERVER,
    Receipt("r\r1", {"receipt-id": "r\r1"}),
    b"RECEIPT\nreceipt-id:r\\r1\n\n\x00",
)
case(
    "1.0",
    CLIENT,
    Send(
        "/queue/a",
        b"",
        headers={"destination": "/queue/a", "x": "a:b\\c", "content-length": "0"},
    ),
    b"SEND\ndestination:/queue/a\nx:a:b\\c\ncontent-length:0\n\n\x00",
)
# Non-ASCII is UTF-8 on the wire.
case(
    "1.2",
    CLIENT,
    Send(
        "/queue/caf\u00e9",
        "\u00fcber".encode(),
        headers={"destination": "/queue/caf\u00e9", "content-length": "5"},
    ),
    "SEND\ndestination:/queue/caf\u00e9\ncontent-length:5\n\n".encode()
    + "\u00fcber".encode()
    + b"\x00",
)
# A body with NUL bytes travels whole thanks to content-length.
case(
    "1.0 1.1 1.2",
    CLIENT,
    Send(
        "/queue/a", b"\x00a\x00\n\n\x00", headers={"destination": "/queue/a", "content-length": "6"}
    ),
    b"SEND\ndestination:/queue/a\ncontent-length:6\n\n\x00a\x00\n\n\x00\x00",
)


def _peer(role: Role) -> Role:
    return SERVER if role is CLIENT else CLIENT


def _ids(cases: list[tuple[str, Role, Event, bytes]]) -> list[str]:
    return [f"{v}-{type(e).__name__}-{i}" for i, (v, _, e, _) in enumerate(cases)]


@pytest.mark.parametrize(
    ("version", "sender", "event", "data"), SIMPLE_CASES, ids=_ids(SIMPLE_CASES)
)
def test_encode(version: str, sender: Role, event: Event, data: bytes) -> None:
    assert open_conn(sender, version).send(event) == data


@pytest.mark.parametrize(
    ("version", "sender", "event", "data"), SIMPLE_CASES, ids=_ids(SIMPLE_CASES)
)
def test_decode(version: str, sender: Role, event: Event, data: bytes) -> None:
    assert receive_all(open_conn(_peer(sender), version), data) == [event]


@pytest.mark.parametrize(
    ("version", "sender", "event", "data"), SIMPLE_CASES, ids=_ids(SIMPLE_CASES)
)
def test_split_at_every_offset(version: str, sender: Role, event: Event, data: bytes) -> None:
    for i in range(1, len(data)):
        conn = open_conn(_peer(sender), version)
        assert receive_all(conn, data[:i]) + receive_all(conn, data[i:]) == [event], i


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
@pytest.mark.parametrize("sender", [CLIENT, SERVER])
def test_all_frames_in_one_read_and_byte_by_byte(version: str, sender: Role) -> None:
    cases = [
        (e, d)
        for v, s, e, d in SIMPLE_CASES
        if v == version and s is sender and not isinstance(e, (Disconnect, Error))
    ]
    # Heart-beats and optional EOLs between frames, LF and CRLF.
    data = b"\n".join(d + (b"\r\n" if i % 2 else b"") for i, (_, d) in enumerate(cases))
    expected = [e for e, _ in cases]
    assert receive_all(open_conn(_peer(sender), version), data) == expected
    conn = open_conn(_peer(sender), version)
    got = []
    for i in range(len(data)):
        got += receive_all(conn, data[i : i + 1])
    assert got == expected


def test_heartbeat_is_an_eol_and_is_consumed_silently() -> None:
    client = open_conn(CLIENT)
    assert client.send(Heartbeat()) == b"\n"
    server = open_conn(SERVER)
    assert server.send(Heartbeat()) == b"\n"
    assert receive_all(server, b"\n\r\n\n") == []


# --- CONNECT / CONNECTED ----------------------------------------------------

CONNECT_CASES: list[tuple[Connect, bytes]] = [
    (
        Connect(None, None, "guest", "secret", headers={"login": "guest", "passcode": "secret"}),
        b"CONNECT\nlogin:guest\npasscode:secret\n\n\x00",
    ),
    (
        Connect(
            "1.1,1.2",
            "broker.example",
            heart_beat=(1000, 2000),
            headers={
                "accept-version": "1.1,1.2",
                "host": "broker.example",
                "heart-beat": "1000,2000",
            },
        ),
        b"CONNECT\naccept-version:1.1,1.2\nhost:broker.example\nheart-beat:1000,2000\n\n\x00",
    ),
    (
        Connect(
            "1.2",
            "h",
            "a:b",
            "p\\w",
            headers={"accept-version": "1.2", "host": "h", "login": "a:b", "passcode": "p\\w"},
            command="STOMP",
        ),
        # CONNECT and STOMP frames are never escaped.
        b"STOMP\naccept-version:1.2\nhost:h\nlogin:a:b\npasscode:p\\w\n\n\x00",
    ),
]


@pytest.mark.parametrize(("event", "data"), CONNECT_CASES)
def test_connect_both_ways(event: Connect, data: bytes) -> None:
    assert StompConnection(CLIENT).send(event) == data
    assert receive_all(StompConnection(SERVER), data) == [event]
    for i in range(1, len(data)):
        server = StompConnection(SERVER)
        assert receive_all(server, data[:i]) + receive_all(server, data[i:]) == [event]


CONNECTED_CASES: list[tuple[str | None, Connected, bytes, Connected]] = [
    # (client accept-version, what the server app sends, bytes, what the client gets)
    (
        None,
        Connected(session="s-1"),
        b"CONNECTED\nversion:1.0\nsession:s-1\n\n\x00",
        Connected("1.0", (0, 0), None, "s-1", {"version": "1.0", "session": "s-1"}),
    ),
    (
        "1.0,1.1,1.2",
        Connected(heart_beat=(500, 0), server="shoal/1", session="s-2"),
        b"CONNECTED\nversion:1.2\nheart-beat:500,0\nserver:shoal/1\nsession:s-2\n\n\x00",
        Connected(
            "1.2",
            (500, 0),
            "shoal/1",
            "s-2",
            {"version": "1.2", "heart-beat": "500,0", "server": "shoal/1", "session": "s-2"},
        ),
    ),
    (
        "1.1",
        Connected(server="a:b\\c", headers={"x": "y"}),
        b"CONNECTED\nversion:1.1\nheart-beat:0,0\nserver:a:b\\c\nx:y\n\n\x00",
        Connected(
            "1.1",
            (0, 0),
            "a:b\\c",
            None,
            {"version": "1.1", "heart-beat": "0,0", "server": "a:b\\c", "x": "y"},
        ),
    ),
]


@pytest.mark.parametrize(("accept", "sent", "data", "received"), CONNECTED_CASES)
def test_connected_both_ways(
    accept: str | None, sent: Connected, data: bytes, received: Connected
) -> None:
    client = StompConnection(CLIENT)
    server = StompConnection(SERVER)
    (connect,) = receive_all(server, client.send(Connect(accept, "h")))
    assert isinstance(connect, Connect)
    assert server.send(sent) == data
    assert receive_all(client, data) == [received]
    assert client.version == server.version == received.version


# --- encoders used directly -------------------------------------------------


def test_encode_message_matches_connection_send() -> None:
    server = open_conn(SERVER, "1.2")
    headers = {"JMSXGroupID": "g-1", "destination": "/ignored", "content-length": "99"}
    data = encode_message("/queue/a", "m-1", "s-1", "a-1", headers, b"xyz", "1.2")
    assert data == server.send(Message("/queue/a", "m-1", "s-1", "a-1", b"xyz", headers))
    assert data == (
        b"MESSAGE\ndestination:/queue/a\nmessage-id:m-1\nsubscription:s-1\nack:a-1\n"
        b"JMSXGroupID:g-1\ncontent-length:3\n\nxyz\x00"
    )
    client = open_conn(CLIENT, "1.2")
    (msg,) = receive_all(client, data)
    assert isinstance(msg, Message)
    assert msg.headers["destination"] == "/queue/a"
    assert msg.headers["content-length"] == "3"


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("1.2", b"k\\c:a\\cb\\nc\\\\d\\re\n"),
        ("1.1", b"k\\c:a\\cb\\nc\\\\d\re\n"),
    ],
)
def test_encode_message_escapes_per_version(version: str, expected: bytes) -> None:
    data = encode_message("/q", "m", "s", None, {"k:": "a:b\nc\\d\re"}, b"", version)
    assert expected in data
    (msg,) = receive_all(open_conn(CLIENT, version), data)
    assert isinstance(msg, Message)
    assert msg.headers["k:"] == "a:b\nc\\d\re"


def test_encode_message_refuses_non_str_values() -> None:
    with pytest.raises(LocalProtocolError, match="must be str"):
        encode_message("/q", "m", "s", None, {"x-delivery-count": 3}, b"", "1.2")  # type: ignore[dict-item]


def test_encode_message_without_optional_headers() -> None:
    assert encode_message("/q", "m", None, None, {}, b"", "1.0") == (
        b"MESSAGE\ndestination:/q\nmessage-id:m\ncontent-length:0\n\n\x00"
    )


def test_encode_frame_general() -> None:
    assert (
        encode_frame("RECEIPT", {"receipt-id": "1"}, b"", "1.2") == b"RECEIPT\nreceipt-id:1\n\n\x00"
    )
    assert encode_frame("SEND", {"destination": "/q"}, b"", "1.2") == (
        b"SEND\ndestination:/q\ncontent-length:0\n\n\x00"
    )
    # CONNECT is never escaped, whatever the version says.
    assert encode_frame("CONNECT", {"login": "a:b"}, b"", "1.2") == b"CONNECT\nlogin:a:b\n\n\x00"


def test_received_event_can_be_sent_again_unchanged() -> None:
    """A server may forward what it received: headers round-trip."""
    client = open_conn(CLIENT, "1.2")
    server = open_conn(SERVER, "1.2")
    data = client.send(Send("/queue/a", b"x", headers={"a": "1", "b": "x:y"}))
    (send,) = receive_all(server, data)
    assert isinstance(send, Send)
    assert open_conn(CLIENT, "1.2").send(send) == data
    assert drain(server) == []
