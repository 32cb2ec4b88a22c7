"""AMQP 1.0 transactions on the wire (part 4): a coordinator link's bodies and
the transactional delivery states.

A peer attaches a link whose target is a coordinator and sends Declare and
Discharge messages on it; ``control_event`` turns one into
``DeclareReceived`` or ``DischargeReceived``. A transfer or a disposition in
a transaction carries a TransactionalState naming its txn-id
(``txn_id_of``, ``transactional_outcome``). The connection (connection.py)
keeps the links and deliveries; what the transactions mean is the server's
(server/amqp_transactions.py).
"""

from __future__ import annotations

from typing import Any

from proton import Delivery, Described, Message, ulong

from shoal.protocol.amqp import events as ev
from shoal.protocol.amqp import proton_calls as calls

_DECLARE = (0x31, "amqp:declare:list")
_DISCHARGE = (0x32, "amqp:discharge:list")
DECLARED_STATE = 0x33
TRANSACTIONAL_STATE = 0x34
_ACCEPTED = 0x24
_DESCRIBED_OUTCOMES = {  # an outcome inside a TransactionalState, by descriptor
    _ACCEPTED: "accepted",
    0x25: "rejected",
    0x26: "released",
    0x27: "modified",
}
_OUTCOME_SYMBOLS = {
    "amqp:accepted:list": 0x24,
    "amqp:rejected:list": 0x25,
    "amqp:released:list": 0x26,
    "amqp:modified:list": 0x27,
}


def binary(value: object) -> bytes:
    """A txn-id as bytes (Proton hands binaries back as memory)."""
    if isinstance(value, (memoryview, bytes, bytearray)):
        return bytes(value)
    return str(value).encode()


def control_event(
    link_id: int, delivery_id: int, encoded: bytes
) -> ev.DeclareReceived | ev.DischargeReceived | None:
    """A coordinator transfer's body as its event; None for anything but a
    Declare or a Discharge. The txn-id is copied out while the message that
    holds its memory lives."""
    msg = Message()
    event: ev.DeclareReceived | ev.DischargeReceived | None = None
    try:
        msg.decode(encoded)
        body = msg.body
        descriptor = getattr(body, "descriptor", None)
        fields = getattr(body, "value", None)
        if descriptor in _DECLARE:
            event = ev.DeclareReceived(link_id, delivery_id)
        elif descriptor in _DISCHARGE and isinstance(fields, list) and fields:
            fail = bool(fields[1]) if len(fields) > 1 else False
            event = ev.DischargeReceived(link_id, delivery_id, binary(fields[0]), fail)
    except Exception:  # not an AMQP message: refused as any other body
        event = None
    msg.clear()  # only now, the txn-id copied out
    return event


def txn_id_of(dlv: calls.Handle) -> bytes | None:
    """The txn-id of a transfer's TransactionalState, if it carries one."""
    remote = Delivery.wrap(calls.pointer(dlv, "pn_delivery_t *")).remote
    if remote.type != TRANSACTIONAL_STATE:
        return None
    fields = remote.data or [b""]
    return binary(fields[0])


def transactional_outcome(dlv: calls.Handle) -> tuple[bytes, str, bool, bool] | None:
    """The peer's TransactionalState on one of our transfers: (txn-id,
    outcome, delivery-failed, undeliverable-here), or None when the state
    holds no outcome yet."""
    wrapped = Delivery.wrap(calls.pointer(dlv, "pn_delivery_t *"))
    fields = wrapped.remote.data or []
    txn_id = binary(fields[0]) if fields else b""
    inner = fields[1] if len(fields) > 1 else None
    outcome = _DESCRIBED_OUTCOMES.get(_descriptor_code(inner), "accepted" if inner is None else "")
    if not outcome:
        return None
    failed = undeliverable = False
    if outcome == "modified":
        values = list(getattr(inner, "value", None) or [])
        failed = bool(values[0]) if values else False
        undeliverable = bool(values[1]) if len(values) > 1 else False
    return txn_id, outcome, failed, undeliverable


def accepted_in(txn_id: bytes) -> list[Any]:
    """The fields of a TransactionalState that accepts a transfer in ``txn_id``."""
    return [txn_id, Described(ulong(_ACCEPTED), [])]


def _descriptor_code(value: object) -> int:
    """A described value's numeric descriptor (its symbolic one mapped), else -1."""
    descriptor = getattr(value, "descriptor", None)
    if descriptor is None:
        return -1
    if isinstance(descriptor, int):
        return descriptor
    if isinstance(descriptor, (memoryview, bytes, bytearray)):  # a symbol as raw memory
        return _OUTCOME_SYMBOLS.get(bytes(descriptor).decode("ascii", "replace"), -1)
    return _OUTCOME_SYMBOLS.get(str(descriptor), -1)
