"""What the sync and the asyncio client share: frames in, values out.

No I/O here. Both clients drive a :class:`shoal.protocol.stomp.StompConnection`
and use these helpers to build frames, wrap what arrives and decide how the
handshake, a read or a settle turns out, so the two behave the same way on
the wire and raise the same errors. Each client keeps only its sockets or
streams, its locks or events, and its threads or tasks.
"""

from __future__ import annotations

import itertools
import socket
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from shoal.client.errors import (
    ClientError,
    ClientTimeout,
    ConnectFailed,
    ConnectionLost,
    ServerError,
)
from shoal.client.options import ClientOptions
from shoal.errors import RemoteProtocolError
from shoal.protocol.stomp import (
    ACK_MODES,
    NEED_DATA,
    Abort,
    Ack,
    Commit,
    Connect,
    Connected,
    ConnectionClosed,
    Disconnect,
    Error,
    Event,
    Nack,
    Send,
    StompConnection,
    Subscribe,
    Unsubscribe,
)
from shoal.protocol.stomp import Message as MessageFrame

__all__ = ["GROUP_HEADER", "GROUP_SEQ_HEADER", "Message", "Producer", "new_group_id"]

GROUP_HEADER = "JMSXGroupID"
GROUP_SEQ_HEADER = "JMSXGroupSeq"
_ALT_GROUP_HEADER = "_AMQ_GROUP_ID"  # Artemis' name; the broker accepts it too

Body = bytes | bytearray | memoryview | str
# The frames a client may send with a receipt.
Request = Send | Subscribe | Unsubscribe | Ack | Nack | Commit | Abort | Disconnect

RECV_BYTES = 256 * 1024
DEFAULT_GROUP: Any = object()  # send()'s default: "the connection's group"

# A client's states.
NEW, OPEN, RECONNECTING, CLOSING, CLOSED = "new", "open", "reconnecting", "closing", "closed"


def os_reason(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve host name ({exc.strerror})"
    if isinstance(exc, TimeoutError):
        return "timed out"
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return text


def new_group_id() -> str:
    """A random group id (what ``autoGroup`` uses): 32 hex digits."""
    return uuid.uuid4().hex


class Ids:
    """Per-client counters for receipt, subscription and transaction ids."""

    def __init__(self) -> None:
        self._receipt = itertools.count(1)
        self._sub = itertools.count(1)
        self._tx = itertools.count(1)
        self.prefix = uuid.uuid4().hex[:8]

    def receipt(self) -> str:
        return f"r-{next(self._receipt)}"

    def subscription(self) -> str:
        return f"sub-{next(self._sub)}"

    def transaction(self) -> str:
        return f"tx-{self.prefix}-{next(self._tx)}"


class Message:
    """A message received on a subscription.

    ``body`` is bytes (``text`` decodes it as UTF-8); ``headers`` holds every
    header of the MESSAGE frame. The group fields read the standard headers:
    ``group`` is ``JMSXGroupID`` (or Artemis' ``_AMQ_GROUP_ID``), ``group_seq``
    is ``JMSXGroupSeq`` as an int (``None`` when absent), ``redelivered`` is
    true when the broker delivered it before, and ``delivery_count`` is how
    many times it was delivered *before* this delivery (0 the first time;
    the broker's ``x-delivery-count``).

    Settle it with :meth:`ack` or :meth:`nack` (with the asyncio client,
    ``await msg.ack()``). In ``ack="auto"`` subscriptions the broker settled
    it on delivery and both are no-ops.
    """

    __slots__ = (
        "_client",
        "_generation",
        "ack_id",
        "ack_mode",
        "body",
        "destination",
        "headers",
        "message_id",
        "settled",
        "subscription",
    )

    def __init__(
        self,
        frame: MessageFrame,
        client: Any,
        ack_mode: str,
        generation: int,
    ) -> None:
        self.body: bytes = frame.body
        self.headers: dict[str, str] = frame.headers
        self.destination: str = frame.destination
        self.message_id: str = frame.message_id
        self.subscription: str | None = frame.subscription
        self.ack_id: str = frame.ack if frame.ack is not None else frame.message_id
        self.ack_mode = ack_mode
        self.settled = ack_mode == "auto"
        self._client = client
        self._generation = generation

    @property
    def text(self) -> str:
        """The body decoded as UTF-8."""
        return self.body.decode()

    @property
    def group(self) -> str | None:
        h = self.headers
        return h.get(GROUP_HEADER, h.get(_ALT_GROUP_HEADER))

    @property
    def group_seq(self) -> int | None:
        raw = self.headers.get(GROUP_SEQ_HEADER)
        try:
            return int(raw) if raw is not None else None
        except ValueError:
            return None

    @property
    def redelivered(self) -> bool:
        return self.headers.get("redelivered", "false").lower() == "true"

    @property
    def delivery_count(self) -> int:
        try:
            return int(self.headers.get("x-delivery-count", "0"))
        except ValueError:
            return 0

    @property
    def persistent(self) -> bool:
        return self.headers.get("persistent", "false").lower() == "true"

    def ack(self, *, receipt: bool = False) -> Any:
        """Settle the message (in ``client`` mode: it and every earlier one of
        its subscription). ``receipt=True`` waits until the broker confirmed."""
        return self._client._settle("ack", self, None, receipt)

    def nack(self, *, receipt: bool = False) -> Any:
        """Give the message back: the broker redelivers it at the head of its
        group, with ``redelivered`` set (dead-lettered after the queue's
        ``max-delivery-attempts``)."""
        return self._client._settle("nack", self, None, receipt)

    def __repr__(self) -> str:
        group = f" group={self.group!r}" if self.group is not None else ""
        return (
            f"<Message {self.message_id} {self.destination}{group} "
            f"{len(self.body)} bytes{' redelivered' if self.redelivered else ''}>"
        )


def to_bytes(body: Body) -> bytes:
    if isinstance(body, str):
        return body.encode()
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body)
    raise TypeError(f"body must be bytes or str, not {type(body).__name__}")


def send_frame(
    destination: str,
    body: Body,
    headers: Mapping[str, str] | None,
    *,
    group: str | None,
    group_seq: int | None,
    persistent: bool | None,
    content_type: str | None,
    receipt: str | None = None,
    transaction: str | None = None,
) -> Send:
    """A SEND event. Explicit arguments win over the same names in ``headers``."""
    h = {str(k): str(v) for k, v in headers.items()} if headers else {}
    if group is not None:
        h[GROUP_HEADER] = group
    if group_seq is not None:
        h[GROUP_SEQ_HEADER] = str(int(group_seq))
    if persistent is not None:
        h["persistent"] = "true" if persistent else "false"
    if content_type is not None:
        h["content-type"] = content_type
    return Send(destination, to_bytes(body), receipt, transaction, h)


def subscribe_frame(
    sub_id: str,
    destination: str,
    ack: str,
    prefetch: int | None,
    headers: Mapping[str, str] | None,
    receipt: str | None,
) -> Subscribe:
    if ack not in ACK_MODES:
        raise ValueError(f"ack must be one of {', '.join(ACK_MODES)}, not {ack!r}")
    h = {str(k): str(v) for k, v in headers.items()} if headers else {}
    if prefetch is not None:
        if prefetch < 0:
            raise ValueError(f"prefetch must be >= 0, not {prefetch}")
        h["prefetch-count"] = str(prefetch)
    return Subscribe(sub_id, destination, ack, h, receipt)


def connect_frame(options: ClientOptions) -> Connect:
    headers: dict[str, str] = {}
    if options.client_id is not None:
        headers["client-id"] = options.client_id
    return Connect(
        "1.0,1.1,1.2",
        options.vhost or options.host,
        options.login,
        options.passcode,
        options.heartbeat,
        headers,
    )


def server_error(frame: Error) -> ServerError:
    details = frame.body.decode("utf-8", "replace").strip()
    message = frame.message
    if not message and details:
        message = details.splitlines()[0]
    return ServerError(
        message,
        details=details,
        code=frame.headers.get("code"),
        receipt_id=frame.receipt_id,
        headers=frame.headers,
    )


def default_group(options: ClientOptions) -> str | None:
    """The group a client's own ``send`` uses when none is given."""
    if options.group_id is not None:
        return options.group_id
    if options.auto_group:
        return new_group_id()
    return None


class Producer:
    """Sends with a group id: its own random one (``auto_group``) or a fixed one.

    ``Producer(client)`` follows the connection URL: ``?autoGroup=true`` gives
    each producer its own random group id, ``?groupID=G`` gives them all G.
    ``group="AAPL"`` or ``auto_group=True`` decide for this producer alone;
    ``Producer(client, group=None, auto_group=False)`` sends ungrouped.

    With a group, the producer numbers what it sends in ``JMSXGroupSeq``
    (1, 2, 3, ...) unless a ``group_seq`` is given. :meth:`close_group` sends
    a last message with ``JMSXGroupSeq:-1``, which ends the group: the broker
    assigns its next message afresh.

    Works with both clients: with the asyncio client, ``await producer.send(...)``.
    ``persistent`` and ``headers`` given here are defaults for every send.
    """

    def __init__(
        self,
        client: Any,
        *,
        group: str | None = None,
        auto_group: bool | None = None,
        persistent: bool | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if group is not None and auto_group:
            raise ValueError("give either group= or auto_group=True, not both")
        options: ClientOptions = client.options
        if group is not None:
            self.group: str | None = group
        elif auto_group or (auto_group is None and options.auto_group):
            self.group = new_group_id()
        elif auto_group is None:
            self.group = options.group_id
        else:
            self.group = None
        self.client = client
        self.persistent = persistent
        self.headers = dict(headers or {})
        self._seq = 0

    def _next_seq(self, group_seq: int | None) -> int | None:
        if group_seq is not None or self.group is None:
            return group_seq
        self._seq += 1
        return self._seq

    def send(
        self,
        destination: str,
        body: Body = b"",
        *,
        headers: Mapping[str, str] | None = None,
        group_seq: int | None = None,
        persistent: bool | None = None,
        receipt: bool = False,
        content_type: str | None = None,
        transaction: Any = None,
    ) -> Any:
        """Send with this producer's group; see the client's ``send``."""
        merged = {**self.headers, **headers} if headers else self.headers
        return self.client.send(
            destination,
            body,
            headers=merged,
            group=self.group,
            group_seq=self._next_seq(group_seq),
            persistent=self.persistent if persistent is None else persistent,
            receipt=receipt,
            content_type=content_type,
            transaction=transaction,
        )

    def close_group(
        self, destination: str, body: Body = b"", *, receipt: bool = False, **kw: Any
    ) -> Any:
        """Send a last message of the group (``JMSXGroupSeq:-1``) and start
        numbering again; the broker then assigns the group afresh."""
        if self.group is None:
            raise ValueError("this producer sends ungrouped messages; there is no group to close")
        self._seq = 0
        return self.send(destination, body, group_seq=-1, receipt=receipt, **kw)

    def __repr__(self) -> str:
        return f"<Producer group={self.group!r}>"


def tx_id(transaction: Any) -> str | None:
    """A transaction argument (a Transaction object or its id) as the id."""
    if transaction is None:
        return None
    if isinstance(transaction, str):
        return transaction
    return str(transaction.id)


# --- the connection's life: what both clients decide the same way -----------


def handshake_event(event: Event, address: str) -> Connected:
    """The CONNECTED that ends the handshake; an ERROR or EOF instead fails it."""
    if isinstance(event, Connected):
        return event
    if isinstance(event, Error):
        raise server_error(event)
    raise ConnectFailed(address, "the broker closed the connection before CONNECTED")


def handshake_failure(exc: BaseException, options: ClientOptions) -> BaseException:
    """What a handshake that failed with ``exc`` raises (``exc`` itself if no client error fits)."""
    address = options.address
    if isinstance(exc, TimeoutError):
        return ClientTimeout(f"no CONNECTED from {address} within {options.timeout:g} s")
    if isinstance(exc, RemoteProtocolError):
        return ConnectFailed(address, f"protocol error: {exc}")
    if isinstance(exc, OSError):
        return ConnectFailed(address, os_reason(exc))
    return exc


def check_can_send(
    state: str, error: ClientError | None, address: str, *, closing: bool, not_connected: str
) -> None:
    """Raise if a client in ``state`` cannot send frames (``closing``: DISCONNECT may go out).

    ``error`` is the client's terminal error; ``not_connected`` what to say before connect().
    """
    if error is not None:
        raise error
    if state == OPEN or (closing and state == CLOSING):
        return
    if state == NEW:
        raise ClientError(not_connected)
    if state == RECONNECTING:
        raise ConnectionLost(f"not connected to {address} (reconnecting)")
    raise ConnectionLost("the client is closed")


def read_frames(
    conn: StompConnection,
    data: bytes,
    now: float,
    handle: Callable[[Event], None],
    address: str,
) -> ClientError | None:
    """Feed ``data`` (``b""`` at EOF) to ``conn`` and pass each frame to ``handle``.

    Returns why the connection ended, if it did: the broker's ERROR as a
    :class:`ServerError`, a protocol error, or the broker closing it.
    """
    try:
        conn.receive_data(data, now)
        while (event := conn.next_event()) is not NEED_DATA:
            if isinstance(event, ConnectionClosed):
                break
            if isinstance(event, Error):
                return server_error(event)
            handle(event)
    except RemoteProtocolError as exc:
        return ConnectionLost(f"protocol error from the broker at {address}: {exc}")
    if data and event is NEED_DATA:
        return None
    return ConnectionLost(f"connection closed by the broker at {address}")


def settle_frame(
    kind: str, msg: Message, transaction: Any, generation: int, subs: Mapping[str, Any]
) -> Ack | Nack | None:
    """The ACK or NACK (``kind``) for ``msg``; ``None`` when it needs no settling.

    Raises if ``msg`` came on an earlier connection than ``generation`` or its
    subscription in ``subs`` is closed: the broker delivers it again anyway.
    """
    if msg.ack_mode == "auto" or (msg.settled and transaction is None):
        return None
    if msg._generation != generation:
        raise ConnectionLost(
            f"message {msg.message_id} came on a connection that was lost; "
            "the broker delivers it again"
        )
    sub = subs.get(msg.subscription or "")
    if sub is None or sub.closed:
        raise ClientError(
            f"subscription {msg.subscription!r} is closed; cannot {kind} "
            f"message {msg.message_id} (the broker delivers it again)"
        )
    cls = Ack if kind == "ack" else Nack
    return cls(msg.ack_id, msg.subscription, tx_id(transaction))


def resubscribe_data(conn: StompConnection, subs: Iterable[Any]) -> bytes:
    """The SUBSCRIBE frames that restore the open ones of ``subs`` on a new connection."""
    return b"".join(
        conn.send(subscribe_frame(s.id, s.destination, s.ack, s.prefetch, s.headers, None))
        for s in subs
        if not s.closed
    )
