"""A message's runs of calls into Proton's C API, one Python call per run.

cffi drops and retakes the GIL around every call into Proton, and an AMQP
message takes several dozen of them (AW1's profile, docs/amqp.md). Each
function here makes one run that the hot path makes per event or per
message: the next event, a transfer's reads, a peer's outcome, a send, a
received message's decode and fields. Two implementations of the same
functions:

* ``_proton_calls.pyx`` (Cython, built by setup.py beside the mypyc
  modules) calls Proton's functions through the pointers cffi hands out,
  keeping the GIL: no headers, and one Python call per run. Its handles are
  the C pointers as ints.
* this module (pure Python through cffi), the fallback where the Cython
  module is not built, is stale or ``SHOAL_PURE`` is set. Its handles are
  cffi's pointers.

Callers treat handles as opaque, hashable values: they get them from
``handle`` (once per connection, link or message) and from these functions,
and pass them back; ``pointer`` turns one into cffi's pointer for Proton's
Python wrappers (the paths that are not per message).
"""

from __future__ import annotations

import importlib
import struct
import warnings
from typing import Any

from cproton import PN_ACCEPTED, PN_BINARY, PN_STRING, ffi, lib
from proton import Event

from shoal import _native

Handle = Any

#: receive_transfer's status: what became of the transfer.
RECEIVED = 0  # in the buffer (size: the bytes received, negative on error)
NOT_READABLE = 1
ABORTED = 2  # the sender aborted it: advanced past and settled here
PARTIAL = 3  # more frames to come
TOO_LARGE = 4  # larger than max_bytes (size: the pending bytes)
SHORT_BUFFER = 5  # the buffer is smaller than size: grow it and call again

#: Which implementation runs ("compiled" or "pure"), set on import.
IMPLEMENTATION = "pure"

_NULL = ffi.NULL
_TERMINAL_STATES = frozenset((0x24, 0x25, 0x26, 0x27))  # accepted ... modified
_RECEIVED_STATE = 0x23
_MODIFIED_STATE = 0x27
_tag_pack = struct.Struct("<Q").pack_into
DELIVERY_EVENT: int = Event.DELIVERY.number
FLOW_EVENT: int = Event.LINK_FLOW.number


def handle(pointer: Any) -> Handle:
    """A handle for one of cffi's pointers (a connection's, link's or message's)."""
    return pointer


def pointer(handle: Handle, ctype: str) -> Any:
    """cffi's pointer (of C type ``ctype``, e.g. ``"pn_event_t *"``) for a handle."""
    return handle


# cffi's functions bound once: a lookup on ``lib`` per call adds up in the
# pure build, which runs these per message.
_collector_peek = lib.pn_collector_peek
_collector_pop = lib.pn_collector_pop
_event_type = lib.pn_event_type
_event_delivery = lib.pn_event_delivery
_event_link = lib.pn_event_link
_delivery_link = lib.pn_delivery_link
_readable = lib.pn_delivery_readable
_pending = lib.pn_delivery_pending
_partial = lib.pn_delivery_partial
_aborted = lib.pn_delivery_aborted
_link_recv = lib.pn_link_recv
_link_advance = lib.pn_link_advance
_settle = lib.pn_delivery_settle
_settled = lib.pn_delivery_settled
_remote_state = lib.pn_delivery_remote_state
_remote = lib.pn_delivery_remote
_is_failed = lib.pn_disposition_is_failed
_is_undeliverable = lib.pn_disposition_is_undeliverable
_new_delivery = lib.pn_delivery
_link_send = lib.pn_link_send
_update = lib.pn_delivery_update
_link_credit = lib.pn_link_credit
_message_decode = lib.pn_message_decode
_data_next = lib.pn_data_next
_data_type = lib.pn_data_type
_message_properties = lib.pn_message_properties
_message_body = lib.pn_message_body
_get_binary = lib.pn_data_get_binary
_get_string = lib.pn_data_get_string
_get_group_id = lib.pn_message_get_group_id
_get_group_sequence = lib.pn_message_get_group_sequence
_is_durable = lib.pn_message_is_durable
_get_priority = lib.pn_message_get_priority
_get_expiry_time = lib.pn_message_get_expiry_time
_get_ttl = lib.pn_message_get_ttl
_get_creation_time = lib.pn_message_get_creation_time
_get_id = lib.pn_message_get_id
_get_correlation_id = lib.pn_message_get_correlation_id
_get_user_id = lib.pn_message_get_user_id
_get_reply_to = lib.pn_message_get_reply_to
_get_subject = lib.pn_message_get_subject
_get_content_encoding = lib.pn_message_get_content_encoding
_get_content_type = lib.pn_message_get_content_type
_from_buffer = ffi.from_buffer
_unpack = ffi.unpack
_string = ffi.string


def take_event(
    collector: Handle, pop_previous: bool, wanted: bytes
) -> tuple[int, Handle, Handle] | None:
    """The collector's next event whose kind ``wanted[kind]`` marks, others
    popped unseen; None when there is none. ``pop_previous``: pop the event
    this returned last first (events are popped only once handled, as Proton
    keeps what they name alive until then).

    Returns ``(kind, delivery, its link)`` for a delivery event, ``(kind,
    link, None)`` for a flow event, ``(kind, event, None)`` for others."""
    if pop_previous:
        _collector_pop(collector)
    while True:
        event = _collector_peek(collector)
        if event == _NULL:
            return None
        kind: int = _event_type(event)
        if kind < len(wanted) and wanted[kind]:
            break
        _collector_pop(collector)
    if kind == DELIVERY_EVENT:
        delivery = _event_delivery(event)
        return kind, delivery, _delivery_link(delivery)
    if kind == FLOW_EVENT:
        return kind, _event_link(event), None
    return kind, event, None


def pop_event(collector: Handle) -> None:
    _collector_pop(collector)


def receive_transfer(
    delivery: Handle, link: Handle, buffer: bytearray, buffer_pointer: Any, max_bytes: int
) -> tuple[int, int, bool]:
    """Receive a whole transfer into ``buffer`` (``buffer_pointer``: cffi's
    pointer to it) and advance the link: ``(status, size, remotely settled)``."""
    if not _readable(delivery):
        return NOT_READABLE, 0, False
    size: int = _pending(delivery)
    if _partial(delivery) or _aborted(delivery):
        if _aborted(delivery):
            _link_advance(link)
            _settle(delivery)
            return ABORTED, size, False
        return PARTIAL, size, False
    if size > max_bytes:
        return TOO_LARGE, size, False
    if size > len(buffer):
        return SHORT_BUFFER, size, False
    received: int = _link_recv(link, buffer_pointer, size)
    _link_advance(link)
    return RECEIVED, received, bool(_settled(delivery))


def read_outcome(delivery: Handle) -> tuple[int, bool, bool, bool]:
    """The peer's disposition of one of our transfers: ``(state, settled,
    failed, undeliverable)``, settled here too when it is final (a terminal
    outcome, or ``received`` the peer settled). A state that is not an
    outcome is returned unsettled, touching nothing."""
    state: int = _remote_state(delivery)
    if state not in _TERMINAL_STATES and state != _RECEIVED_STATE:
        return state, False, False, False
    settled = state != _RECEIVED_STATE or bool(_settled(delivery))
    failed = undeliverable = False
    if state == _MODIFIED_STATE:
        remote = _remote(delivery)
        failed = bool(_is_failed(remote))
        undeliverable = bool(_is_undeliverable(remote))
    if settled:
        _settle(delivery)
    return state, settled, failed, undeliverable


_tag_bytes = ffi.new("char[8]")
_tag = ffi.new("pn_delivery_tag_t *", (8, _tag_bytes))
_tag_view = ffi.buffer(_tag_bytes)


def send_transfer(
    link: Handle, tag: int, data: bytes | bytearray, data_pointer: Any, size: int, settled: bool
) -> Handle:
    """A new delivery tagged ``tag`` (8 bytes, little-endian) carrying the first
    ``size`` bytes of ``data`` (``data_pointer``: cffi's pointer to it, or
    None), the link advanced past it; settled at once if ``settled``."""
    _tag_pack(_tag_view, 0, tag)
    delivery = _new_delivery(link, _tag[0])
    _link_send(link, data if data_pointer is None else data_pointer, size)
    _link_advance(link)
    if settled:
        _settle(delivery)
    return delivery


def accept(delivery: Handle) -> None:
    """Settle a received transfer as accepted."""
    _update(delivery, PN_ACCEPTED)
    _settle(delivery)


def settle(delivery: Handle) -> None:
    _settle(delivery)


def link_flow(link: Handle) -> tuple[int, int, bool]:
    """``(state, credit, drain)`` of a link."""
    return lib.pn_link_state(link), _link_credit(link), bool(lib.pn_link_get_drain(link))


def link_credit(link: Handle) -> int:
    credit: int = _link_credit(link)
    return credit


def decode_message(
    message: Handle, buffer: bytes | bytearray | memoryview, buffer_pointer: Any, size: int
) -> tuple[int, bool, int, bytes | None]:
    """Decode the first ``size`` bytes of ``buffer`` into a ``pn_message_t``:
    ``(status, has properties, body type, body bytes)``. The type is 0 without
    a body; the bytes are a binary's or a string's (UTF-8), else None. Both
    the properties and the body are left at their first node, to be read."""
    status: int = _message_decode(
        message, _from_buffer(buffer) if buffer_pointer is None else buffer_pointer, size
    )
    if status < 0:
        return status, False, 0, None
    has_properties = bool(_data_next(_message_properties(message)))
    node = _message_body(message)
    if not _data_next(node):
        return status, has_properties, 0, None
    kind: int = _data_type(node)
    if kind == PN_BINARY:
        raw = _get_binary(node)
    elif kind == PN_STRING:
        raw = _get_string(node)
    else:
        return status, has_properties, kind, None
    return status, has_properties, kind, _unpack(raw.start, raw.size)


def message_fields(message: Handle, read_header: bool) -> tuple[Any, ...]:
    """A ``pn_message_t``'s fields the mapping reads, in one tuple:
    ``(group_id, group_sequence, durable, priority, expiry_time, ttl,
    creation_time, id type, correlation_id type, user_id, reply_to,
    subject, content_encoding, content_type)``; text fields None when unset,
    user_id None when empty, the ids' Proton type (``PN_NULL`` when unset).
    Without ``read_header`` (a header of defaults) durable, priority and ttl
    are returned as the defaults (False, 4, 0), unread."""
    group_id = _get_group_id(message)
    reply_to = _get_reply_to(message)
    subject = _get_subject(message)
    content_encoding = _get_content_encoding(message)
    content_type = _get_content_type(message)
    user = _get_user_id(message)
    return (
        None if group_id == _NULL else _string(group_id).decode("utf-8", "replace"),
        _get_group_sequence(message),
        bool(_is_durable(message)) if read_header else False,
        _get_priority(message) if read_header else 4,
        _get_expiry_time(message),
        _get_ttl(message) if read_header else 0,
        _get_creation_time(message),
        _get_id(message).type,
        _get_correlation_id(message).type,
        _unpack(user.start, user.size) if user.size else None,
        None if reply_to == _NULL else _string(reply_to).decode("utf-8", "replace"),
        None if subject == _NULL else _string(subject).decode("utf-8", "replace"),
        None if content_encoding == _NULL else _string(content_encoding).decode("utf-8", "replace"),
        None if content_type == _NULL else _string(content_type).decode("utf-8", "replace"),
    )


_FUNCTIONS = (
    "handle",
    "pointer",
    "take_event",
    "pop_event",
    "receive_transfer",
    "read_outcome",
    "send_transfer",
    "accept",
    "settle",
    "link_flow",
    "link_credit",
    "decode_message",
    "message_fields",
)


def _use_compiled() -> None:
    """Replace the functions above with the Cython module's, where it may run."""
    global IMPLEMENTATION
    if _native.pure_reason:  # SHOAL_PURE, or a stale build
        return
    try:
        compiled = importlib.import_module(_native.CYTHON_MODULE)
    except ModuleNotFoundError:
        return  # not built: this module is the implementation
    except ImportError as exc:  # built, but for another Proton (it checks each signature)
        warnings.warn(f"shoal: {exc}; calling Proton through cffi", RuntimeWarning, stacklevel=2)
        return
    namespace = globals()
    for name in _FUNCTIONS:
        namespace[name] = getattr(compiled, name)
    IMPLEMENTATION = "compiled"


_use_compiled()
