"""The incremental decoder: framing, EOLs, escaping, bodies, limits."""

from __future__ import annotations

import pytest

from shoal.errors import LimitExceeded, RemoteProtocolError
from shoal.protocol.stomp import (
    MAX_FRAME_BYTES,
    MAX_HEADER_LINE_BYTES,
    MAX_HEADERS,
    NEED_DATA,
    ConnectionClosed,
    ConnectionState,
    FrameDecoder,
    Limits,
    Role,
    Send,
    StompConnection,
)

from .helpers import open_conn, receive_all


def frames(
    data: bytes, version: str | None = "1.2", chunk: int = 0
) -> list[tuple[str, dict[str, str], bytes]]:
    """Decode ``data`` (in ``chunk``-sized reads, or at once) into raw frames."""
    dec = FrameDecoder()
    dec.version = version
    out = []
    pieces = [data] if not chunk else [data[i : i + chunk] for i in range(0, len(data), chunk)]
    for piece in pieces:
        dec.feed(piece)
        while (frame := dec.next_frame()) is not None:
            out.append(frame)
    return out


def server(version: str = "1.2", limits: Limits | None = None) -> StompConnection:
    return open_conn(Role.SERVER, version, limits)


def protocol_error(conn: StompConnection, data: bytes) -> RemoteProtocolError:
    with pytest.raises(RemoteProtocolError) as info:
        receive_all(conn, data)
    assert conn.state is ConnectionState.ERROR
    return info.value


# --- framing ----------------------------------------------------------------


def test_limits_defaults_are_the_named_constants() -> None:
    limits = Limits()
    assert limits.max_frame_bytes == MAX_FRAME_BYTES == 10 * 1024 * 1024
    assert limits.max_headers == MAX_HEADERS == 1000
    assert limits.max_header_line_bytes == MAX_HEADER_LINE_BYTES == 64 * 1024


@pytest.mark.parametrize(
    "data",
    [
        b"SEND\r\ndestination:/q\r\n\r\nbody\x00",
        b"SEND\ndestination:/q\r\n\r\nbody\x00",
        b"SEND\r\ndestination:/q\n\nbody\x00",
        b"SEND\r\ndestination:/q\r\n\nbody\x00",
        b"SEND\ndestination:/q\n\r\nbody\x00",
    ],
)
def test_crlf_and_mixed_line_endings(data: bytes) -> None:
    assert frames(data) == [("SEND", {"destination": "/q"}, b"body")]
    for i in range(1, len(data)):
        dec = FrameDecoder()
        dec.feed(data[:i])
        first = dec.next_frame()
        dec.feed(data[i:])
        assert [first or dec.next_frame()] == [("SEND", {"destination": "/q"}, b"body")]


def test_line_ending_style_may_change_between_frames() -> None:
    body = b"x\n\ny\r\n\r\nz"  # looks like head terminators, but is a body
    lf = b"SEND\ndestination:/a\ncontent-length:%d\n\n%s\x00" % (len(body), body)
    crlf = b"SEND\r\ndestination:/b\r\ncontent-length:%d\r\n\r\n%s\x00" % (len(body), body)
    data = lf + crlf + crlf + lf + b"\r\n" + lf + crlf
    got = frames(data)
    assert [f[1]["destination"] for f in got] == ["/a", "/b", "/b", "/a", "/a", "/b"]
    assert all(f[2] == body for f in got)
    assert frames(data, chunk=7) == got


def test_crlf_head_then_frame_with_lf_blank_line_in_body() -> None:
    """A CRLF frame whose body holds "\\n\\n" must not be cut there."""
    data = b"SEND\r\ndestination:/q\r\n\r\nab\n\ncd\x00" + b"SEND\ndestination:/r\n\n\x00"
    assert frames(data) == [
        ("SEND", {"destination": "/q"}, b"ab\n\ncd"),
        ("SEND", {"destination": "/r"}, b""),
    ]


def test_body_without_content_length_ends_at_first_nul() -> None:
    assert frames(b"SEND\ndestination:/q\n\nabc\x00SE") == [
        ("SEND", {"destination": "/q"}, b"abc"),
    ]


def test_content_length_body_may_hold_nul_and_newlines() -> None:
    body = b"\x00\n\n\x00SEND\n\n\x00"
    data = b"SEND\ndestination:/q\ncontent-length:%d\n\n%s\x00" % (len(body), body)
    assert (
        frames(data * 3)
        == [("SEND", {"destination": "/q", "content-length": str(len(body))}, body)] * 3
    )
    assert frames(data * 3, chunk=1) == frames(data * 3)


def test_eols_between_frames_are_skipped() -> None:
    one = b"SEND\ndestination:/q\n\n\x00"
    data = b"\n\r\n" + one + b"\n" + one + b"\r\n\r\n\n" + one + b"\n\n"
    assert len(frames(data)) == 3
    assert len(frames(data, chunk=1)) == 3


def test_many_frames_in_one_read() -> None:
    one = b"SEND\ndestination:/q\ncontent-length:3\n\nabc\x00"
    assert len(frames(one * 1000)) == 1000


def test_large_frame_trickling_in_small_reads() -> None:
    body = bytes(range(256)) * 1000  # 256 KB, with NULs
    with_cl = b"SEND\ndestination:/q\ncontent-length:%d\n\n%s\x00" % (len(body), body)
    text_body = b"x" * 300_000
    without_cl = b"SEND\ndestination:/q\n\n%s\x00" % text_body
    got = frames(with_cl + without_cl + with_cl, chunk=4096)
    assert [f[2] for f in got] == [body, text_body, body]
    assert all(isinstance(f[2], bytes) for f in got)


def test_repeated_header_first_occurrence_wins() -> None:
    (frame,) = frames(b"SEND\ndestination:/a\nfoo:1\ndestination:/b\nfoo:2\n\n\x00")
    assert frame[1] == {"destination": "/a", "foo": "1"}
    conn = server()
    (send,) = receive_all(conn, b"SEND\ndestination:/a\ndestination:/b\n\n\x00")
    assert isinstance(send, Send) and send.destination == "/a"


def test_repeated_escaped_header_first_occurrence_wins() -> None:
    (frame,) = frames(b"SEND\ndestination:/a\na\\cb:1\na\\cb:2\n\n\x00", "1.2")
    assert frame[1] == {"destination": "/a", "a:b": "1"}


def test_header_value_may_hold_colons() -> None:
    (frame,) = frames(b"SEND\ndestination:/a\nurl:http://x:80/\n\n\x00", "1.0")
    assert frame[1]["url"] == "http://x:80/"
    (frame,) = frames(b"SEND\ndestination:/a\nurl:http://x:80/\n\n\x00", "1.2")
    assert frame[1]["url"] == "http://x:80/"


def test_empty_header_value() -> None:
    (frame,) = frames(b"SEND\ndestination:/a\nempty:\n\n\x00")
    assert frame[1]["empty"] == ""


# --- escaping ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "raw", "value"),
    [
        ("1.0", b"a\\nb\\c\\\\", "a\\nb\\c\\\\"),
        ("1.1", b"a\\nb\\c\\\\", "a\nb:\\"),
        ("1.2", b"a\\nb\\c\\\\\\r", "a\nb:\\\r"),
        (None, b"a\\nb", "a\\nb"),  # not negotiated: as 1.0
    ],
)
def test_unescaping_per_version(version: str | None, raw: bytes, value: str) -> None:
    (frame,) = frames(b"SEND\ndestination:/q\nx:" + raw + b"\n\n\x00", version)
    assert frame[1]["x"] == value


@pytest.mark.parametrize(
    ("version", "raw"),
    [("1.1", b"a\\rb"), ("1.2", b"a\\tb"), ("1.1", b"a\\"), ("1.2", b"\\x")],
)
def test_undefined_escape_is_a_protocol_error(version: str, raw: bytes) -> None:
    err = protocol_error(server(version), b"SEND\ndestination:/q\nx:" + raw + b"\n\n\x00")
    assert "escape" in err.error_frame_hint


def test_connect_frames_are_never_unescaped() -> None:
    (frame,) = frames(b"CONNECT\nlogin:a\\cb\n\n\x00", "1.2")
    assert frame[1]["login"] == "a\\cb"


# --- malformed frames -------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"FOO\n\n\x00", ["unknown command", "FOO"]),
        (b"send\ndestination:/q\n\n\x00", ["unknown command", "send"]),
        (b"SEND\ndestination:/q\nnocolon\n\n\x00", ["nocolon", "':'"]),
        (b"SEND\ndestination:/q\n:value\n\n\x00", ["empty name"]),
        (b"SEND\ndestination:/q\ncontent-length:abc\n\nx\x00", ["content-length"]),
        (b"SEND\ndestination:/q\ncontent-length:-1\n\nx\x00", ["content-length"]),
        (b"SEND\ndestination:/q\ncontent-length: 1\n\nx\x00", ["content-length"]),
        ("SEND\ndestination:/q\ncontent-length:\uff11\n\nx\x00".encode(), ["content-length"]),
        (b"SEND\ndestination:/q\ncontent-length:1\n\nxy\x00", ["NUL", "content-length"]),
        (b"SEND\ndestination:\xff\xfe\n\n\x00", ["UTF-8"]),
    ],
)
def test_malformed_frames(data: bytes, words: list[str]) -> None:
    err = protocol_error(server(), data)
    for word in words:
        assert word in err.error_frame_hint


def test_unknown_command_is_refused_before_the_head_is_complete() -> None:
    conn = server()
    with pytest.raises(RemoteProtocolError, match="unknown command"):
        receive_all(conn, b"GARBAGE\nheader:value\n")


@pytest.mark.parametrize("data", [b"hello", b'{"op": "subscribe"}', b"\n\nSEND\r\r", b"SENDX"])
def test_input_that_cannot_start_a_command_is_refused_before_its_line_ends(data: bytes) -> None:
    # A WebSocket client's JSON or text message has no newline to wait for.
    with pytest.raises(RemoteProtocolError, match="unknown command"):
        receive_all(server(), data)


@pytest.mark.parametrize("data", [b"S", b"SEN", b"SEND", b"SEND\r", b"\nCONNEC"])
def test_the_start_of_a_command_line_waits_for_more(data: bytes) -> None:
    conn = server()
    conn.receive_data(data)
    assert conn.next_event() is NEED_DATA


def test_eof_mid_frame_is_an_error_eof_between_frames_is_not() -> None:
    conn = server()
    conn.receive_data(b"SEND\ndestination:/q\n\nabc")
    conn.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="middle of a frame"):
        conn.next_event()

    conn = server()
    conn.receive_data(b"SEND\ndestination:/q\n\nabc\x00\n\n")
    conn.receive_data(b"")
    assert isinstance(conn.next_event(), Send)
    assert conn.next_event() == ConnectionClosed()
    assert conn.next_event() == ConnectionClosed()
    assert conn.state is ConnectionState.CLOSED


# --- limits -----------------------------------------------------------------


def limit_error(conn: StompConnection, *chunks: bytes) -> LimitExceeded:
    with pytest.raises(LimitExceeded) as info:
        for chunk in chunks:
            receive_all(conn, chunk)
    assert isinstance(info.value, RemoteProtocolError)
    assert conn.state is ConnectionState.ERROR
    return info.value


def test_max_frame_bytes_with_content_length_is_refused_from_the_head() -> None:
    conn = server(limits=Limits(max_frame_bytes=1000))
    err = limit_error(conn, b"SEND\ndestination:/q\ncontent-length:100000000\n\n")
    assert (err.limit_name, err.limit) == ("max_frame_bytes", 1000)
    assert "max_frame_bytes" in err.error_frame_hint


def test_max_frame_bytes_without_content_length_is_refused_as_bytes_arrive() -> None:
    conn = server(limits=Limits(max_frame_bytes=1000))
    assert receive_all(conn, b"SEND\ndestination:/q\n\n" + b"x" * 900) == []
    err = limit_error(conn, b"x" * 200)
    assert err.limit_name == "max_frame_bytes"


def test_max_frame_bytes_counts_the_whole_frame() -> None:
    head = b"SEND\ndestination:/q\n\n"
    limits = Limits(max_frame_bytes=len(head) + 200 + 1)
    assert len(receive_all(server(limits=limits), head + b"x" * 200 + b"\x00")) == 1
    limit_error(server(limits=limits), head + b"x" * 201 + b"\x00")


def test_max_frame_bytes_for_a_huge_head() -> None:
    conn = server(limits=Limits(max_frame_bytes=1000, max_header_line_bytes=100_000))
    limit_error(conn, b"SEND\ndestination:/q\n", b"x:" + b"y" * 600, b"y" * 600)


def test_max_headers() -> None:
    limits = Limits(max_headers=10)
    ok = b"SEND\n" + b"".join(b"h%d:v\n" % i for i in range(9)) + b"destination:/q\n\n\x00"
    assert len(receive_all(server(limits=limits), ok)) == 1
    bad = b"SEND\n" + b"".join(b"h%d:v\n" % i for i in range(10)) + b"destination:/q\n\n\x00"
    err = limit_error(server(limits=limits), bad)
    assert (err.limit_name, err.limit) == ("max_headers", 10)
    # Detected before the head is complete, too.
    err = limit_error(server(limits=limits), bad[:-4])
    assert err.limit_name == "max_headers"


def test_max_header_line_bytes() -> None:
    limits = Limits(max_header_line_bytes=100)
    line = b"x:" + b"v" * 98
    assert (
        len(receive_all(server(limits=limits), b"SEND\ndestination:/q\n" + line + b"\n\n\x00")) == 1
    )
    err = limit_error(server(limits=limits), b"SEND\ndestination:/q\n" + line + b"v\n\n\x00")
    assert (err.limit_name, err.limit) == ("max_header_line_bytes", 100)
    # A long line still arriving is refused without waiting for its end.
    err = limit_error(server(limits=limits), b"SEND\ndestination:/q\nx:", b"v" * 60, b"v" * 60)
    assert err.limit_name == "max_header_line_bytes"


def test_max_command_line_bytes() -> None:
    # A line longer than every command is refused as unknown before the limit
    # (see below); a limit below the longest command is still enforced.
    dec = FrameDecoder(Limits(max_command_line_bytes=4))
    dec.feed(b"UNSUB")
    assert dec.next_frame() is None
    dec.feed(b"SCRIBE")
    with pytest.raises(LimitExceeded) as info:
        dec.next_frame()
    assert info.value.limit_name == "max_command_line_bytes"


def test_limits_apply_to_the_first_frame_too() -> None:
    conn = StompConnection(Role.SERVER, limits=Limits(max_frame_bytes=100))
    err = limit_error(conn, b"CONNECT\n", b"login:" + b"x" * 200)
    assert err.limit_name == "max_frame_bytes"


def test_default_limits_accept_a_large_frame() -> None:
    body = b"x" * (MAX_FRAME_BYTES - 100)
    data = b"SEND\ndestination:/q\ncontent-length:%d\n\n%s\x00" % (len(body), body)
    conn = server()
    got = []
    for i in range(0, len(data), 65536):
        got += receive_all(conn, data[i : i + 65536])
    assert len(got) == 1 and isinstance(got[0], Send) and got[0].body == body


def test_need_data_on_partial_frame() -> None:
    conn = server()
    conn.receive_data(b"SEND\ndestination:/q\n")
    assert conn.next_event() is NEED_DATA
    assert conn.state is ConnectionState.OPEN


def test_missing_nul_after_content_length_body_split_over_reads() -> None:
    conn = server()
    assert receive_all(conn, b"SEND\ndestination:/q\ncontent-length:3\n\nab") == []
    with pytest.raises(RemoteProtocolError, match="not followed by NUL"):
        receive_all(conn, b"cd\x00")


def test_max_frame_bytes_when_the_nul_arrives_late() -> None:
    conn = server(limits=Limits(max_frame_bytes=300))
    assert receive_all(conn, b"SEND\ndestination:/q\n\n" + b"x" * 250) == []
    limit_error(conn, b"x" * 40 + b"\x00")


def test_max_command_line_bytes_in_a_complete_head() -> None:
    conn = server(limits=Limits(max_command_line_bytes=16))
    err = limit_error(conn, b"X" * 20 + b"\nk:v\n\n\x00")
    assert err.limit_name == "max_command_line_bytes"


def test_too_much_data_pipelined_before_connected() -> None:
    conn = StompConnection(Role.SERVER, limits=Limits(max_frame_bytes=100))
    conn.receive_data(b"CONNECT\naccept-version:1.2\n\n\x00")
    conn.next_event()
    conn.receive_data(b"SEND\ndestination:/q\n\n" + b"x" * 100)
    with pytest.raises(LimitExceeded):
        conn.next_event()


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"JMSXGroupID": "g", "x-shoal-origin-id": "7"},
        {"colon": "a:b", "newline": "a\nb", "back\\slash": "c\rd"},  # escaped: slow path
        {"destination": "/queue/other", "content-length": "1", "k": "v"},  # own names win
    ],
)
def test_encode_send_decodes_to_the_same_send(headers):
    from shoal.protocol.stomp.encoder import encode_send

    body = b"body\x00with nul"
    [(command, decoded, got)] = frames(encode_send("/queue/a:b", headers, body, "1.2"))
    assert command == "SEND" and got == body
    expected = {k: v for k, v in headers.items() if k not in ("destination", "content-length")}
    assert decoded == {"destination": "/queue/a:b", **expected, "content-length": str(len(body))}
