"""message_io encodes and decodes exactly as proton.Message does."""

from __future__ import annotations

import pytest
from proton import Data, Described, Message, MessageException, symbol, ulong

from shoal.protocol.amqp.message_io import (
    RECYCLED_BODY_MAX,
    RECYCLED_MAX,
    RECYCLED_PROPERTIES_MAX,
    MessageCodec,
    header_section,
    with_application_property,
)

MESSAGES = [
    lambda: Message(body=b"x" * 256, group_id="g1", group_sequence=5),
    lambda: Message(body="caf\u00e9", content_type="text/plain", durable=True, priority=7),
    lambda: Message(body=None, properties={"a": 1, "b": "two", "c": True}),
    lambda: Message(body=[1, "two", b"3"], subject="s", correlation_id="c-1"),
    lambda: Message(body={"k": "v"}, annotations={symbol("x-opt-a"): "b"}),
    lambda: Message(body=b"", instructions={symbol("x-i"): 1}, delivery_count=3),
    lambda: Message(body=b"y" * 5000, address="/queue/q", first_acquirer=True, ttl=2.5),
]


@pytest.mark.parametrize("make", MESSAGES)
def test_encode_is_byte_identical_to_proton(make):
    assert bytes(MessageCodec(16).encode(make())) == bytes(make().encode())


@pytest.mark.parametrize("make", MESSAGES)
def test_decode_gives_what_proton_gives(make):
    data = make().encode()
    ours, theirs = MessageCodec().decode(data), Message()
    theirs.decode(data)
    for attr in (
        "instructions",
        "annotations",
        "properties",
        "group_id",
        "group_sequence",
        "durable",
        "priority",
        "subject",
        "content_type",
        "address",
        "delivery_count",
    ):
        assert getattr(ours, attr) == getattr(theirs, attr), attr
    body, expected = ours.body, theirs.body
    if isinstance(expected, memoryview):  # a binary body: ours is its bytes (a copy)
        assert type(body) is bytes
        expected = bytes(expected)
    else:
        assert type(body) is type(expected)
    assert body == expected


def test_codec_grows_its_buffer_and_keeps_the_size():
    enc = MessageCodec(16)
    big = Message(body=b"z" * 3000)
    assert bytes(enc.encode(big)) == bytes(big.encode())
    assert len(enc.buffer) >= 3000
    small = Message(body=b"a")
    assert bytes(enc.encode(small)) == bytes(small.encode())


def test_one_codec_gives_each_message_its_own_bytes():
    enc = MessageCodec()
    first = enc.encode(Message(body=b"one", group_id="g1"))
    second = enc.encode(Message(body=b"two", group_id="g2"))
    assert bytes(first) == bytes(Message(body=b"one", group_id="g1").encode())
    assert bytes(second) == bytes(Message(body=b"two", group_id="g2").encode())


_GOOD = bytes(Message(body=b"x" * 20, group_id="g").encode())


@pytest.mark.parametrize("data", [_GOOD[:-5], _GOOD[:12], b"\x00Sp\xff\xff", b"garbage!"])
def test_malformed_bytes_decode_as_proton_decodes_them(data):
    theirs = Message()
    try:
        theirs.decode(data)
    except MessageException:
        with pytest.raises(MessageException):
            MessageCodec().decode(data)
        return
    ours = MessageCodec().decode(data)
    assert (ours.body, ours.group_id, ours.properties) == (
        theirs.body,
        theirs.group_id,
        theirs.properties,
    )


def test_a_message_decoded_from_the_buffer_survives_the_buffers_reuse():
    codec = MessageCodec()
    first = Message(body=b"first", group_id="g1", properties={"k": "v"})
    size = codec.encode_to_buffer(first)
    decoded = codec.decode_buffer(size)
    codec.encode_to_buffer(Message(body=b"other", group_id="g2", properties={"k": "w"}))
    assert (bytes(decoded.body), decoded.group_id, decoded.properties) == (
        b"first",
        "g1",
        {"k": "v"},
    )


def _full() -> Message:
    return Message(
        body=b"full body",
        properties={"p": 1},
        annotations={symbol("x-opt-a"): "b"},
        instructions={symbol("x-i"): 1},
        group_id="g",
        group_sequence=9,
        durable=True,
        priority=8,
        ttl=3.0,
        first_acquirer=True,
        delivery_count=2,
        address="/queue/a",
        subject="s",
        reply_to="r",
        correlation_id="c",
        content_type="text/plain",
    )


def test_a_recycled_message_comes_back_blank():
    codec = MessageCodec()
    used = _full()
    codec.encode(used)
    codec.recycle(used)
    blank = codec.blank()
    assert blank is used
    assert codec.encode(blank) == bytes(Message().encode())
    blank.body = b"x"
    blank.group_id = "g2"
    assert codec.encode(blank) == bytes(Message(body=b"x", group_id="g2").encode())


@pytest.mark.parametrize("make", MESSAGES)
def test_decoding_into_a_recycled_message_keeps_nothing_of_the_old_one(make):
    codec = MessageCodec()
    old = codec.decode(bytes(_full().encode()))
    codec.recycle(old)
    data = make().encode()
    ours, theirs = codec.decode(data), Message()
    assert ours is old
    theirs.decode(data)
    assert codec.encode(ours) == bytes(theirs.encode())
    assert (ours.instructions, ours.annotations, ours.properties) == (
        theirs.instructions,
        theirs.annotations,
        theirs.properties,
    )


@pytest.mark.parametrize(
    "message",
    [
        Message(body=b"x" * (RECYCLED_BODY_MAX + 1)),
        Message(body=[1, 2, 3]),
        Message(body=b"", properties={f"p{i}": i for i in range(RECYCLED_PROPERTIES_MAX + 1)}),
    ],
)
def test_large_messages_are_not_kept_for_reuse(message):
    # A cleared pn_message_t keeps its memory: a pool of big ones would hold it.
    codec = MessageCodec()
    codec.recycle(message)
    assert codec.blank() is not message


def test_only_a_few_messages_are_kept_for_reuse():
    codec = MessageCodec()
    messages = [Message(body=b"m") for _ in range(RECYCLED_MAX + 5)]
    for m in messages:
        codec.recycle(m)
    reused = {id(codec.blank()) for _ in range(RECYCLED_MAX + 5)}
    assert len(reused & {id(m) for m in messages}) == RECYCLED_MAX


def test_codecs_given_one_pool_reuse_each_others_messages():
    # A producer's connection hands back what a consumer's then fills and sends.
    pool: list[Message] = []
    producer, consumer = MessageCodec(pool=pool), MessageCodec(pool=pool)
    received = [producer.decode(bytes(_full().encode())) for _ in range(3)]
    for m in received:
        producer.recycle(m)
    reused = [consumer.blank() for _ in range(3)]
    assert {id(m) for m in reused} == {id(m) for m in received}
    assert consumer.encode(reused[0]) == bytes(Message().encode())
    assert consumer.blank() not in received  # the pool is empty again: a new one


def test_a_section_unset_after_an_encode_is_gone_from_the_next_one():
    # blank() empties every section, so its message's first encode clears none;
    # the encodes after it must clear what the one before put there.
    codec = MessageCodec()
    m = codec.blank()
    m.body, m.properties, m.annotations = b"x", {"k": "v"}, {symbol("x-opt-a"): "b"}
    m.instructions = {symbol("x-i"): 1}
    assert codec.encode(m) == bytes(_like(m).encode())
    m.properties = m.annotations = m.instructions = None
    m.body = None
    assert codec.encode(m) == bytes(Message().encode())


def _like(m: Message) -> Message:
    return Message(
        body=m.body, properties=m.properties, annotations=m.annotations, instructions=m.instructions
    )


# --- the encoding kept for AMQP consumers -------------------------------------------


def _received(codec: MessageCodec, data: bytes) -> tuple[Message, tuple | None]:
    """As the connection takes a transfer: into the buffer, decoded, then kept."""
    codec.reserve(len(data))
    codec.buffer[: len(data)] = data
    message = codec.decode_buffer(len(data))
    return message, codec.kept_encoding(len(data))


def _decoded(data: bytes) -> Message:
    m = Message()
    m.decode(data)
    return m


def _footer(annotations: dict) -> bytes:
    d = Data()
    d.put_object(Described(ulong(0x78), annotations))
    return bytes(d.encode())


@pytest.mark.parametrize("body", [b"x" * 300, "caf\u00e9", b""], ids=["binary", "text", "empty"])
def test_kept_encoding_drops_header_and_delivery_annotations_and_splits_at_the_body(body):
    sent = Message(body=body, group_id="g", durable=True, priority=7, delivery_count=2)
    sent.annotations = {symbol("x-opt-a"): "b"}
    sent.instructions = {symbol("x-opt-hop"): 1}
    data = sent.encode()
    message, kept = _received(MessageCodec(16), data)
    before, after = kept
    raw = body.encode() if isinstance(body, str) else body
    assert after == b"" and data.endswith(before + raw)
    again = _decoded(header_section(False, 4, 0, True, 0) + before + raw + after)
    assert again.annotations == {symbol("x-opt-a"): "b"} and not again.instructions
    assert (again.group_id, again.body if isinstance(body, str) else bytes(again.body)) == (
        "g",
        body,
    )
    # the header is the broker's, not the sender's
    assert (again.durable, again.priority, again.delivery_count) == (False, 4, 0)


def test_kept_encoding_with_a_footer_splits_around_the_body_too():
    data = Message(body=b"zz", durable=True).encode() + _footer({symbol("x-f"): "v"})
    message, kept = _received(MessageCodec(), data)
    before, after = kept
    assert after == _footer({symbol("x-f"): "v"}) and data.endswith(before + b"zz" + after)
    assert not before.startswith(b"\x00Sp")  # the header is not kept


def test_kept_encoding_of_a_body_that_is_not_one_run_is_the_whole_message():
    sent = Message(body={"k": "v"}, group_id="g")  # an amqp-value map
    data = sent.encode()
    _, (whole, after) = _received(MessageCodec(), data)
    assert after is None and data.endswith(whole) and whole.startswith(b"\x00Ss")


@pytest.mark.parametrize(
    "data, default",
    [
        (Message(body=b"x", group_id="g").encode(), True),  # Proton's list0 header
        (b"\x00Sw\xa0\x01x", True),  # no header section at all
        (Message(body=b"x", durable=True).encode(), False),
        (Message(body=b"x", priority=7).encode(), False),
        (Message(body=b"x", ttl=2.5).encode(), False),
        (Message(body=b"x", first_acquirer=True).encode(), False),  # not a default either
    ],
    ids=["list0", "none", "durable", "priority", "ttl", "first-acquirer"],
)
def test_kept_encoding_says_whether_the_header_is_all_defaults(data, default):
    codec = MessageCodec()
    message, kept = _received(codec, data)
    assert kept is not None and codec.default_header is default
    if default:  # what a reader may then take without asking Proton
        assert (message.durable, message.priority, message.ttl) == (False, 4, 0)


def test_default_header_is_false_when_the_encoding_is_not_kept():
    codec = MessageCodec()
    _received(codec, Message(body=b"x").encode())
    assert codec.default_header
    header = b"\x00\x80" + (0x70).to_bytes(8, "big") + b"\xc0\x02\x01\x41"
    _, kept = _received(codec, header + b"\x00Sw\xa0\x03abc")
    assert kept is None and not codec.default_header


def test_a_header_with_a_long_form_descriptor_is_not_kept():
    # a header section [durable=true] whose descriptor is a ulong (0x80), which
    # Proton never writes but may read
    header = b"\x00\x80" + (0x70).to_bytes(8, "big") + b"\xc0\x02\x01\x41"
    data = header + b"\x00Sw\xa0\x03abc"
    message, kept = _received(MessageCodec(), data)
    assert message.durable and bytes(message.body) == b"abc"
    assert kept is None  # mapped from its fields instead


@pytest.mark.parametrize("count", [0, 3, 40])
def test_header_section_is_proton_s_header(count):
    m = _decoded(header_section(True, 9, 1500, count == 0, count) + b"\x00Sw@")
    assert (m.durable, m.priority, m.ttl, m.first_acquirer, m.delivery_count) == (
        True,
        9,
        1.5,
        count == 0,
        count,
    )
    if count < 16:  # the common ones are made once
        assert header_section(False, 4, 0, True, count) is header_section(False, 4, 0, True, count)


@pytest.mark.parametrize("props", [None, {"n": 1, "s": "t"}], ids=["none", "some"])
def test_with_application_property_adds_one_and_keeps_the_rest(props):
    sent = Message(body=b"b", group_id="g", properties=props)
    sent.annotations = {symbol("x-opt-a"): "b"}
    data = sent.encode() + _footer({symbol("x-f"): "v"})
    _, (before, after) = _received(MessageCodec(), data)
    added = with_application_property(before + b"b" + after, "first", True)
    m = _decoded(added)
    assert m.properties == {**(props or {}), "first": True}
    assert m.annotations == {symbol("x-opt-a"): "b"} and bytes(m.body) == b"b"
    assert added.endswith(_footer({symbol("x-f"): "v"}))


def test_with_application_property_reads_long_and_symbolic_descriptors():
    # application properties under a ulong descriptor (0x80 form), as a sender may
    # write them; Proton reads them, and so does the walk over the sections
    props = b"\x00\x80" + (0x74).to_bytes(8, "big") + b"\xc1\x06\x02\xa1\x01nT\x01"  # {"n": 1}
    body = b"\x00Su\xa0\x01b"
    m = _decoded(with_application_property(props + body, "first", True))
    assert m.properties == {"n": 1, "first": True} and bytes(m.body) == b"b"
    # a body under its symbolic name: the new section goes in front of it
    symbolic = b"\x00\xa3\x10amqp:data:binary\xa0\x01b"
    added = with_application_property(symbolic, "first", True)
    assert added.endswith(symbolic)
    assert _decoded(added[: -len(symbolic)] + body).properties == {"first": True}
