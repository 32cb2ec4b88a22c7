"""Property tests: bad input only ever raises RemoteProtocolError, and what
one side encodes the other side decodes to the same event."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.errors import RemoteProtocolError
from shoal.protocol.stomp import (
    NEED_DATA,
    Connect,
    Connected,
    ConnectionClosed,
    ConnectionState,
    Error,
    Event,
    Limits,
    Message,
    Role,
    Send,
    StompConnection,
    encode_message,
)

from .helpers import open_conn, receive_all

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
VERSIONS = st.sampled_from(["1.0", "1.1", "1.2"])
SMALL_LIMITS = Limits(
    max_frame_bytes=4096, max_headers=20, max_header_line_bytes=256, max_command_line_bytes=32
)


def feed(conn: StompConnection, chunks: list[bytes], eof: bool) -> list[Event]:
    """Feed chunks; answer CONNECT like a server app would. Any exception
    other than RemoteProtocolError fails the test."""
    events: list[Event] = []
    try:
        for chunk in chunks + ([b""] if eof else []):
            conn.receive_data(chunk)
            while True:
                event = conn.next_event()
                if event is NEED_DATA:
                    break
                assert isinstance(event, Event)
                events.append(event)
                if isinstance(event, Connect) and conn.role is Role.SERVER:
                    conn.send(Connected(heart_beat=(1000, 1000)))
                if isinstance(event, ConnectionClosed):
                    return events
                conn.get_timer()
    except RemoteProtocolError as exc:
        assert conn.state is ConnectionState.ERROR
        assert isinstance(exc.error_frame_hint, str) and exc.error_frame_hint
        if conn.role is Role.SERVER:
            # The server can always answer with an ERROR frame quoting the hint.
            assert conn.send(Error(exc.error_frame_hint)).startswith(b"ERROR\n")
    return events


chunks_of_bytes = st.lists(st.binary(min_size=1, max_size=64), max_size=12)

# Bytes that look like STOMP: frames made of real commands and header-ish
# lines (good and bad), with LF or CRLF, bodies, NULs, EOLs, and the odd
# stray byte inserted anywhere.
_commands = st.sampled_from(
    [
        b"CONNECT",
        b"STOMP",
        b"CONNECTED",
        b"SEND",
        b"SUBSCRIBE",
        b"UNSUBSCRIBE",
        b"ACK",
        b"NACK",
        b"BEGIN",
        b"COMMIT",
        b"ABORT",
        b"DISCONNECT",
        b"MESSAGE",
        b"RECEIPT",
        b"ERROR",
        b"send",
        b"",
    ]
)
_headers = st.sampled_from(
    [
        b"accept-version:1.0,1.1,1.2",
        b"accept-version:1.1",
        b"accept-version:9.9",
        b"heart-beat:10,10",
        b"heart-beat:x",
        b"destination:/queue/a",
        b"id:1",
        b"message-id:1",
        b"subscription:1",
        b"transaction:t",
        b"receipt:r",
        b"receipt-id:r",
        b"version:1.2",
        b"ack:client",
        b"ack:bogus",
        b"content-length:0",
        b"content-length:3",
        b"content-length:x",
        b"content-length:99999999",
        b"k:v\\c\\n\\\\\\r",
        b"k:\\t",
        b"k:\\",
        b"k:\xff",
        b"nocolon",
        b":v",
        b"",
    ]
)


@st.composite
def frame_like(draw: st.DrawFn) -> bytes:
    eol = draw(st.sampled_from([b"\n", b"\r\n"]))
    head = [draw(_commands)] + draw(st.lists(_headers | st.binary(max_size=6), max_size=6))
    body = draw(st.sampled_from([b"", b"abc", b"a\x00c"]) | st.binary(max_size=8))
    end = draw(st.sampled_from([b"\x00", b"\x00\n", b"\x00\r\n\n", b""]))
    return b"".join(line + eol for line in head) + eol + body + end


@st.composite
def stompish_bytes(draw: st.DrawFn) -> bytes:
    data = b"".join(draw(st.lists(frame_like(), max_size=5)))
    for _ in range(draw(st.integers(0, 2))):
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.binary(min_size=1, max_size=3)) + data[at:]
    return data


stompish = stompish_bytes()


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points) if b > a]


@FUZZ
@given(chunks=chunks_of_bytes, eof=st.booleans())
def test_arbitrary_bytes_to_a_new_server(chunks: list[bytes], eof: bool) -> None:
    feed(StompConnection(Role.SERVER), chunks, eof)
    feed(StompConnection(Role.SERVER, limits=SMALL_LIMITS), chunks, eof)


@FUZZ
@given(data=stompish, cuts=st.lists(st.integers(0, 10_000), max_size=6), eof=st.booleans())
def test_stomp_like_bytes_to_a_new_server(data: bytes, cuts: list[int], eof: bool) -> None:
    feed(StompConnection(Role.SERVER), split(data, cuts), eof)
    feed(StompConnection(Role.SERVER, limits=SMALL_LIMITS), split(data, cuts), eof)


@FUZZ
@given(
    version=VERSIONS,
    role=st.sampled_from([Role.SERVER, Role.CLIENT]),
    data=st.one_of(stompish, st.binary(max_size=300)),
    cuts=st.lists(st.integers(0, 10_000), max_size=6),
    eof=st.booleans(),
)
def test_stomp_like_bytes_to_an_open_connection(
    version: str, role: Role, data: bytes, cuts: list[int], eof: bool
) -> None:
    feed(open_conn(role, version), split(data, cuts), eof)
    feed(open_conn(role, version, SMALL_LIMITS), split(data, cuts), eof)


@FUZZ
@given(data=stompish, cuts=st.lists(st.integers(0, 10_000), max_size=6))
def test_split_points_do_not_change_the_result(data: bytes, cuts: list[int]) -> None:
    """Events (or the error) do not depend on how the bytes were split."""

    def outcome(chunks: list[bytes]) -> tuple[list[Event], str | None]:
        conn = open_conn(Role.SERVER, "1.2")
        events: list[Event] = []
        try:
            for chunk in chunks:
                conn.receive_data(chunk)
                while (event := conn.next_event()) is not NEED_DATA:
                    assert isinstance(event, Event)
                    events.append(event)
        except RemoteProtocolError as exc:
            return events, type(exc).__name__
        return events, None

    whole = outcome([data] if data else [])
    pieces = outcome(split(data, cuts))
    if whole[1] is None and pieces[1] is None:
        assert whole == pieces
    else:
        # An error may be found a little earlier when bytes arrive piecemeal
        # (limits, unknown commands), never later, and never a different event.
        assert pieces[0] == whole[0][: len(pieces[0])]


# --- round trips ------------------------------------------------------------


# A NUL can be written in no header of any version (it ends the frame).
_header_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=20
)


def header_names(version: str) -> st.SearchStrategy[str]:
    names = _header_text.filter(bool).map(lambda k: k[:12])
    if version == "1.0":
        return names.filter(lambda k: not any(c in k for c in ":\n\r"))
    return names


def header_values(version: str) -> st.SearchStrategy[str]:
    if version == "1.0":
        return _header_text.filter(lambda v: "\n" not in v and not v.endswith("\r"))
    if version == "1.1":
        return _header_text.filter(lambda v: not v.endswith("\r"))
    return _header_text


@st.composite
def sends(draw: st.DrawFn) -> tuple[str, Send]:
    version = draw(VERSIONS)
    headers = draw(st.dictionaries(header_names(version), header_values(version), max_size=6))
    destination = draw(header_values(version))
    event = Send(
        destination,
        draw(st.binary(max_size=64)),
        draw(st.none() | header_values(version)),
        draw(st.none() | header_values(version)),
        headers,
    )
    return version, event


@FUZZ
@given(case=sends(), cut=st.integers(0, 10_000))
def test_send_round_trip(case: tuple[str, Send], cut: int) -> None:
    version, event = case
    data = open_conn(Role.CLIENT, version).send(event)
    server = open_conn(Role.SERVER, version)
    cut %= len(data)
    got = receive_all(server, data[:cut]) if cut else []
    got += receive_all(server, data[cut:])
    (received,) = got
    assert isinstance(received, Send)
    expected = dict(event.headers)
    expected["destination"] = event.destination
    if event.receipt is not None:
        expected["receipt"] = event.receipt
    if event.transaction is not None:
        expected["transaction"] = event.transaction
    expected["content-length"] = str(len(event.body))
    assert received.headers == expected
    assert received.destination == event.destination
    assert received.body == event.body
    assert received.receipt == expected.get("receipt")
    assert received.transaction == expected.get("transaction")


@FUZZ
@given(
    version=VERSIONS,
    data=st.data(),
    body=st.binary(max_size=64),
)
def test_message_round_trip(version: str, data: st.DataObject, body: bytes) -> None:
    values = header_values(version)
    headers = data.draw(st.dictionaries(header_names(version), values, max_size=6))
    destination, message_id = data.draw(values), data.draw(values)
    subscription = data.draw(values) if version != "1.0" else data.draw(st.none() | values)
    ack = data.draw(st.none() | values)
    wire = encode_message(destination, message_id, subscription, ack, headers, body, version)
    assert wire == open_conn(Role.SERVER, version).send(
        Message(destination, message_id, subscription, ack, body, headers)
    )
    (msg,) = receive_all(open_conn(Role.CLIENT, version), wire)
    assert isinstance(msg, Message)
    assert (msg.destination, msg.message_id, msg.subscription, msg.ack, msg.body) == (
        destination,
        message_id,
        subscription,
        ack,
        body,
    )
    expected = dict(headers)
    expected.update(
        {"destination": destination, "message-id": message_id, "content-length": str(len(body))}
    )
    if subscription is not None:
        expected["subscription"] = subscription
    if ack is not None:
        expected["ack"] = ack
    assert msg.headers == expected
