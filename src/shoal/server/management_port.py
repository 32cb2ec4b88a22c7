"""The server's side of the management port (``shoal.management.broker_port``).

:class:`ServerPort` answers management's reads with snapshots of the core
and of the sessions, and carries out its commands: admin commands go to the
core, closing a connection goes to the server, which shuts the session down
in its next flush. The sink publishes through an internal core connection.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from shoal.broker.queue import Queue
from shoal.broker.sink import DEFAULT_ORPHAN_AGE, SinkStaging, staging_of
from shoal.errors import Conflict
from shoal.management.broker_port import FsyncStats, LogQueueView, MessageView, SessionView, SinkRow

if TYPE_CHECKING:
    from shoal.broker.core import Broker
    from shoal.server.session_api import ServerState

SINK_CONN = 0  # the core connection the sink publishes through
ORPHAN_AGE = DEFAULT_ORPHAN_AGE  # staged rows no publish claimed are dropped after this


class ServerPort:
    """Implements ``BrokerPort`` over a server's core and sessions."""

    def __init__(self, server: ServerState) -> None:
        self._server = server

    @property
    def _broker(self) -> Broker:
        return self._server.broker  # set once the server has started

    # --- reads ------------------------------------------------------------------

    def broker_info(self) -> dict[str, Any]:
        return self._server.info()

    def fsync_stats(self) -> FsyncStats | None:
        pipeline = self._server.persistence
        if pipeline is None:
            return None
        return FsyncStats(pipeline.sync_count, list(pipeline.sync_seconds))

    def metrics(self) -> Any:
        return self._server.metrics

    def cluster_status(self) -> dict[str, Any] | None:
        cluster = self._server.cluster
        return None if cluster is None else cluster.status()

    def cluster_node(self) -> str | None:
        cluster = self._server.cluster
        return None if cluster is None else cluster.config.node

    def cluster_bindings(self, queue: str) -> dict[str, str] | None:
        grouping = self._broker.cluster
        if grouping is None:
            return None
        return {group: node for (q, group), node in grouping.bindings.items() if q == queue}

    def cluster_forget(self, node: str) -> dict[str, Any] | None:
        cluster = self._server.cluster
        return None if cluster is None else cluster.forget(node)

    def cluster_rebalance(self, queue: str) -> dict[str, Any] | None:
        cluster = self._server.cluster
        return None if cluster is None else cluster.rebalance(queue)

    def queue_infos(self) -> list[dict[str, Any]]:
        return self._broker.queue_infos()

    def queue_counters(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for q in self._broker.queues.values():
            if isinstance(q, Queue):
                out.append(
                    {
                        "name": q.name,
                        "enqueued": q.enqueued,
                        "delivered": q.delivered,
                        "acked": q.acked,
                        "depth": q.depth,
                    }
                )
            else:  # a log queue: its info is per bucket, not per group
                info = getattr(q, "info", None)
                out.append({"name": q.name, **(info() if callable(info) else {})})
        return out

    def consumer_infos(self) -> list[dict[str, Any]]:
        return self._broker.consumer_infos()

    def connection_infos(self) -> list[dict[str, Any]]:
        return self._broker.connection_infos()

    def sessions(self) -> dict[int, SessionView]:
        return {
            conn_id: SessionView(
                peer=getattr(s, "peer", None),
                user=getattr(s, "user", None),
                protocol=getattr(s, "protocol", None),
                connected_at=getattr(s, "connected_at", None),
                frames_in=getattr(s, "frames_in", None),
                messages_out=getattr(s, "messages_out", None),
            )
            for conn_id, s in list(self._server.sessions.items())
        }

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
    ) -> tuple[list[dict[str, Any]], int]:
        return self._broker.group_page(
            queue,
            state=state,
            owner=owner,
            contains=contains,
            sort=sort,
            descending=descending,
            offset=offset,
            limit=limit,
            now=now,
        )

    def group_state_counts(self, queue: str) -> dict[str, int]:
        return self._broker.group_state_counts(queue)

    def group_info(self, queue: str, group: str, now: float) -> dict[str, Any] | None:
        return self._broker.group_info(queue, group, now)

    def browse(self, queue: str, limit: int) -> list[MessageView]:
        return [
            MessageView(
                id=m.id,
                destination=m.destination,
                headers=dict(m.headers),
                body=m.body,
                size=m.size,
                group=m.group,
                group_seq=m.group_seq,
                persistent=m.persistent,
                priority=m.priority,
                expires=m.expires,
                timestamp=m.timestamp,
                delivery_count=m.delivery_count,
            )
            for m in self._broker.browse(queue, limit)
        ]

    # --- commands ---------------------------------------------------------------

    def create_queue(self, name: str, settings: dict[str, Any], now: float) -> None:
        self._broker.create_queue(name, settings, now)

    def delete_queue(self, name: str, now: float) -> None:
        self._broker.delete_queue(name, now)

    def purge_queue(self, name: str, now: float) -> int:
        return self._broker.purge_queue(name, now)

    def reset_groups(self, queue: str, group: str | None, now: float) -> int:
        return self._broker.reset_groups(queue, group, now)

    def park_group(self, queue: str, group: str, now: float) -> None:
        self._broker.park_group(queue, group, now)

    def resume_group(self, queue: str, group: str, now: float) -> None:
        self._broker.resume_group(queue, group, now)

    def close_connection(self, conn_id: int, reason: str, now: float) -> None:
        if conn_id in self._server.sessions:
            self._server.close_connection(conn_id, reason)
        else:  # no socket (the sink's connection): only the core knows it
            self._broker.disconnect(conn_id, now)

    # --- log queues and the exactly-once sink -------------------------------------

    def log_queue_names(self) -> list[str]:
        return sorted(name for name, q in self._broker.queues.items() if q.kind == "log")

    def log_queue(self, name: str) -> LogQueueView:
        q: LogQueueView = self._broker.log_queue(name)
        return q

    def _staging(self, now: float) -> SinkStaging:
        staging = staging_of(self._broker)
        staging.collect_orphans(now, ORPHAN_AGE)
        return staging

    def sink_stage(self, handle: str, destination: str, rows: Sequence[SinkRow], now: float) -> int:
        return self._staging(now).stage(handle, destination, rows, now)

    def sink_publish(
        self, sink_id: str, batch_id: int, handles: list[str], now: float
    ) -> dict[str, Any]:
        staging = self._staging(now)
        broker = self._broker
        try:
            broker.connect(SINK_CONN, now)
        except Conflict:
            pass  # already connected
        send = broker.send

        def publish_one(
            destination: str, group: str | None, headers: dict[str, str], body: bytes
        ) -> None:
            send(SINK_CONN, destination, headers, body, now)

        def publish_many(destination: str, rows: Any) -> int:  # log queues: in one go
            return broker.send_many(SINK_CONN, destination, rows, now)

        return staging.publish(sink_id, batch_id, handles, publish_one, publish_many)

    def sink_discard(self, handles: Iterable[str]) -> int:
        return staging_of(self._broker).discard(handles)

    def sink_info(self, now: float) -> dict[str, Any]:
        return self._staging(now).info()
