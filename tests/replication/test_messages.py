"""The replication messages' bytes: every message round-trips, split at any
offset; bad frames are a ReplicationProtocolError, never another error."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shoal.errors import RemoteProtocolError
from shoal.replication import (
    Ack,
    Copy,
    Data,
    Decoder,
    Hello,
    Message,
    ReplicationProtocolError,
    Stale,
    encode,
)

u64 = st.integers(0, 2**64 - 1)
messages = st.one_of(
    st.builds(Hello, u64, u64, u64),
    st.builds(Data, u64, u64, st.binary(max_size=64)),
    st.builds(Copy, u64, u64, st.binary(max_size=64)),
    st.builds(Ack, u64, u64, u64),
    st.builds(Stale, u64),
)


def decode_all(data: bytes, *, step: int | None = None) -> list[Message]:
    decoder = Decoder()
    out: list[Message] = []
    chunks = [data] if step is None else [data[i : i + step] for i in range(0, len(data), step)]
    for chunk in chunks:
        decoder.receive_data(chunk)
        while (msg := decoder.next_message()) is not None:
            out.append(msg)
    return out


TABLE: list[tuple[Message, bytes]] = [
    (Hello(7, 6, 5), struct.pack("<IBQQQ", 25, 1, 7, 6, 5)),
    (Data(7, 1, b"rec"), struct.pack("<IBQQ", 20, 2, 7, 1) + b"rec"),
    (Copy(2, 9, b""), struct.pack("<IBQQ", 17, 3, 2, 9)),
    (Ack(3, 4, 2), struct.pack("<IBQQQ", 25, 4, 3, 4, 2)),
    (Stale(8), struct.pack("<IBQ", 9, 5, 8)),
]


@pytest.mark.parametrize(("msg", "data"), TABLE, ids=[type(m).__name__ for m, _ in TABLE])
def test_each_message_has_the_documented_bytes(msg: Message, data: bytes) -> None:
    assert encode(msg) == data
    assert decode_all(data) == [msg]


@given(st.lists(messages, max_size=8), st.integers(1, 40))
def test_messages_round_trip_whatever_the_chunks(msgs: list[Message], step: int) -> None:
    data = b"".join(encode(m) for m in msgs)
    assert decode_all(data) == msgs
    assert decode_all(data, step=step) == msgs


def test_a_number_over_u64_is_refused_when_encoding() -> None:
    with pytest.raises(ValueError, match="does not fit"):
        encode(Ack(1, 2**64, 0))


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (struct.pack("<IBQ", 9, 99, 1), "unknown replication frame kind 99"),
        (struct.pack("<IBQQ", 17, 1, 1, 0), "must hold 16 bytes"),
        (struct.pack("<IBQ", 9, 2, 1), "too short"),
        (struct.pack("<IBQB", 10, 5, 1, 0), "holds nothing"),
        (struct.pack("<IBQ", 3, 5, 1), "outside"),
        (struct.pack("<I", 2**31) + b"\x02" + bytes(8), "outside"),
    ],
)
def test_a_bad_frame_is_a_protocol_error(data: bytes, says: str) -> None:
    with pytest.raises(ReplicationProtocolError, match=says):
        decode_all(data)


@given(st.binary(max_size=80))
def test_any_bytes_decode_or_raise_a_remote_protocol_error(data: bytes) -> None:
    try:
        decode_all(data)
    except RemoteProtocolError:
        pass


def test_a_decoder_holds_a_partial_frame_until_it_is_whole() -> None:
    data = encode(Data(1, 1, b"x" * 100))
    decoder = Decoder()
    decoder.receive_data(data[:50])
    assert decoder.next_message() is None
    decoder.receive_data(data[50:])
    assert decoder.next_message() == Data(1, 1, b"x" * 100)
    assert decoder.next_message() is None


def test_repr_shows_bytes_as_their_length() -> None:
    assert repr(Data(1, 2, b"abc")) == "Data(epoch=1, seq=2, 3 bytes)"
    assert repr(Stale(4)) == "Stale(epoch=4)"
