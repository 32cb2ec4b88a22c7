"""What an AMQP 1.0 peer did, as small values (``AmqpConnection.next_event``).

Treat them as read-only: the ones that come per message (transfers, outcomes,
credit) are not frozen only because a frozen dataclass is slower to build.

Links and deliveries are named by integers the connection hands out
(``link_id``, ``delivery_id``); the Proton objects behind them never leave
``connection.py``. A message is a ``proton.Message`` (decoded, complete).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from shoal.records import AmqpHeaders as AmqpHeaders  # the server builds them

if TYPE_CHECKING:
    import proton


class NeedData:
    """Sentinel: no complete event until more bytes arrive."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = NeedData()


@dataclass(frozen=True, slots=True)
class ConnectionOpened:
    """The peer's open frame (after SASL, if any): ``user`` is who SASL said it is."""

    container_id: str
    hostname: str | None
    user: str | None


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The peer closed the connection (or the transport ended): nothing more comes."""

    condition: str | None = None
    description: str | None = None


@dataclass(frozen=True, slots=True)
class CredentialsReceived:
    """SASL PLAIN: answer with ``authenticated(user)`` or ``refuse_credentials(reason)``."""

    user: str
    password: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class AuthenticationFailed:
    """SASL refused the peer; the outcome was sent and the connection is closing."""

    mechanism: str
    user: str | None
    reason: str


@dataclass(frozen=True, slots=True)
class ProtocolFailed:
    """The peer broke the specification; the connection closes with this error."""

    description: str


@dataclass(frozen=True, slots=True)
class SenderAttached:
    """The peer attached a link on which we send: it consumes from ``address``."""

    link_id: int
    name: str
    address: str | None
    capabilities: tuple[str, ...]
    settled: bool  # the peer asked for pre-settled transfers (at-most-once)
    selector: str | None = None  # a JMS selector filter on the source
    durable: bool = False  # the source outlives the link (a durable subscription)


@dataclass(frozen=True, slots=True)
class ReceiverAttached:
    """The peer attached a link on which we receive: it produces to ``address``."""

    link_id: int
    name: str
    address: str | None
    capabilities: tuple[str, ...]
    coordinator: bool = False  # a transaction coordinator target


@dataclass(frozen=True, slots=True)
class LinkDetached:
    """The peer detached (``closed``) or suspended a link."""

    link_id: int
    closed: bool
    condition: str | None = None


@dataclass(slots=True)  # not frozen: per message, and a frozen init costs ~1 us more
class TransferReceived:
    """A complete message arrived on a receiving link."""

    link_id: int
    delivery_id: int
    message: proton.Message
    settled: bool  # sent pre-settled: no outcome is expected
    size: int  # encoded bytes
    # The encoding as received, less header and delivery annotations
    # (MessageCodec.kept_encoding): (before, after) around the body bytes, or
    # (everything, None); None when it could not be kept.
    encoding: tuple[bytes, bytes | None] | None = None
    # No header section, or one of defaults (MessageCodec.default_header).
    default_header: bool = False
    # Sent in a transaction (TransactionalState): its txn-id.
    txn_id: bytes | None = None


@dataclass(slots=True)  # not frozen: per message, and a frozen init costs ~1 us more
class CreditChanged:
    """The peer's flow on a sending link: we may send ``credit`` more transfers."""

    link_id: int
    credit: int
    drain: bool


@dataclass(slots=True)  # not frozen: per message, and a frozen init costs ~1 us more
class OutcomeReceived:
    """The peer's disposition for one of our transfers.

    ``outcome`` is ``accepted``, ``released``, ``rejected``, ``modified`` (or
    ``received``, a non-terminal state, never followed by settlement here).
    """

    link_id: int
    delivery_id: int
    outcome: str
    settled: bool
    delivery_failed: bool = False
    undeliverable_here: bool = False
    txn_id: bytes | None = None  # settled in a transaction (TransactionalState)


@dataclass(frozen=True, slots=True)
class DeclareReceived:
    """A Declare on a coordinator link: answer ``declared`` (or ``settle`` rejected)."""

    link_id: int
    delivery_id: int


@dataclass(frozen=True, slots=True)
class DischargeReceived:
    """A Discharge on a coordinator link: commit (``fail`` False) or roll back
    ``txn_id``; answer with ``settle`` (accepted, or rejected naming why)."""

    link_id: int
    delivery_id: int
    txn_id: bytes
    fail: bool


Event = (
    ConnectionOpened
    | ConnectionClosed
    | CredentialsReceived
    | AuthenticationFailed
    | ProtocolFailed
    | SenderAttached
    | ReceiverAttached
    | LinkDetached
    | TransferReceived
    | CreditChanged
    | OutcomeReceived
    | DeclareReceived
    | DischargeReceived
)
