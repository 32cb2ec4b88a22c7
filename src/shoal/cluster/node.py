"""This process as a cluster node: wires the pure grouping state into the
server and drives its adapters (ZooKeeper, the cluster links).

Created by ``BrokerServer.start`` when ``[cluster]`` is configured. Runs on
the event loop; the ZooKeeper client's answers arrive here through
``call_soon_threadsafe`` and become core commands.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from shoal.broker.queue import Queue
from shoal.cluster.grouping import FORWARD_PREFIX, ClusterGrouping
from shoal.cluster.link import LinkClient, LinkSession
from shoal.cluster.zookeeper import ZooKeeperGrouping

if TYPE_CHECKING:
    from shoal.broker.effects import ProposeBinding
    from shoal.server.config import ClusterConfig

log = logging.getLogger("shoal.cluster")

INFO_INTERVAL = 0.25  # s between checks of which local queues have consumers


class ClusterNode:
    def __init__(self, server: Any, config: ClusterConfig) -> None:
        self.server = server
        self.config = config
        self.grouping = ClusterGrouping(
            config.node, config.timeout_ms, epoch=int(time.time() * 1000)
        )
        self.links: dict[str, LinkClient] = {}  # target node -> its link
        self.members: dict[str, dict[str, Any]] = {}
        self.link_address = ""
        self.zk: ZooKeeperGrouping | None = None
        self._info_handle: Any = None

    async def start(self) -> None:
        server = self.server
        cfg = self.config
        server.broker.cluster = self.grouping
        listener = await server.loop.create_server(
            lambda: LinkSession(server, cfg.name),
            cfg.link[0],
            cfg.link[1],
            reuse_address=True,
            backlog=128,
        )
        server.listeners.append(listener)
        host, port = listener.sockets[0].getsockname()[:2]
        server.addresses["link"] = (host, port)
        self.link_address = f"{host}:{port}"
        self.zk = ZooKeeperGrouping(
            server.loop,
            cfg.zookeeper,
            cfg.name,
            cfg.node,
            on_decided=self._decided,
            on_members=self._members,
            still_pending=lambda q, g: self.grouping.is_pending((q, g)),
        )
        self.zk.start(self._info())
        self._info_handle = server.loop.call_later(INFO_INTERVAL, self._refresh_info)

    def stop(self) -> None:
        if self._info_handle is not None:
            self._info_handle.cancel()
        for link in self.links.values():
            link.close()
        if self.zk is not None:
            self.zk.stop()

    # --- from the core and the adapters --------------------------------------

    def propose(self, eff: ProposeBinding) -> None:
        assert self.zk is not None
        self.zk.propose(eff.queue, eff.group, eff.proposal)

    def _decided(self, queue: str, group: str, node: str) -> None:
        self.server.broker.binding_decided(queue, group, node, time.time())
        for ms in self.grouping.take_latencies():
            self.server.metrics.decision_latency.observe(ms / 1000.0)
        self.server.schedule_flush()

    def _members(self, members: dict[str, dict[str, Any]]) -> None:
        self.members = members
        self.grouping.set_members(
            {n: frozenset(m.get("consumers", ())) for n, m in members.items()}
        )
        for node, info in members.items():
            if node == self.config.node or not info.get("link"):
                continue
            host, _, port = str(info["link"]).rpartition(":")
            address = (host, int(port))
            link = self.links.get(node)
            if link is None:
                link = LinkClient(self.server, self.config.name, self.config.node, node, address)
                self.links[node] = link
                link.start()
            else:
                link.retarget(address)

    def _info(self) -> dict[str, Any]:
        consumers = sorted(
            name
            for name, q in self.server.broker.queues.items()
            if q.__class__ is Queue and q.consumers and not name.startswith(FORWARD_PREFIX)
        )
        info: dict[str, Any] = {"link": self.link_address, "consumers": consumers}
        http = self.server.addresses.get("http")
        if http is not None:  # the console links each node to its own (C10)
            info["http"] = f"{http[0]}:{http[1]}"
        return info

    def _refresh_info(self) -> None:
        if self.zk is not None:
            self.zk.set_info(self._info())
        self._info_handle = self.server.loop.call_later(INFO_INTERVAL, self._refresh_info)

    # --- views ----------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """``/api/cluster`` and ``shoal cluster status``."""
        g = self.grouping
        queues = self.server.broker.queues
        held = g.held_by()
        nodes = []
        known = set(self.members) | set(self.links) | {self.config.node}
        for node in sorted(known):
            info = self.members.get(node, {})
            entry: dict[str, Any] = {
                "node": node,
                "self": node == self.config.node,
                "link": info.get("link")
                or (
                    self.link_address
                    if node == self.config.node
                    else self.links[node].status()["link"]
                ),
                "member": node in self.members,
                "http": info.get("http"),
                "queues_with_consumers": info.get("consumers", []),
                "bindings_held": held.get(node, 0),
            }
            if node != self.config.node:
                link = self.links.get(node)
                fq = queues.get(FORWARD_PREFIX + node)
                entry["state"] = link.state if link is not None else "no link"
                entry["forward_backlog"] = 0 if fq is None else fq.depth
                entry["forwarded"] = 0 if link is None else link.sent
            else:
                entry["state"] = "self"
            nodes.append(entry)
        latencies = sorted(g.decision_ms)
        p99 = latencies[min(len(latencies) - 1, len(latencies) * 99 // 100)] if latencies else None
        return {
            "cluster": self.config.name,
            "node": self.config.node,
            "link": self.link_address,
            "grouping": self.config.grouping,
            "zookeeper": {
                "connect": self.config.zookeeper,
                "state": self.zk.state if self.zk is not None else "stopped",
            },
            "timeout_ms": self.config.timeout_ms,
            "nodes": nodes,
            "bindings_cached": len(g.bindings),
            "decisions_pending": len(g.pending),
            "decisions": g.decisions,
            "decision_timeouts": g.timeouts,
            # over the last 1000 decisions
            "decision_ms_p50": latencies[len(latencies) // 2] if latencies else None,
            "decision_ms_p99": p99,
            "forwarded": g.forwarded,
            "duplicates_dropped": g.duplicates,
        }
