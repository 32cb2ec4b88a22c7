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
(``encode_to_buffer``): no bytes object per message either way. It also keeps
what it received (``kept_encoding``): the message less its header and
delivery annotations, the sections a broker rewrites per hop, so a consumer
over AMQP gets every other section exactly as sent (message annotations,
properties, ``reply-to-group-id``, footer), behind a header section of the
broker's (``header_section``), as Artemis passes AMQP messages on. Messages the
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
from proton import Data, Described, Message, ubyte, uint, ulong

from shoal.protocol.amqp import proton_calls as calls

# cffi's functions themselves: cproton's wrappers (pn_data_get_binary, ...)
# add a Python call or two per section, as do Message's properties.

_clear = lib.pn_data_clear
_next = lib.pn_data_next
_instructions = lib.pn_message_instructions
_annotations = lib.pn_message_annotations
_properties = lib.pn_message_properties
_body = lib.pn_message_body
_clear_message = lib.pn_message_clear
_encode = lib.pn_message_encode_py
_put_binary = lib.pn_data_put_binary
_put_string = lib.pn_data_put_string
_from_buffer = ffi.from_buffer
_unpack = ffi.unpack
_data_decode = lib.pn_data_decode
# AMQP 1.0 sections (part 3.2) start with a described type: 0x00, then the
# descriptor, which every client we know sends as a smallulong (0x53, code).
_DESCRIBED = 0x00
_SMALLULONG = 0x53
_EMPTY_LIST = 0x45  # list0: Proton writes a header of defaults so
_HEADER = 0x70
_DELIVERY_ANNOTATIONS = 0x71
_APPLICATION_PROPERTIES = 0x74
_FIRST_BODY = 0x75  # data; then amqp-sequence, amqp-value, footer (0x78)
_MAX_UINT = 2**32 - 1
_HANDLE = "shoal_handle"  # a Message's attribute: its pn_message_t's handle
# Section descriptors by name, as a sender may also write them (part 3.2).
_SECTION_CODES = {
    "amqp:message-annotations:map": 0x72,
    "amqp:properties:list": 0x73,
    "amqp:application-properties:map": 0x74,
    "amqp:data:binary": 0x75,
    "amqp:amqp-sequence:list": 0x76,
    "amqp:amqp-value:*": 0x77,
    "amqp:footer:map": 0x78,
}
# Header sections by (durable, priority, first-acquirer, delivery-count): a
# handful of them carry almost every delivery.
_HEADERS: dict[tuple[bool, int, bool, int], bytes] = {}
_HEADERS_CACHED_COUNT = 16  # delivery counts below this are cached
# A cleared pn_message_t keeps the memory of what it held: keep few, and small.
# Enough for one read of small transfers: a producer link may have 1000
# (server/amqp.py PRODUCER_CREDIT) in flight, all decoded before the first is
# handed back; with 512, a read of more allocated (and freed) the rest.
RECYCLED_MAX = 1024  # messages kept for reuse per pool
RECYCLED_BODY_MAX = 8 * 1024  # bytes (or characters) of body at most
RECYCLED_PROPERTIES_MAX = 32  # application properties at most


_LAST_SECTION = 0x78  # footer
# Bytes of a value's own width, or of its size field, by the constructor's
# high nibble (AMQP 1.0 part 1.2: 0x4 none, 0x5 one ... 0x9 sixteen; from
# 0xa the value is a size field of 1 or 4 bytes and that many bytes).
_FIXED_WIDTH = {0x4: 0, 0x5: 1, 0x6: 2, 0x7: 4, 0x8: 8, 0x9: 16}
_SIZE_WIDTH = {0xA: 1, 0xB: 4, 0xC: 1, 0xD: 4, 0xE: 1, 0xF: 4}


def _value_end(buf: bytes | bytearray, start: int, size: int) -> int:
    """Where the encoded value at ``start`` ends, or -1 if it does not fit in ``size``."""
    pos = start
    values = 1  # still to skip: a described value is two (its descriptor, then it)
    while values:
        if pos >= size:
            return -1
        nibble = buf[pos] >> 4
        if buf[pos] == _DESCRIBED:
            pos += 1
            values += 1
            continue
        width = _FIXED_WIDTH.get(nibble)
        if width is not None:
            pos += 1 + width
        else:
            width = _SIZE_WIDTH.get(nibble, -1)
            if width < 0 or pos + 1 + width > size:
                return -1
            pos += 1 + width + int.from_bytes(buf[pos + 1 : pos + 1 + width], "big")
        values -= 1
    return pos if pos <= size else -1


def _section_code(buf: bytes | bytearray, start: int, size: int) -> int:
    """The section code of the descriptor at ``start`` (short or long ulong, or
    a symbol), -1 if it names none."""
    end = _value_end(buf, start, size)
    if end < 0:
        return -1
    kind = buf[start]
    if kind == _SMALLULONG:
        return buf[start + 1]
    if kind == 0x80:  # ulong
        return int.from_bytes(buf[start + 1 : end], "big")
    if kind in (0xA3, 0xB3):  # sym8, sym32
        name = bytes(buf[start + (2 if kind == 0xA3 else 5) : end])
        return _SECTION_CODES.get(name.decode("ascii", "replace"), -1)
    return -1


def section_problem(buf: bytes | bytearray, size: int) -> str | None:
    """Why the first ``size`` bytes of ``buf`` are not an AMQP message (a run of
    sections, part 3.2, each whole), or None. Proton's decoder
    stops quietly at what it cannot read, so a transfer of random bytes, or a
    data section claiming more bytes than were sent, would come out as an
    empty message. Reads only each value's constructor and size."""
    if size <= 0:
        return "no message sections in the transfer"
    start = 0
    seen = 0  # a bit per section code met
    while start < size:
        if buf[start] != _DESCRIBED:
            return f"byte {start} does not start a message section"
        code = _section_code(buf, start + 1, size)
        if not _HEADER <= code <= _LAST_SECTION:
            return f"byte {start} starts no known message section"
        # Order is not checked: rhea writes the footer before the body, and Proton
        # reads sections in any order. Only data and sequence sections repeat.
        bit = 1 << (code - _HEADER)
        if seen & bit and code not in (0x75, 0x76):
            return f"message section 0x{code:02x} appears twice"
        seen |= bit
        end = _value_end(buf, start, size)
        if end < 0:
            return f"message section 0x{code:02x} runs past the transfer's {size} bytes"
        start = end
    return None


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
        # The body of the last decode, as bytes (binary or UTF-8), for kept_encoding.
        self._body_bytes: bytes | None = None
        self._scratch = Data()  # measures the sections kept_encoding skips
        # Set by kept_encoding: the message has no header section, or one of
        # defaults (list0): not durable, priority 4, no ttl, as a reader may take
        # without asking Proton (three calls per message).
        self.default_header = False

    def blank(self, *, to_decode: bool = False) -> Message:
        """A message with nothing set, as ``Message()``, to fill through its
        attributes (decode with this codec, not ``Message.decode``).
        ``to_decode``: its ``pn_message_t`` is left as it was, as
        ``pn_message_decode`` clears it first (one call into Proton fewer)."""
        if not self._recycled:
            message = Message()
            setattr(message, _HANDLE, calls.handle(message._msg))
        else:
            message = self._recycled.pop()
            if not to_decode:
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
        return self._decoded(data, None, len(data))

    def decode_buffer(self, size: int) -> Message:
        """A ``Message`` from the first ``size`` bytes of ``buffer``; Proton copies
        what it keeps, so the buffer may be reused at once. Its delivery and
        message annotations are left unread (``kept_encoding`` keeps the latter)."""
        return self._decoded(self.buffer, self.pointer, size, annotations=False)

    def _decoded(
        self,
        buffer: bytes | bytearray | memoryview,
        pointer: Any,
        size: int,
        annotations: bool = True,
    ) -> Message:
        message = self.blank(to_decode=True)  # its sections and body start as None
        self._clean = None
        status, has_properties, body_type, body = calls.decode_message(
            message_handle(message), buffer, pointer, size
        )
        if status < 0:
            message._check(status)  # raises Proton's exception
        impl = message._msg
        if annotations:
            node = _instructions(impl)
            if _next(node):
                message.instructions = Data(node).get_object()
            node = _annotations(impl)
            if _next(node):
                message.annotations = Data(node).get_object()
        if has_properties:  # decode_message left it at its first node
            message.properties = Data(_properties(impl)).get_object()
        self._body_bytes = body
        if body_type == PN_BINARY:
            message.body = body
        elif body_type == PN_STRING:
            assert body is not None
            message.body = body.decode("utf8")
        elif body_type:
            message.body = Data(_body(impl)).get_object()
        return message

    def kept_encoding(self, size: int) -> tuple[bytes, bytes | None] | None:
        """Right after ``decode_buffer(size)``: the message as received less its
        header and delivery-annotations sections, as ``(before, after)``.

        Split around the body's bytes (binary or text), so that ``before + body
        + after`` is the encoding and the body is not held twice: ``after`` is
        empty where the body ends the message, the footer's section where one
        follows it. (Any place the body's bytes occur would do: the parts only
        ever go out joined.) A body that is not one run of those bytes (no
        binary or text body, or several data sections) leaves ``before`` the
        whole encoding and ``after`` None. None when a section's descriptor
        is not in the short form: such a message is mapped from its fields
        instead. Sets ``default_header``."""
        buf = self.buffer
        start = 0
        self.default_header = False
        default_header = True
        while start + 3 <= size and buf[start] == _DESCRIBED:
            if buf[start + 1] != _SMALLULONG:
                return None
            if buf[start + 2] not in (_HEADER, _DELIVERY_ANNOTATIONS):
                break
            if start + 3 < size and buf[start + 3] == _EMPTY_LIST:  # a header of defaults
                start += 4
                continue
            if buf[start + 2] == _HEADER:
                default_header = False
            scratch = self._scratch._data
            _clear(scratch)
            used: int = _data_decode(scratch, self.pointer + start, size - start)
            if used <= 0:
                return None
            start += used
        if start + 3 > size or buf[start] != _DESCRIBED or buf[start + 1] != _SMALLULONG:
            return None
        self.default_header = default_header
        body = self._body_bytes
        if body is not None:
            n = len(body)
            cut = size - n
            if cut > start and buf.startswith(body, cut):
                return _unpack(self.pointer + start, cut - start), b""
            cut = buf.rfind(body, start, size)
            if cut > start:
                return (
                    _unpack(self.pointer + start, cut - start),
                    _unpack(self.pointer + cut + n, size - cut - n),
                )
        return _unpack(self.pointer + start, size - start), None

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


def message_handle(message: Message) -> calls.Handle:
    """The proton_calls handle of a message's ``pn_message_t`` (kept on it)."""
    handle = getattr(message, _HANDLE, None)
    if handle is None:
        handle = calls.handle(message._msg)
        setattr(message, _HANDLE, handle)
    return handle


def header_section(
    durable: bool, priority: int, ttl: int, first_acquirer: bool, delivery_count: int
) -> bytes:
    """An encoded header section (``ttl`` in ms, 0 for none), by Proton."""
    key = (durable, priority, first_acquirer, delivery_count)
    if not ttl:
        hit = _HEADERS.get(key)
        if hit is not None:
            return hit
    data = Data()
    fields = [
        durable,
        ubyte(priority),
        uint(min(ttl, _MAX_UINT)) if ttl > 0 else None,
        first_acquirer,
        uint(min(delivery_count, _MAX_UINT)),
    ]
    data.put_object(Described(ulong(_HEADER), fields))
    encoded = bytes(data.encode())
    if not ttl and delivery_count < _HEADERS_CACHED_COUNT:
        _HEADERS[key] = encoded
    return encoded


def with_application_property(encoded: bytes, key: str, value: object) -> bytes:
    """``encoded`` (sections from message annotations on, as ``kept_encoding``
    gives them) with one more application property, the others untouched."""
    data = Data()
    start = 0
    while start < len(encoded):
        data.clear()
        used: int = data.decode(encoded[start:])
        section = data.get_object()
        descriptor = section.descriptor
        code = _SECTION_CODES.get(str(descriptor), 0) if isinstance(descriptor, str) else descriptor
        if code >= _FIRST_BODY:  # no application properties: a new section here
            data.clear()
            data.put_object(Described(ulong(_APPLICATION_PROPERTIES), {key: value}))
            added = bytes(data.encode())
            return encoded[:start] + added + encoded[start:]
        if code == _APPLICATION_PROPERTIES:
            props = dict(section.value or {})
            props[key] = value
            data.clear()
            data.put_object(Described(ulong(_APPLICATION_PROPERTIES), props))
            replaced = bytes(data.encode())
            return encoded[:start] + replaced + encoded[start + used :]
        start += used
    raise ValueError("no body section in the kept encoding")
