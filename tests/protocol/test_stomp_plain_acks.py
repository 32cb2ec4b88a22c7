"""``StompConnection.take_acks``: the server's shortcut for plain ACK frames
reads exactly what ``next_event`` reads, frame for frame."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.errors import RemoteProtocolError
from shoal.protocol.stomp import NEED_DATA, Ack, Event, Limits, Role, Send, StompConnection

from .helpers import open_conn

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def events_of(conn: StompConnection, chunks: list[bytes], shortcut: bool) -> list[object]:
    """Everything ``conn`` reads from ``chunks``, plain ACKs as ``("ack", id)``
    whichever way they were read; a protocol error ends the list."""
    out: list[object] = []
    try:
        for chunk in chunks:
            conn.receive_data(chunk)
            while True:
                if shortcut:
                    ids = conn.take_acks()
                    if ids:
                        out.extend(("ack", i) for i in ids)
                        continue
                event = conn.next_event()
                if event is NEED_DATA:
                    break
                assert isinstance(event, Event)
                if (
                    isinstance(event, Ack)
                    and event.headers == {"id": event.id}
                    and event.subscription is None
                    and event.transaction is None
                    and event.receipt is None
                ):
                    out.append(("ack", event.id))
                else:
                    out.append(event)
    except RemoteProtocolError as exc:
        out.append(("error", str(exc)))
    return out


FRAMES = st.sampled_from(
    [
        b"ACK\nid:1\n\n\x00",
        b"ACK\nid:12345678\n\n\x00\n",
        b"ACK\nid:abc-DEF_9.~!\n\n\x00\r\n",
        b"ACK\nid:" + b"7" * 200 + b"\n\n\x00",
        b"ACK\nid:" + b"7" * 201 + b"\n\n\x00",  # too long for the shortcut
        b"ACK\nid:a:b\n\n\x00",  # a colon: read by next_event
        b"ACK\nid:a\\cb\n\n\x00",  # an escape
        b"ACK\nid: 5\n\n\x00",  # a space
        b"ACK\nid:5\nreceipt:r1\n\n\x00",
        b"ACK\nid:5\ntransaction:t1\n\n\x00",
        b"ACK\nid:5\ncontent-length:0\n\n\x00",
        b"ACK\nid:5\n\nbody\x00",
        b"ACK\r\nid:5\r\n\r\n\x00",
        b"ACK\nid:\n\n\x00",
        b"ACK\n\n\x00",  # no id: an error either way
        b"ACK\nid:\xc3\xa9\n\n\x00",
        b"SEND\ndestination:/queue/a\n\nhi\x00",
        b"SEND\ndestination:/queue/a\ncontent-length:17\n\nACK\nid:1\n\n\x00xx\x00",
        b"NACK\nid:9\n\n\x00",
        b"\n",
        b"\r\n",
        b"ACKX\nid:1\n\n\x00",
    ]
)


@PROPERTY
@given(frames=st.lists(FRAMES, max_size=12), cuts=st.lists(st.integers(0, 2000), max_size=6))
def test_the_shortcut_reads_what_next_event_reads(frames: list[bytes], cuts: list[int]) -> None:
    data = b"".join(frames)
    bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    chunks = [data[a:b] for a, b in itertools.pairwise(bounds)]
    plain = events_of(open_conn(Role.SERVER, "1.2"), chunks, shortcut=False)
    fast = events_of(open_conn(Role.SERVER, "1.2"), chunks, shortcut=True)
    assert fast == plain


def test_a_run_of_plain_acks_is_read_at_once_up_to_the_next_other_frame() -> None:
    conn = open_conn(Role.SERVER, "1.2")
    conn.receive_data(
        b"\nACK\nid:1\n\n\x00ACK\nid:2\n\n\x00\r\n\nACK\nid:3\n\n\x00"
        b"SEND\ndestination:/queue/a\n\n\x00ACK\nid:4\n\n\x00ACK\nid:5\n\n"
    )
    assert conn.take_acks() == ["1", "2", "3"]
    assert conn.take_acks() == []
    event = conn.next_event()
    assert isinstance(event, Send) and event.destination == "/queue/a"
    assert conn.take_acks() == ["4"]
    assert conn.take_acks() == []  # the fifth is not complete yet
    conn.receive_data(b"\x00")
    assert conn.take_acks() == ["5"]
    assert conn.next_event() is NEED_DATA


@pytest.mark.parametrize("version", ["1.0", "1.1"])
def test_before_1_2_an_ack_is_not_read_by_the_shortcut(version: str) -> None:
    # 1.0 and 1.1 name the message with message-id: an "id" header alone is
    # not a plain ACK there.
    conn = open_conn(Role.SERVER, version)
    conn.receive_data(b"ACK\nid:1\n\n\x00")
    assert conn.take_acks() == []
    with pytest.raises(RemoteProtocolError):
        conn.next_event()


def test_a_client_never_takes_acks() -> None:
    conn = open_conn(Role.CLIENT, "1.2")
    conn.receive_data(b"ACK\nid:1\n\n\x00")
    assert conn.take_acks() == []


def test_limits_below_the_shortcuts_frame_size_turn_it_off() -> None:
    limits = Limits(max_frame_bytes=180, max_headers=8, max_header_line_bytes=100)
    conn = open_conn(Role.SERVER, "1.2", limits)
    conn.receive_data(b"ACK\nid:1\n\n\x00")
    assert conn.take_acks() == []
    event = conn.next_event()
    assert isinstance(event, Ack) and event.id == "1"


def test_a_limit_an_ack_breaks_is_enforced_as_without_the_shortcut() -> None:
    # No header allowed: next_event refuses the ACK; the shortcut must not take it.
    conn = open_conn(Role.SERVER, "1.2")
    conn.set_limits(Limits(max_headers=0))
    conn.receive_data(b"ACK\nid:1\n\n\x00")
    assert conn.take_acks() == []
    with pytest.raises(RemoteProtocolError):
        conn.next_event()
