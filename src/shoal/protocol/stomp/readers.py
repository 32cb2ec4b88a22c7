"""Reading STOMP frames: a decoded frame's headers and body become an event.

One reader per command checks what the command requires (``destination``,
``id``, an ACK's id for the version...) and raises ``RemoteProtocolError``
naming the missing or bad header. ``StompConnection`` (connection.py) keeps
the state machine around them and picks the reader by command.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from shoal.errors import RemoteProtocolError

from .frames import (
    ACK_MODES,
    Abort,
    Ack,
    Begin,
    Commit,
    Connect,
    Connected,
    Disconnect,
    Error,
    Event,
    Message,
    Nack,
    Receipt,
    Send,
    Subscribe,
    Unsubscribe,
)


def _missing(command: str, header: str, version: str | None = None) -> RemoteProtocolError:
    where = f" (STOMP {version})" if version else ""
    return RemoteProtocolError(f"{command} frame has no '{header}' header{where}")


def _parse_heart_beat(value: str | None) -> tuple[int, int]:
    if value is None:
        return (0, 0)
    parts = value.split(",")
    if len(parts) == 2:
        a, b = parts[0].strip(), parts[1].strip()
        if a.isascii() and a.isdigit() and b.isascii() and b.isdigit():
            return int(a), int(b)
    raise RemoteProtocolError(
        f"heart-beat header {value!r} is not two non-negative integers 'cx,cy'"
    )


def read_connect(h: dict[str, str], command: str) -> Connect:
    return Connect(
        h.get("accept-version"),
        h.get("host"),
        h.get("login"),
        h.get("passcode"),
        _parse_heart_beat(h.get("heart-beat")),
        h,
        "STOMP" if command == "STOMP" else "CONNECT",
    )


def _read_send(h: dict[str, str], body: bytes, version: str | None) -> Send:
    destination = h.get("destination")
    if destination is None:
        raise _missing("SEND", "destination")
    # Send(...) would run the dataclass's __init__ as interpreted Python (about
    # a third of this function's cost compiled); five stores into its slots do not.
    event = object.__new__(Send)
    event.destination = destination
    event.body = body
    event.receipt = h.get("receipt")
    event.transaction = h.get("transaction")
    event.headers = h
    return event


def _read_subscribe(h: dict[str, str], body: bytes, version: str | None) -> Subscribe:
    destination = h.get("destination")
    if destination is None:
        raise _missing("SUBSCRIBE", "destination")
    sub_id = h.get("id")
    if sub_id is None and version != "1.0":
        raise _missing("SUBSCRIBE", "id", version)
    ack = h.get("ack", "auto")
    if ack not in ACK_MODES:
        raise RemoteProtocolError(
            f"SUBSCRIBE header 'ack' is {ack!r}; expected auto, client or client-individual"
        )
    return Subscribe(sub_id, destination, ack, h, h.get("receipt"))


def _read_unsubscribe(h: dict[str, str], body: bytes, version: str | None) -> Unsubscribe:
    sub_id = h.get("id")
    destination = h.get("destination")
    if sub_id is None:
        if version != "1.0":
            raise _missing("UNSUBSCRIBE", "id", version)
        if destination is None:
            raise RemoteProtocolError(
                "UNSUBSCRIBE frame has neither an 'id' nor a 'destination' header"
            )
    return Unsubscribe(sub_id, h, h.get("receipt"), destination)


def _ack_fields(command: str, h: dict[str, str], version: str | None) -> tuple[str, str | None]:
    if version == "1.2":
        ack_id = h.get("id")
        if ack_id is None:
            raise _missing(command, "id", version)
        return ack_id, h.get("subscription")
    ack_id = h.get("message-id")
    if ack_id is None:
        raise _missing(command, "message-id", version)
    subscription = h.get("subscription")
    if subscription is None and version == "1.1":
        raise _missing(command, "subscription", version)
    return ack_id, subscription


def _read_ack(h: dict[str, str], body: bytes, version: str | None) -> Ack:
    if version == "1.2":  # the hot case, _ack_fields inlined
        ack_id = h.get("id")
        if ack_id is not None:
            return Ack(ack_id, h.get("subscription"), h.get("transaction"), h.get("receipt"), h)
    ack_id, subscription = _ack_fields("ACK", h, version)
    return Ack(ack_id, subscription, h.get("transaction"), h.get("receipt"), h)


def _read_nack(h: dict[str, str], body: bytes, version: str | None) -> Nack:
    if version == "1.0":
        raise RemoteProtocolError("NACK is not part of STOMP 1.0 (negotiate 1.1 or 1.2)")
    ack_id, subscription = _ack_fields("NACK", h, version)
    return Nack(ack_id, subscription, h.get("transaction"), h.get("receipt"), h)


def _transaction(command: str, h: dict[str, str]) -> str:
    tx = h.get("transaction")
    if tx is None:
        raise _missing(command, "transaction")
    return tx


def _read_begin(h: dict[str, str], body: bytes, version: str | None) -> Begin:
    return Begin(_transaction("BEGIN", h), h.get("receipt"), h)


def _read_commit(h: dict[str, str], body: bytes, version: str | None) -> Commit:
    return Commit(_transaction("COMMIT", h), h.get("receipt"), h)


def _read_abort(h: dict[str, str], body: bytes, version: str | None) -> Abort:
    return Abort(_transaction("ABORT", h), h.get("receipt"), h)


def _read_disconnect(h: dict[str, str], body: bytes, version: str | None) -> Disconnect:
    return Disconnect(h.get("receipt"), h)


def _read_connected(h: dict[str, str], body: bytes, version: str | None) -> Connected:
    return Connected(
        h.get("version", "1.0"),
        _parse_heart_beat(h.get("heart-beat")),
        h.get("server"),
        h.get("session"),
        h,
    )


def _read_message(h: dict[str, str], body: bytes, version: str | None) -> Message:
    destination = h.get("destination")
    if destination is None:
        raise _missing("MESSAGE", "destination")
    message_id = h.get("message-id")
    if message_id is None:
        raise _missing("MESSAGE", "message-id")
    subscription = h.get("subscription")
    if subscription is None and version != "1.0":
        raise _missing("MESSAGE", "subscription", version)
    return Message(destination, message_id, subscription, h.get("ack"), body, h)


def _read_receipt(h: dict[str, str], body: bytes, version: str | None) -> Receipt:
    receipt_id = h.get("receipt-id")
    if receipt_id is None:
        raise _missing("RECEIPT", "receipt-id")
    return Receipt(receipt_id, h)


def _read_error(h: dict[str, str], body: bytes, version: str | None) -> Error:
    return Error(h.get("message", ""), body, h.get("receipt-id"), h)


_Reader = Callable[[dict[str, str], bytes, "str | None"], Event]

#: The frame readers by command; CONNECT and STOMP take ``read_connect``.
READERS: Final[dict[str, _Reader]] = {
    "SEND": _read_send,
    "SUBSCRIBE": _read_subscribe,
    "UNSUBSCRIBE": _read_unsubscribe,
    "ACK": _read_ack,
    "NACK": _read_nack,
    "BEGIN": _read_begin,
    "COMMIT": _read_commit,
    "ABORT": _read_abort,
    "DISCONNECT": _read_disconnect,
    "CONNECTED": _read_connected,
    "MESSAGE": _read_message,
    "RECEIPT": _read_receipt,
    "ERROR": _read_error,
}
