"""One AMQP 1.0 server connection on Qpid Proton's engine, sans-I/O.

    conn = AmqpConnection(mechanisms=("PLAIN",))
    conn.receive_data(data, now)        # b"" means EOF
    event = conn.next_event()           # an event (events.py) or NEED_DATA
    conn.send_message(link_id, message) # ... and the other commands below
    data = conn.data_to_send()          # bytes to write
    deadline = conn.handle_timer(now)   # idle-timeout frames; next deadline or None

Proton does the framing, the performatives and the message codec
(``proton.Transport`` fed with ``push``, drained with ``peek``/``pop``,
events from a ``proton.Collector``); no socket, no reactor, no clock: time
is an argument. SASL runs in front of it (``sasl.py``): PLAIN credentials
come out as ``CredentialsReceived`` and the owner answers with
``authenticated`` or ``refuse_credentials``. Links are opened
only when the owner says so (``accept_link`` / ``refuse_link``), so the
broker can check the address and the user's permission first.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any

from cproton import PN_EOS, ffi, lib
from proton import (
    Collector,
    Condition,
    Connection,
    Data,
    Delivery,
    Described,
    Disposition,
    Link,
    Message,
    Terminus,
    Transport,
    symbol,
    ulong,
)
from proton import Event as PnEvent

from shoal.protocol.amqp import events as ev
from shoal.protocol.amqp import proton_calls as calls
from shoal.protocol.amqp.coordinator import (
    DECLARED_STATE,
    TRANSACTIONAL_STATE,
    accepted_in,
    control_event,
    transactional_outcome,
    txn_id_of,
)
from shoal.protocol.amqp.message_io import MessageCodec, section_problem
from shoal.protocol.amqp.sasl import SaslServer, SaslState

MAX_FRAME_BYTES = 1024 * 1024  # our max-frame-size in the open frame
MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # a larger transfer closes its link
# What one connection may hold; past one, it is closed (resource-limit-exceeded).
MAX_SESSIONS = 256  # sessions the peer has begun and not ended
MAX_LINKS = 1000  # links the peer has attached and not detached, all sessions
MAX_PARTIAL_BYTES = 32 * 1024 * 1024  # bytes of transfers still arriving, all links
RESOURCE_LIMIT = "amqp:resource-limit-exceeded"

# Outcome names for OutcomeReceived and ``settle``.
_OUTCOMES = {
    Disposition.ACCEPTED: "accepted",
    Disposition.RELEASED: "released",
    Disposition.REJECTED: "rejected",
    Disposition.MODIFIED: "modified",
    Disposition.RECEIVED: "received",
}
_STATES = {name: state for state, name in _OUTCOMES.items()}
_DELIVERY_EVENT = PnEvent.DELIVERY.number
_FLOW_EVENT = PnEvent.LINK_FLOW.number
_WRAPPED_EVENTS = frozenset(  # the others _handle answers (the rest are ignored)
    kind.number
    for kind in (
        PnEvent.LINK_REMOTE_OPEN,
        PnEvent.LINK_REMOTE_CLOSE,
        PnEvent.LINK_REMOTE_DETACH,
        PnEvent.SESSION_REMOTE_OPEN,
        PnEvent.SESSION_REMOTE_CLOSE,
        PnEvent.CONNECTION_REMOTE_OPEN,
        PnEvent.CONNECTION_REMOTE_CLOSE,
        PnEvent.TRANSPORT_ERROR,
        PnEvent.TRANSPORT_CLOSED,
    )
)
# Marks, by event number, the events _pump is given (calls.take_event pops the rest).
_WANTED_EVENTS = bytes(
    kind in _WRAPPED_EVENTS or kind in (_DELIVERY_EVENT, _FLOW_EVENT)
    for kind in range(max(_WRAPPED_EVENTS | {_DELIVERY_EVENT, _FLOW_EVENT}) + 1)
)
_LOCAL_ACTIVE = Link.LOCAL_ACTIVE
# cffi's functions themselves, not cproton's Python wrappers around them, for
# the bytes in and out (once per read or write, not per message).
_transport_capacity = lib.pn_transport_capacity
_transport_push = lib.pn_transport_push
_transport_pending = lib.pn_transport_pending
_transport_peek = lib.pn_transport_peek
_transport_pop = lib.pn_transport_pop
_from_buffer = ffi.from_buffer
_buffer = ffi.buffer
OUTPUT_BUFFER_BYTES = 64 * 1024  # what data_to_send peeks into (grows for a larger output)


def _capabilities(terminus: Terminus) -> tuple[str, ...]:
    caps = terminus.capabilities
    if caps is None:
        return ()
    caps.rewind()
    if not caps.next():
        return ()
    value = caps.get_object()  # a symbol or an array of symbols
    if value is None:
        return ()
    if isinstance(value, (list, tuple)) or hasattr(value, "elements"):
        return tuple(_text(x) for x in getattr(value, "elements", value))
    return (_text(value),)


# The JMS selector filter of a source (Artemis and Qpid JMS: key "jms-selector").
_SELECTOR_DESCRIPTORS = ("apache.org:selector-filter:string", 0x0000468C00000004)


def _selector(terminus: Terminus) -> str | None:
    """The selector in a source's filter set, if any."""
    filters = terminus.filter
    if filters is None:
        return None
    filters.rewind()
    if not filters.next():
        return None
    try:
        value = filters.get_object()
    except Exception:  # a filter Proton's binding cannot read: not a selector
        return None
    if not isinstance(value, dict):
        return None
    for described in value.values():
        descriptor = getattr(described, "descriptor", None)
        if descriptor is None:
            continue
        if _text(descriptor) in _SELECTOR_DESCRIPTORS or descriptor in _SELECTOR_DESCRIPTORS:
            return _text(described.value)
    return None


def close_frame(condition: str, description: str) -> bytes:
    """An AMQP close frame (channel 0) carrying an error condition."""
    data = Data()
    error = Described(ulong(0x1D), [symbol(condition), description])
    data.put_object(Described(ulong(0x18), [error]))
    body = bytes(data.encode())
    return (8 + len(body)).to_bytes(4, "big") + b"\x02\x00\x00\x00" + body


def _unsigned(credit: int) -> int:
    """Link credit as the peer granted it: a uint, which Proton reads into an int."""
    return credit & 0xFFFFFFFF


def _text(value: object) -> str:
    # Proton's binding hands some symbols back as raw memory.
    if isinstance(value, (memoryview, bytes, bytearray)):
        return bytes(value).decode("ascii", "replace")
    return str(value)


class AmqpConnection:
    def __init__(
        self,
        *,
        mechanisms: tuple[str, ...] = ("ANONYMOUS",),
        container_id: str = "shoal",
        max_frame_bytes: int = MAX_FRAME_BYTES,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        idle_timeout: float = 0.0,
        message_pool: list[Message] | None = None,
        max_sessions: int = MAX_SESSIONS,
        max_links: int = MAX_LINKS,
        max_partial_bytes: int = MAX_PARTIAL_BYTES,
    ) -> None:
        self._sasl = SaslServer(mechanisms)
        self.max_message_bytes = max_message_bytes
        self.max_sessions = max_sessions
        self.max_links = max_links
        self.max_partial_bytes = max_partial_bytes
        # The peer's open sessions (pn_session_t) -> links attached in each.
        self._session_links: dict[calls.Handle, int] = {}
        self._link_count = 0
        # Receiving links (pn_link_t) with a transfer still arriving -> its bytes so far.
        self._partial: dict[calls.Handle, int] = {}
        self._discarding: set[calls.Handle] = set()  # links closed for a too large transfer
        self.user: str | None = None
        t = self._transport = Transport(Transport.SERVER)
        t.max_frame_size = max_frame_bytes
        if idle_timeout:
            t.idle_timeout = idle_timeout
        self._collector = Collector()
        self._collector_handle = calls.handle(self._collector._impl)
        c = self._conn = Connection()
        c.container = container_id
        c.collect(self._collector)
        t.bind(c)
        self._transport_impl: Any = t._impl  # pn_transport_t
        self._output = bytearray(OUTPUT_BUFFER_BYTES)  # data_to_send peeks into it
        self._output_pointer: Any = _from_buffer(self._output)
        self._events: deque[ev.Event] = deque()
        self._links: dict[int, Link] = {}
        self._link_ids = itertools.count(1)
        # Transfers and dispositions take the C API through proton_calls, by
        # handle: Proton's Python wrappers cost several objects per call (AW1,
        # docs/benchmarks.md). A pn_delivery_t lives until we settle it or drop
        # its link, as we do here.
        self._link_impls: dict[int, calls.Handle] = {}  # link id -> pn_link_t
        self._link_of_impl: dict[calls.Handle, int] = {}  # pn_link_t -> link id
        self._receiving: set[int] = set()  # links on which the peer sends
        self._coordinators: set[int] = set()  # coordinator links (the peer's transactions)
        # A coordinator was attached: transfers and dispositions may carry a txn-id
        # (only then are their states read, a call into Proton per message).
        self._transactional = False
        # delivery id -> (pn_delivery_t, link id)
        self._deliveries: dict[int, tuple[calls.Handle, int]] = {}
        self._sent: dict[calls.Handle, int] = {}  # our unsettled pn_delivery_t -> delivery id
        # Transfers are received into and sent from its buffer; messages recycled
        # into message_pool (shared with other connections) if given.
        self._codec = MessageCodec(pool=message_pool)
        self._delivery_ids = itertools.count(1)
        self._tags = itertools.count(1)  # a delivery's tag: the next count, 8 bytes
        self._failed = False
        self._last_words = b""  # our own close frame, where Proton wrote none
        self._asked = False  # CredentialsReceived emitted
        self._closed = False  # ConnectionClosed emitted
        self.now = 0.0

    # --- bytes in, events out -------------------------------------------------

    def receive_data(self, data: bytes | bytearray, now: float) -> None:
        self.now = now
        if self._failed or self._closed:
            return
        if not data:
            if self._sasl.state is SaslState.DONE:
                self._transport.close_tail()
                self._pump()
            else:
                self._emit_closed("transport closed during SASL")
            return
        sasl = self._sasl
        if sasl.state is not SaslState.DONE:
            data = sasl.receive_data(data)
            if sasl.state is SaslState.VERIFYING and sasl.credentials is not None:
                if not self._asked:
                    self._asked = True
                    self._events.append(ev.CredentialsReceived(*sasl.credentials))
                return
            if self._sasl_decided():
                return
        self._feed(data)

    def authenticated(self, user: str | None) -> None:
        """SASL PLAIN succeeded as ``user``: the waiting bytes go on to the engine."""
        rest = self._sasl.complete(True, user)
        self.user = user
        self._feed(rest)

    def refuse_credentials(self, reason: str) -> None:
        user = self._sasl.credentials[0] if self._sasl.credentials else None
        self._sasl.complete(False, user, reason)
        self._sasl_decided()

    def _sasl_decided(self) -> bool:
        """Emit a SASL failure; True when there is nothing for the engine."""
        sasl = self._sasl
        result = sasl.result
        if sasl.state is SaslState.FAILED and result is not None:
            self._failed = True
            if result.protocol_error:
                self._events.append(ev.ProtocolFailed(result.reason))
            else:
                self._events.append(
                    ev.AuthenticationFailed(result.mechanism, result.user, result.reason)
                )
            return True
        if sasl.state is SaslState.DONE and result is not None:
            self.user = result.user
            return False
        return True  # still waiting for more of the exchange

    def _feed(self, data: bytes | bytearray) -> None:
        if not data or self._failed:
            return
        t = self._transport
        impl = self._transport_impl
        pointer = _from_buffer(data)
        offset, size = 0, len(data)
        while offset < size and not self._failed:
            cap = _transport_capacity(impl)
            if cap <= 0:  # the engine's input is closed (it failed or finished)
                if cap < PN_EOS:
                    t._check(cap)  # raises, as Transport.capacity does
                break
            n = min(cap, size - offset)
            pushed = _transport_push(impl, pointer + offset, n)
            if pushed != n:
                t._check(pushed)  # raises for an error, as Transport.push does
                raise OverflowError(f"unable to process all bytes: {pushed}, {n}")
            offset += n
            self._pump()
        self._pump()
        if _transport_capacity(impl) < 0 and not self._closed and not self._failed:
            # Proton stopped reading without a close from the peer: it could
            # not decode a frame (it raises no event for that before open).
            cond = t.condition
            self._failed = True
            if cond is None and self._conn.state & Link.LOCAL_ACTIVE:
                # Proton closed its output too, without a close frame: ours names why.
                self._last_words = close_frame("amqp:decode-error", "malformed AMQP frame")
            self._events.append(
                ev.ProtocolFailed(
                    (cond.description or cond.name) if cond else "malformed AMQP frame"
                )
            )

    def next_event(self) -> ev.Event | ev.NeedData:
        if self._events:
            return self._events.popleft()
        return ev.NEED_DATA

    def data_to_send(self) -> bytes:
        out = bytes(self._sasl.output)
        self._sasl.output.clear()
        if self._sasl.state is not SaslState.DONE:
            return out
        impl = self._transport_impl
        chunks = [out] if out else []
        while True:
            pending: int = _transport_pending(impl)
            if pending <= 0:
                if pending < PN_EOS:
                    self._transport._check(pending)  # raises, as Transport.pending does
                break
            if pending > len(self._output):
                self._output = bytearray(pending)
                self._output_pointer = _from_buffer(self._output)
            pointer = self._output_pointer
            peeked: int = _transport_peek(impl, pointer, pending)
            if peeked <= 0:
                if peeked < PN_EOS:
                    self._transport._check(peeked)  # raises, as Transport.peek does
                break
            chunks.append(_buffer(pointer, peeked)[:])
            _transport_pop(impl, peeked)
        if self._last_words:
            chunks.append(self._last_words)
            self._last_words = b""
        if len(chunks) == 1:
            return chunks[0]
        return b"".join(chunks)

    @property
    def finished(self) -> bool:
        """Nothing more will be written: the owner may close the socket."""
        if self._failed:
            return not self._sasl.output
        return self._sasl.state is SaslState.DONE and self._transport.pending() < 0

    def handle_timer(self, now: float) -> float | None:
        """Let the engine send idle frames or time the peer out; the next deadline."""
        self.now = now
        if self._sasl.state is not SaslState.DONE or self._failed:
            return None
        deadline = self._transport.tick(now)
        self._pump()
        return deadline or None

    # --- Proton events -> ours --------------------------------------------------

    def _pump(self) -> None:
        # Transfers, dispositions and credit are most events: they skip
        # Proton's Event wrapper, which builds about six wrapper objects per
        # event (AW1 measured ~50 us of broker CPU per event through it), and
        # the events we ignore never reach Python. An event is popped once
        # handled (take_event pops the previous one), as Proton keeps what it
        # names alive until then.
        collector = self._collector_handle
        handled = False
        while True:
            item = calls.take_event(collector, handled, _WANTED_EVENTS)
            if item is None:
                return
            handled = True
            if self._failed:  # refused for a limit: the rest is not read
                continue
            kind, subject, link = item
            try:
                if kind == _DELIVERY_EVENT:
                    self._on_delivery(subject, link)
                elif kind == _FLOW_EVENT:
                    self._on_flow(subject)
                else:
                    self._handle(PnEvent.wrap(calls.pointer(subject, "pn_event_t *")))
            except BaseException:
                calls.pop_event(collector)
                raise

    def _on_flow(self, link: calls.Handle) -> None:
        link_id = self._link_of_impl.get(link)
        if link_id is None or link_id in self._receiving:
            return
        state, credit, drain = calls.link_flow(link)
        if state & _LOCAL_ACTIVE:
            self._events.append(ev.CreditChanged(link_id, _unsigned(credit), drain))

    def _handle(self, pe: PnEvent) -> None:
        kind = pe.type
        if kind == PnEvent.LINK_REMOTE_OPEN:
            link = pe.link
            session = calls.handle(link.session._impl)
            self._session_links[session] = self._session_links.get(session, 0) + 1
            self._link_count += 1
            if self._link_count > self.max_links:
                self._refuse_connection(
                    RESOURCE_LIMIT,
                    f"more than {self.max_links} links on one connection (max-amqp-links-per-connection)",
                )
                return
            if not link.name:  # Proton reads a name that is not a string as none
                self._refuse_connection("amqp:invalid-field", "attach: the name must be a string")
                return
            self._on_attach(link)
        elif kind in (PnEvent.LINK_REMOTE_CLOSE, PnEvent.LINK_REMOTE_DETACH):
            link = pe.link
            session = calls.handle(link.session._impl)
            if self._session_links.get(session, 0) > 0:
                self._session_links[session] -= 1
                self._link_count -= 1
            self._discarding.discard(calls.handle(link._impl))
            closed = kind == PnEvent.LINK_REMOTE_CLOSE
            cond = link.remote_condition
            if closed:
                link.close()
            else:
                link.detach()
            self._forget_link(link, closed, cond.name if cond else None)
            # Both ends are done with it: Proton may free it once our detach is
            # written (else each attach a peer ever made stays in memory).
            link.free()
        elif kind == PnEvent.SESSION_REMOTE_OPEN:
            if len(self._session_links) >= self.max_sessions:
                self._refuse_connection(
                    RESOURCE_LIMIT,
                    f"more than {self.max_sessions} sessions on one connection (max-amqp-sessions-per-connection)",
                )
                return
            self._session_links[calls.handle(pe.session._impl)] = 0
            if pe.session.state & Link.LOCAL_UNINIT:
                pe.session.open()
        elif kind == PnEvent.SESSION_REMOTE_CLOSE:
            session = pe.session
            self._link_count -= self._session_links.pop(calls.handle(session._impl), 0)
            for link in list(self._links.values()):
                if link.session == session:
                    self._forget_link(link, True, None)
            session.close()
        elif kind == PnEvent.CONNECTION_REMOTE_OPEN:
            conn = self._conn
            conn.open()
            self._events.append(
                ev.ConnectionOpened(conn.remote_container or "", conn.remote_hostname, self.user)
            )
        elif kind == PnEvent.CONNECTION_REMOTE_CLOSE:
            cond = self._conn.remote_condition
            self._conn.close()
            self._emit_closed(None, cond)
        elif kind == PnEvent.TRANSPORT_ERROR:
            cond = self._transport.condition
            description = (cond.description or cond.name) if cond else "transport error"
            self._failed = True
            self._events.append(ev.ProtocolFailed(description))
        elif kind == PnEvent.TRANSPORT_CLOSED:
            self._emit_closed(None)

    def _refuse_connection(self, condition: str, description: str) -> None:
        """Close the connection with an error condition and read nothing more
        (the events still waiting are dropped unhandled)."""
        if self._failed:
            return
        self._failed = True
        self._partial.clear()
        self._conn.condition = Condition(condition, description)
        self._conn.close()
        self._events.append(ev.ProtocolFailed(description))

    def _emit_closed(self, description: str | None, cond: Condition | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        self._events.append(
            ev.ConnectionClosed(
                cond.name if cond else None, (cond.description if cond else None) or description
            )
        )

    def _id_of(self, link: Link) -> int:
        link_id = getattr(link, "shoal_id", None)
        if link_id is None:
            link_id = next(self._link_ids)
            link.shoal_id = link_id
            self._links[link_id] = link
            impl = calls.handle(link._impl)
            self._link_impls[link_id] = impl
            self._link_of_impl[impl] = link_id
            if link.is_receiver:
                self._receiving.add(link_id)
        return link_id

    def _drop_link(self, link_id: int) -> Link | None:
        link = self._links.pop(link_id, None)
        impl = self._link_impls.pop(link_id, None)
        self._link_of_impl.pop(impl, None)
        self._partial.pop(impl, None)
        self._receiving.discard(link_id)
        self._coordinators.discard(link_id)
        for did, (dlv, owner) in list(self._deliveries.items()):
            if owner == link_id:
                del self._deliveries[did]
                self._sent.pop(dlv, None)
        return link

    def _forget_link(self, link: Link, closed: bool, condition: str | None) -> None:
        link_id = getattr(link, "shoal_id", None)
        if link_id is None or self._drop_link(link_id) is None:
            return
        self._events.append(ev.LinkDetached(link_id, closed, condition))

    def _on_attach(self, link: Link) -> None:
        link_id = self._id_of(link)
        if link.is_sender:  # the peer receives from us
            source = link.remote_source
            self._events.append(
                ev.SenderAttached(
                    link_id,
                    link.name,
                    source.address,
                    _capabilities(source),
                    link.remote_snd_settle_mode == Link.SND_SETTLED,
                    _selector(source),
                    source.durability != Terminus.NONDURABLE
                    or source.expiry_policy == Terminus.EXPIRE_NEVER,
                )
            )
        else:
            target = link.remote_target
            if target.type == Terminus.COORDINATOR:
                self._coordinators.add(link_id)
            self._events.append(
                ev.ReceiverAttached(
                    link_id,
                    link.name,
                    target.address,
                    _capabilities(target),
                    target.type == Terminus.COORDINATOR,
                )
            )

    def _on_delivery(self, dlv: calls.Handle, link: calls.Handle) -> None:
        did = self._sent.get(dlv)
        if did is not None:  # one of our unsettled transfers: its peer's disposition
            self._on_disposition(dlv, did)
            return
        link_id = self._link_of_impl.get(link)
        if link_id is not None and link_id in self._coordinators:
            self._on_control(dlv, link, link_id)
        elif link_id is not None and link_id in self._receiving:
            self._on_transfer(dlv, link, link_id)
        elif link in self._discarding:
            self._discard(dlv, link)

    def _discard(self, dlv: calls.Handle, link: calls.Handle) -> None:
        """Drop what arrived of a transfer on a link we closed for its size: the
        peer may send on until it reads our detach, and Proton would keep it all."""
        delivery = calls.pointer(dlv, "pn_delivery_t *")
        pn_link = calls.pointer(link, "pn_link_t *")
        codec = self._codec
        while lib.pn_delivery_pending(delivery) > 0:
            if lib.pn_link_recv(pn_link, codec.pointer, len(codec.buffer)) <= 0:
                break
        if not lib.pn_delivery_partial(delivery):
            lib.pn_link_advance(pn_link)
            lib.pn_delivery_settle(delivery)
            self._discarding.discard(link)

    def _on_transfer(self, dlv: calls.Handle, link: calls.Handle, link_id: int) -> None:
        codec = self._codec
        status, size, settled = calls.receive_transfer(
            dlv, link, codec.buffer, codec.pointer, self.max_message_bytes
        )
        if status == calls.SHORT_BUFFER:
            codec.reserve(size)
            status, size, settled = calls.receive_transfer(
                dlv, link, codec.buffer, codec.pointer, self.max_message_bytes
            )
        partial = self._partial
        if status == calls.PARTIAL:
            if size > self.max_message_bytes:
                partial.pop(link, None)
                self._too_large(
                    dlv, link, link_id, f"message larger than {self.max_message_bytes} bytes"
                )
                return
            partial[link] = size
            if sum(partial.values()) > self.max_partial_bytes:
                self._refuse_connection(
                    RESOURCE_LIMIT,
                    f"more than {self.max_partial_bytes} bytes of transfers arriving at once "
                    "(max-amqp-partial-bytes-per-connection)",
                )
            return
        if partial:
            partial.pop(link, None)
        if status == calls.TOO_LARGE:
            self._too_large(
                dlv,
                link,
                link_id,
                f"message of {size} bytes is larger than {self.max_message_bytes} bytes",
            )
            return
        if status != calls.RECEIVED:  # not readable yet, or aborted (and settled)
            return
        try:
            if size < 0:  # what pn_link_recv returned
                raise ValueError("no bytes in the transfer")
            problem = section_problem(codec.buffer, size)
            if problem is not None:
                raise ValueError(problem)
            msg = codec.decode_buffer(size)
            encoding = codec.kept_encoding(size)
        except Exception as exc:
            wrapped = Delivery.wrap(calls.pointer(dlv, "pn_delivery_t *"))
            wrapped.local.condition = Condition(
                "amqp:decode-error", f"cannot decode message: {exc}"
            )
            wrapped.update(Disposition.REJECTED)
            wrapped.settle()
            return
        txn_id = txn_id_of(dlv) if self._transactional else None
        if settled:
            calls.settle(dlv)
            did = 0
        else:
            did = next(self._delivery_ids)
            self._deliveries[did] = (dlv, link_id)
        self._events.append(
            ev.TransferReceived(
                link_id,
                did,
                msg,
                settled,
                size,
                encoding,
                codec.default_header,  # False when the encoding was not kept
                txn_id,
            )
        )

    def _on_control(self, dlv: calls.Handle, link: calls.Handle, link_id: int) -> None:
        """A transfer on a coordinator link: a Declare or a Discharge."""
        codec = self._codec
        status, size, settled = calls.receive_transfer(
            dlv, link, codec.buffer, codec.pointer, len(codec.buffer)
        )
        if status != calls.RECEIVED:  # a control body is a few bytes: never partial here
            if status in (calls.PARTIAL, calls.NOT_READABLE):
                return
            self.close_link(link_id, "amqp:decode-error", "coordinator transfer too large")
            return
        did = next(self._delivery_ids)
        self._deliveries[did] = (dlv, link_id)
        event = control_event(link_id, did, bytes(codec.buffer[:size]))
        if event is None:
            self.settle(
                did,
                "rejected",
                condition="amqp:decode-error",
                description="a coordinator takes only Declare and Discharge bodies",
            )
        else:
            self._events.append(event)
        if settled:  # pre-settled: the peer wants no answer
            self._deliveries.pop(did, None)
            calls.settle(dlv)

    def _too_large(
        self, dlv: calls.Handle, link: calls.Handle, link_id: int, description: str
    ) -> None:
        self.close_link(link_id, "amqp:link:message-size-exceeded", description)
        self._discarding.add(link)
        self._discard(dlv, link)

    def _on_disposition(self, dlv: calls.Handle, did: int) -> None:
        """The peer's disposition for one of our transfers (delivery ``did``).

        Not checked with ``pn_delivery_updated``: on a sending link only the
        peer's dispositions raise the event, and a repeated one finds the
        delivery settled and gone, or is a non-terminal state the server
        ignores. (One call into Proton fewer per message.)"""
        entry = self._deliveries.get(did)
        if entry is None:
            return
        link_id = entry[1]
        state, settled, failed, undeliverable = calls.read_outcome(dlv)  # settles a final one
        outcome = _OUTCOMES.get(state)
        if outcome is None:
            if state == TRANSACTIONAL_STATE:
                self._on_transactional_outcome(dlv, did, link_id)
            return
        if settled:
            del self._sent[dlv]
            self._deliveries.pop(did, None)
        self._events.append(
            ev.OutcomeReceived(link_id, did, outcome, settled, failed, undeliverable)
        )

    def _on_transactional_outcome(self, dlv: calls.Handle, did: int, link_id: int) -> None:
        """The peer settled one of our transfers in a transaction: the outcome
        takes effect at discharge, so it is final here (settled at once)."""
        found = transactional_outcome(dlv)
        if found is None:
            return  # a state in a transaction that is not an outcome: nothing to do yet
        txn_id, outcome, failed, undeliverable = found
        calls.settle(dlv)
        del self._sent[dlv]
        self._deliveries.pop(did, None)
        self._events.append(
            ev.OutcomeReceived(link_id, did, outcome, True, failed, undeliverable, txn_id)
        )

    # --- commands -------------------------------------------------------------

    def accept_link(
        self, link_id: int, *, address: str | None = None, settled: bool = False
    ) -> None:
        """Open our end of an attached link, echoing the peer's terminus (a link
        the peer detached meanwhile, in the same read, is left alone)."""
        link = self._links.get(link_id)
        if link is None:
            return
        if link.is_sender:
            link.source.copy(link.remote_source)
            if address is not None:
                link.source.type = Terminus.SOURCE  # the peer may have sent none (a look-up)
                link.source.address = address
            link.target.copy(link.remote_target)
            link.snd_settle_mode = Link.SND_SETTLED if settled else Link.SND_UNSETTLED
        else:
            link.target.copy(link.remote_target)
            if address is not None:
                link.target.address = address
            link.source.copy(link.remote_source)
            link.max_message_size = self.max_message_bytes
        link.open()
        if link.is_sender and link.credit:  # granted along with the attach, before we opened
            self._events.append(ev.CreditChanged(link_id, _unsigned(link.credit), link.drain_mode))

    def accept_coordinator(self, link_id: int, credit: int) -> None:
        """Open an attached coordinator link and let the peer send ``credit`` controls."""
        self._transactional = True
        self.accept_link(link_id)
        self.grant_credit(link_id, credit)

    def declared(self, delivery_id: int, txn_id: bytes) -> None:
        """Answer a Declare: the transaction is ``txn_id`` (state Declared)."""
        self._settle_with_state(delivery_id, DECLARED_STATE, [txn_id])

    def refuse_link(self, link_id: int, condition: str, description: str) -> None:
        """Answer an attach with a null terminus and a closing detach (part 2.6.3)."""
        link = self._drop_link(link_id)
        if link is None:
            return
        link.open()
        link.condition = Condition(condition, description)
        link.close()

    def close_link(self, link_id: int, condition: str, description: str) -> None:
        link = self._links.get(link_id)
        if link is None:
            return
        link.condition = Condition(condition, description)
        link.close()
        self._forget_link(link, True, condition)
        self._events.pop()  # our own close is not the peer's news

    def grant_credit(self, link_id: int, credit: int) -> None:
        link = self._links.get(link_id)
        if link is not None and credit > 0:
            link.flow(credit)

    def credit(self, link_id: int) -> int:
        link = self._link_impls.get(link_id)
        return _unsigned(calls.link_credit(link)) if link is not None else 0

    def drained(self, link_id: int) -> int:
        """In drain mode with nothing to send: use up the peer's credit."""
        link = self._links.get(link_id)
        return link.drained() if link is not None else 0

    def send_message(
        self, link_id: int, message: Message | bytes | tuple[bytes, ...], *, settled: bool = False
    ) -> int:
        """Transfer ``message`` (or its encoding, whole or in parts) on a sending
        link; its delivery id (0 when pre-settled)."""
        link = self._link_impls[link_id]
        tag = next(self._tags)
        if isinstance(message, bytes):
            dlv = calls.send_transfer(link, tag, message, None, len(message), settled)
        elif isinstance(message, tuple):
            # One call into Proton: the parts are a few hundred bytes, and a
            # call costs more than copying them.
            whole = b"".join(message)
            dlv = calls.send_transfer(link, tag, whole, None, len(whole), settled)
        else:
            codec = self._codec
            size = codec.encode_to_buffer(message)  # may replace the buffer
            dlv = calls.send_transfer(link, tag, codec.buffer, codec.pointer, size, settled)
        if settled:
            return 0
        did = next(self._delivery_ids)
        self._deliveries[did] = (dlv, link_id)
        self._sent[dlv] = did
        return did

    def blank_message(self) -> Message:
        """A message to fill and send: as ``Message()``, but maybe a recycled one."""
        return self._codec.blank()

    def recycle(self, message: Message) -> None:
        """Hand back a received or sent message once nothing reads it (not even a
        view of its body): the next transfer may be decoded into it."""
        self._codec.recycle(message)

    def settle(
        self,
        delivery_id: int,
        outcome: str = "accepted",
        *,
        condition: str | None = None,
        description: str | None = None,
        txn_id: bytes | None = None,
    ) -> None:
        """Settle a received transfer with an outcome (a rejection names why);
        one sent in transaction ``txn_id`` is accepted as TransactionalState."""
        if txn_id is not None and condition is None and outcome == "accepted":
            self._settle_with_state(delivery_id, TRANSACTIONAL_STATE, accepted_in(txn_id))
            return
        entry = self._deliveries.pop(delivery_id, None)
        if entry is None:
            return
        dlv = entry[0]
        self._sent.pop(dlv, None)
        if condition is None and outcome == "accepted":
            calls.accept(dlv)
            return
        wrapped = Delivery.wrap(calls.pointer(dlv, "pn_delivery_t *"))
        if condition is not None:
            wrapped.local.condition = Condition(condition, description)
        wrapped.update(_STATES[outcome])
        calls.settle(dlv)

    def _settle_with_state(self, delivery_id: int, state: int, fields: list[Any]) -> None:
        entry = self._deliveries.pop(delivery_id, None)
        if entry is None:
            return
        wrapped = Delivery.wrap(calls.pointer(entry[0], "pn_delivery_t *"))
        wrapped.local.data = fields
        wrapped.update(state)
        calls.settle(entry[0])

    def close(self, condition: str | None = None, description: str | None = None) -> None:
        """Close the connection, with an error condition if given."""
        if self._failed or self._sasl.state is not SaslState.DONE:
            self._failed = True
            return
        if condition is not None:
            self._conn.condition = Condition(condition, description)
        if self._conn.state & Link.LOCAL_UNINIT:
            self._conn.open()
        self._conn.close()
        self._pump()
