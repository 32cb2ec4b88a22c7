"""Record encodings: every record type round-trips, compact and wide forms."""

from __future__ import annotations

import dataclasses
import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from store_helpers import msg

from shoal.records import (
    AmqpHeaders,
    DeliveryCounted,
    GroupBound,
    GroupParked,
    GroupResumed,
    LogCommitted,
    MessageRemoved,
    MessageStored,
    QueueDeclared,
    QueueDeleted,
    SinkBatchPublished,
)
from shoal.store.journal.codec import (
    MESSAGE,
    T_MESSAGE,
    T_MESSAGE_WIDE,
    T_WIDE,
    DecodeError,
    Snapshot,
    decode_payload,
    encode_batch,
    encode_snapshot,
)
from shoal.store.journal.record import (
    FRAME_HEADER,
    check_frame,
    frame_parts,
    frame_size,
)

ALL = [
    QueueDeclared("q", "q", "anycast", {"group-buckets": 4, "x": [1, "a"], "f": 1.5}),
    QueueDeclared("t.s", "t", "multicast", {}, subscription="s", client_id="c"),
    QueueDeleted("gone"),
    msg(1),
    msg(2, group="g", headers={}, body=b""),
    msg(3, bucket=2, offset=17, delivery_count=3),
    MessageRemoved("q", 1),
    DeliveryCounted("q", 2, 5),
    GroupParked("q", "g"),
    GroupResumed("q", "g"),
    LogCommitted("log", 3, 99),
    SinkBatchPublished("spark-query", 12),
    GroupBound("q", "g/\u00e9", "n1"),
    GroupBound("q", "", ""),
]


def roundtrip(records):
    payload, offs = encode_batch(records)
    out = decode_payload(payload, 0, len(payload))
    got = [r for r, _ in out]
    for (r, boff), body in zip(out, offs):
        if body >= 0:
            rel, n = body >> 32, body & 0xFFFFFFFF
            assert boff == rel and n == len(r.body)
            assert payload[rel : rel + n] == r.body
        else:
            assert boff == -1
    return got, payload


def test_every_record_type_round_trips():
    got, _ = roundtrip(ALL)
    assert got == ALL


def test_message_uses_the_compact_form():
    payload, offs = encode_batch([msg(7)])
    assert payload[0] == T_MESSAGE
    fields = MESSAGE.unpack_from(payload, 0)
    assert fields[2] == 7  # id
    text_len = fields[-1]
    text = payload[62 : 62 + text_len].decode()
    assert text.split("\0") == ["q", "/queue/q", "", "k", "v7"]
    assert offs == [(62 + text_len) << 32 | len(b"body-7")]


@pytest.mark.parametrize(
    "m",
    [
        msg(1, headers={"a": "x\0y"}),  # NUL in a header value
        msg(2, "que\0ue"),
        msg(2**64 + 5),  # id too big for u64
        msg(-3),
        MessageStored("q", 4, "/q", {}, b"b", "g", 2**70, 0, 4, 0),
        MessageStored("q", 5, "/q", {"n": "1"}, b"ba", None, 0, 0, 2**40, 0),
    ],
)
def test_messages_that_do_not_fit_use_the_wide_form(m):
    got, payload = roundtrip([m])
    assert payload[0] == T_MESSAGE_WIDE
    want = {f.name: getattr(m, f.name) for f in dataclasses.fields(m)}
    assert got[0] == MessageStored(**want)


def _amqp(encoding: tuple[bytes, bytes | None], **headers: str) -> AmqpHeaders:
    h = AmqpHeaders(headers)
    h.encoding = encoding
    return h


@pytest.mark.parametrize(
    "encoding",
    [(b"\x00Ss\x45\x00Sw\xa0\x04", b""), (b"\x00Sw\xa0\x04body\x00Sx\xc1\x01\x00", None)],
    ids=["split-at-the-body", "whole"],
)
def test_a_message_received_over_amqp_keeps_its_encoding(encoding):
    m = msg(9, group="g", headers=_amqp(encoding, JMSXGroupID="g", persistent="true"))
    got, payload = roundtrip([m, msg(10)])
    assert payload[0] == T_MESSAGE and got == [m, msg(10)]
    assert type(got[0].headers) is AmqpHeaders and got[0].headers.encoding == encoding
    assert type(got[1].headers) is dict  # the plain ones stay plain


def test_a_record_with_a_kept_encoding_that_does_not_add_up_is_refused():
    payload, _ = encode_batch([msg(9, headers=_amqp((b"x" * 40, b"")))])
    bad = bytearray(payload)
    text_len = MESSAGE.unpack_from(payload, 0)[-1]
    struct.pack_into("<I", bad, 62 + text_len, 10**6)  # before's length past the record
    with pytest.raises(DecodeError):
        decode_payload(bytes(bad), 0, len(bad))


def test_other_records_that_do_not_fit_use_the_wide_form():
    recs = [MessageRemoved("q", -1), DeliveryCounted("q", 1, 2**65), SinkBatchPublished("s", 2**64)]
    got, payload = roundtrip(recs)
    assert payload[0] == T_WIDE and got == recs


def test_surrogates_round_trip():
    m = msg(1, "q\udcff", headers={"h\ud800": "v\udfff"}, group="g\udc80")
    assert roundtrip([m])[0] == [m]


def test_snapshot_round_trips():
    snap = {
        "queues": [],
        "parked": [["q", "g"]],
        "log_commits": [],
        "sink_batches": {"s": 1},
        "next_message_id": 5,
    }
    payload = encode_snapshot(snap)
    [(got, off)] = decode_payload(payload, 0, len(payload))
    assert got == Snapshot(snap) and off == -1


@pytest.mark.parametrize(
    "payload",
    [
        bytes([99, 0, 0, 0, 0]),  # unknown tag
        bytes([4, 200, 0, 0, 0]) + b"x" * 10,  # runs past the end
        bytes([3]) + struct.pack("<I", 3) + b"abc",  # message shorter than its fixed part
        encode_batch([msg(1)])[0][:-1],  # cut short by one byte
    ],
)
def test_bad_payloads_raise_decode_error(payload):
    with pytest.raises(DecodeError):
        decode_payload(payload, 0, len(payload))


def test_bad_utf8_raises_decode_error():
    payload = bytearray(encode_batch([msg(1)])[0])
    payload[62] = 0xFF  # first byte of the text block
    with pytest.raises(DecodeError):
        decode_payload(bytes(payload), 0, len(payload))


def test_frames_are_aligned_and_checked():
    payload = b"hello world"
    parts = frame_parts(1234, 7, payload)
    frame = b"".join(parts)
    assert len(frame) == frame_size(len(payload)) == 32
    crc, length, seq = FRAME_HEADER.unpack_from(frame, 0)
    assert (length, seq) == (11, 7)
    assert crc == zlib.crc32(frame[4 : 16 + 11], 1234)
    assert crc == zlib.crc32(payload, zlib.crc32(struct.pack("<IQ", 11, 7), 1234))
    buf = memoryview(frame)
    assert check_frame(buf, 0, len(frame), 1234, 6) == (11, 7)
    assert check_frame(buf, 0, len(frame), 1235, 6) == "CRC mismatch"
    assert "sequence" in check_frame(buf, 0, len(frame), 1234, 7)
    assert "past the end" in check_frame(buf, 0, len(frame) - 8, 1234, 0)
    padded = frame[:-1] + b"\x01"
    assert check_frame(memoryview(padded), 0, len(padded), 1234, 0) == "non-zero padding"


text = st.text(max_size=20)
ints = st.integers(min_value=-(2**70), max_value=2**70)


@st.composite
def messages(draw):
    return MessageStored(
        queue=draw(text),
        id=draw(st.integers(min_value=0, max_value=2**64 + 10)),
        destination=draw(text),
        headers=draw(st.dictionaries(text, text, max_size=5)),
        body=draw(st.binary(max_size=64)),
        group=draw(st.none() | text),
        group_seq=draw(ints),
        expires=draw(ints),
        priority=draw(st.integers(min_value=-(2**33), max_value=2**33)),
        timestamp=draw(ints),
        delivery_count=draw(st.integers(min_value=0, max_value=2**33)),
        bucket=draw(st.integers(min_value=-1, max_value=2**33)),
        offset=draw(ints),
    )


@given(st.lists(messages(), min_size=1, max_size=5))
def test_any_message_round_trips(ms):
    assert roundtrip(ms)[0] == ms
