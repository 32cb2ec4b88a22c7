"""AMQP message <-> core headers (server/amqp_mapping.py): what survives the broker."""

from __future__ import annotations

import uuid

import proton
import pytest
from hypothesis import given
from hypothesis import strategies as st
from proton import Message

from shoal.broker.effects import Deliver
from shoal.broker.model import Message as StoredMessage
from shoal.protocol.amqp import AmqpHeaders
from shoal.protocol.amqp.message_io import MessageCodec
from shoal.server.amqp_mapping import (
    MESSAGE_ID,
    TYPES_HEADER,
    address_for,
    headers_of,
    id_text,
    id_value,
    message_of,
    transfer_as_received,
)


def _stored() -> StoredMessage:
    """A stored message, as the core hands one over (only its destination is read)."""
    return StoredMessage(1, "q", "/queue/q", {}, b"", None, 0, False, 0, 4, 0)


def through(message: Message) -> Message:
    """Sent by an AMQP producer, delivered to an AMQP consumer (encoded both ways)."""
    received = Message()
    received.decode(message.encode())
    headers, body = headers_of(received, 0)
    eff = Deliver(1, "amqp-1", "1", _stored(), False)
    out = Message()
    out.decode(message_of(eff, body, headers, 0, False).encode())
    return out


TYPED = {
    "long": 42,
    "negative": -7,
    "flag": True,
    "off": False,
    "double": 2.5,
    "text": "42",
    "empty": "",
    "int": proton.int32(3),
    "short": proton.short(-2),
    "byte": proton.byte(-1),
    "ulong": proton.ulong(2**63),
    "uint": proton.uint(7),
    "ushort": proton.ushort(8),
    "ubyte": proton.ubyte(9),
    "float": proton.float32(1.5),
    "symbol": proton.symbol("sym"),
    "char": proton.char("z"),
    "stamp": proton.timestamp(1_700_000_000_000),
    "uuid": uuid.UUID(int=5),
    "binary": b"\x00\xffbin",
    "null": None,
}


def test_application_property_types_survive_amqp_to_amqp():
    got = through(Message(body=b"x", properties=dict(TYPED))).properties
    assert set(got) == set(TYPED)  # the types header is not an application property
    for name, value in TYPED.items():
        kept = bytes(got[name]) if name == "binary" else got[name]
        assert kept == value and type(kept) is type(value), name


def test_stomp_sees_text_and_stomp_headers_stay_strings():
    received = Message()
    received.decode(Message(properties={"n": 42, "ok": True, "p": 0.5}).encode())
    headers, _ = headers_of(received, 0)
    assert (headers["n"], headers["ok"], headers["p"]) == ("42", "true", "0.5")
    assert TYPES_HEADER in headers
    eff = Deliver(1, "amqp-1", "1", _stored(), False)
    from_stomp = message_of(eff, b"", {"n": "42", "ok": "true"}, 0, False)
    assert from_stomp.properties == {"n": "42", "ok": "true"}


def test_a_types_header_edited_on_the_way_keeps_the_text():
    eff = Deliver(1, "amqp-1", "1", _stored(), False)
    headers = {"n": "not a number", "b": "maybe", TYPES_HEADER: '{"n":"long","b":"boolean"}'}
    assert message_of(eff, b"", headers, 0, False).properties == {
        "n": "not a number",
        "b": "maybe",
    }
    broken = message_of(eff, b"", {"n": "1", TYPES_HEADER: "{not json"}, 0, False)
    assert broken.properties == {"n": "1"}


def test_a_producers_own_types_header_is_not_trusted():
    received = Message()
    received.decode(Message(properties={TYPES_HEADER: '{"a":"long"}', "a": "1"}).encode())
    headers, _ = headers_of(received, 0)
    assert TYPES_HEADER not in headers and headers["a"] == "1"


@pytest.mark.parametrize(
    "mid",
    ["order-1", "ID:AMQP_ULONG:looks-typed", proton.ulong(5), uuid.UUID(int=9), b"\x01\x02"],
)
def test_message_and_correlation_ids_keep_value_and_type(mid):
    got = through(
        Message(
            id=mid,
            correlation_id=mid,
            user_id=b"alice",
            reply_to="replies",
            subject="greeting",
            content_type="application/json",
            content_encoding="gzip",
            body=b"{}",
        )
    )
    for value in (got.id, got.correlation_id):
        kept = bytes(value) if isinstance(value, memoryview) else value
        assert kept == mid and type(kept) is type(mid if not isinstance(mid, int) else 0)
    assert bytes(got.user_id) == b"alice"
    assert (got.reply_to, got.subject) == ("replies", "greeting")
    assert (str(got.content_type), str(got.content_encoding)) == ("application/json", "gzip")


def test_stomp_names_of_the_ids():
    received = Message()
    received.decode(Message(id=proton.ulong(5), correlation_id="c-1", user_id=b"bob").encode())
    headers, _ = headers_of(received, 0)
    assert headers[MESSAGE_ID] == "ID:AMQP_ULONG:5"
    assert headers["correlation-id"] == "c-1" and headers["JMSXUserID"] == "bob"


def test_reply_to_addresses():
    assert [address_for(d) for d in ("/queue/a", "/topic/b", "/temp-queue/c")] == [
        "a",
        "topic://b",
        "/temp-queue/c",
    ]


@given(st.one_of(st.text(), st.integers(0, 2**64 - 1), st.uuids(), st.binary()))
def test_id_text_is_reversible(value):
    back = id_value(id_text(value))
    assert back == value and (isinstance(value, int) or type(back) is type(value))


@pytest.mark.parametrize("seq", ["-1", "-5", str(2**32)])
def test_a_group_sequence_amqp_cannot_carry_goes_as_the_jmsxgroupseq_property(seq):
    """group-sequence is unsigned: a closing JMSXGroupSeq (negative) from STOMP must
    not fail the delivery; the AMQP consumer sees it as the JMSXGroupSeq property."""
    eff = Deliver(1, "amqp-1", "1", _stored(), False)
    m = message_of(eff, b"", {"JMSXGroupID": "g", "JMSXGroupSeq": seq}, 0, False)
    back = Message()
    back.decode(m.encode())
    assert back.group_id == "g" and not back.group_sequence
    assert back.properties == {"JMSXGroupSeq": int(seq)}
    headers, _ = headers_of(back, 0)  # and an AMQP producer closes a group the same way
    assert headers["JMSXGroupSeq"] == seq


def test_every_header_and_properties_field_survives():
    """The fields read and set through Proton's C API, each one (not only a group's)."""
    sent = Message(
        body="hello",
        group_id="g1",
        group_sequence=7,
        durable=True,
        priority=9,
        expiry_time=1_764_072_000.123,
        creation_time=1_764_000_000.5,
        user_id=b"alice",
        reply_to="replies",
        subject="greeting",
        content_encoding="gzip",
        content_type="text/x-note",
        id="m-1",
        correlation_id=proton.ulong(5),
        properties={"k": "v"},
    )
    got = through(sent)
    assert (got.group_id, got.group_sequence, got.durable, got.priority) == ("g1", 7, True, 9)
    assert got.expiry_time == 1_764_072_000.123
    assert got.creation_time == 1_764_000_000.5
    assert (got.user_id, got.reply_to, got.subject) == (b"alice", "replies", "greeting")
    assert (got.content_encoding, got.content_type, got.body) == ("gzip", "text/x-note", "hello")
    assert (got.id, got.correlation_id, got.properties) == ("m-1", 5, {"k": "v"})
    assert got.address == "/queue/q" and got.first_acquirer


def test_a_time_to_live_becomes_an_expiry():
    headers, _ = headers_of(Message(ttl=2.5), 1_000)
    assert headers["expires"] == "3500"


def test_a_content_type_named_none_is_kept():
    """Proton's binding reads an unset content-type as the text 'None'; the C API
    tells the two apart, so a content-type that is really 'None' survives."""
    headers, _ = headers_of(Message(body=b"x", content_type="None"), 0)
    assert headers["content-type"] == "None"
    assert "content-type" not in headers_of(Message(body=b"x"), 0)[0]


def test_creation_time_is_the_stomp_timestamp_header():
    """AMQP creation-time (Qpid JMS: JMSTimestamp) <-> STOMP's "timestamp"
    (ActiveMQ's JMSTimestamp header, the selector's JMSTimestamp)."""
    headers, _ = headers_of(Message(body=b"x", creation_time=1_764_000_000.25), 0)
    assert headers["timestamp"] == "1764000000250"
    assert "timestamp" not in headers_of(Message(body=b"x"), 0)[0]
    eff = Deliver(1, "amqp-1", "1", _stored(), False)
    stamped = message_of(eff, b"x", {"timestamp": "1764000000250"}, 0, False)
    assert stamped.creation_time == 1_764_000_000.25 and not stamped.properties
    texted = message_of(eff, b"x", {"timestamp": "yesterday"}, 0, False)
    assert texted.creation_time == 0 and texted.properties == {"timestamp": "yesterday"}


# --- a message received over AMQP goes out as it came -----------------------------------


def _kept(message: Message) -> tuple[dict[str, str], bytes]:
    """headers_of as the connection calls it: with the encoding it kept."""
    codec = MessageCodec()
    data = message.encode()
    codec.reserve(len(data))
    codec.buffer[: len(data)] = data
    received = codec.decode_buffer(len(data))
    kept = codec.kept_encoding(len(data))
    return headers_of(received, 0, kept, codec.default_header)


def _out(parts: tuple[bytes, ...]) -> Message:
    m = Message()
    m.decode(b"".join(parts))
    return m


@pytest.mark.parametrize(
    "sent",
    [
        Message(body=b"b", group_id="g", group_sequence=2),
        Message(body=b"b"),
        Message(body=b"b", durable=True),
        Message(body=b"b", priority=2),
        Message(body=b"b", ttl=1.5),
        Message(body=b"b", expiry_time=1_764_000_000.5, ttl=3),
        Message(body="t", first_acquirer=True, delivery_count=4),
    ],
    ids=["defaults", "bare", "durable", "priority", "ttl", "expiry", "first-acquirer"],
)
def test_headers_of_skipping_a_default_header_reads_what_proton_reads(sent):
    headers, _ = _kept(sent)
    received = Message()
    received.decode(sent.encode())
    assert dict(headers) == headers_of(received, 0)[0]


def test_headers_of_keeps_the_encoding_and_the_same_headers():
    sent = Message(body=b"b", group_id="g", group_sequence=2, durable=True, priority=7)
    headers, body = _kept(sent)
    assert type(headers) is AmqpHeaders and body == b"b"
    received = Message()
    received.decode(sent.encode())
    assert headers == headers_of(received, 0)[0]  # the core sees what it saw before
    assert type(dict(headers)) is dict  # a copy (the core's, before a change) is plain


@pytest.mark.parametrize(
    ("count", "redelivered", "ttl"), [(0, False, 0), (2, True, 0), (0, False, 1500)]
)
def test_kept_encoding_writes_the_header_from_the_delivery(count, redelivered, ttl):
    sent = Message(body="hi", group_id="g", durable=True, priority=7, delivery_count=9)
    sent.annotations = {proton.symbol("x-opt-a"): "b"}
    headers, body = _kept(sent)
    assert isinstance(headers, AmqpHeaders)
    eff = Deliver(1, "amqp-1", "1", _stored(), redelivered)
    got = _out(transfer_as_received(eff, body, headers, count, redelivered, ttl))
    assert (got.durable, got.priority, got.delivery_count) == (True, 7, count)
    assert got.first_acquirer is not redelivered and got.ttl == ttl / 1000
    assert (got.body, got.group_id, got.annotations) == ("hi", "g", sent.annotations)


def test_kept_encoding_adds_the_group_first_key():
    headers, body = _kept(Message(body=b"b", group_id="g", properties={"n": 1}))
    assert isinstance(headers, AmqpHeaders)
    eff = Deliver(1, "amqp-1", "1", _stored(), False, "JMSXGroupFirstForConsumer")
    got = _out(transfer_as_received(eff, body, headers, 0, False))
    assert got.properties == {"n": 1, "JMSXGroupFirstForConsumer": True}
    assert bytes(got.body) == b"b"
