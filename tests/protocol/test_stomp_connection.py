"""The connection: negotiation, the state machine, validation, heart-beats."""

from __future__ import annotations

import pytest

from shoal.errors import LocalProtocolError, RemoteProtocolError
from shoal.protocol.stomp import (
    NEED_DATA,
    Abort,
    Ack,
    Begin,
    Commit,
    Connect,
    Connected,
    ConnectionClosed,
    ConnectionState,
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
)

from .helpers import ConnectionPair, drain, open_conn, open_pair, receive_all

CLIENT, SERVER = Role.CLIENT, Role.SERVER
S = ConnectionState


def connect_bytes(accept: str | None = "1.2", extra: bytes = b"") -> bytes:
    head = b"CONNECT\n"
    if accept is not None:
        head += b"accept-version:" + accept.encode() + b"\n"
    return head + extra + b"\n\x00"


# --- version negotiation ----------------------------------------------------


@pytest.mark.parametrize(
    ("accept", "version"),
    [
        (None, "1.0"),
        ("1.0", "1.0"),
        ("1.1", "1.1"),
        ("1.2", "1.2"),
        ("1.0,1.1", "1.1"),
        ("1.2,1.1,1.0", "1.2"),
        ("1.0, 1.1 ,1.2", "1.2"),
        ("1.1,2.0", "1.1"),
    ],
)
def test_server_picks_the_highest_common_version(accept: str | None, version: str) -> None:
    conn = StompConnection(SERVER)
    (connect,) = receive_all(conn, connect_bytes(accept))
    assert isinstance(connect, Connect)
    assert connect.accept_version == accept
    assert conn.state is S.CONNECTING
    assert conn.version is None  # set when CONNECTED goes out
    data = conn.send(Connected())
    assert data.startswith(b"CONNECTED\nversion:" + version.encode() + b"\n")
    assert conn.version == version
    assert conn.state is S.OPEN


def test_a_server_limited_to_some_versions_negotiates_only_those() -> None:
    # A WebSocket subprotocol (v11.stomp) fixes the version.
    conn = StompConnection(SERVER, versions=("1.1",))
    receive_all(conn, connect_bytes("1.0,1.1,1.2"))
    assert conn.send(Connected()).startswith(b"CONNECTED\nversion:1.1\n")

    conn = StompConnection(SERVER, versions=("1.1",))
    with pytest.raises(RemoteProtocolError) as info:
        receive_all(conn, connect_bytes("1.2"))
    assert info.value.error_frame_hint == "Supported protocol versions are 1.1"
    assert b"\nversion:1.1\n" in conn.send(Error(info.value.error_frame_hint))


def test_stomp_command_connects_too() -> None:
    conn = StompConnection(SERVER)
    (connect,) = receive_all(conn, b"STOMP\naccept-version:1.2\nhost:h\n\n\x00")
    assert isinstance(connect, Connect) and connect.command == "STOMP"
    conn.send(Connected())
    assert conn.version == "1.2"


@pytest.mark.parametrize("accept", ["2.0", "0.9,3.1", ""])
def test_no_common_version(accept: str) -> None:
    conn = StompConnection(SERVER)
    with pytest.raises(RemoteProtocolError) as info:
        receive_all(conn, connect_bytes(accept))
    assert "1.0,1.1,1.2" in info.value.error_frame_hint
    assert conn.state is S.ERROR
    data = conn.send(Error(info.value.error_frame_hint))
    assert data.startswith(b"ERROR\n")
    assert b"\nversion:1.0,1.1,1.2\n" in data
    assert b"message:Supported protocol versions are 1.0,1.1,1.2\n" in data
    with pytest.raises(RemoteProtocolError):
        conn.next_event()


def test_connected_with_an_explicit_version() -> None:
    conn = StompConnection(SERVER)
    receive_all(conn, connect_bytes("1.1,1.2"))
    assert conn.send(Connected(version="1.1")).startswith(b"CONNECTED\nversion:1.1\n")
    assert conn.version == "1.1"

    conn = StompConnection(SERVER)
    receive_all(conn, connect_bytes("1.1,1.2"))
    with pytest.raises(LocalProtocolError):
        conn.send(Connected(version="1.0"))


def test_client_checks_the_servers_version() -> None:
    client = StompConnection(CLIENT)
    client.send(Connect("1.1,1.2"))
    with pytest.raises(RemoteProtocolError, match="not offered"):
        receive_all(client, b"CONNECTED\nversion:1.0\n\n\x00")
    assert client.state is S.ERROR


def test_client_without_version_header_means_1_0() -> None:
    client = StompConnection(CLIENT)
    client.send(Connect())
    (connected,) = receive_all(client, b"CONNECTED\nsession:x\n\n\x00")
    assert isinstance(connected, Connected)
    assert connected.version == "1.0" and client.version == "1.0"


def test_client_cannot_offer_only_unknown_versions() -> None:
    with pytest.raises(LocalProtocolError):
        StompConnection(CLIENT).send(Connect("3.0"))


def test_frames_pipelined_behind_connect_wait_for_the_version() -> None:
    conn = StompConnection(SERVER)
    # Sent before CONNECTED: its escaping depends on the version still unknown.
    conn.receive_data(connect_bytes("1.2") + b"SEND\ndestination:/q\nk:a\\cb\n\n\x00")
    conn.receive_data(b"")
    assert isinstance(conn.next_event(), Connect)
    assert conn.next_event() is NEED_DATA  # held until the app answers
    assert conn.next_event() is NEED_DATA
    conn.send(Connected())
    send = conn.next_event()
    assert isinstance(send, Send) and send.headers["k"] == "a:b"
    assert conn.next_event() == ConnectionClosed()


def test_connect_is_never_escaped_even_in_1_2() -> None:
    conn = StompConnection(SERVER)
    (connect,) = receive_all(conn, connect_bytes("1.2", b"login:a\\cb\npasscode:p:w\n"))
    assert isinstance(connect, Connect)
    assert (connect.login, connect.passcode) == ("a\\cb", "p:w")


# --- state machine ----------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"SEND\ndestination:/q\n\n\x00", "first frame must be CONNECT"),
        (b"MESSAGE\ndestination:/q\nmessage-id:1\n\n\x00", "first frame must be CONNECT"),
        (b"BOGUS\n\n\x00", "unknown command"),
    ],
)
def test_first_frame_must_be_connect(data: bytes, words: str) -> None:
    conn = StompConnection(SERVER)
    with pytest.raises(RemoteProtocolError, match=words):
        receive_all(conn, data)
    assert conn.state is S.ERROR
    # The server answers with an ERROR frame, then closes.
    assert conn.send(Error("bad")) == b"ERROR\nmessage:bad\ncontent-length:0\n\n\x00"
    with pytest.raises(LocalProtocolError):
        conn.send(Receipt("1"))
    with pytest.raises(RemoteProtocolError, match="ERROR state"):
        conn.next_event()
    assert conn.state is S.ERROR


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"CONNECT\n\n\x00", "already connected"),
        (b"STOMP\n\n\x00", "already connected"),
        (b"MESSAGE\ndestination:/q\nmessage-id:1\nsubscription:1\n\n\x00", "server frame"),
        (b"CONNECTED\n\n\x00", "server frame"),
        (b"RECEIPT\nreceipt-id:1\n\n\x00", "server frame"),
    ],
)
def test_server_refuses_frames_out_of_place(data: bytes, words: str) -> None:
    conn = open_conn(SERVER)
    with pytest.raises(RemoteProtocolError, match=words):
        receive_all(conn, data)
    assert conn.state is S.ERROR


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"SEND\ndestination:/q\n\n\x00", "client frame"),
        (b"CONNECTED\n\n\x00", "unexpected CONNECTED"),
    ],
)
def test_client_refuses_frames_out_of_place(data: bytes, words: str) -> None:
    conn = open_conn(CLIENT)
    with pytest.raises(RemoteProtocolError, match=words):
        receive_all(conn, data)


def test_client_receiving_before_connect() -> None:
    with pytest.raises(RemoteProtocolError, match="before CONNECT"):
        receive_all(StompConnection(CLIENT), b"MESSAGE\ndestination:/q\nmessage-id:1\n\n\x00")


def test_client_waiting_for_connected_gets_something_else() -> None:
    client = StompConnection(CLIENT)
    client.send(Connect())
    with pytest.raises(RemoteProtocolError, match="expected CONNECTED"):
        receive_all(client, b"RECEIPT\nreceipt-id:1\n\n\x00")


def test_client_gets_error_instead_of_connected() -> None:
    client = StompConnection(CLIENT)
    client.send(Connect(login="x", passcode="wrong"))
    events = receive_all(client, b"ERROR\nmessage:bad credentials\n\n\x00")
    assert events == [Error("bad credentials", b"", None, {"message": "bad credentials"})]
    assert client.state is S.CLOSED
    assert client.next_event() == ConnectionClosed()
    with pytest.raises(LocalProtocolError):
        client.send(Send("/q"))


def test_server_refuses_login_with_error() -> None:
    pair = ConnectionPair()
    pair.send(CLIENT, Connect())
    (error,) = pair.send(SERVER, Error("access refused"))
    assert isinstance(error, Error) and error.message == "access refused"
    assert pair.server.state is S.CLOSED and pair.client.state is S.CLOSED
    assert pair.server.next_event() == ConnectionClosed()


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_disconnect(version: str) -> None:
    pair = open_pair(version)
    (disconnect,) = pair.send(CLIENT, Disconnect(receipt="bye"))
    assert disconnect == Disconnect("bye", {"receipt": "bye"})
    assert pair.server.state is S.DISCONNECTING
    assert pair.client.state is S.DISCONNECTING
    with pytest.raises(LocalProtocolError):
        pair.client.send(Send("/q"))
    # The server may still deliver, then confirms.
    assert len(pair.send(SERVER, Message("/q", "m-1", "0", body=b"x"))) == 1
    (receipt,) = pair.send(SERVER, Receipt("bye"))
    assert isinstance(receipt, Receipt) and receipt.receipt_id == "bye"
    assert pair.server.send(ConnectionClosed()) == b""
    assert pair.server.state is S.CLOSED
    assert receive_all(pair.client, b"") == [ConnectionClosed()]


def test_frame_after_disconnect_is_an_error() -> None:
    conn = open_conn(SERVER)
    with pytest.raises(RemoteProtocolError, match="after DISCONNECT"):
        receive_all(conn, b"DISCONNECT\n\n\x00SEND\ndestination:/q\n\n\x00")


def test_eof_at_start_and_data_after_eof() -> None:
    conn = StompConnection(SERVER)
    assert receive_all(conn, b"") == [ConnectionClosed()]
    with pytest.raises(LocalProtocolError):
        conn.receive_data(b"x")


def test_send_misuse_raises_local_errors() -> None:
    server = StompConnection(SERVER)
    with pytest.raises(LocalProtocolError):
        server.send(Connected())  # no CONNECT yet
    with pytest.raises(LocalProtocolError):
        server.send(Send("/q"))  # a client frame
    client = StompConnection(CLIENT)
    with pytest.raises(LocalProtocolError):
        client.send(Send("/q"))  # before CONNECT
    with pytest.raises(LocalProtocolError):
        client.send(Heartbeat())
    client = open_conn(CLIENT, "1.2")
    with pytest.raises(LocalProtocolError):
        client.send(Message("/q", "1"))  # a server frame
    with pytest.raises(LocalProtocolError):
        client.send(Connect())  # twice
    with pytest.raises(LocalProtocolError):
        client.send(Event())  # not a frame
    with pytest.raises(LocalProtocolError):
        StompConnection(CLIENT).send(Connect(heart_beat=(-1, 0)))


@pytest.mark.parametrize(
    ("version", "event"),
    [
        ("1.1", Subscribe(None, "/q")),
        ("1.2", Subscribe(None, "/q")),
        ("1.1", Unsubscribe(None)),
        ("1.0", Unsubscribe(None)),
        ("1.1", Ack("m-1")),  # 1.1 needs the subscription
        ("1.0", Nack("m-1")),
        ("1.0", Send("/q", headers={"x": "a\nb"})),  # 1.0 cannot carry a LF
        ("1.0", Send("/q", headers={"a:b": "x"})),
        ("1.1", Send("/q", headers={"x": "ends in CR\r"})),
        ("1.2", Send("/q", headers={"x": 1})),  # type: ignore[dict-item]
    ],
)
def test_client_events_that_cannot_be_sent(version: str, event: Event) -> None:
    with pytest.raises(LocalProtocolError):
        open_conn(CLIENT, version).send(event)


def test_error_frame_values_are_kept_on_one_line() -> None:
    conn = StompConnection(SERVER)
    with pytest.raises(RemoteProtocolError):
        receive_all(conn, b"FOO\n\n\x00")
    data = conn.send(Error("line one\nline two\r\nthree", b"body\nwith lines"))
    assert data == (
        b"ERROR\nmessage:line one line two three\ncontent-length:15\n\nbody\nwith lines\x00"
    )


# --- required headers -------------------------------------------------------

MISSING_HEADER_CASES = [
    # (version, frame bytes, header named in the hint)
    ("1.2", b"SEND\nreceipt:1\n\n\x00", "destination"),
    ("1.0", b"SEND\n\n\x00", "destination"),
    ("1.2", b"SUBSCRIBE\nid:1\n\n\x00", "destination"),
    ("1.1", b"SUBSCRIBE\ndestination:/q\n\n\x00", "id"),
    ("1.2", b"SUBSCRIBE\ndestination:/q\n\n\x00", "id"),
    ("1.2", b"SUBSCRIBE\nid:1\ndestination:/q\nack:sometimes\n\n\x00", "ack"),
    ("1.2", b"UNSUBSCRIBE\n\n\x00", "id"),
    ("1.0", b"UNSUBSCRIBE\n\n\x00", "destination"),
    ("1.2", b"ACK\nmessage-id:1\n\n\x00", "id"),
    ("1.1", b"ACK\nsubscription:1\n\n\x00", "message-id"),
    ("1.1", b"ACK\nmessage-id:1\n\n\x00", "subscription"),
    ("1.0", b"ACK\nid:1\n\n\x00", "message-id"),
    ("1.2", b"NACK\nsubscription:1\n\n\x00", "id"),
    ("1.1", b"NACK\nmessage-id:1\n\n\x00", "subscription"),
    ("1.0", b"NACK\nmessage-id:1\n\n\x00", "NACK"),
    ("1.2", b"BEGIN\n\n\x00", "transaction"),
    ("1.2", b"COMMIT\nreceipt:1\n\n\x00", "transaction"),
    ("1.0", b"ABORT\n\n\x00", "transaction"),
]


@pytest.mark.parametrize(("version", "data", "header"), MISSING_HEADER_CASES)
def test_server_validates_required_headers(version: str, data: bytes, header: str) -> None:
    conn = open_conn(SERVER, version)
    with pytest.raises(RemoteProtocolError) as info:
        receive_all(conn, data)
    assert f"'{header}'" in info.value.error_frame_hint or header in info.value.error_frame_hint
    assert conn.state is S.ERROR


@pytest.mark.parametrize(
    ("version", "data", "header"),
    [
        ("1.2", b"MESSAGE\nmessage-id:1\nsubscription:1\n\n\x00", "destination"),
        ("1.2", b"MESSAGE\ndestination:/q\nsubscription:1\n\n\x00", "message-id"),
        ("1.1", b"MESSAGE\ndestination:/q\nmessage-id:1\n\n\x00", "subscription"),
        ("1.2", b"RECEIPT\n\n\x00", "receipt-id"),
    ],
)
def test_client_validates_required_headers(version: str, data: bytes, header: str) -> None:
    with pytest.raises(RemoteProtocolError, match=f"'{header}'"):
        receive_all(open_conn(CLIENT, version), data)


def test_optional_ids_in_1_0() -> None:
    conn = open_conn(SERVER, "1.0")
    (sub,) = receive_all(conn, b"SUBSCRIBE\ndestination:/q\n\n\x00")
    assert sub == Subscribe(None, "/q", "auto", {"destination": "/q"})
    client = open_conn(CLIENT, "1.0")
    (msg,) = receive_all(client, b"MESSAGE\ndestination:/q\nmessage-id:1\n\n\x00")
    assert isinstance(msg, Message) and msg.subscription is None


@pytest.mark.parametrize("value", ["1000", "a,b", "1,-1", "1,2,3", ""])
def test_bad_heart_beat_header(value: str) -> None:
    conn = StompConnection(SERVER)
    with pytest.raises(RemoteProtocolError, match="heart-beat"):
        receive_all(conn, connect_bytes("1.2", b"heart-beat:" + value.encode() + b"\n"))


# --- heart-beats ------------------------------------------------------------


@pytest.mark.parametrize(
    ("client_hb", "server_hb", "server_gets", "client_gets"),
    [
        # server/client gets: (send every ms, expect every ms)
        ((0, 0), (0, 0), (0, 0), (0, 0)),
        ((0, 0), (1000, 1000), (0, 0), (0, 0)),
        ((1000, 2000), (500, 500), (2000, 1000), (1000, 2000)),
        ((1000, 0), (0, 1000), (0, 1000), (1000, 0)),
        ((0, 3000), (5000, 0), (5000, 0), (0, 5000)),
        ((100, 100), (0, 0), (0, 0), (0, 0)),
    ],
)
def test_heart_beat_negotiation(
    client_hb: tuple[int, int],
    server_hb: tuple[int, int],
    server_gets: tuple[int, int],
    client_gets: tuple[int, int],
) -> None:
    pair = ConnectionPair()
    connected = pair.connect(client_heart_beat=client_hb, server_heart_beat=server_hb)
    assert connected.heart_beat == server_hb  # the wire carries each side's own wish
    assert pair.server.heart_beat == server_gets
    assert pair.client.heart_beat == client_gets
    if server_gets == (0, 0):
        assert pair.server.get_timer() is None
        assert pair.server.handle_timer(1e9) == b""


def test_no_heart_beats_in_1_0() -> None:
    pair = ConnectionPair()
    pair.connect(None, client_heart_beat=(1000, 1000), server_heart_beat=(1000, 1000))
    assert pair.server.version == "1.0"
    assert pair.server.heart_beat == pair.client.heart_beat == (0, 0)
    assert pair.server.get_timer() is None
    assert b"heart-beat" not in pair.wire[-1][1]


def test_server_heart_beat_timers() -> None:
    conn = StompConnection(SERVER)
    conn.receive_data(connect_bytes("1.2", b"heart-beat:1000,2000\n"), now=10.0)
    conn.next_event()
    assert conn.get_timer() is None  # not connected yet
    conn.send(Connected(heart_beat=(500, 500)))
    assert conn.heart_beat == (2000, 1000)  # send every 2 s, expect every 1 s
    # Next deadline: the silence check (10 + 2 * 1) comes before the beat (10 + 2).
    assert conn.get_timer() == 12.0
    assert conn.handle_timer(11.0) == b""
    assert receive_all(conn, b"\n", now=11.5) == []  # a client heart-beat, consumed silently
    assert conn.get_timer() == 12.0  # now the beat is first; the check moved to 13.5
    assert conn.handle_timer(12.0) == b"\n"
    assert conn.get_timer() == 13.5


def test_heart_beat_send_and_timeout() -> None:
    pair = ConnectionPair()
    pair.now = 100.0
    pair.connect(client_heart_beat=(1000, 2000), server_heart_beat=(500, 500))
    server = pair.server  # sends every 2 s, expects something every 1 s
    assert server.get_timer() == 102.0  # silence check: 100 + 2 * 1
    server.receive_data(b"\n", now=101.5)
    assert server.next_event() is NEED_DATA
    assert server.get_timer() == 102.0  # the beat is due at 100 + 2
    assert server.handle_timer(101.9) == b""
    assert server.handle_timer(102.0) == b"\n"
    assert server.get_timer() == 103.5  # silence check: 101.5 + 2
    server.receive_data(b"SEND\ndestination:/q\n\n\x00", now=103.0)
    assert isinstance(server.next_event(), Send)
    assert server.get_timer() == 104.0  # beat: 102 + 2
    # Sending data counts as a beat (time known from the last call).
    server.handle_timer(103.8)
    server.send(Message("/q", "m-1", "0"))
    assert server.get_timer() == 105.0  # silence check: 103 + 2
    with pytest.raises(RemoteProtocolError, match="heart-beat timeout"):
        server.handle_timer(105.0)
    assert server.state is S.ERROR
    assert server.send(Error("heart-beat timeout")).startswith(b"ERROR\n")


def test_client_heart_beat_timers() -> None:
    pair = ConnectionPair()
    pair.connect(client_heart_beat=(1000, 2000), server_heart_beat=(500, 500))
    client = pair.client  # sends every 1 s, expects every 2 s
    assert client.heart_beat == (1000, 2000)
    assert client.get_timer() == 1.0
    assert client.handle_timer(1.0) == b"\n"
    assert client.handle_timer(1.5) == b""
    assert client.get_timer() == 2.0
    assert client.handle_timer(2.0) == b"\n"
    client.receive_data(b"\n", 2.5)
    assert client.handle_timer(3.0) == b"\n"
    assert client.get_timer() == 4.0
    assert client.handle_timer(4.0) == b"\n"
    assert client.get_timer() == 5.0
    with pytest.raises(RemoteProtocolError, match="heart-beat timeout"):
        client.handle_timer(6.5)  # silent since 2.5: 4 s = 2 x 2 s


def test_timers_stop_after_close() -> None:
    pair = ConnectionPair()
    pair.connect(client_heart_beat=(1000, 1000), server_heart_beat=(1000, 1000))
    assert pair.server.get_timer() is not None
    pair.server.receive_data(b"")
    assert drain(pair.server) == [ConnectionClosed()]
    assert pair.server.get_timer() is None
    assert pair.server.handle_timer(1e6) == b""


# --- a whole conversation ---------------------------------------------------


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_full_conversation(version: str) -> None:
    pair = ConnectionPair()
    pair.connect(None if version == "1.0" else version)
    assert pair.client.version == pair.server.version == version
    assert pair.client.state is pair.server.state is S.OPEN

    (sub,) = pair.send(
        CLIENT, Subscribe("sub-1", "/queue/orders", "client-individual", receipt="r-1")
    )
    assert isinstance(sub, Subscribe)
    assert (sub.id, sub.destination, sub.ack, sub.receipt) == (
        "sub-1",
        "/queue/orders",
        "client-individual",
        "r-1",
    )
    assert pair.send(SERVER, Receipt("r-1")) == [Receipt("r-1", {"receipt-id": "r-1"})]

    (begin,) = pair.send(CLIENT, Begin("tx-1"))
    assert begin == Begin("tx-1", None, {"transaction": "tx-1"})
    headers = (
        {"JMSXGroupID": "g:1", "JMSXGroupSeq": "1"} if version != "1.0" else {"JMSXGroupID": "g1"}
    )
    (send,) = pair.send(
        CLIENT, Send("/queue/orders", b"\x00order\x00", transaction="tx-1", headers=headers)
    )
    assert isinstance(send, Send)
    assert (send.destination, send.body, send.transaction) == (
        "/queue/orders",
        b"\x00order\x00",
        "tx-1",
    )
    assert send.headers["JMSXGroupID"] == headers["JMSXGroupID"]
    assert pair.send(CLIENT, Commit("tx-1", receipt="r-2")) == [
        Commit("tx-1", "r-2", {"transaction": "tx-1", "receipt": "r-2"})
    ]
    pair.send(SERVER, Receipt("r-2"))

    # The broker delivers the message with the producer's headers.
    ack_id = "ack-1" if version == "1.2" else None
    (msg,) = pair.send(
        SERVER, Message("/queue/orders", "m-1", "sub-1", ack_id, send.body, send.headers)
    )
    assert isinstance(msg, Message)
    assert (msg.destination, msg.message_id, msg.subscription, msg.ack, msg.body) == (
        "/queue/orders",
        "m-1",
        "sub-1",
        ack_id,
        b"\x00order\x00",
    )
    assert msg.headers["JMSXGroupID"] == headers["JMSXGroupID"]
    assert "transaction" in msg.headers  # forwarding policy is the broker's

    (ack,) = pair.send(CLIENT, Ack(msg.ack or msg.message_id, msg.subscription))
    assert isinstance(ack, Ack)
    assert (ack.id, ack.subscription) == (msg.ack or msg.message_id, "sub-1")
    if version != "1.0":
        (nack,) = pair.send(CLIENT, Nack("m-2", "sub-1", transaction="tx-2"))
        assert isinstance(nack, Nack) and (nack.id, nack.transaction) == ("m-2", "tx-2")
    (abort,) = pair.send(CLIENT, Abort("tx-2"))
    assert isinstance(abort, Abort)

    (unsub,) = pair.send(CLIENT, Unsubscribe("sub-1"))
    assert unsub == Unsubscribe("sub-1", {"id": "sub-1"})
    pair.send(CLIENT, Heartbeat())  # an EOL: nothing to report
    (disconnect,) = pair.send(CLIENT, Disconnect(receipt="bye"))
    assert isinstance(disconnect, Disconnect)
    pair.send(SERVER, Receipt("bye"))
    assert pair.send(SERVER, ConnectionClosed()) == [ConnectionClosed()]
    assert pair.client.state is S.CLOSED and pair.server.state is S.CLOSED


def test_error_from_server_mid_conversation_carries_receipt_id() -> None:
    pair = open_pair("1.2")
    (error,) = pair.send(SERVER, Error("queue full", b"try later", receipt_id="r-7"))
    assert error == Error(
        "queue full",
        b"try later",
        "r-7",
        {"message": "queue full", "receipt-id": "r-7", "content-length": "9"},
    )
    assert pair.client.state is S.CLOSED


def test_send_message_is_output_for_heart_beats_and_checks_the_state():
    """The broker's delivery path (send_message) counts as output, as send(Message) does,
    and is refused before the connection is open."""
    server = StompConnection(Role.SERVER)
    with pytest.raises(LocalProtocolError):
        server.send_message("/queue/q", "1", "s", "1", {}, b"x")
    server.receive_data(b"CONNECT\naccept-version:1.2\nhost:h\nheart-beat:0,1000\n\n\x00", 0.0)
    server.next_event()
    server.send(Connected(version="1.2", heart_beat=(1000, 0)))
    assert server.get_timer() == 1.0
    server.receive_data(b"\n", 0.9)  # the clock moves with input
    server.next_event()
    data = server.send_message("/queue/q", "7", "s", "7", {"k": "v"}, b"body")
    assert data.startswith(b"MESSAGE\n") and b"k:v\n" in data and data.endswith(b"body\x00")
    assert server.get_timer() == 1.9  # the MESSAGE reset the outgoing heart-beat clock
    assert server.handle_timer(1.5) == b""


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
@pytest.mark.parametrize("receipt_id", ["r1", "42", "é-7", "a:b", "x\\y", "two\nlines", "cr\r"])
def test_send_receipt_writes_what_send_receipt_event_writes(version, receipt_id):
    """The receipt fast path (every receipted SEND's answer) and send(Receipt) agree:
    the same bytes, or the same refusal (STOMP 1.0 cannot carry a line feed)."""
    fast, generic = open_conn(Role.SERVER, version), open_conn(Role.SERVER, version)
    try:
        expected = generic.send(Receipt(receipt_id=receipt_id))
    except LocalProtocolError:
        with pytest.raises(LocalProtocolError):
            fast.send_receipt(receipt_id)
        return
    assert fast.send_receipt(receipt_id) == expected
    assert fast.state is generic.state is S.OPEN


def test_send_receipt_is_refused_before_the_connection_is_open():
    server = StompConnection(Role.SERVER)
    with pytest.raises(LocalProtocolError):
        server.send_receipt("r1")
