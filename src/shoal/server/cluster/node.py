"""This process as a cluster node: wires the pure grouping state into the
server and drives its adapters (ZooKeeper, the cluster links).

Created by ``BrokerServer.start`` when ``[cluster]`` is configured. Runs on
the event loop; the ZooKeeper client's answers arrive here through
``call_soon_threadsafe`` and become core commands.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from shoal.broker.queue import Queue
from shoal.cluster.grouping import FORWARD_PREFIX, ClusterGrouping, FenceClock, rebalance_plan
from shoal.cluster.local_handler import PROPOSE_DESTINATION, TOUCH_DESTINATION, other_handlers
from shoal.errors import BrokerError, Conflict, NotFound, ProtocolError
from shoal.server.cluster.handlers import LocalHandler, RemoteHandler
from shoal.server.cluster.link import LinkClient, LinkSession
from shoal.server.cluster.zookeeper import SESSION_TIMEOUT, BindingWatches, ZooKeeperGrouping

if TYPE_CHECKING:
    from shoal.broker.effects import ProposeBinding, ReleaseBinding, TouchBinding
    from shoal.server.config import ClusterConfig

log = logging.getLogger("shoal.cluster")

INFO_INTERVAL = 0.25  # s between checks of which local queues have consumers
JOIN_NOTICE = 2.0  # s of waiting to join before saying what it waits for


class ClusterNode:
    def __init__(self, server: Any, config: ClusterConfig) -> None:
        self.server = server
        self.config = config
        self.grouping = ClusterGrouping(
            config.node,
            config.timeout_ms,
            epoch=int(time.time() * 1000),
            group_timeout_ms=config.group_timeout_ms,
            reaper_period_ms=config.reaper_period_ms,
            consumerless_ms=config.consumerless_rebind_after_ms,
            load_balancing=config.message_load_balancing,
        )
        self.grouping.resend_below = server.redelivered_below
        self.started_ms = int(time.time() * 1000)
        self.rebalances: dict[str, dict[str, Any]] = {}  # queue -> the last one asked here
        self.links: dict[str, LinkClient] = {}  # target node -> its link
        self.members: dict[str, dict[str, Any]] = {}
        self.link_address = ""
        self.zk: ZooKeeperGrouping | None = None
        # C8: who decides. None: ZooKeeper; otherwise membership only is in ZooKeeper.
        self.handler: LocalHandler | RemoteHandler | None = None
        self.watches: BindingWatches | None = None
        self._info_handle: Any = None
        self.fence_clock = FenceClock(int(SESSION_TIMEOUT * 1000))
        self._rechecking: int | None = None  # the session being re-checked
        self.fencing = False  # set by start: the zookeeper handler only
        # C6: nodes out of membership -> since when (time.time()); forgets done
        self.absent_since: dict[str, float] = {}
        self.forgets: dict[str, dict[str, Any]] = {}
        self._rival_locals: list[str] = []
        self._odd_members: list[str] = []
        # a member: in membership, and (zookeeper handler) its groups confirmed
        self.joined = asyncio.Event()

    async def start(self) -> None:
        server = self.server
        cfg = self.config
        server.broker.cluster = self.grouping
        # zookeeper handler: fenced until a ZooKeeper session has confirmed
        # this node's groups. local/remote: bindings never move, no fencing.
        self.fencing = cfg.grouping == "zookeeper"
        if self.fencing:
            server.broker.cluster_fence(time.time())
            self.grouping.fences = 0  # counts the fences after start-up
        listener = await server.loop.create_server(
            lambda: LinkSession(server, cfg.name, cfg.node, cfg.secret),
            cfg.link[0],
            cfg.link[1],
            reuse_address=True,
            backlog=128,
        )
        server.listeners.append(listener)
        host, port = listener.sockets[0].getsockname()[:2]
        server.addresses["link"] = (host, port)
        self.link_address = f"{host}:{port}"
        if cfg.secret is None:
            log.warning(
                "the cluster link on %s is not authenticated: any peer that reaches it can act "
                "as a node; set [cluster] secret or secret-file (docs/cluster.md)",
                self.link_address,
            )
        if cfg.grouping == "local":
            # its decisions, journaled (GroupBound): known to its own core at once
            bindings = server.recovered_bindings
            self.grouping.bindings.update(bindings)
            now_ms = int(time.time() * 1000)
            for key, node in bindings.items():
                if node == cfg.node and self.grouping.moving:  # the reaper starts counting now
                    self.grouping.last_use[key] = now_ms
            self.handler = LocalHandler(
                server,
                cfg.node,
                bindings,
                self._decided,
                self._touched,
                self._released,
                self._released_from,
            )
        elif cfg.grouping == "remote":
            self.handler = RemoteHandler(
                cfg.node,
                self.links,
                self._decided,
                lambda q, g: self.grouping.is_pending((q, g)),
                cached=lambda: list(self.grouping.bindings),
                on_touched=self._touched,
                on_released=self._released,
                on_moved=self._released_from,
            )
        self.zk = ZooKeeperGrouping(
            server.loop,
            cfg.zookeeper,
            cfg.name,
            cfg.node,
            on_decided=self._decided,
            on_members=self._members,
            still_pending=lambda q, g: self.grouping.is_pending((q, g)),
            on_plan=self._plan,
            on_contact=self._contact,
            on_lost=self._lost,
            on_rechecked=self._rechecked,
        )
        if self.handler is None:  # bindings that move (C5-C7) live in ZooKeeper
            self.watches = BindingWatches(
                self.zk,
                on_moved=self._moved,
                on_refreshed=self._refreshed,
                on_released=self._released,
            )
        self.zk.start(self._info())
        self._info_handle = server.loop.call_later(INFO_INTERVAL, self._refresh_info)

    async def wait_joined(self, stop: asyncio.Event) -> None:
        """Until this node has joined the cluster, or ``stop`` is set; says what
        it waits for when that takes long (ZooKeeper not up yet)."""
        waits = [asyncio.ensure_future(self.joined.wait()), asyncio.ensure_future(stop.wait())]
        try:
            done, _ = await asyncio.wait(
                waits, timeout=JOIN_NOTICE, return_when=asyncio.FIRST_COMPLETED
            )
            if not done:
                log.warning(
                    "node %r is waiting for ZooKeeper at %s to join cluster %r",
                    self.config.node,
                    self.config.zookeeper,
                    self.config.name,
                )
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()

    def _check_joined(self) -> None:
        if self.joined.is_set() or self.config.node not in self.members:
            return
        if self.fencing and self.grouping.fenced:
            return
        self.joined.set()
        log.info("node %r joined cluster %r", self.config.node, self.config.name)

    def stop(self) -> None:
        if self._info_handle is not None:
            self._info_handle.cancel()
        for link in self.links.values():
            link.close()
        if self.zk is not None:
            self.zk.stop()

    # --- from the core and the adapters --------------------------------------

    def propose(self, eff: ProposeBinding) -> None:
        if self.handler is not None:
            self.handler.propose(eff.queue, eff.group, eff.proposal)
            return
        assert self.zk is not None
        self.zk.propose(eff.queue, eff.group, eff.proposal)

    def handler_frame(
        self, session: LinkSession, destination: str, headers: dict[str, str]
    ) -> None:
        """A remote node's proposal, touch or release (C8); only the local
        handler's node takes them."""
        handler = self.handler
        if not isinstance(handler, LocalHandler):
            raise ProtocolError(
                f"cluster link: node {self.config.node!r} is not the local grouping handler "
                f"(its cluster.grouping.type is {self.config.grouping!r})"
            )
        if destination == PROPOSE_DESTINATION:
            handler.propose_from_link(session, headers)
        elif destination == TOUCH_DESTINATION:
            handler.touch_from_link(session, headers)
        else:
            handler.release_from_link(session, headers)

    def receipt_from_link(self, target: str, receipt_id: str, headers: dict[str, str]) -> None:
        if isinstance(self.handler, RemoteHandler):
            self.handler.receipt_from_link(target, receipt_id, headers)

    def link_session_up(self, origin: str, session: LinkSession) -> None:
        if isinstance(self.handler, LocalHandler):
            self.handler.session_up(origin, session)

    def link_session_down(self, origin: str, session: LinkSession) -> None:
        if isinstance(self.handler, LocalHandler):
            self.handler.session_down(origin, session)

    def link_up(self, target: str) -> None:
        if isinstance(self.handler, RemoteHandler):
            self.handler.link_up(target)

    def _decided(self, queue: str, group: str, node: str) -> None:
        self.server.broker.binding_decided(queue, group, node, time.time())
        for ms in self.grouping.take_latencies():
            self.server.metrics.decision_latency.observe(ms / 1000.0)
        if self.watches is not None:  # a cached binding is watched (C5-C7)
            # with group-timeout on, an answer is a use: refresh its last use
            touch = self.config.group_timeout_ms > 0 and node != self.config.node
            self.watches.watch(queue, group, node, touch=touch)
        self.server.schedule_flush()

    # --- fencing (docs/cluster.md "Partitions and fencing") ----------------------

    def _contact(self, sent_ms: int, session: int, session_ms: int) -> None:
        if not self.fencing:
            return
        clock = self.fence_clock
        clock.session_ms = min(int(SESSION_TIMEOUT * 1000), session_ms)
        if clock.needs_check(session):
            if self._rechecking != session and self.zk is not None:
                self._rechecking = session
                self.zk.recheck(session, self.server.broker.cluster_recheck_keys())
            return
        clock.answered(sent_ms, session)
        if self.grouping.fenced and not clock.must_fence(_mono_ms()):
            self._unfence({})  # the same session: nobody could take our groups

    def _rechecked(
        self, sent_ms: int, session: int, view: dict[tuple[str, str], str | None] | None
    ) -> None:
        if self._rechecking == session:
            self._rechecking = None
        if view is None:
            return  # asked again on the next contact
        self.fence_clock.checked(sent_ms, session)
        if self.fence_clock.must_fence(_mono_ms()):
            return
        self._unfence(view)
        if self.watches is not None:  # moves of these are watched from now on (C5-C7)
            for (queue, group), node in view.items():
                if node is not None:
                    self.watches.watch(queue, group, node)

    def _unfence(self, view: dict[tuple[str, str], str | None]) -> None:
        parked = self.server.broker.cluster_unfence(time.time(), view)
        log.log(
            logging.WARNING if self.joined.is_set() or parked else logging.INFO,
            "ZooKeeper session confirmed: delivering this node's groups%s%s",
            " again" if self.joined.is_set() else "",
            f" ({len(parked)} moved meanwhile, parked)" if parked else "",
        )
        self._check_joined()
        self.server.schedule_flush()

    def _lost(self) -> None:
        if not self.fencing:
            return
        self.fence_clock.lost()
        self._fence("the ZooKeeper session expired")

    def _fence(self, why: str) -> None:
        if self.grouping.fenced:
            return
        self.server.broker.cluster_fence(time.time())
        log.warning("%s: this node's groups are fenced (not delivered) until it has a session", why)
        self.server.schedule_flush()

    # --- bindings that move (C5-C7, docs/cluster.md) -----------------------------

    def touch(self, eff: TouchBinding) -> None:
        node = self.grouping.bindings.get((eff.queue, eff.group), "")
        if self.watches is not None:
            self.watches.watch(eff.queue, eff.group, node, touch=True)
        elif self.handler is not None:
            self.handler.touch(eff.queue, eff.group)

    def release(self, eff: ReleaseBinding) -> None:
        """The reaper found the group drained here: release once that is on
        disk (the acks that drained it), or a crash could bring back a message
        of a group already bound elsewhere."""
        persistence = self.server.persistence
        persistence.when_synced(
            persistence.appended_seq, lambda _error: self._release_now(eff), fail_fast=False
        )

    def _release_now(self, eff: ReleaseBinding) -> None:
        if self.watches is not None:
            self.watches.release(eff.queue, eff.group, self.config.node, eff.idle_ms, eff.to)
        elif self.handler is not None:
            self.handler.release(eff.queue, eff.group, eff.idle_ms)

    def _touched(self, queue: str, group: str, node: str) -> None:
        """The local handler's answer to a touch: still ``node``'s, or moved/gone ("")."""
        if node and node == self.grouping.bindings.get((queue, group)):
            self._refreshed(queue, group, node)
        else:
            self._moved(queue, group, node or None)

    def _released_from(self, queue: str, group: str, old: str) -> None:
        """The local handler released ``old``'s binding: drop it if cached."""
        if self.grouping.bindings.get((queue, group)) == old:
            self._moved(queue, group, None)

    def _moved(self, queue: str, group: str, node: str | None) -> None:
        log.info("binding %r/%r moved to %s", queue, group, node or "(none)")
        self.server.broker.binding_moved(queue, group, node, time.time())
        self.server.schedule_flush()

    def _refreshed(self, queue: str, group: str, node: str) -> None:
        self.server.broker.binding_decided(queue, group, node, time.time())
        self.server.schedule_flush()

    def _released(self, queue: str, group: str, released: bool) -> None:
        if released:
            log.info("binding %r/%r released (reaper)", queue, group)
        self.server.broker.binding_released(queue, group, released, time.time())
        self.server.schedule_flush()

    def forget(self, node: str) -> dict[str, Any]:
        """C6: release every binding of ``node``, which must be out of
        membership (a live node keeps its bindings). Runs off the event loop;
        the result shows in ``status()["forgets"]``."""
        if isinstance(self.handler, RemoteHandler):
            raise Conflict(
                "bindings are decided by the local grouping handler on node "
                f"{self.handler.local or '(unknown)'}: ask that node to forget {node!r}"
            )
        if node == self.config.node:
            raise Conflict(f"node {node!r} is this node; forget it from another node")
        if node in self.members:
            raise Conflict(
                f"node {node!r} is a live member of the cluster (its ZooKeeper session is "
                "up); only a lost node's bindings can be forgotten"
            )
        if not node or not all(c.isalnum() or c in "._-" for c in node):
            raise NotFound(f"no such node {node!r}")
        running = self.forgets.get(node)
        if running is not None and running["state"] == "running":
            return running
        entry: dict[str, Any] = {"node": node, "state": "running", "released": None}
        self.forgets[node] = entry
        if isinstance(self.handler, LocalHandler):

            def forgotten(released: int) -> None:
                entry.update(state="done", released=released)
                log.warning("forgot node %r: %d bindings released", node, released)
                self.server.schedule_flush()

            self.handler.forget(node, forgotten)
            return dict(entry)
        watches = self.watches
        assert watches is not None

        def done(fut: Any) -> None:
            exc = fut.exception()
            if exc is not None:
                entry.update(state="failed", error=str(exc))
                log.warning("forgetting node %r failed: %s", node, exc)
            else:
                entry.update(state="done", released=fut.result())
                log.warning("forgot node %r: %d bindings released", node, fut.result())

        self.server.loop.run_in_executor(None, watches.forget, node).add_done_callback(done)
        return dict(entry)

    def rebalance(self, queue: str) -> dict[str, Any]:
        """Cluster rebalance (C7) of ``queue``: plan, from ZooKeeper's bindings
        and membership, which groups move so that the nodes whose queue has
        consumers hold counts that differ by at most one; publish the plan.
        Each holder releases its planned groups as they drain (``_plan``).
        Runs off the event loop; the result shows in ``status()["rebalances"]``."""
        if self.watches is None:
            raise Conflict(
                f"rebalance needs the zookeeper grouping handler; with {self.config.grouping!r} "
                "rebalance is not built for it yet (docs/cluster.md)"
            )
        if not queue or queue.startswith("$"):
            raise NotFound(f"no such queue {queue!r}")
        targets = sorted(n for n, m in self.members.items() if queue in m.get("consumers", ()))
        if not targets:
            raise Conflict(
                f"no node has consumers on queue {queue!r}: a rebalance moves groups to "
                "nodes with consumers"
            )
        running = self.rebalances.get(queue)
        if running is not None and running["state"] == "running":
            return dict(running)
        entry: dict[str, Any] = {"queue": queue, "state": "running", "targets": targets}
        self.rebalances[queue] = entry
        zk = self.zk
        assert zk is not None

        def plan() -> dict[str, Any]:
            holders = zk.holders(queue)
            moves = rebalance_plan(holders, targets)
            at = int(time.time() * 1000)
            zk.write_plan(queue, {"by": self.config.node, "at": at, "moves": moves})
            return {"groups": len(holders), "moves": moves}

        def done(fut: Any) -> None:
            exc = fut.exception()
            if exc is not None:
                entry.update(state="failed", error=str(exc))
                log.warning("rebalancing queue %r failed: %s", queue, exc)
                return
            result = fut.result()
            entry.update(state="done", groups=result["groups"], moves=result["moves"])
            log.warning(
                "rebalance of queue %r: %d of %d groups to move",
                queue,
                len(result["moves"]),
                result["groups"],
            )

        self.server.loop.run_in_executor(None, plan).add_done_callback(done)
        return dict(entry)

    def _plan(self, queue: str, plan: dict[str, Any]) -> None:
        """A rebalance plan read from ZooKeeper: release our planned groups as
        they drain. A plan older than this process is not ours to carry out
        (its holder may have been another incarnation)."""
        if self.watches is None or int(plan.get("at", 0)) < self.started_ms:
            return
        moves = {str(g): str(n) for g, n in dict(plan.get("moves", {})).items()}
        mine = self.server.broker.cluster_rebalance(queue, moves, time.time())
        if mine:
            log.info("rebalance of queue %r: %d groups to move from this node", queue, mine)
        self.server.schedule_flush()

    def _check_rebind(self) -> None:
        """C6 ``rebind-after``: a node out of membership that long is forgotten."""
        after = self.config.rebind_after_ms
        if after <= 0 or self.zk is None or not self.zk.client.connected:
            return
        if isinstance(self.handler, RemoteHandler):
            return  # the local node forgets, for the cluster
        now = time.time()
        for node, since in self.absent_since.items():
            done = self.forgets.get(node)
            if done is not None and done["state"] != "failed":
                continue  # forgotten (or being forgotten) in this absence
            if (now - since) * 1000 >= after:
                log.warning("node %r out of membership for %d ms: rebinding", node, after)
                try:
                    self.forget(node)
                except BrokerError as exc:
                    log.warning("rebind-after of node %r: %s", node, exc)

    def _members(self, members: dict[str, dict[str, Any]]) -> None:
        now = time.time()
        for node in set(self.members) | set(self.links):
            if node not in members and node != self.config.node:
                self.absent_since.setdefault(node, now)
        for node in members:
            if self.absent_since.pop(node, None) is not None:
                done = self.forgets.get(node)
                if done is not None and done["state"] != "running":
                    del self.forgets[node]  # back: a later absence counts anew
        self.members = members
        self._check_joined()
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
                link = LinkClient(
                    self.server,
                    self.config.name,
                    self.config.node,
                    node,
                    address,
                    self.config.secret,
                )
                self.links[node] = link
                link.start()
            else:
                link.retarget(address)
        odd = other_handlers(self.config.grouping, members)
        if odd and odd != self._odd_members:
            log.error(
                "nodes %s run a grouping handler that does not work with this node's %r: "
                "a group may be bound twice; give every node of the cluster the same "
                "cluster.grouping.type (or one 'local' and the rest 'remote')",
                ", ".join(odd),
                self.config.grouping,
            )
        self._odd_members = odd
        if isinstance(self.handler, RemoteHandler):
            self.handler.members_changed(members)  # after the links: it may ask at once
        elif isinstance(self.handler, LocalHandler):
            others = sorted(
                n
                for n, m in members.items()
                if n != self.config.node and m.get("grouping") == "local"
            )
            if others and others != self._rival_locals:
                log.error(
                    "nodes %s also run the local grouping handler; a cluster needs exactly one",
                    ", ".join(others),
                )
            self._rival_locals = others

    def _info(self) -> dict[str, Any]:
        consumers = sorted(
            name
            for name, q in self.server.broker.queues.items()
            if q.__class__ is Queue and q.consumers and not name.startswith(FORWARD_PREFIX)
        )
        info: dict[str, Any] = {
            "link": self.link_address,
            "consumers": consumers,
            "grouping": self.config.grouping,
            "joined": self.joined.is_set(),
        }
        http = self.server.addresses.get("http")
        if http is not None:  # the console links each node to its own (C10)
            info["http"] = f"{http[0]}:{http[1]}"
        return info

    def _refresh_info(self) -> None:
        if self.fencing and not self.grouping.fenced and self.fence_clock.must_fence(_mono_ms()):
            self._fence("no answer from ZooKeeper for most of the session timeout")
        if self.zk is not None:
            self.zk.set_info(self._info())
        self._check_rebind()
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
                # a member still confirming its groups: not serving yet
                "joined": self.joined.is_set()
                if node == self.config.node
                else node in self.members and info.get("joined", True),
                "http": info.get("http"),
                "queues_with_consumers": info.get("consumers", []),
                "bindings_held": held.get(node, 0),
            }
            if node != self.config.node:
                link = self.links.get(node)
                fq = queues.get(FORWARD_PREFIX + node)
                entry["state"] = link.state if link is not None else "no link"
                # sent but not yet acked by the target counts: it may be sent again
                entry["forward_backlog"] = 0 if fq is None else fq.depth + fq.in_flight
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
            "local_handler": self._local_handler(),
            "timeout_ms": self.config.timeout_ms,
            "joined": self.joined.is_set(),
            "fenced": g.fenced,
            "fences": g.fences,
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
            "group_timeout_ms": self.config.group_timeout_ms,
            "rebind_after_ms": self.config.rebind_after_ms,
            "consumerless_rebind_after_ms": self.config.consumerless_rebind_after_ms,
            "bindings_released": g.released,
            "entries_rerouted": g.rerouted,
            "stranded_sent": g.stranded_sent,
            "forgets": sorted(self.forgets.values(), key=lambda e: e["node"]),
            "message_load_balancing": self.config.message_load_balancing,
            "balanced": g.balanced,
            "rebalances": sorted(self.rebalances.values(), key=lambda e: e["queue"]),
            "moves_waiting": len(g.moves),
            "groups_moved": g.moved_out,
        }

    def _local_handler(self) -> str | None:
        """The node deciding bindings (local/remote handlers), as this node knows it."""
        if isinstance(self.handler, LocalHandler):
            return self.config.node
        if isinstance(self.handler, RemoteHandler):
            return self.handler.local
        return None


def _mono_ms() -> int:
    return int(time.monotonic() * 1000)
