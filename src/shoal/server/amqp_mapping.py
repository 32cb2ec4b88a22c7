"""AMQP 1.0 messages <-> the core's string headers (docs/amqp.md, "Message mapping").

The core keeps a message's headers as strings, as STOMP carries them. What
AMQP says with a type is kept two ways:

- message-id and correlation-id: strings as they are; an id of another
  type (ulong, uuid, binary) in Qpid JMS's string form (``ID:AMQP_ULONG:5``,
  ``ID:AMQP_UUID:...``, ``ID:AMQP_BINARY:<hex>``), which Artemis uses too,
  so it reads back as the same type;
- application properties: the value's text, and for every value that is
  not a string its AMQP type in one extra header, :data:`TYPES_HEADER`
  (JSON, name -> type). An AMQP consumer gets the typed value back; a STOMP
  consumer sees the text (and that header). A STOMP header never gets a
  type: ``42`` sent over STOMP is the string ``"42"`` to an AMQP consumer.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import proton
from cproton import (
    PN_NULL,
    PN_STRING,
    ffi,
    lib,
    msgid2py,
    pn_message_set_correlation_id,
    pn_message_set_id,
)
from proton import Message as AmqpMessage

from shoal.broker.settings import DEFAULT_GROUP_HEADER
from shoal.errors import InvalidDestination, InvalidHeader
from shoal.protocol.amqp import proton_calls as calls
from shoal.protocol.amqp.events import AmqpHeaders
from shoal.protocol.amqp.message_io import (
    header_section,
    message_handle,
    with_application_property,
)

if TYPE_CHECKING:
    from shoal.broker.effects import Deliver

GROUP_ID = DEFAULT_GROUP_HEADER
GROUP_SEQ = "JMSXGroupSeq"
MESSAGE_ID = "JMSMessageID"  # Artemis' name for an AMQP message-id on its other protocols
USER_ID = "JMSXUserID"  # Artemis' name for an AMQP user-id
TYPES_HEADER = "x-amqp-types"
_MAX_SEQUENCE = 2**32 - 1  # group-sequence is a sequence-no (uint)
_MAX_SIGNED_SEQUENCE = 2**31 - 1
_MAX_TIMESTAMP = 2**63 - 1  # ms (a pn_timestamp_t)
_NULL: Final = ffi.NULL
_unpack: Final = ffi.unpack
_from_buffer: Final = ffi.from_buffer
# The pn_message_t fields, read and set through cffi's functions themselves.
_get_correlation_id: Final = lib.pn_message_get_correlation_id
_get_id: Final = lib.pn_message_get_id
_set_address: Final = lib.pn_message_set_address
_set_content_encoding: Final = lib.pn_message_set_content_encoding
_set_content_type: Final = lib.pn_message_set_content_type
_set_creation_time: Final = lib.pn_message_set_creation_time
_set_delivery_count: Final = lib.pn_message_set_delivery_count
_set_durable: Final = lib.pn_message_set_durable
_set_expiry_time: Final = lib.pn_message_set_expiry_time
_set_first_acquirer: Final = lib.pn_message_set_first_acquirer
_set_group_id: Final = lib.pn_message_set_group_id
_set_group_sequence: Final = lib.pn_message_set_group_sequence
_set_priority: Final = lib.pn_message_set_priority
_set_reply_to: Final = lib.pn_message_set_reply_to
_set_subject: Final = lib.pn_message_set_subject
_set_user_id: Final = lib.pn_message_set_user_id

# Headers with a field of their own in an AMQP message (not application properties).
OWN_HEADERS = frozenset(
    {
        GROUP_ID,
        GROUP_SEQ,
        MESSAGE_ID,
        USER_ID,
        TYPES_HEADER,
        "persistent",
        "priority",
        "expires",
        "timestamp",
        "correlation-id",
        "reply-to",
        "content-type",
        "content-encoding",
        "subject",
        "redelivered",
        "x-delivery-count",
        "content-length",
    }
)

# Qpid JMS's string forms of non-string ids (AMQPMessageIdHelper).
_ID_PREFIX = "ID:AMQP_"
_ULONG, _UUID, _BINARY, _STRING = (
    "ID:AMQP_ULONG:",
    "ID:AMQP_UUID:",
    "ID:AMQP_BINARY:",
    "ID:AMQP_STRING:",
)


def id_text(value: object) -> str:
    """An AMQP message-id / correlation-id -> its header text (reversible)."""
    if isinstance(value, str):
        return _STRING + value if value.startswith(_ID_PREFIX) else value
    if isinstance(value, uuid.UUID):
        return _UUID + str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _BINARY + bytes(value).hex()
    if isinstance(value, int) and not isinstance(value, bool):
        return _ULONG + str(value)
    return str(value)


def id_value(text: str) -> object:
    """Header text -> the AMQP id it stands for (a string unless it names a type)."""
    if not text.startswith(_ID_PREFIX):
        return text
    try:
        if text.startswith(_ULONG):
            return proton.ulong(int(text[len(_ULONG) :]))
        if text.startswith(_UUID):
            return uuid.UUID(text[len(_UUID) :])
        if text.startswith(_BINARY):
            return bytes.fromhex(text[len(_BINARY) :])
    except ValueError:
        return text  # not one of ours after all: keep what was sent
    if text.startswith(_STRING):
        return text[len(_STRING) :]
    return text


# AMQP type of an application-property value -> (name in TYPES_HEADER).
# Proton's subclasses come before the plain Python types they extend.
_TYPE_NAMES: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (bool, "boolean"),
    (proton.ulong, "ulong"),
    (proton.uint, "uint"),
    (proton.ushort, "ushort"),
    (proton.ubyte, "ubyte"),
    (proton.int32, "int"),
    (proton.short, "short"),
    (proton.byte, "byte"),
    (proton.timestamp, "timestamp"),
    (proton.decimal32, "decimal32"),
    (proton.decimal64, "decimal64"),
    (proton.decimal128, "decimal128"),
    (int, "long"),
    (proton.float32, "float"),
    (float, "double"),
    (proton.char, "char"),
    (proton.symbol, "symbol"),
    (uuid.UUID, "uuid"),
    ((bytes, bytearray, memoryview), "binary"),
)


def _to_int(kind: type) -> Callable[[str], Any]:
    return lambda text: kind(int(text))


_FROM_TEXT: dict[str, Callable[[str], Any]] = {
    "boolean": lambda text: {"true": True, "false": False}[text],
    "ulong": _to_int(proton.ulong),
    "uint": _to_int(proton.uint),
    "ushort": _to_int(proton.ushort),
    "ubyte": _to_int(proton.ubyte),
    "int": _to_int(proton.int32),
    "short": _to_int(proton.short),
    "byte": _to_int(proton.byte),
    "timestamp": _to_int(proton.timestamp),
    "decimal32": _to_int(proton.decimal32),
    "decimal64": _to_int(proton.decimal64),
    "decimal128": _to_int(proton.decimal128),
    "long": int,
    "float": lambda text: proton.float32(float(text)),
    "double": float,
    "char": lambda text: proton.char(text) if len(text) == 1 else _bad(text),
    "symbol": proton.symbol,
    "uuid": uuid.UUID,
    "binary": bytes.fromhex,
    "null": lambda text: None,
}


def _bad(text: str) -> Any:
    raise ValueError(text)


def _property_text(value: object) -> tuple[str, str | None]:
    """An application-property value -> (header text, AMQP type name; None for a string)."""
    if type(value) is str:
        return value, None
    if value is None:
        return "", "null"
    for kind, name in _TYPE_NAMES:
        if isinstance(value, kind):
            if name == "boolean":
                return ("true" if value else "false"), name
            if name == "binary":
                return bytes(value).hex(), name  # type: ignore[call-overload]
            if name in ("float", "double"):
                # float's and int's own text: a compiled float(value) / int(value)
                # keeps a Proton subclass, whose repr names its type.
                return float.__repr__(value), name
            if isinstance(value, int):
                return int.__repr__(value), name
            return str(value), name
    return str(value), None  # a list or map (not allowed by AMQP): its text


def _property_value(text: str, kind: str | None) -> object:
    convert = _FROM_TEXT.get(kind) if kind is not None else None
    if convert is None:
        return text
    try:
        return convert(text)
    except (ValueError, KeyError, OverflowError, AssertionError):
        return text  # a header edited on the way (e.g. by a STOMP client): keep its text


def destination_for(address: str | None, capabilities: tuple[str, ...]) -> str:
    """An AMQP address -> a Shoal destination, as Artemis and Qpid JMS name them."""
    if not address:
        raise InvalidDestination("the link has no address")
    for prefix, kind in (("queue://", "/queue/"), ("topic://", "/topic/")):
        if address.startswith(prefix):
            return kind + address[len(prefix) :]
    if address.startswith(("/queue/", "/topic/", "/temp-queue/", "/temp-topic/")):
        return address
    if "topic" in capabilities:
        return "/topic/" + address
    return "/queue/" + address


def address_for(destination: str) -> str:
    """A Shoal destination -> the AMQP address a client links to (Artemis: the bare
    name for a queue; ``topic://`` keeps a topic a topic without annotations)."""
    if destination.startswith("/queue/"):
        return destination[len("/queue/") :]
    if destination.startswith("/topic/"):
        return "topic://" + destination[len("/topic/") :]
    return destination


def _id_of(msgid: Any) -> object:
    """A ``pn_msgid_t`` (set) -> the id, as Proton's binding reads it."""
    if msgid.type == PN_STRING:
        return _unpack(msgid.u.as_bytes.start, msgid.u.as_bytes.size).decode()
    return msgid2py(msgid)


def headers_of(
    message: AmqpMessage,
    now_ms: int,
    encoding: tuple[bytes, bytes | None] | None = None,
    default_header: bool = False,
) -> tuple[dict[str, str], bytes]:
    """A received AMQP message -> (core headers, body).

    With its ``encoding`` as received (``TransferReceived.encoding``) the
    headers are an ``AmqpHeaders`` that keep it for AMQP consumers.
    ``default_header``: the message has no header section or one of
    defaults (``TransferReceived.default_header``), so its fields are not read.
    The fields are read from the ``pn_message_t`` through Proton's C API: the
    binding's properties cost a Python call and a wrapper or two each."""
    headers: dict[str, str]
    if encoding is None:
        headers = {}
    else:
        kept = AmqpHeaders()
        kept.encoding = encoding
        headers = kept
    props = message.properties
    if props:
        types: dict[str, str] | None = None
        for key, value in props.items():
            name = str(key)
            text, kind = _property_text(value)
            headers[name] = text
            if kind is not None:
                if types is None:
                    types = {}
                types[name] = kind
        headers.pop(TYPES_HEADER, None)  # only ours: a client's own is not trusted
        if types:
            headers[TYPES_HEADER] = json.dumps(types, separators=(",", ":"))
    (
        group_id,
        group_sequence,
        durable,
        priority,
        expiry,  # ms
        ttl,  # ms
        created,  # ms; JMSTimestamp, STOMP's "timestamp" (ActiveMQ)
        id_type,
        correlation_type,
        user_id,
        reply_to,
        subject,
        content_encoding,
        ctype,
    ) = calls.message_fields(message_handle(message), not default_header)
    if group_id is not None:
        headers[GROUP_ID] = group_id
        if group_sequence:
            # Read as a signed int, as Artemis does: Qpid JMS writes JMSXGroupSeq = -1
            # (close the group) as the sequence-no 2^32 - 1.
            if group_sequence > _MAX_SIGNED_SEQUENCE:
                group_sequence -= _MAX_SEQUENCE + 1
            headers[GROUP_SEQ] = str(group_sequence)
    if default_header:
        headers["persistent"] = "false"
    else:
        headers["persistent"] = "true" if durable else "false"
        if priority != 4:
            headers["priority"] = str(priority)
    if expiry:
        headers["expires"] = str(expiry)
    elif not default_header and ttl:
        headers["expires"] = str(now_ms + ttl)
    if created:
        headers["timestamp"] = str(created)
    if id_type != PN_NULL:
        headers[MESSAGE_ID] = id_text(_id_of(_get_id(message._msg)))
    if correlation_type != PN_NULL:
        headers["correlation-id"] = id_text(_id_of(_get_correlation_id(message._msg)))
    if user_id is not None:
        headers[USER_ID] = user_id.decode("utf-8", "replace")
    if reply_to:
        headers["reply-to"] = destination_for(reply_to, ())
    if subject:
        headers["subject"] = subject
    if content_encoding is not None:
        headers["content-encoding"] = content_encoding
    body = message.body
    if ctype is not None:
        headers["content-type"] = ctype
    if body is None:
        data = b""
    elif isinstance(body, (bytes, bytearray, memoryview)):
        data = bytes(body)
    elif isinstance(body, str):
        data = body.encode()
        headers.setdefault("content-type", "text/plain")
    else:
        raise InvalidHeader(
            "body", type(body).__name__, "only data sections and string amqp-values are carried"
        )
    return headers, data


def _types_of(headers: dict[str, str]) -> dict[str, str]:
    text = headers.get(TYPES_HEADER)
    if text is None:
        return {}
    try:
        types = json.loads(text)
    except ValueError:
        return {}
    return types if isinstance(types, dict) else {}


def transfer_as_received(
    eff: Deliver,
    body: bytes,
    headers: AmqpHeaders,
    count: int,
    redelivered: bool,
    ttl: int = 0,
) -> tuple[bytes, ...]:
    """A core delivery of a message received over AMQP -> its transfer, in
    parts: a header section of ours (``ttl``: ms left, 0 for none), then the
    sections as received (with the queue's ``group-first-key`` property added
    when the delivery asks for it)."""
    p = headers.get("priority")
    priority = min(255, int(p)) if p is not None and p.isdigit() else 4
    head = header_section(
        headers.get("persistent") == "true", priority, ttl, not redelivered, count
    )
    before, after = headers.encoding
    if eff.first_key is not None:
        whole = before if after is None else before + body + after
        return head, with_application_property(whole, eff.first_key, True)
    if after is None:
        return head, before
    return head, before, body, after


def message_of(
    eff: Deliver,
    body: bytes,
    headers: dict[str, str],
    count: int,
    redelivered: bool,
    blank: AmqpMessage | None = None,
) -> AmqpMessage:
    """A core delivery -> the AMQP message to transfer (filled into ``blank``,
    a message with nothing set, if given)."""
    m = AmqpMessage() if blank is None else blank
    impl = m._msg  # fields set through Proton's C API, as headers_of reads them
    status = 0  # a setter's error (negative) survives the |
    props: dict[str, Any] = {}
    types = _types_of(headers) if TYPES_HEADER in headers else None
    for key, value in headers.items():
        if key not in OWN_HEADERS:
            props[key] = _property_value(value, types.get(key)) if types else value
    gid = headers.get(GROUP_ID)
    if gid is not None:
        status |= _set_group_id(impl, gid.encode())
        seq = headers.get(GROUP_SEQ)
        if seq is not None and seq.lstrip("-").isdigit():
            n = int(seq)
            if 0 <= n <= _MAX_SEQUENCE:
                status |= _set_group_sequence(impl, n)
            else:  # a closing (negative) JMSXGroupSeq: AMQP's group-sequence is unsigned
                props[GROUP_SEQ] = n
    if headers.get("persistent", "").lower() == "true":  # false is the default
        status |= _set_durable(impl, True)
    p = headers.get("priority")
    if p is not None and p.isdigit():
        status |= _set_priority(impl, min(9, int(p)))
    e = headers.get("expires")
    if e is not None and e.isdigit() and int(e) > 0:
        status |= _set_expiry_time(impl, min(int(e), _MAX_TIMESTAMP))
    ts = headers.get("timestamp")
    if ts is not None:
        if ts.isdigit() and int(ts) > 0:
            status |= _set_creation_time(impl, min(int(ts), _MAX_TIMESTAMP))
        else:  # a STOMP producer's own text: an application property, as before
            props["timestamp"] = ts
    mid = headers.get(MESSAGE_ID)
    if mid is not None:
        pn_message_set_id(impl, id_value(mid))
    cid = headers.get("correlation-id")
    if cid is not None:
        pn_message_set_correlation_id(impl, id_value(cid))
    uid = headers.get(USER_ID)
    if uid is not None:
        raw = uid.encode()
        status |= _set_user_id(impl, (len(raw), _from_buffer(raw)))
    reply_to = headers.get("reply-to")
    if reply_to is not None:
        status |= _set_reply_to(impl, address_for(reply_to).encode())
    subject = headers.get("subject")
    if subject is not None:
        status |= _set_subject(impl, subject.encode())
    encoding = headers.get("content-encoding")
    if encoding is not None:
        status |= _set_content_encoding(impl, encoding.encode())
    ctype = headers.get("content-type")
    if ctype is not None:
        status |= _set_content_type(impl, ctype.encode())
    if ctype is not None and ctype.startswith("text/"):
        try:
            m.body = body.decode()
        except UnicodeDecodeError:
            m.body = body
    else:
        m.body = body
    if eff.first_key is not None:
        props[eff.first_key] = True
    if props:
        m.properties = props
    status |= _set_address(impl, eff.message.destination.encode())
    if count:  # 0 is the default
        status |= _set_delivery_count(impl, count)
    status |= _set_first_acquirer(impl, not redelivered)
    if status < 0:
        m._check(status)  # raises Proton's exception
    return m
