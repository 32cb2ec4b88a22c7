"""The one port between management and the broker.

Handlers read snapshots (plain dicts and frozen views, never the core's or a
session's live objects) and send commands through :class:`BrokerPort`; the
server implements it (``shoal.server.management_port.ServerPort``) over the core and its
sessions. Closing a connection is a command the server carries out in its
own loop, so no handler touches a session.

A new kind of read or command (cluster status, a protocol's connection
facts) is a method here plus its implementation in the server's adapter.
This module imports nothing of management, so every handler module can
depend on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

# A row the sink stages: (group, headers, body).
SinkRow = tuple[str | None, dict[str, str], bytes]


@dataclass(frozen=True, slots=True)
class SessionView:
    """What the server knows of one client connection's socket."""

    peer: str | None
    user: str | None
    protocol: str | None  # "stomp", "amqp"
    connected_at: float | None
    frames_in: int | None
    messages_out: int | None


@dataclass(frozen=True, slots=True)
class MessageView:
    """A pending message as browsing shows it; ``body`` is None when paged out."""

    id: int
    destination: str
    headers: dict[str, str]
    body: bytes | None
    size: int
    group: str | None
    group_seq: int | None
    persistent: bool
    priority: int | None
    expires: int
    timestamp: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class FsyncStats:
    count: int  # journal syncs so far
    recent: Sequence[float]  # the latest durations in seconds, oldest first


class LogQueueView(Protocol):
    """A log queue's reads and its consumer-offset commits (docs/spark.md)."""

    name: str
    nbuckets: int

    def barrier(self) -> bool: ...
    def bucket_infos(self) -> list[dict[str, Any]]: ...
    def end_offsets(self) -> dict[int, int]: ...
    def read(self, bucket: int, start: int, end: int | None, max_rows: int) -> list[Any]: ...
    def commit(self, bucket: int, offset: int) -> bool: ...


class BrokerPort(Protocol):
    # --- reads: snapshots ------------------------------------------------------

    def broker_info(self) -> dict[str, Any]:
        """version, uptime_s, listeners, journal."""
        ...

    def fsync_stats(self) -> FsyncStats | None:
        """None when nothing is journaled (no sync pipeline)."""
        ...

    def metrics(self) -> Any:
        """The server's metric registry (it observes delivery latency), or None."""
        ...

    def cluster_status(self) -> dict[str, Any] | None:
        """``/api/cluster`` (docs/cluster.md); None when not a cluster node."""
        ...

    def cluster_node(self) -> str | None:
        """This node's cluster id; None when not a cluster node."""
        ...

    def cluster_bindings(self, queue: str) -> dict[str, str] | None:
        """{group: node holding it} of ``queue``, the bindings this node knows
        (C10); None when not a cluster node."""
        ...

    def cluster_forget(self, node: str) -> dict[str, Any] | None:
        """C6: start releasing a lost node's bindings (``forgets`` in the
        status shows when it is done); None when not a cluster node."""
        ...

    def cluster_rebalance(self, queue: str) -> dict[str, Any] | None:
        """C7: plan and publish a rebalance of ``queue``'s groups
        (``rebalances`` in the status); None when not a cluster node."""
        ...

    def queue_infos(self) -> list[dict[str, Any]]: ...

    def queue_counters(self) -> list[dict[str, Any]]:
        """Each queue's name, enqueued, delivered, acked and depth: what rate
        sampling reads, cheap at any number of groups (no per-group walk)."""
        ...

    def consumer_infos(self) -> list[dict[str, Any]]: ...
    def connection_infos(self) -> list[dict[str, Any]]: ...
    def sessions(self) -> dict[int, SessionView]: ...

    def group_page(
        self,
        queue: str,
        *,
        state: set[str] | None,
        owner: str | None,
        contains: str | None,
        sort: str,
        descending: bool,
        offset: int,
        limit: int,
        now: float,
    ) -> tuple[list[dict[str, Any]], int]: ...

    def group_state_counts(self, queue: str) -> dict[str, int]:
        """{state: groups} with every state present."""
        ...

    def group_info(self, queue: str, group: str, now: float) -> dict[str, Any] | None: ...
    def browse(self, queue: str, limit: int) -> list[MessageView]: ...

    # --- commands --------------------------------------------------------------

    def create_queue(self, name: str, settings: dict[str, Any], now: float) -> None: ...
    def delete_queue(self, name: str, now: float) -> None: ...
    def purge_queue(self, name: str, now: float) -> int: ...
    def reset_groups(self, queue: str, group: str | None, now: float) -> int: ...
    def park_group(self, queue: str, group: str, now: float) -> None: ...
    def resume_group(self, queue: str, group: str, now: float) -> None: ...

    def close_connection(self, conn_id: int, reason: str, now: float) -> None:
        """Tell the client ``reason`` and close; its unsettled messages go back."""
        ...

    # --- log queues and the exactly-once sink ------------------------------------

    def log_queue_names(self) -> list[str]:
        """Sorted."""
        ...

    def log_queue(self, name: str) -> LogQueueView:
        """Raises NotFound."""
        ...

    def sink_stage(self, handle: str, destination: str, rows: Sequence[SinkRow], now: float) -> int:
        """Keep ``rows`` under ``handle``; returns the rows staged under it."""
        ...

    def sink_publish(
        self, sink_id: str, batch_id: int, handles: list[str], now: float
    ) -> dict[str, Any]: ...

    def sink_discard(self, handles: Iterable[str]) -> int: ...
    def sink_info(self, now: float) -> dict[str, Any]: ...
