"""STOMP events: one slotted class per frame type, plus the ``NEED_DATA`` sentinel.

Every event keeps *all* the headers of its frame in ``headers`` (first
occurrence of a repeated header wins, values unescaped for the negotiated
version) and exposes the well-known ones as attributes. When an event is
sent, attributes that are set win over the same names in ``headers``;
``content-length`` is always computed from ``body``.

The classes are plain (not frozen) slotted dataclasses: the decoder builds one
per frame on the broker's hot path, and frozen dataclasses pay for
``object.__setattr__`` on every field. Treat them as values all the same.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import ClassVar, Final, Literal

__all__ = [
    "NEED_DATA",
    "Abort",
    "Ack",
    "Begin",
    "Commit",
    "Connect",
    "Connected",
    "ConnectionClosed",
    "Disconnect",
    "Error",
    "Event",
    "Heartbeat",
    "Message",
    "Nack",
    "NeedData",
    "Receipt",
    "Send",
    "Subscribe",
    "Unsubscribe",
]


class NeedData(enum.Enum):
    """Type of the :data:`NEED_DATA` sentinel (an enum so type checkers can narrow it)."""

    NEED_DATA = "NEED_DATA"

    def __repr__(self) -> str:
        return "NEED_DATA"

    __str__ = __repr__


#: Returned by ``next_event()`` when no complete frame is buffered.
NEED_DATA = NeedData.NEED_DATA

#: SUBSCRIBE ``ack`` values, which are also the core's settlement modes:
#: ``auto`` (settled when delivered), ``client`` (cumulative), ``client-individual``.
ACK_MODES: Final = ("auto", "client", "client-individual")


class Event:
    """Base class of every STOMP event."""

    __slots__ = ()
    command: ClassVar[str] = ""


# --- client frames ----------------------------------------------------------


@dataclass(slots=True)
class Connect(Event):
    """CONNECT (or STOMP, see ``command``).

    ``accept_version`` is the raw header (``"1.0,1.1,1.2"``); ``None`` means the
    header is absent, which STOMP reads as "1.0 only". ``heart_beat`` is the
    client's ``(cx, cy)`` in milliseconds.
    """

    accept_version: str | None = "1.0,1.1,1.2"
    host: str | None = None
    login: str | None = None
    passcode: str | None = None
    heart_beat: tuple[int, int] = (0, 0)
    headers: dict[str, str] = field(default_factory=dict)
    command: Literal["CONNECT", "STOMP"] = "CONNECT"  # type: ignore[misc]

    @property
    def versions(self) -> tuple[str, ...]:
        """The versions the client accepts, in the order it listed them."""
        if self.accept_version is None:
            return ("1.0",)
        return tuple(v.strip() for v in self.accept_version.split(",") if v.strip())


@dataclass(slots=True)
class Send(Event):
    command: ClassVar[str] = "SEND"
    destination: str
    body: bytes = b""
    receipt: str | None = None
    transaction: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Subscribe(Event):
    """SUBSCRIBE. ``id`` may be ``None`` only in STOMP 1.0."""

    command: ClassVar[str] = "SUBSCRIBE"
    id: str | None
    destination: str
    ack: str = "auto"
    headers: dict[str, str] = field(default_factory=dict)
    receipt: str | None = None


@dataclass(slots=True)
class Unsubscribe(Event):
    """UNSUBSCRIBE. STOMP 1.0 may name the ``destination`` instead of ``id``."""

    command: ClassVar[str] = "UNSUBSCRIBE"
    id: str | None
    headers: dict[str, str] = field(default_factory=dict)
    receipt: str | None = None
    destination: str | None = None


@dataclass(slots=True)
class Ack(Event):
    """ACK. ``id`` is the 1.2 ``id`` header, or ``message-id`` in 1.0/1.1."""

    command: ClassVar[str] = "ACK"
    id: str
    subscription: str | None = None
    transaction: str | None = None
    receipt: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Nack(Event):
    """NACK (1.1+). ``id`` is the 1.2 ``id`` header, or ``message-id`` in 1.1."""

    command: ClassVar[str] = "NACK"
    id: str
    subscription: str | None = None
    transaction: str | None = None
    receipt: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Begin(Event):
    command: ClassVar[str] = "BEGIN"
    transaction: str
    receipt: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Commit(Event):
    command: ClassVar[str] = "COMMIT"
    transaction: str
    receipt: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Abort(Event):
    command: ClassVar[str] = "ABORT"
    transaction: str
    receipt: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Disconnect(Event):
    command: ClassVar[str] = "DISCONNECT"
    receipt: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


# --- server frames ----------------------------------------------------------


@dataclass(slots=True)
class Connected(Event):
    """CONNECTED.

    Sent by a server app, ``version=None`` lets the connection fill in the
    negotiated version, and ``heart_beat`` is the server's wanted ``(sx, sy)``.
    Received by a client, both are what the server sent (``version`` is
    ``"1.0"`` when the header is absent).
    """

    command: ClassVar[str] = "CONNECTED"
    version: str | None = None
    heart_beat: tuple[int, int] = (0, 0)
    server: str | None = None
    session: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Message(Event):
    """MESSAGE. ``subscription`` may be ``None`` in 1.0; ``ack`` is the 1.2 ack id."""

    command: ClassVar[str] = "MESSAGE"
    destination: str
    message_id: str
    subscription: str | None = None
    ack: str | None = None
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Receipt(Event):
    command: ClassVar[str] = "RECEIPT"
    receipt_id: str
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Error(Event):
    """ERROR. ``message`` is the short ``message`` header, ``body`` the details."""

    command: ClassVar[str] = "ERROR"
    message: str = ""
    body: bytes = b""
    receipt_id: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


# --- not frames -------------------------------------------------------------


@dataclass(slots=True)
class Heartbeat(Event):
    """A heart-beat: one EOL on the wire. Only ever sent; received EOLs are
    consumed silently (they just prove the peer is alive)."""


@dataclass(slots=True)
class ConnectionClosed(Event):
    """The peer closed the connection (``receive_data(b"")``), or we did."""
