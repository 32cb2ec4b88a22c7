# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""proton_calls.py's functions, compiled: Proton's C functions called through
the pointers cffi hands out, with the GIL kept (docs in proton_calls.py).

No Proton headers: each function is declared here by its C signature, and
on import each one is checked against the signature cffi has for it (a
mismatch is an ImportError, and proton_calls.py falls back to cffi). Handles
are the C pointers as ints.
"""

from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t, uintptr_t
from libc.string cimport strlen
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.unicode cimport PyUnicode_DecodeUTF8

from cproton import ffi, lib
from proton import Event

cdef extern from *:
    ctypedef Py_ssize_t ssize_t

# pn_bytes_t and pn_delivery_tag_t: {size_t size; const char *start}.
cdef struct pn_bytes:
    size_t size
    const char *start

# pn_atom_t: {pn_type_t type; union {... 16 bytes, 8-aligned} u}; only the
# type is read. Same size and alignment, so the same return convention.
cdef struct pn_atom:
    int type
    uint64_t u0
    uint64_t u1

# _Bool results are read as one byte, as the C ABI returns them.
ctypedef void *(*ptr_of)(void *) noexcept nogil
ctypedef unsigned char (*bool_of)(void *) noexcept nogil
ctypedef int (*int_of)(void *) noexcept nogil
ctypedef size_t (*size_of)(void *) noexcept nogil
ctypedef void (*void_of)(void *) noexcept nogil
ctypedef uint64_t (*u64_of)(void *) noexcept nogil
ctypedef uint32_t (*u32_of)(void *) noexcept nogil
ctypedef uint8_t (*u8_of)(void *) noexcept nogil
ctypedef int64_t (*i64_of)(void *) noexcept nogil
ctypedef const char *(*text_of)(void *) noexcept nogil
ctypedef pn_bytes (*bytes_of)(void *) noexcept nogil
ctypedef pn_atom (*atom_of)(void *) noexcept nogil
ctypedef ssize_t (*io_fn)(void *, char *, size_t) noexcept nogil
ctypedef int (*decode_fn)(void *, char *, size_t) noexcept nogil
ctypedef void *(*delivery_fn)(void *, pn_bytes) noexcept nogil
ctypedef void (*update_fn)(void *, uint64_t) noexcept nogil


cdef uintptr_t _address(str name, str signature) except 0:
    got = ffi.getctype(ffi.typeof(getattr(lib, name)))
    if got != signature:
        raise ImportError(f"Proton's {name} is {got}, not {signature} as compiled")
    return int(ffi.cast("uintptr_t", ffi.addressof(lib, name)))


# Signatures as cffi writes them (ffi.getctype) for python-qpid-proton 0.40.
cdef ptr_of collector_peek = <ptr_of>_address(
    "pn_collector_peek", "struct pn_event_t *(*)(struct pn_collector_t *)")
cdef bool_of collector_pop = <bool_of>_address(
    "pn_collector_pop", "_Bool(*)(struct pn_collector_t *)")
cdef int_of event_type = <int_of>_address(
    "pn_event_type", "pn_event_type_t(*)(struct pn_event_t *)")
cdef ptr_of event_delivery = <ptr_of>_address(
    "pn_event_delivery", "struct pn_delivery_t *(*)(struct pn_event_t *)")
cdef ptr_of event_link = <ptr_of>_address(
    "pn_event_link", "struct pn_link_t *(*)(struct pn_event_t *)")
cdef ptr_of delivery_link = <ptr_of>_address(
    "pn_delivery_link", "struct pn_link_t *(*)(struct pn_delivery_t *)")
cdef bool_of delivery_readable = <bool_of>_address(
    "pn_delivery_readable", "_Bool(*)(struct pn_delivery_t *)")
cdef size_of delivery_pending = <size_of>_address(
    "pn_delivery_pending", "size_t(*)(struct pn_delivery_t *)")
cdef bool_of delivery_partial = <bool_of>_address(
    "pn_delivery_partial", "_Bool(*)(struct pn_delivery_t *)")
cdef bool_of delivery_aborted = <bool_of>_address(
    "pn_delivery_aborted", "_Bool(*)(struct pn_delivery_t *)")
cdef io_fn link_recv = <io_fn>_address(
    "pn_link_recv", "ssize_t(*)(struct pn_link_t *, char *, size_t)")
cdef bool_of link_advance = <bool_of>_address(
    "pn_link_advance", "_Bool(*)(struct pn_link_t *)")
cdef void_of delivery_settle = <void_of>_address(
    "pn_delivery_settle", "void(*)(struct pn_delivery_t *)")
cdef bool_of delivery_settled = <bool_of>_address(
    "pn_delivery_settled", "_Bool(*)(struct pn_delivery_t *)")
cdef u64_of delivery_remote_state = <u64_of>_address(
    "pn_delivery_remote_state", "uint64_t(*)(struct pn_delivery_t *)")
cdef ptr_of delivery_remote = <ptr_of>_address(
    "pn_delivery_remote", "struct pn_disposition_t *(*)(struct pn_delivery_t *)")
cdef bool_of disposition_is_failed = <bool_of>_address(
    "pn_disposition_is_failed", "_Bool(*)(struct pn_disposition_t *)")
cdef bool_of disposition_is_undeliverable = <bool_of>_address(
    "pn_disposition_is_undeliverable", "_Bool(*)(struct pn_disposition_t *)")
cdef int_of link_state = <int_of>_address(
    "pn_link_state", "int(*)(struct pn_link_t *)")
cdef int_of link_credit_of = <int_of>_address(
    "pn_link_credit", "int(*)(struct pn_link_t *)")
cdef bool_of link_get_drain = <bool_of>_address(
    "pn_link_get_drain", "_Bool(*)(struct pn_link_t *)")
cdef delivery_fn new_delivery = <delivery_fn>_address(
    "pn_delivery", "struct pn_delivery_t *(*)(struct pn_link_t *, struct pn_bytes_t)")
cdef io_fn link_send = <io_fn>_address(
    "pn_link_send", "ssize_t(*)(struct pn_link_t *, char *, size_t)")
cdef update_fn delivery_update = <update_fn>_address(
    "pn_delivery_update", "void(*)(struct pn_delivery_t *, uint64_t)")
cdef decode_fn message_decode = <decode_fn>_address(
    "pn_message_decode", "int(*)(struct pn_message_t *, char *, size_t)")
cdef ptr_of message_properties = <ptr_of>_address(
    "pn_message_properties", "struct pn_data_t *(*)(struct pn_message_t *)")
cdef ptr_of message_body = <ptr_of>_address(
    "pn_message_body", "struct pn_data_t *(*)(struct pn_message_t *)")
cdef bool_of data_next = <bool_of>_address(
    "pn_data_next", "_Bool(*)(struct pn_data_t *)")
cdef int_of data_type = <int_of>_address(
    "pn_data_type", "pn_type_t(*)(struct pn_data_t *)")
cdef bytes_of data_get_binary = <bytes_of>_address(
    "pn_data_get_binary", "struct pn_bytes_t(*)(struct pn_data_t *)")
cdef bytes_of data_get_string = <bytes_of>_address(
    "pn_data_get_string", "struct pn_bytes_t(*)(struct pn_data_t *)")
cdef text_of get_group_id = <text_of>_address(
    "pn_message_get_group_id", "char *(*)(struct pn_message_t *)")
cdef u32_of get_group_sequence = <u32_of>_address(
    "pn_message_get_group_sequence", "uint32_t(*)(struct pn_message_t *)")
cdef bool_of is_durable = <bool_of>_address(
    "pn_message_is_durable", "_Bool(*)(struct pn_message_t *)")
cdef u8_of get_priority = <u8_of>_address(
    "pn_message_get_priority", "uint8_t(*)(struct pn_message_t *)")
cdef i64_of get_expiry_time = <i64_of>_address(
    "pn_message_get_expiry_time", "int64_t(*)(struct pn_message_t *)")
cdef u32_of get_ttl = <u32_of>_address(
    "pn_message_get_ttl", "uint32_t(*)(struct pn_message_t *)")
cdef i64_of get_creation_time = <i64_of>_address(
    "pn_message_get_creation_time", "int64_t(*)(struct pn_message_t *)")
cdef atom_of get_id = <atom_of>_address(
    "pn_message_get_id", "pn_atom_t(*)(struct pn_message_t *)")
cdef atom_of get_correlation_id = <atom_of>_address(
    "pn_message_get_correlation_id", "pn_atom_t(*)(struct pn_message_t *)")
cdef bytes_of get_user_id = <bytes_of>_address(
    "pn_message_get_user_id", "struct pn_bytes_t(*)(struct pn_message_t *)")
cdef text_of get_reply_to = <text_of>_address(
    "pn_message_get_reply_to", "char *(*)(struct pn_message_t *)")
cdef text_of get_subject = <text_of>_address(
    "pn_message_get_subject", "char *(*)(struct pn_message_t *)")
cdef text_of get_content_encoding = <text_of>_address(
    "pn_message_get_content_encoding", "char *(*)(struct pn_message_t *)")
cdef text_of get_content_type = <text_of>_address(
    "pn_message_get_content_type", "char *(*)(struct pn_message_t *)")

if (ffi.sizeof("pn_atom_t"), ffi.offsetof("pn_atom_t", "u"), ffi.alignof("pn_atom_t")) != (
    sizeof(pn_atom), 8, 8
) or ffi.sizeof("pn_bytes_t") != sizeof(pn_bytes):
    raise ImportError("Proton's pn_atom_t or pn_bytes_t is laid out otherwise than compiled")

# The same values as proton_calls.py's constants, which the connection compares
# against (the transfer tests take every status but NOT_READABLE).
cdef enum:
    RECEIVED = 0
    NOT_READABLE = 1
    ABORTED = 2
    PARTIAL = 3
    TOO_LARGE = 4
    SHORT_BUFFER = 5
    RECEIVED_STATE = 0x23
    ACCEPTED_STATE = 0x24
    MODIFIED_STATE = 0x27
cdef int DELIVERY_EVENT = Event.DELIVERY.number
cdef int FLOW_EVENT = Event.LINK_FLOW.number
cdef int BINARY_TYPE = 19  # PN_BINARY, checked below
cdef int STRING_TYPE = 20  # PN_STRING
import cproton as _cproton
if (_cproton.PN_BINARY, _cproton.PN_STRING, _cproton.PN_ACCEPTED, _cproton.PN_RECEIVED,
        _cproton.PN_MODIFIED) != (BINARY_TYPE, STRING_TYPE, ACCEPTED_STATE, RECEIVED_STATE,
        MODIFIED_STATE):
    raise ImportError("Proton's type or outcome numbers differ from those compiled")


def handle(pointer):
    return int(ffi.cast("uintptr_t", pointer))


def pointer(uintptr_t handle, str ctype):
    return ffi.cast(ctype, handle)


def take_event(uintptr_t collector, bint pop_previous, bytes wanted):
    cdef void *c = <void *>collector
    cdef const unsigned char *marks = <const unsigned char *>PyBytes_AS_STRING(wanted)
    cdef Py_ssize_t n_marks = PyBytes_GET_SIZE(wanted)
    cdef void *event
    cdef void *delivery
    cdef int kind
    if pop_previous:
        collector_pop(c)
    while True:
        event = collector_peek(c)
        if event == NULL:
            return None
        kind = event_type(event)
        if 0 <= kind < n_marks and marks[kind]:
            break
        collector_pop(c)
    if kind == DELIVERY_EVENT:
        delivery = event_delivery(event)
        return kind, <uintptr_t>delivery, <uintptr_t>delivery_link(delivery)
    if kind == FLOW_EVENT:
        return kind, <uintptr_t>event_link(event), None
    return kind, <uintptr_t>event, None


def pop_event(uintptr_t collector):
    collector_pop(<void *>collector)


def receive_transfer(uintptr_t delivery, uintptr_t link, bytearray buffer, buffer_pointer,
                     Py_ssize_t max_bytes):
    cdef void *d = <void *>delivery
    cdef void *l = <void *>link
    cdef size_t size
    cdef ssize_t received
    if not delivery_readable(d):
        return NOT_READABLE, 0, False
    size = delivery_pending(d)
    if delivery_partial(d) or delivery_aborted(d):
        if delivery_aborted(d):
            link_advance(l)
            delivery_settle(d)
            return ABORTED, size, False
        return PARTIAL, size, False
    if size > <size_t>max_bytes:
        return TOO_LARGE, size, False
    if size > <size_t>PyByteArray_GET_SIZE(buffer):
        return SHORT_BUFFER, size, False
    received = link_recv(l, PyByteArray_AS_STRING(buffer), size)
    link_advance(l)
    return RECEIVED, received, delivery_settled(d) != 0


def read_outcome(uintptr_t delivery):
    cdef void *d = <void *>delivery
    cdef void *remote
    cdef uint64_t state = delivery_remote_state(d)
    cdef bint settled
    cdef bint failed = False
    cdef bint undeliverable = False
    if state < RECEIVED_STATE or state > MODIFIED_STATE:
        return state, False, False, False
    settled = state != RECEIVED_STATE or delivery_settled(d) != 0
    if state == MODIFIED_STATE:
        remote = delivery_remote(d)
        failed = disposition_is_failed(remote) != 0
        undeliverable = disposition_is_undeliverable(remote) != 0
    if settled:
        delivery_settle(d)
    return state, settled, failed, undeliverable


def send_transfer(uintptr_t link, unsigned long long tag, data, data_pointer, Py_ssize_t size,
                  bint settled):
    cdef void *l = <void *>link
    cdef char *start
    cdef Py_ssize_t length
    cdef unsigned char tag_bytes[8]
    cdef pn_bytes tag_value
    cdef int i
    cdef void *d
    if type(data) is bytes:
        start = PyBytes_AS_STRING(data)
        length = PyBytes_GET_SIZE(data)
    elif type(data) is bytearray:
        start = PyByteArray_AS_STRING(data)
        length = PyByteArray_GET_SIZE(data)
    else:
        raise TypeError(f"send_transfer: bytes or bytearray, not {type(data).__name__}")
    if not 0 <= size <= length:
        raise ValueError(f"send_transfer: {size} bytes of {length}")
    for i in range(8):  # little-endian, as proton_calls.py packs it
        tag_bytes[i] = (tag >> (8 * i)) & 0xFF
    tag_value.size = 8
    tag_value.start = <const char *>tag_bytes
    d = new_delivery(l, tag_value)  # Proton copies the tag
    link_send(l, start, size)
    link_advance(l)
    if settled:
        delivery_settle(d)
    return <uintptr_t>d


def accept(uintptr_t delivery):
    delivery_update(<void *>delivery, ACCEPTED_STATE)
    delivery_settle(<void *>delivery)


def settle(uintptr_t delivery):
    delivery_settle(<void *>delivery)


def link_flow(uintptr_t link):
    cdef void *l = <void *>link
    return link_state(l), link_credit_of(l), link_get_drain(l) != 0


def link_credit(uintptr_t link):
    return link_credit_of(<void *>link)


def decode_message(uintptr_t message, buffer, buffer_pointer, Py_ssize_t size):
    cdef void *m = <void *>message
    cdef Py_buffer view
    cdef int status
    cdef void *node
    cdef int kind
    cdef pn_bytes raw
    cdef bint has_properties
    PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
    try:
        if not 0 <= size <= view.len:
            raise ValueError(f"decode_message: {size} bytes of {view.len}")
        status = message_decode(m, <char *>view.buf, size)
    finally:
        PyBuffer_Release(&view)
    if status < 0:
        return status, False, 0, None
    has_properties = data_next(message_properties(m)) != 0
    node = message_body(m)
    if not data_next(node):
        return status, has_properties, 0, None
    kind = data_type(node)
    if kind == BINARY_TYPE:
        raw = data_get_binary(node)
    elif kind == STRING_TYPE:
        raw = data_get_string(node)
    else:
        return status, has_properties, kind, None
    return status, has_properties, kind, PyBytes_FromStringAndSize(raw.start, raw.size)


cdef object _text(const char *value):
    if value == NULL:
        return None
    return PyUnicode_DecodeUTF8(value, strlen(value), "replace")


def message_fields(uintptr_t message, bint read_header):
    cdef void *m = <void *>message
    cdef pn_bytes user = get_user_id(m)
    return (
        _text(get_group_id(m)),
        get_group_sequence(m),
        (is_durable(m) != 0) if read_header else False,
        get_priority(m) if read_header else 4,
        get_expiry_time(m),
        get_ttl(m) if read_header else 0,
        get_creation_time(m),
        get_id(m).type,
        get_correlation_id(m).type,
        PyBytes_FromStringAndSize(user.start, user.size) if user.size else None,
        _text(get_reply_to(m)),
        _text(get_subject(m)),
        _text(get_content_encoding(m)),
        _text(get_content_type(m)),
    )
