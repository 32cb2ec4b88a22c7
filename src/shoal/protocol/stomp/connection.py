"""The STOMP connection state machine, for either end of the wire.

``StompConnection`` turns bytes into events (``receive_data`` /
``next_event``) and events into bytes (``send``); heart-beats run on a clock
the caller passes in (``receive_data(data, now)``, ``get_timer()``,
``handle_timer(now)``). It owns version negotiation and validation; it never
does I/O and never reads a clock.

Rules kept here:

- The state machine is data: :data:`RECEIVE_TRANSITIONS` and
  :data:`SEND_TRANSITIONS` list, for each (role, state), which frames may be
  received or sent and the state each one leads to. Anything else is an error.
- A peer's mistake raises :class:`RemoteProtocolError` from ``next_event()``
  (or ``handle_timer()`` on a heart-beat timeout) and the state becomes
  ``ERROR`` for good; a server then sends an :class:`Error` and closes. Our
  own misuse raises :class:`LocalProtocolError` from ``send()``.
- The ``receipt`` of the frame that broke the rules, when its headers could be
  read, is kept in ``error_receipt_id``: the ERROR answering it carries it as
  ``receipt-id`` (STOMP 1.2), as for any other failed frame.
- A server holds frames pipelined behind CONNECT (``next_event()`` returns
  ``NEED_DATA``) until the app has sent ``Connected``: their escaping depends
  on the version that reply fixes. Call ``next_event()`` again after it.

What each command's headers must hold is read in readers.py.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Final

from shoal.errors import LimitExceeded, LocalProtocolError, RemoteProtocolError

from .codec import (
    ALL_COMMANDS,
    CLIENT_COMMANDS,
    SERVER_COMMANDS,
    SUPPORTED_VERSIONS,
    FrameDecoder,
    Limits,
)
from .encoder import encode_frame, encode_message, encode_message_lossy
from .frames import (
    NEED_DATA,
    Abort,
    Ack,
    Begin,
    Commit,
    Connect,
    Connected,
    ConnectionClosed,
    Disconnect,
    Error,
    Event,
    Heartbeat,
    Message,
    Nack,
    NeedData,
    Receipt,
    Send,
    Subscribe,
    Unsubscribe,
)
from .readers import READERS, read_connect

__all__ = [
    "RECEIVE_TRANSITIONS",
    "SEND_TRANSITIONS",
    "ConnectionState",
    "Role",
    "StompConnection",
]


class Role(enum.Enum):
    CLIENT = "client"
    SERVER = "server"


class ConnectionState(enum.Enum):
    START = "START"  # nothing exchanged yet
    CONNECTING = "CONNECTING"  # CONNECT sent/received, CONNECTED not yet
    OPEN = "OPEN"
    DISCONNECTING = "DISCONNECTING"  # DISCONNECT sent/received
    CLOSED = "CLOSED"  # EOF, ERROR frame exchanged, or ConnectionClosed sent
    ERROR = "ERROR"  # a protocol error; terminal


CLIENT, SERVER = Role.CLIENT, Role.SERVER
START, CONNECTING, OPEN, DISCONNECTING, CLOSED, ERROR = (
    ConnectionState.START,
    ConnectionState.CONNECTING,
    ConnectionState.OPEN,
    ConnectionState.DISCONNECTING,
    ConnectionState.CLOSED,
    ConnectionState.ERROR,
)

_CLIENT_OPEN_FRAMES = (
    "SEND",
    "SUBSCRIBE",
    "UNSUBSCRIBE",
    "ACK",
    "NACK",
    "BEGIN",
    "COMMIT",
    "ABORT",
)


def _stay(state: ConnectionState, commands: tuple[str, ...]) -> dict[str, ConnectionState]:
    return dict.fromkeys(commands, state)


#: (role, state) -> {command the role may receive: next state}
RECEIVE_TRANSITIONS: Final[dict[tuple[Role, ConnectionState], dict[str, ConnectionState]]] = {
    (SERVER, START): {"CONNECT": CONNECTING, "STOMP": CONNECTING},
    (SERVER, OPEN): {**_stay(OPEN, _CLIENT_OPEN_FRAMES), "DISCONNECT": DISCONNECTING},
    (CLIENT, CONNECTING): {"CONNECTED": OPEN, "ERROR": CLOSED},
    (CLIENT, OPEN): {"MESSAGE": OPEN, "RECEIPT": OPEN, "ERROR": CLOSED},
    (CLIENT, DISCONNECTING): {
        "MESSAGE": DISCONNECTING,
        "RECEIPT": DISCONNECTING,
        "ERROR": CLOSED,
    },
}

#: (role, state) -> {command the role may send: next state}
SEND_TRANSITIONS: Final[dict[tuple[Role, ConnectionState], dict[str, ConnectionState]]] = {
    (CLIENT, START): {"CONNECT": CONNECTING, "STOMP": CONNECTING},
    (CLIENT, OPEN): {**_stay(OPEN, _CLIENT_OPEN_FRAMES), "DISCONNECT": DISCONNECTING},
    (SERVER, START): {"ERROR": CLOSED},
    (SERVER, CONNECTING): {"CONNECTED": OPEN, "ERROR": CLOSED},
    (SERVER, OPEN): {"MESSAGE": OPEN, "RECEIPT": OPEN, "ERROR": CLOSED},
    (SERVER, DISCONNECTING): {
        "MESSAGE": DISCONNECTING,
        "RECEIPT": DISCONNECTING,
        "ERROR": CLOSED,
    },
    (SERVER, CLOSED): {"ERROR": CLOSED},
    (SERVER, ERROR): {"ERROR": ERROR},
}

_HEARTBEAT_STATES: Final = frozenset({OPEN, DISCONNECTING})
_EMPTY: Final[dict[str, ConnectionState]] = {}
_SUPPORTED_LIST: Final = ",".join(SUPPORTED_VERSIONS)


# --- writing helpers --------------------------------------------------------


def _merge(fixed: dict[str, str], extra: dict[str, str]) -> dict[str, str]:
    """``fixed`` first and winning, then the other headers of ``extra``."""
    if not extra:
        return fixed
    merged = {**fixed, **extra}
    merged.update(fixed)
    return merged


def _optional(headers: dict[str, str], name: str, value: str | None) -> None:
    if value is not None:
        headers[name] = value


def _one_line(value: str) -> str:
    if not isinstance(value, str):
        return value  # encode_frame reports it
    return value.replace("\r\n", " ").replace("\n", " ").replace("\r", " ").replace("\x00", "\\0")


class StompConnection:
    """One end of a STOMP connection. See the module docstring."""

    def __init__(
        self,
        role: Role,
        *,
        limits: Limits | None = None,
        versions: tuple[str, ...] = SUPPORTED_VERSIONS,
    ) -> None:
        self.role = role
        self.limits = limits if limits is not None else Limits()
        #: Server: the versions a CONNECT may negotiate (a WebSocket
        #: subprotocol such as ``v12.stomp`` fixes one).
        self.versions = versions
        self.state = START
        #: Negotiated version, ``None`` until CONNECTED is sent (server) or
        #: received (client).
        self.version: str | None = None
        #: Negotiated heart-beat intervals in ms: (we send every, we expect every).
        self.heart_beat: tuple[int, int] = (0, 0)
        self._decoder = FrameDecoder(self.limits)
        self._recv_table = RECEIVE_TRANSITIONS.get((role, START), _EMPTY)
        self._send_table = SEND_TRANSITIONS.get((role, START), _EMPTY)
        self._offered: tuple[str, ...] = ()  # versions offered in CONNECT
        self._client_heart_beat = (0, 0)  # (cx, cy) from CONNECT
        self._version_mismatch = False
        #: ``receipt`` of the frame that put the connection in ERROR, if known.
        self.error_receipt_id: str | None = None
        self._now = 0.0
        self._last_recv = 0.0
        self._last_sent = 0.0
        self._hb_out = 0.0  # seconds; 0: off
        self._hb_in = 0.0

    def set_limits(self, limits: Limits) -> None:
        """Change the parser limits (a server raises them once the peer logged in)."""
        self.limits = limits
        self._decoder.limits = limits

    def __repr__(self) -> str:
        return (
            f"<StompConnection {self.role.value} {self.state.name} "
            f"version={self.version} heart_beat={self.heart_beat}>"
        )

    def _set_state(self, state: ConnectionState) -> None:
        self.state = state
        self._recv_table = RECEIVE_TRANSITIONS.get((self.role, state), _EMPTY)
        self._send_table = SEND_TRANSITIONS.get((self.role, state), _EMPTY)

    # -- receiving -----------------------------------------------------------

    def receive_data(self, data: bytes, now: float = 0.0) -> None:
        """Buffer bytes from the peer; ``b""`` means the peer closed (EOF)."""
        if self._decoder.eof and data:
            raise LocalProtocolError("receive_data() called with data after EOF")
        self._now = now
        if data:
            self._last_recv = now
        self._decoder.feed(data)

    def take_acks(self) -> list[str]:
        """A shortcut past ``next_event`` for the commonest frame a server
        reads: the ids of the ACK frames next in the buffer that carry an
        ``id`` header alone (STOMP 1.2, an open server connection), consumed,
        in order. ``next_event`` would have returned each as ``Ack(id,
        headers={"id": id})``. ``[]`` when the next frame is any other."""
        if self.state is not OPEN or self.role is not SERVER or self.version != "1.2":
            return []
        return self._decoder.take_plain_acks()

    def next_event(self) -> Event | NeedData:
        """The next event, ``NEED_DATA``, or ``ConnectionClosed()`` after EOF."""
        state = self.state
        if state is ERROR:
            raise RemoteProtocolError("the connection is in ERROR state after a protocol error")
        if state is CLOSED:
            return ConnectionClosed()
        decoder = self._decoder
        frame = None
        try:
            if state is CONNECTING and self.role is SERVER:
                # Hold frames pipelined behind CONNECT until the version is known.
                if decoder.buffered > self.limits.max_frame_bytes:
                    raise LimitExceeded(
                        "max_frame_bytes",
                        self.limits.max_frame_bytes,
                        "too much data sent before CONNECTED",
                    )
                return NEED_DATA
            frame = decoder.next_frame()
            if frame is None:
                if decoder.eof:
                    return self._handle_eof()
                return NEED_DATA
            command, headers, body = frame
            new_state = self._recv_table.get(command)
            if new_state is None:
                self._unexpected(command)
            if state is START:
                return self._handle_connect(read_connect(headers, command))
            event = READERS[command](headers, body, self.version)
            if new_state is not state:
                if command == "CONNECTED":
                    self._handle_connected(event)  # type: ignore[arg-type]
                self._set_state(new_state)  # type: ignore[arg-type]
            return event
        except RemoteProtocolError:
            self._set_state(ERROR)
            failed = frame[1] if frame is not None else decoder.error_headers
            if failed:
                self.error_receipt_id = failed.get("receipt")
            raise

    def _handle_eof(self) -> ConnectionClosed:
        if not self._decoder.at_frame_boundary():
            raise RemoteProtocolError("connection closed in the middle of a frame")
        self._set_state(CLOSED)
        return ConnectionClosed()

    def _unexpected(self, command: str) -> None:
        state = self.state
        if command not in ALL_COMMANDS:
            raise RemoteProtocolError(f"unknown command {command[:40]!r}")
        if self.role is SERVER:
            if state is START:
                raise RemoteProtocolError(
                    f"the first frame must be CONNECT or STOMP, not {command}"
                )
            if command in SERVER_COMMANDS:
                raise RemoteProtocolError(f"{command} is a server frame; a client cannot send it")
            if command in ("CONNECT", "STOMP"):
                raise RemoteProtocolError(f"{command} frame on a connection already connected")
        else:
            if state is START:
                raise RemoteProtocolError(f"{command} frame received before CONNECT was sent")
            if command in CLIENT_COMMANDS:
                raise RemoteProtocolError(f"{command} is a client frame; a server cannot send it")
            if state is CONNECTING:
                raise RemoteProtocolError(f"expected CONNECTED or ERROR, got {command}")
        if state is DISCONNECTING:
            raise RemoteProtocolError(f"{command} frame after DISCONNECT")
        raise RemoteProtocolError(f"unexpected {command} frame in state {state.name}")

    def _handle_connect(self, event: Connect) -> Connect:
        """Server: a CONNECT or STOMP frame arrived; check the versions."""
        offered = event.versions
        common = [v for v in self.versions if v in offered]
        if not common:
            self._version_mismatch = True
            supported = ",".join(self.versions)
            raise RemoteProtocolError(
                f"no common STOMP version: the client accepts {event.accept_version!r}, "
                f"this server supports {supported}",
                error_frame_hint=f"Supported protocol versions are {supported}",
            )
        self._offered = tuple(common)
        self._client_heart_beat = event.heart_beat
        self._set_state(CONNECTING)
        return event

    def _handle_connected(self, event: Connected) -> None:
        """Client: CONNECTED arrived; adopt its version and heart-beats."""
        version = event.version or "1.0"
        if version not in self._offered:
            raise RemoteProtocolError(
                f"server chose STOMP version {version!r}, which was not offered "
                f"({','.join(self._offered)})"
            )
        self._set_version(version)
        if version != "1.0":
            cx, cy = self._client_heart_beat
            sx, sy = event.heart_beat
            self._start_heartbeats(max(cx, sy) if cx and sy else 0, max(sx, cy) if sx and cy else 0)

    def _set_version(self, version: str) -> None:
        self.version = version
        self._decoder.version = version

    # -- sending -------------------------------------------------------------

    def send_message(
        self,
        destination: str,
        message_id: str,
        subscription: str | None,
        ack: str | None,
        headers: dict[str, str],
        body: bytes,
    ) -> bytes:
        """``send(Message(...))`` without building the event: the broker's
        delivery path. Same checks, same bookkeeping (heart-beats count it
        as output); raises ``LocalProtocolError`` for what this connection's
        version cannot carry (see :meth:`send_message_lossy`)."""
        if self.state is not OPEN or self.role is not SERVER:
            self._check_can_send("MESSAGE")
        data = encode_message(
            destination, message_id, subscription, ack, headers, body, self.version
        )
        self._last_sent = self._now
        return data

    def send_receipt(self, receipt_id: str) -> bytes:
        """``send(Receipt(receipt_id))`` without building the event: the
        answer to every receipted frame. The same bytes and checks; an id
        that needs escaping, or another state than OPEN, takes ``send``."""
        if (
            self.state is OPEN
            and self.role is SERVER
            and "\\" not in receipt_id
            and ":" not in receipt_id
            and "\n" not in receipt_id
            and "\r" not in receipt_id
            and "\x00" not in receipt_id
        ):
            self._last_sent = self._now
            return b"RECEIPT\nreceipt-id:" + receipt_id.encode() + b"\n\n\x00"
        return self.send(Receipt(receipt_id=receipt_id))

    def send_message_lossy(
        self,
        destination: str,
        message_id: str,
        subscription: str | None,
        ack: str | None,
        headers: dict[str, str],
        body: bytes,
    ) -> tuple[bytes, list[str]]:
        """:meth:`send_message` for a message it refused: the headers this
        version cannot carry are left out and named in the frame
        (:func:`encode_message_lossy`). Returns the bytes and the names dropped."""
        if self.state is not OPEN or self.role is not SERVER:
            self._check_can_send("MESSAGE")
        data, dropped = encode_message_lossy(
            destination, message_id, subscription, ack, headers, body, self.version
        )
        self._last_sent = self._now
        return data, dropped

    def _check_can_send(self, command: str) -> None:
        if self._send_table.get(command) is None:
            raise LocalProtocolError(
                f"a {self.role.value} cannot send {command} in state {self.state.name}"
            )

    def send(self, event: Event) -> bytes:
        """Bytes to write for ``event``; raises ``LocalProtocolError`` if the
        event is not allowed now."""
        cls = type(event)
        state = self.state
        if cls is Message and state is OPEN and self.role is SERVER:  # hot path
            m: Message = event  # type: ignore[assignment]
            data = encode_message(
                m.destination, m.message_id, m.subscription, m.ack, m.headers, m.body, self.version
            )
            self._last_sent = self._now
            return data
        if cls is Heartbeat:
            if state not in _HEARTBEAT_STATES:
                raise LocalProtocolError(f"cannot send a heart-beat in state {state.name}")
            self._last_sent = self._now
            return b"\n"
        if cls is ConnectionClosed:
            if state is not ERROR:
                self._set_state(CLOSED)
            return b""
        writer = _WRITERS.get(cls)
        if writer is None:
            raise LocalProtocolError(f"cannot send {event!r}: not a STOMP event")
        command = event.command
        new_state = self._send_table.get(command)
        if new_state is None:
            raise LocalProtocolError(
                f"a {self.role.value} cannot send {command} in state {state.name}"
            )
        data = writer(self, event)
        if new_state is not state:
            self._set_state(new_state)
        self._last_sent = self._now
        return data

    def _write_connect(self, event: Connect) -> bytes:
        offered = event.versions
        if not set(offered) & set(SUPPORTED_VERSIONS):
            raise LocalProtocolError(
                f"accept_version {event.accept_version!r} has no version we support "
                f"({_SUPPORTED_LIST})"
            )
        self._offered = tuple(v for v in SUPPORTED_VERSIONS if v in offered)
        cx, cy = event.heart_beat
        if cx < 0 or cy < 0:
            raise LocalProtocolError(f"heart_beat {event.heart_beat!r} has a negative value")
        self._client_heart_beat = (cx, cy)
        fixed: dict[str, str] = {}
        _optional(fixed, "accept-version", event.accept_version)
        _optional(fixed, "host", event.host)
        _optional(fixed, "login", event.login)
        _optional(fixed, "passcode", event.passcode)
        if cx or cy:
            fixed["heart-beat"] = f"{cx},{cy}"
        return encode_frame(event.command, _merge(fixed, event.headers), b"", None)

    def _write_connected(self, event: Connected) -> bytes:
        version = event.version
        if version is None:
            version = self._offered[-1]
        elif version not in self._offered:
            raise LocalProtocolError(
                f"Connected(version={version!r}) but the client accepts {','.join(self._offered)}"
            )
        self._set_version(version)
        fixed = {"version": version}
        if version != "1.0":
            sx, sy = event.heart_beat
            if sx < 0 or sy < 0:
                raise LocalProtocolError(f"heart_beat {event.heart_beat!r} has a negative value")
            cx, cy = self._client_heart_beat
            fixed["heart-beat"] = f"{sx},{sy}"
            self._start_heartbeats(max(sx, cy) if sx and cy else 0, max(cx, sy) if cx and sy else 0)
        _optional(fixed, "server", event.server)
        _optional(fixed, "session", event.session)
        return encode_frame("CONNECTED", _merge(fixed, event.headers), b"", None)

    def _write_send(self, event: Send) -> bytes:
        fixed = {"destination": event.destination}
        _optional(fixed, "receipt", event.receipt)
        _optional(fixed, "transaction", event.transaction)
        return encode_frame("SEND", _merge(fixed, event.headers), event.body, self.version)

    def _write_subscribe(self, event: Subscribe) -> bytes:
        fixed: dict[str, str] = {}
        if event.id is not None:
            fixed["id"] = event.id
        elif self.version != "1.0":
            raise LocalProtocolError(f"SUBSCRIBE needs an id in STOMP {self.version}")
        fixed["destination"] = event.destination
        fixed["ack"] = event.ack
        _optional(fixed, "receipt", event.receipt)
        return encode_frame("SUBSCRIBE", _merge(fixed, event.headers), b"", self.version)

    def _write_unsubscribe(self, event: Unsubscribe) -> bytes:
        fixed: dict[str, str] = {}
        if event.id is not None:
            fixed["id"] = event.id
        elif self.version != "1.0" or event.destination is None:
            raise LocalProtocolError(f"UNSUBSCRIBE needs an id in STOMP {self.version}")
        _optional(fixed, "destination", event.destination)
        _optional(fixed, "receipt", event.receipt)
        return encode_frame("UNSUBSCRIBE", _merge(fixed, event.headers), b"", self.version)

    def _write_ack(self, event: Ack | Nack) -> bytes:
        command = event.command
        version = self.version
        if version == "1.2":
            fixed = {"id": event.id}
        elif command == "NACK" and version == "1.0":
            raise LocalProtocolError("NACK is not part of STOMP 1.0")
        else:
            fixed = {"message-id": event.id}
            if event.subscription is None and version == "1.1":
                raise LocalProtocolError(f"{command} needs a subscription in STOMP 1.1")
        _optional(fixed, "subscription", event.subscription)
        _optional(fixed, "transaction", event.transaction)
        _optional(fixed, "receipt", event.receipt)
        return encode_frame(command, _merge(fixed, event.headers), b"", version)

    def _write_transaction(self, event: Begin | Commit | Abort) -> bytes:
        fixed = {"transaction": event.transaction}
        _optional(fixed, "receipt", event.receipt)
        return encode_frame(event.command, _merge(fixed, event.headers), b"", self.version)

    def _write_disconnect(self, event: Disconnect) -> bytes:
        fixed: dict[str, str] = {}
        _optional(fixed, "receipt", event.receipt)
        return encode_frame("DISCONNECT", _merge(fixed, event.headers), b"", self.version)

    def _write_message(self, event: Message) -> bytes:
        return encode_message(
            event.destination,
            event.message_id,
            event.subscription,
            event.ack,
            event.headers,
            event.body,
            self.version,
        )

    def _write_receipt(self, event: Receipt) -> bytes:
        return encode_frame(
            "RECEIPT", _merge({"receipt-id": event.receipt_id}, event.headers), b"", self.version
        )

    def _write_error(self, event: Error) -> bytes:
        fixed: dict[str, str] = {}
        if event.message:
            fixed["message"] = event.message
        _optional(fixed, "receipt-id", event.receipt_id)
        if self._version_mismatch:
            fixed.setdefault("version", ",".join(self.versions))
        headers = _merge(fixed, event.headers)
        # An ERROR may quote the peer's bad input and may go out before any
        # version is agreed: keep every value on one line, and NUL-free.
        headers = {k: _one_line(v) for k, v in headers.items()}
        return encode_frame("ERROR", headers, event.body, self.version)

    # -- heart-beats ---------------------------------------------------------

    def _start_heartbeats(self, out_ms: int, in_ms: int) -> None:
        self.heart_beat = (out_ms, in_ms)
        self._hb_out = out_ms / 1000.0
        self._hb_in = in_ms / 1000.0
        self._last_sent = self._now

    def get_timer(self) -> float | None:
        """When ``handle_timer`` should next run (the caller's clock), or ``None``."""
        if self.state not in _HEARTBEAT_STATES:
            return None
        deadline: float | None = None
        if self._hb_out:
            deadline = self._last_sent + self._hb_out
        if self._hb_in:
            check = self._last_recv + 2 * self._hb_in
            if deadline is None or check < deadline:
                deadline = check
        return deadline

    def handle_timer(self, now: float) -> bytes:
        """Heart-beat bytes to write now (``b"\\n"`` or ``b""``). Raises
        ``RemoteProtocolError`` if the peer has been silent for twice its
        negotiated interval."""
        self._now = now
        if self.state not in _HEARTBEAT_STATES:
            return b""
        if self._hb_in and now >= self._last_recv + 2 * self._hb_in:
            silent_ms = (now - self._last_recv) * 1000.0
            self._set_state(ERROR)
            raise RemoteProtocolError(
                f"heart-beat timeout: nothing received for {silent_ms:.0f} ms "
                f"(negotiated interval {self.heart_beat[1]} ms)"
            )
        if self._hb_out and now >= self._last_sent + self._hb_out:
            self._last_sent = now
            return b"\n"
        return b""


_WRITERS: Final[dict[type, Callable[[StompConnection, Event], bytes]]] = {
    Connect: StompConnection._write_connect,  # type: ignore[dict-item]
    Connected: StompConnection._write_connected,  # type: ignore[dict-item]
    Send: StompConnection._write_send,  # type: ignore[dict-item]
    Subscribe: StompConnection._write_subscribe,  # type: ignore[dict-item]
    Unsubscribe: StompConnection._write_unsubscribe,  # type: ignore[dict-item]
    Ack: StompConnection._write_ack,  # type: ignore[dict-item]
    Nack: StompConnection._write_ack,  # type: ignore[dict-item]
    Begin: StompConnection._write_transaction,  # type: ignore[dict-item]
    Commit: StompConnection._write_transaction,  # type: ignore[dict-item]
    Abort: StompConnection._write_transaction,  # type: ignore[dict-item]
    Disconnect: StompConnection._write_disconnect,  # type: ignore[dict-item]
    Message: StompConnection._write_message,  # type: ignore[dict-item]
    Receipt: StompConnection._write_receipt,  # type: ignore[dict-item]
    Error: StompConnection._write_error,  # type: ignore[dict-item]
}
