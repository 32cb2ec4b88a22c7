"""What a connection's session needs of the server, as a protocol.

``BrokerServer`` (app.py) implements it; the listeners' sessions (stomp.py,
http.py) depend only on this, so the server imports its sessions and never
the other way round.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import asyncio

    from shoal.broker.core import Broker
    from shoal.protocol.stomp import Limits
    from shoal.server.config import Config
    from shoal.server.persistence import SyncPipeline
    from shoal.store.records import Record


class ServerState(Protocol):
    version: str
    config: Config
    loop: asyncio.AbstractEventLoop
    broker: Broker
    persistence: SyncPipeline
    protocol_limits: Limits
    security_on: bool
    sessions: dict[int, Any]  # conn id -> StompSession
    dirty: set[Any]  # sessions with output written outside flush

    def next_conn_id(self) -> int: ...
    def authorize(self, user: str | None, action: str, destination: str) -> None: ...
    def schedule_flush(self) -> None: ...
    def take_records(self) -> list[Record]: ...
    def info(self) -> dict[str, Any]: ...
