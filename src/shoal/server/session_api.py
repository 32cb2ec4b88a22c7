"""What a connection's session needs of the server, as a protocol.

``BrokerServer`` (app.py) implements it; the listeners' sessions (stomp.py,
http.py) depend only on this, so the server imports its sessions and never
the other way round. Also the pool of connections not yet authenticated,
which the sessions of every protocol share.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable

    from shoal.broker.core import Broker
    from shoal.management.metrics import Metrics
    from shoal.protocol.stomp import Limits
    from shoal.records import Record
    from shoal.security import LoginThrottle
    from shoal.server.config import Config
    from shoal.server.pacing import ReadPacer
    from shoal.server.persistence import SyncPipeline


class HandshakePool:
    """Connections that have not authenticated yet, by the listener (local
    address) they came in on. Each listener's strangers count against its own
    max-unauthenticated-connections, so idle sockets on one port (AMQP, the
    cluster link) never lock another port's clients out."""

    def __init__(self) -> None:
        self._listener_of: dict[int, Any] = {}  # conn id -> listener
        self._counts: dict[Any, int] = {}  # listener -> its connections here

    def admit(self, conn_id: int, transport: asyncio.BaseTransport, limit: int) -> bool:
        """Count a new connection in, unless its listener is at ``limit`` (-1: none)."""
        listener = transport.get_extra_info("sockname")  # the listener's own address
        count = self._counts.get(listener, 0)
        if 0 <= limit <= count:
            return False
        self._listener_of[conn_id] = listener
        self._counts[listener] = count + 1
        return True

    def discard(self, conn_id: int) -> None:
        listener = self._listener_of.pop(conn_id, _ABSENT)
        if listener is not _ABSENT:
            left = self._counts[listener] - 1
            if left:
                self._counts[listener] = left
            else:
                del self._counts[listener]

    def __contains__(self, conn_id: object) -> bool:
        return conn_id in self._listener_of

    def __len__(self) -> int:
        return len(self._listener_of)


_ABSENT = object()


class ServerState(Protocol):
    version: str
    config: Config
    loop: asyncio.AbstractEventLoop
    broker: Broker
    persistence: SyncPipeline
    protocol_limits: Limits
    handshake_limits: Limits  # until CONNECTED
    security_on: bool
    sessions: dict[int, Any]  # conn id -> StompSession
    handshaking: HandshakePool  # conn ids that have not completed CONNECT
    dirty: set[Any]  # sessions with output written outside flush
    read_since_flush: list[ReadPacer]  # pacers of the sessions that read since the last flush
    login_throttle: LoginThrottle
    max_destination_bytes: int
    metrics: Metrics
    cluster: Any  # shoal.server.cluster.node.ClusterNode, or None on a single node

    def next_conn_id(self) -> int: ...
    def verify_password_async(
        self, login: str, passcode: str, wanted: Callable[[], bool]
    ) -> asyncio.Future[bool | None]: ...
    def authorize(self, user: str | None, action: str, destination: str) -> None: ...
    def schedule_flush(self) -> None: ...
    def flush(self) -> None: ...
    def take_records(self) -> list[Record]: ...
    def removals_written(self, removals: list[Record]) -> None: ...
    def info(self) -> dict[str, Any]: ...
    def close_connection(self, conn_id: int, reason: str) -> None: ...
