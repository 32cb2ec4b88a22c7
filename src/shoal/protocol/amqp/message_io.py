"""``proton.Message`` encode and decode with fewer Python objects per message.

Proton's ``Message.encode``/``decode`` build a ``Data`` wrapper for each of
four sections on every call, and ``encode`` starts from a 16-byte buffer,
doubling until the message fits (six tries for a 300-byte message), then
copies. ``MessageCodec`` does the same through Proton's C API (``cproton``)
and one reused buffer: a ``Data`` wrapper only for a section that is present
and not a plain binary or string. Proton still does all the encoding and
decoding; the ``Message`` that comes out (or the bytes) are the same.

The connection receives a transfer into ``buffer`` and decodes it there
(``decode_buffer``), and sends an encoded message straight from it
(``encode_to_buffer``): no bytes object per message either way. Messages the
owner is done with can be handed back (``recycle``): ``blank`` and the
decoder then clear one (``pn_message_clear``) instead of allocating a new
``pn_message_t`` (about a microsecond each way). Codecs can share their
recycled messages (``pool``): a producer's connection decodes a whole read
of transfers (hundreds) before the first is handed back, and a consumer's
fills the messages it sends from what producers handed back.
"""

from __future__ import annotations

from typing import Any

from cproton import PN_BINARY, PN_OVERFLOW, PN_STRING, ffi, lib
from proton import Data, Message

# cffi's functions themselves: cproton's wrappers (pn_data_get_binary, ...)
# add a Python call or two per section, as do Message's properties.

_clear = lib.pn_data_clear
_next = lib.pn_data_next
_type = lib.pn_data_type
_instructions = lib.pn_message_instructions
_annotations = lib.pn_message_annotations
_properties = lib.pn_message_properties
_body = lib.pn_message_body
_clear_message = lib.pn_message_clear
_decode = lib.pn_message_decode
_encode = lib.pn_message_encode_py
_get_binary = lib.pn_data_get_binary
_get_string = lib.pn_data_get_string
_put_binary = lib.pn_data_put_binary
_put_string = lib.pn_data_put_string
_from_buffer = ffi.from_buffer
_buffer = ffi.buffer
_unpack = ffi.unpack
# A cleared pn_message_t keeps the memory of what it held: keep few, and small.
# Enough for one read of small transfers: a producer link may have 1000
# (server/amqp.py PRODUCER_CREDIT) in flight, all decoded before the first is
# handed back; with 512, a read of more allocated (and freed) the rest.
RECYCLED_MAX = 1024  # messages kept for reuse per pool
RECYCLED_BODY_MAX = 8 * 1024  # bytes (or characters) of body at most
RECYCLED_PROPERTIES_MAX = 32  # application properties at most


class MessageCodec:
    """Encodes and decodes ``proton.Message`` through one buffer it reuses."""

    def __init__(self, buffer_bytes: int = 1024, pool: list[Message] | None = None) -> None:
        self.buffer = bytearray()
        self.pointer: Any = None  # the buffer for the C API (char *)
        self.reserve(buffer_bytes)
        # Recycled messages; a list shared with other codecs (one thread) if given.
        self._recycled: list[Message] = [] if pool is None else pool
        # The last message blank() gave out, while its sections are still empty
        # (until it is encoded or decoded into): its encode clears none of them.
        self._clean: Message | None = None

    def blank(self) -> Message:
        """A message with nothing set, as ``Message()``, to fill through its
        attributes (decode with this codec, not ``Message.decode``)."""
        if not self._recycled:
            message = Message()
        else:
            message = self._recycled.pop()
            _clear_message(message._msg)
            message.instruction_dict = None
            message.annotation_dict = None
            message.properties = None
            message.body = None
        self._clean = message
        return message

    def recycle(self, message: Message) -> None:
        """Take back a message nothing will read again (not even a view of its body).
        A large one is left to be freed."""
        if len(self._recycled) >= RECYCLED_MAX:
            return
        body = message.body
        if body is not None and not (
            isinstance(body, (bytes, bytearray, memoryview, str)) and len(body) <= RECYCLED_BODY_MAX
        ):
            return
        if message.properties is not None and len(message.properties) > RECYCLED_PROPERTIES_MAX:
            return
        self._recycled.append(message)

    def reserve(self, size: int) -> None:
        """Make ``buffer`` hold at least ``size`` bytes."""
        if size > len(self.buffer):
            self.buffer = bytearray(max(size, 2 * len(self.buffer)))
            self.pointer = ffi.from_buffer(self.buffer)

    # --- decode ---------------------------------------------------------------

    def decode(self, data: bytes | bytearray | memoryview) -> Message:
        """A ``Message`` from its encoded bytes (Proton's exception if it cannot)."""
        return self._decoded(ffi.from_buffer(data), len(data))

    def decode_buffer(self, size: int) -> Message:
        """A ``Message`` from the first ``size`` bytes of ``buffer``; Proton copies
        what it keeps, so the buffer may be reused at once."""
        return self._decoded(self.pointer, size)

    def _decoded(self, pointer: Any, size: int) -> Message:
        message = self.blank()  # its sections and body start as None
        self._clean = None
        impl = message._msg
        status: int = _decode(impl, pointer, size)
        if status < 0:
            message._check(status)  # raises Proton's exception
        node = _instructions(impl)
        if _next(node):
            message.instructions = Data(node).get_object()
        node = _annotations(impl)
        if _next(node):
            message.annotations = Data(node).get_object()
        node = _properties(impl)
        if _next(node):
            message.properties = Data(node).get_object()
        node = _body(impl)
        if _next(node):
            kind = _type(node)
            if kind == PN_BINARY:  # as Data.get_object: a view of the decoded bytes
                raw = _get_binary(node)
                message.body = memoryview(_buffer(raw.start, raw.size))
            elif kind == PN_STRING:
                raw = _get_string(node)
                message.body = _unpack(raw.start, raw.size).decode("utf8")
            else:
                message.body = Data(node).get_object()
        return message

    # --- encode ---------------------------------------------------------------

    def encode(self, message: Message) -> bytes:
        """``message.encode()``, byte for byte."""
        size = self.encode_to_buffer(message)  # may replace the buffer
        return bytes(self.buffer[:size])

    def encode_to_buffer(self, message: Message) -> int:
        """Encode ``message`` into ``buffer``, which grows if it must (read
        ``buffer``/``pointer`` after the call); the bytes written."""
        impl = message._msg
        # Each section Proton holds is replaced by the attribute's value; one left
        # as None is cleared, unless blank() has just emptied them all: it then
        # costs no call into Proton (three or four calls per message sent).
        dirty = message is not self._clean
        self._clean = None
        if message.instruction_dict is not None:
            node = _instructions(impl)
            _clear(node)
            Data(node).put_object(message.instruction_dict)
        elif dirty:
            _clear(_instructions(impl))
        if message.annotation_dict is not None:
            node = _annotations(impl)
            _clear(node)
            Data(node).put_object(message.annotation_dict)
        elif dirty:
            _clear(_annotations(impl))
        if message.properties is not None:
            message._check_property_keys()  # as Proton: str keys only
            node = _properties(impl)
            _clear(node)
            Data(node).put_object(message.properties)
        elif dirty:
            _clear(_properties(impl))
        node = _body(impl)
        _clear(node)
        body = message.body
        status = 0
        if type(body) is bytes:
            status = _put_binary(node, (len(body), _from_buffer(body)))
        elif type(body) is str:
            raw = body.encode("utf8")
            status = _put_string(node, (len(raw), _from_buffer(raw)))
        elif body is not None:
            Data(node).put_object(body)
        if status < 0:
            message._check(status)  # raises Proton's exception
        while True:
            written: int = _encode(impl, self.pointer, len(self.buffer))
            if written != PN_OVERFLOW:
                break
            self.reserve(2 * len(self.buffer))
        if written < 0:
            message._check(written)
        return written
