"""AMQP 1.0, sans-I/O, on Qpid Proton's engine: bytes in -> events out, commands -> bytes out.

    conn = AmqpConnection(mechanisms=("ANONYMOUS",))
    conn.receive_data(data, now)      # b"" means EOF
    event = conn.next_event()         # an event (events.py) or NEED_DATA
    data = conn.data_to_send()

See ``connection.py`` for the commands and ``sasl.py`` for authentication.
"""

from .connection import MAX_FRAME_BYTES, MAX_MESSAGE_BYTES, AmqpConnection
from .events import (
    NEED_DATA,
    AmqpHeaders,
    AuthenticationFailed,
    ConnectionClosed,
    ConnectionOpened,
    CredentialsReceived,
    CreditChanged,
    DeclareReceived,
    DischargeReceived,
    Event,
    LinkDetached,
    NeedData,
    OutcomeReceived,
    ProtocolFailed,
    ReceiverAttached,
    SenderAttached,
    TransferReceived,
)
from .sasl import AMQP_HEADER, SASL_HEADER

__all__ = [
    "AMQP_HEADER",
    "MAX_FRAME_BYTES",
    "MAX_MESSAGE_BYTES",
    "NEED_DATA",
    "SASL_HEADER",
    "AmqpConnection",
    "AmqpHeaders",
    "AuthenticationFailed",
    "ConnectionClosed",
    "ConnectionOpened",
    "CredentialsReceived",
    "CreditChanged",
    "DeclareReceived",
    "DischargeReceived",
    "Event",
    "LinkDetached",
    "NeedData",
    "OutcomeReceived",
    "ProtocolFailed",
    "ReceiverAttached",
    "SenderAttached",
    "TransferReceived",
]
