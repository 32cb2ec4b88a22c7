"""What may never cross the wire: a NUL outside a body (frame injection),
headers a version cannot carry, and the receipt-id an ERROR owes its frame."""

from __future__ import annotations

import pytest

from shoal.errors import LocalProtocolError, RemoteProtocolError
from shoal.protocol.stomp import (
    DROPPED_HEADERS_HEADER,
    ConnectionState,
    Error,
    FrameDecoder,
    Message,
    Receipt,
    Role,
    Send,
    StompConnection,
    encode_frame,
    encode_message,
    encode_message_lossy,
)

from .helpers import open_conn, receive_all

# The attack of issue 13: a header value holding NUL + a whole forged frame.
INJECTION = (
    b"SEND\ndestination:/queue/victim\nreceipt:r-9\nx:a\x00MESSAGE\n"
    b"destination:/queue/victim\nmessage-id:forged\nsubscription:s1\nforged:yes\n\nevil\x00"
)


def refused(data: bytes, version: str = "1.2", chunk: int = 0) -> tuple[StompConnection, str]:
    conn = open_conn(Role.SERVER, version)
    pieces = [data] if not chunk else [data[i : i + chunk] for i in range(0, len(data), chunk)]
    with pytest.raises(RemoteProtocolError) as info:
        for piece in pieces:
            receive_all(conn, piece)
    assert conn.state is ConnectionState.ERROR
    return conn, str(info.value)


# --- input ------------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_nul_in_a_header_value_is_refused_and_named(version: str) -> None:
    conn, text = refused(INJECTION, version)
    assert "'x'" in text and "NUL" in text and "value" in text
    assert conn.error_receipt_id == "r-9"


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"SEND\ndestination:/queue/a\x00b\n\nx\x00", ["'destination'", "value"]),
        (b"SEND\ndestination:/queue/a\nna\x00me:v\n\nx\x00", ["name"]),
        (b"SUBSCRIBE\nid:s\x001\ndestination:/queue/a\n\n\x00", ["SUBSCRIBE", "'id'"]),
        (b"SEND\r\ndestination:/queue/a\r\nx:a\x00b\r\n\r\nx\x00", ["'x'"]),  # CRLF heads
        (b"SEND\ndestination:/queue/a\nx:a\\n\x00\n\nx\x00", ["'x'"]),  # next to an escape
    ],
)
def test_nul_anywhere_in_a_head_is_refused(data: bytes, words: list[str]) -> None:
    _, text = refused(data)
    assert "NUL" in text
    for word in words:
        assert word in text


def test_nul_split_across_reads_is_refused_before_the_head_ends() -> None:
    # The head never ends (no empty line): the NUL is reported as it arrives,
    # not after the frame limit is reached.
    _, text = refused(b"SEND\ndestination:/queue/a\nx:a\x00MESSAGE\nforged:yes\n", chunk=7)
    assert "NUL" in text


def test_nul_in_a_body_is_still_fine() -> None:
    conn = open_conn(Role.SERVER)
    (event,) = receive_all(conn, b"SEND\ndestination:/q\ncontent-length:3\n\na\x00b\x00")
    assert isinstance(event, Send) and event.body == b"a\x00b"


def test_decoder_alone_refuses_nul_in_the_fast_path() -> None:
    dec = FrameDecoder()
    dec.feed(INJECTION)
    with pytest.raises(RemoteProtocolError, match="NUL"):
        dec.next_frame()
    assert dec.error_headers is not None and dec.error_headers["receipt"] == "r-9"


# --- output -----------------------------------------------------------------


@pytest.mark.parametrize("version", [None, "1.0", "1.1", "1.2"])
@pytest.mark.parametrize(
    "headers", [{"x": "a\x00MESSAGE"}, {"a\x00b": "v"}, {"destination": "/queue/a\x00"}]
)
def test_encoders_never_write_a_nul_in_a_header(
    version: str | None, headers: dict[str, str]
) -> None:
    with pytest.raises(LocalProtocolError, match="NUL"):
        encode_frame("SEND", headers, b"body", version)
    if "destination" not in headers:  # encode_message takes its own destination
        with pytest.raises(LocalProtocolError, match="NUL"):
            encode_message("/queue/a", "m-1", "s-1", "m-1", headers, b"body", version)


def test_message_own_fields_with_nul_are_refused() -> None:
    with pytest.raises(LocalProtocolError, match="NUL"):
        encode_message("/queue/a\x00MESSAGE", "m-1", "s-1", "m-1", {}, b"", "1.2")
    with pytest.raises(LocalProtocolError, match="NUL"):
        open_conn(Role.SERVER).send(Receipt("r\x00MESSAGE"))


def test_error_frames_quote_a_nul_visibly() -> None:
    conn = StompConnection(Role.SERVER)
    data = conn.send(Error("bad \x00 byte", b"", receipt_id="r\x001"))
    assert data.count(b"\x00") == 1 and data.endswith(b"\x00")
    assert b"message:bad \\0 byte\n" in data and b"receipt-id:r\\01\n" in data


# --- what a version cannot carry: encode what it allows ---------------------


def decode_message(data: bytes, version: str) -> Message:
    client = open_conn(Role.CLIENT, version)
    (event,) = receive_all(client, data)
    assert isinstance(event, Message)
    return event


def test_lossy_message_for_1_0_drops_only_what_1_0_cannot_carry() -> None:
    headers = {"keep": "plain:value", "multi": "line\none", "cr": "ends\r", "a:b": "x", "ok": "1"}
    with pytest.raises(LocalProtocolError):
        encode_message("/queue/a", "m-1", "s-1", "m-1", headers, b"body", "1.0")
    data, dropped = encode_message_lossy("/queue/a", "m-1", "s-1", "m-1", headers, b"body", "1.0")
    assert dropped == ["multi", "cr", "a:b"]
    got = decode_message(data, "1.0")
    assert got.body == b"body" and got.destination == "/queue/a" and got.message_id == "m-1"
    assert got.headers["keep"] == "plain:value" and got.headers["ok"] == "1"
    assert "multi" not in got.headers and "cr" not in got.headers
    assert got.headers[DROPPED_HEADERS_HEADER] == "multi,cr,a\\cb"


def test_lossy_message_drops_nul_headers_in_every_version() -> None:
    for version in ("1.1", "1.2"):
        data, dropped = encode_message_lossy(
            "/queue/a", "m-1", "s-1", "m-1", {"x": "a\x00b", "y": "line\nok"}, b"", version
        )
        got = decode_message(data, version)
        assert dropped == ["x"] and got.headers["y"] == "line\nok"
        assert got.headers[DROPPED_HEADERS_HEADER] == "x"
        assert data.count(b"\x00") == 1


def test_lossy_message_replaces_what_own_fields_cannot_carry() -> None:
    data, dropped = encode_message_lossy("/queue/a\nb", "m-1", "s\x001", "m-1", {}, b"", "1.0")
    got = decode_message(data, "1.0")
    assert dropped == [] and got.destination == "/queue/a\ufffdb"
    assert got.subscription == "s\ufffd1" and data.count(b"\x00") == 1


def test_lossy_message_equals_the_strict_one_when_nothing_is_wrong() -> None:
    args = ("/queue/a", "m-1", "s-1", "m-1", {"k": "v"}, b"b", "1.0")
    assert encode_message_lossy(*args) == (encode_message(*args), [])


# --- receipt-id on protocol errors (STOMP 1.2) ------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"SEND\nreceipt:r-1\n\nx\x00",  # no destination
        b"FROB\nreceipt:r-1\n\n\x00",  # unknown command, whole head in one read
        b"SUBSCRIBE\nreceipt:r-1\ndestination:/queue/a\n\n\x00",  # no id
        b"SUBSCRIBE\nreceipt:r-1\nid:s\ndestination:/queue/a\nack:sometimes\n\n\x00",
        b"SEND\nreceipt:r-1\ndestination:/queue/a\ncontent-length:x\n\n\x00",
        b"SEND\nreceipt:r-1\ndestination:/queue/a\ncontent-length:1\n\nxy\x00",
        b"CONNECTED\nreceipt:r-1\n\n\x00",  # a server frame from a client
        b"SEND\nreceipt:r\\c1\ndestination:/queue/a\ncontent-length:x\n\n\x00",  # escaped
    ],
)
def test_protocol_error_keeps_the_receipt_of_its_frame(data: bytes) -> None:
    conn, _ = refused(data)
    expected = "r:1" if b"r\\c1" in data else "r-1"
    assert conn.error_receipt_id == expected
    reply = conn.send(Error("bad frame", receipt_id=conn.error_receipt_id))
    assert f"receipt-id:{expected.replace(':', chr(92) + 'c')}\n".encode() in reply


def test_protocol_error_in_a_trickling_body_keeps_the_receipt() -> None:
    data = b"SEND\nreceipt:r-2\ndestination:/queue/a\ncontent-length:1\n\nxy\x00"
    conn, _ = refused(data, chunk=3)
    assert conn.error_receipt_id == "r-2"


def test_protocol_error_without_a_receipt_has_none() -> None:
    conn, _ = refused(b"SEND\n\nx\x00")
    assert conn.error_receipt_id is None
