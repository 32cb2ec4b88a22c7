"""STOMP 1.0/1.1/1.2, sans-I/O: bytes in -> events out, events in -> bytes out.

    conn = StompConnection(Role.SERVER, limits=Limits())
    conn.receive_data(data, now)          # b"" means EOF
    event = conn.next_event()             # an event, NEED_DATA or ConnectionClosed()
    data = conn.send(event)               # bytes to write

See ``connection.py`` for the rules and ``codec.py`` and ``encoder.py`` for the wire format.
"""

from .codec import (
    DROPPED_HEADERS_HEADER,
    MAX_COMMAND_LINE_BYTES,
    MAX_FRAME_BYTES,
    MAX_HEADER_LINE_BYTES,
    MAX_HEADERS,
    SUPPORTED_VERSIONS,
    FrameDecoder,
    Limits,
)
from .connection import ConnectionState, Role, StompConnection
from .encoder import encode_frame, encode_message, encode_message_lossy
from .frames import (
    ACK_MODES,
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

__all__ = [
    "ACK_MODES",
    "DROPPED_HEADERS_HEADER",
    "MAX_COMMAND_LINE_BYTES",
    "MAX_FRAME_BYTES",
    "MAX_HEADERS",
    "MAX_HEADER_LINE_BYTES",
    "NEED_DATA",
    "SUPPORTED_VERSIONS",
    "Abort",
    "Ack",
    "Begin",
    "Commit",
    "Connect",
    "Connected",
    "ConnectionClosed",
    "ConnectionState",
    "Disconnect",
    "Error",
    "Event",
    "FrameDecoder",
    "Heartbeat",
    "Limits",
    "Message",
    "Nack",
    "NeedData",
    "Receipt",
    "Role",
    "Send",
    "StompConnection",
    "Subscribe",
    "Unsubscribe",
    "encode_frame",
    "encode_message",
    "encode_message_lossy",
]
