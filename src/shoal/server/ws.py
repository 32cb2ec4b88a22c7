"""STOMP over WebSocket (``--ws``): the listener browser clients such as
@stomp/stompjs use, as ActiveMQ, Artemis and RabbitMQ's web-stomp offer it.

wsproto does the WebSocket protocol (upgrade, framing, ping/pong, close);
STOMP is an unchanged :class:`StompSession` behind :class:`_FrameTransport`,
an adapter that sends each STOMP frame the session writes (and each
heart-beat EOL) as one WebSocket message. Bytes from the client's messages,
text or binary, are one STOMP stream: a frame may span messages and a
message may hold several frames. So limits, authentication (CONNECT
login/passcode) and errors are those of the TCP listener.

The upgrade is accepted on any path (``/``, ``/ws``, ``/stomp``) when the
Host, and the Origin if a browser sent one, name an allowed host (DNS
rebinding, cross-site WebSocket hijacking), and the subprotocol, if the
client offers any, is one of ``v12.stomp``, ``v11.stomp``, ``v10.stomp``:
the chosen one fixes the STOMP version.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import h11
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from shoal.protocol.stomp import SUPPORTED_VERSIONS
from shoal.server.http_guard import AllowedHosts, host_allowed, origin_allowed
from shoal.server.stomp import StompSession

if TYPE_CHECKING:
    import ssl

    from shoal.server.session_api import ServerState

log = logging.getLogger("shoal.ws")

#: Subprotocols in order of preference, with the STOMP version each allows.
SUBPROTOCOLS: dict[str, tuple[str, ...]] = {
    "v12.stomp": ("1.2",),
    "v11.stomp": ("1.1",),
    "v10.stomp": ("1.0",),
}
#: Seconds a connection may take to send its upgrade request.
UPGRADE_TIMEOUT = 10.0
#: Seconds to wait for the client's answer to our Close before dropping the socket.
CLOSE_TIMEOUT = 2.0
#: Bytes written and not yet taken by the client past which the socket is not
#: read (pongs, receipts and other answers wait until it reads), as on TCP.
WRITE_HIGH_WATER = 1024 * 1024
_NORMAL_CLOSURE = 1000


async def start_ws(
    server: ServerState, hostport: tuple[str, int], ctx: ssl.SSLContext | None
) -> tuple[asyncio.Server, tuple[str, int]]:
    """Open a WebSocket listener (``ws``, or ``ws-tls`` with ``ctx``); returns
    it and the address it bound."""
    hosts = allowed_hosts(server.config.allowed_hosts, hostport[0])
    listener = await server.loop.create_server(
        lambda: WebSocketSession(server, hosts),
        hostport[0],
        hostport[1],
        ssl=ctx,
        reuse_address=True,
        backlog=1024,
    )
    sock = listener.sockets[0].getsockname()
    return listener, (sock[0], sock[1])


# --- Host and Origin: the HTTP port's checks (server/http_guard.py) ---------


def allowed_hosts(configured: tuple[str, ...], listener_host: str) -> AllowedHosts:
    """The host names a request may address: ``allowed-hosts`` if configured,
    else the listener's own address, ``localhost`` and the loopback addresses."""
    return AllowedHosts.for_listener(configured, listener_host)


def refuse_host_or_origin(host: str, origin: str | None, allowed: AllowedHosts) -> str | None:
    """Why a request with these ``Host`` and ``Origin`` headers is refused, or None.

    A bare name allows any port, ``name:port`` that port; ``*`` in
    ``allowed-hosts`` allows any. Clients that are not browsers send no Origin.
    """
    if not host_allowed(host, allowed):
        return f"Host {host!r} is not an allowed host (allowed-hosts)"
    if not origin_allowed(origin, allowed):
        return f"Origin {origin!r} is not an allowed host (allowed-hosts)"
    return None


# --- the connection --------------------------------------------------------


class WebSocketSession(asyncio.Protocol):
    """One TCP connection: the upgrade, then a StompSession over messages."""

    def __init__(self, server: ServerState, allowed: AllowedHosts) -> None:
        self.server = server
        self.allowed = allowed
        self.ws = WSConnection(ConnectionType.SERVER)
        self.transport: asyncio.Transport | None = None
        self.stomp: StompSession | None = None
        self.closing = False
        self._upgrade_timer: asyncio.TimerHandle | None = None
        self._close_timer: asyncio.TimerHandle | None = None
        self.write_blocked = False  # the client does not read what we write
        self.stomp_paused = False  # the STOMP session paused reading (its pacing)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)  # type: ignore[attr-defined]
        self._upgrade_timer = self.server.loop.call_later(UPGRADE_TIMEOUT, self._upgrade_timeout)

    def data_received(self, data: bytes) -> None:
        try:
            self.ws.receive_data(data)
        except RemoteProtocolError as exc:  # a bad upgrade request
            self._reject(exc.event_hint, str(exc))
            return
        stomp_bytes: list[bytes] = []  # one StompSession read per TCP read
        for event in self.ws.events():
            kind = type(event)
            # ``kind is C`` makes ``event`` a C, which mypy cannot follow.
            if kind is TextMessage:
                stomp_bytes.append(event.data.encode())  # type: ignore[attr-defined]
            elif kind is BytesMessage:
                stomp_bytes.append(bytes(event.data))  # type: ignore[attr-defined]
            else:
                self._feed_stomp(stomp_bytes)
                if kind is Request:
                    self._upgrade(event)  # type: ignore[arg-type]
                elif kind is Ping and self.ws.state is ConnectionState.OPEN:
                    self._send(event.response())  # type: ignore[attr-defined]
                elif kind is CloseConnection:
                    self._closed_by_peer(event)  # type: ignore[arg-type]
            if self.transport is None or self.transport.is_closing():
                return
        self._feed_stomp(stomp_bytes)

    def eof_received(self) -> bool | None:
        return None  # close; connection_lost tells the STOMP session

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        for timer in (self._upgrade_timer, self._close_timer):
            if timer is not None:
                timer.cancel()
        if self.stomp is not None:
            self.stomp.connection_lost(exc)

    def pause_writing(self) -> None:
        # A client that sends (pings, frames asking for receipts) and never
        # reads would grow our write buffer without end: stop reading it.
        self.write_blocked = True
        self.update_reading()
        if self.stomp is not None:
            self.stomp.pause_writing()

    def resume_writing(self) -> None:
        self.write_blocked = False
        self.update_reading()
        if self.stomp is not None:
            self.stomp.resume_writing()

    def update_reading(self) -> None:
        """Read the socket unless the client does not read or the STOMP session paused."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self.write_blocked or self.stomp_paused:
            transport.pause_reading()
        elif not self.closing:
            transport.resume_reading()

    # --- upgrade ---------------------------------------------------------

    def _upgrade(self, request: Request) -> None:
        if self._upgrade_timer is not None:
            self._upgrade_timer.cancel()
            self._upgrade_timer = None
        headers = {
            k.decode("latin-1").lower(): v.decode("latin-1") for k, v in request.extra_headers
        }
        problem = refuse_host_or_origin(request.host, headers.get("origin"), self.allowed)
        if problem is not None:
            log.info("refused a WebSocket upgrade from %s: %s", self._peer(), problem)
            self._reject(RejectConnection(status_code=403, has_body=True), problem)
            return
        offered = request.subprotocols
        chosen = next((p for p in SUBPROTOCOLS if p in offered), None)
        if offered and chosen is None:
            self._reject(
                RejectConnection(status_code=400, has_body=True),
                f"no supported subprotocol in {', '.join(offered)!r}; "
                f"this broker speaks {', '.join(SUBPROTOCOLS)}",
            )
            return
        self._send(AcceptConnection(subprotocol=chosen))
        versions = SUBPROTOCOLS[chosen] if chosen else SUPPORTED_VERSIONS
        self.stomp = StompSession(self.server, versions=versions)
        self.stomp.connection_made(_FrameTransport(self))

    def _reject(self, hint: Any, reason: str) -> None:
        """Answer a refused upgrade with its status and a one-line reason, then close."""
        if self.transport is None or self.ws.state is not ConnectionState.CONNECTING:
            if self.transport is not None:
                self.transport.close()
            return
        reject = hint if isinstance(hint, RejectConnection) else RejectConnection(status_code=400)
        body = (reason + "\n").encode()
        headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"connection", b"close")]
        try:
            data = self.ws.send(
                RejectConnection(
                    status_code=reject.status_code,
                    headers=[*reject.headers, *headers],
                    has_body=True,
                )
            )
            data += self.ws.send(RejectData(data=body, body_finished=True))
        except (LocalProtocolError, h11.LocalProtocolError):  # h11 cannot answer this input
            data = b""
        self.transport.write(data)
        self.transport.close()

    def _upgrade_timeout(self) -> None:
        # No whole request yet, so HTTP has nothing to answer: just close.
        self._upgrade_timer = None
        if self.stomp is None and self.transport is not None:
            log.info(
                "closing %s: no WebSocket upgrade request within %s s",
                self._peer(),
                UPGRADE_TIMEOUT,
            )
            self.transport.close()

    # --- messages --------------------------------------------------------

    def _feed_stomp(self, chunks: list[bytes]) -> None:
        if chunks and self.stomp is not None and not self.closing:
            self.stomp.data_received(b"".join(chunks))
        chunks.clear()

    def send_frames(self, frames: list[bytes]) -> None:
        """Each STOMP frame as one message: text when it is UTF-8 (what browsers
        and web-stomp expect), binary when its body is not."""
        if self.transport is None or self.ws.state is not ConnectionState.OPEN:
            return
        out = bytearray()
        send = self.ws.send
        for frame in frames:
            try:
                out += send(TextMessage(data=frame.decode()))
            except UnicodeDecodeError:
                out += send(BytesMessage(data=frame))
        self.transport.write(out)

    def close(self) -> None:
        """Close after what was written: send a Close frame and drop the socket
        when the client answers it (or after CLOSE_TIMEOUT). Closing at once
        would reset the connection if the client is still sending, and a reset
        can destroy the ERROR frame before the client reads it."""
        if self.transport is None or self.closing:
            return
        self.closing = True
        if self.ws.state is not ConnectionState.OPEN:
            self.transport.close()
            return
        self.transport.write(self.ws.send(CloseConnection(code=_NORMAL_CLOSURE)))
        self.transport.resume_reading()  # a blocked producer must still read the answer
        self._close_timer = self.server.loop.call_later(CLOSE_TIMEOUT, self.transport.close)

    def _closed_by_peer(self, event: CloseConnection) -> None:
        # REMOTE_CLOSING: answer the peer's Close; OPEN: wsproto found a
        # protocol error (bad UTF-8, oversized control frame) and names its code.
        # LOCAL_CLOSING: this answers our Close.
        if self.ws.state in (ConnectionState.REMOTE_CLOSING, ConnectionState.OPEN):
            reply = event.response() if self.ws.state is ConnectionState.REMOTE_CLOSING else event
            self._send(reply)
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    def _send(self, event: Any) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(self.ws.send(event))

    def _peer(self) -> str:
        peer = self.transport.get_extra_info("peername") if self.transport else None
        return f"{peer[0]}:{peer[1]}" if peer else "?"


class _FrameTransport(asyncio.Transport):
    """What a StompSession sees as its transport: each buffer it writes is one
    STOMP frame, sent as one WebSocket message; the rest goes to the socket."""

    def __init__(self, session: WebSocketSession) -> None:
        super().__init__()
        self._session = session
        socket = session.transport
        assert socket is not None
        self._socket: asyncio.Transport = socket

    def writelines(self, list_of_data: Any) -> None:
        self._session.send_frames(list(list_of_data))

    def write(self, data: Any) -> None:
        self._session.send_frames([bytes(data)])

    def close(self) -> None:
        self._session.close()

    def abort(self) -> None:
        self._socket.abort()

    def is_closing(self) -> bool:
        return self._session.closing or self._socket.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._socket.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._session.stomp_paused = True
        self._session.update_reading()

    def resume_reading(self) -> None:
        self._session.stomp_paused = False
        self._session.update_reading()

    def is_reading(self) -> bool:
        return self._socket.is_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._socket.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._socket.get_write_buffer_size()
