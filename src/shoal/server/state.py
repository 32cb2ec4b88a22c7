"""What a connection's session needs of the server, as a protocol.

``BrokerServer`` (app.py) implements it; the listeners' sessions (stomp.py,
http.py) depend only on this, so the server imports its sessions and never
the other way round.
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
    from shoal.server.persistence import SyncPipeline


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
    handshaking: set[int]  # conn ids that have not completed CONNECT
    dirty: set[Any]  # sessions with output written outside flush
    read_since_flush: list[Any]  # sessions that read since the last flush
    login_throttle: LoginThrottle
    max_destination_bytes: int
    metrics: Metrics
    cluster: Any  # shoal.cluster.node.ClusterNode, or None on a single node

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
