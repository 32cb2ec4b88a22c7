"""Cluster routing (docs/cluster.md, C1-C9): the core's side of clustered
grouping. A grouped SEND to a queue waits for its group's binding, enters the
local queue or the forward queue to the holding node; bindings that move take
their forward entries back; a fenced node delivers none of its groups.
``ClusterRouter`` holds the node's ``ClusterGrouping`` (its bindings,
pending decisions, leases and moves) and makes these decisions for the
broker; ``Broker.send`` and ``Broker.route`` hand queue messages to
``ClusterRouter.route``. A single node has none (``Broker.router`` is None).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shoal.broker.admin import park
from shoal.broker.effects import (
    ProposeBinding,
    ReleaseBinding,
    SendDecided,
    TouchBinding,
)
from shoal.broker.model import Message
from shoal.broker.queue import Queue
from shoal.broker.routing import parse_message_headers
from shoal.broker.settings import group_id_of
from shoal.cluster.grouping import (
    DESTINATION,
    FORWARD_PREFIX,
    ORIGIN_EPOCH,
    ORIGIN_ID,
    ORIGIN_NODE,
    RESENT,
    HeldSend,
    forward_queue,
    watermark_key,
)
from shoal.errors import InvalidHeader, NotFound
from shoal.records import SinkBatchPublished

if TYPE_CHECKING:
    from shoal.broker.addresses import AddressBook
    from shoal.broker.core import Broker
    from shoal.broker.settings import QueueSettings
    from shoal.cluster.grouping import Pending


def _resent_count(headers: dict[str, str]) -> int:
    """A taken-back entry's delivery count here: 1 if it is marked resent
    (the mark is for a link's target; locally it becomes the count)."""
    return 1 if headers.pop(RESENT, None) is not None else 0


def group_of(q: Any, headers: dict[str, str]) -> str | None:
    """The group of a message of ``q`` with these headers (None: ungrouped)."""
    s: QueueSettings = q.settings
    return group_id_of(headers, s.group_header, s.default_group)


def make_forward_queue(addresses: AddressBook, node: str) -> Queue:
    """The store-and-forward queue to ``node`` (C4), with its own settings."""
    # Ungrouped, so one FIFO: the link sends entries in id order and gets
    # the unacked ones back at the head in that order (the target's dedup
    # watermark relies on it). A link that drops returns its unacked
    # entries: that is no poison message, so deliveries are unlimited.
    q: Queue = addresses.make_queue(
        forward_queue(node),
        {
            "group-header": "x-shoal-forward",
            "default-group": "",
            "queue-type": "classic",
            "max-delivery-attempts": 2**31 - 1,
        },
    )
    return q


def ensure_forward_queue(broker: Broker, node: str) -> None:
    """The link to ``node`` subscribes to its forward queue: create it first
    with its own settings (a plain SUBSCRIBE would use the defaults)."""
    if forward_queue(node) not in broker.queues:
        make_forward_queue(broker.addresses, node)
        broker.dispatch_touched()


class ClusterRouter:
    """Routing in a cluster: the broker's side of clustered grouping."""

    def __init__(self, broker: Broker, grouping: Any) -> None:
        self.broker = broker
        # shoal.cluster.grouping.ClusterGrouping: bindings, pending decisions,
        # leases, moves and the fence flag
        self.grouping = grouping

    # ---------------------------------------------------------------- cluster
    # Clustered grouping (docs/cluster.md): a grouped message of a queue goes
    # to the node its group is bound to; an ungrouped one is balanced over
    # the nodes with consumers (C9, message-load-balancing). Topics stay on
    # the node that received them.

    def route(
        self,
        q: Queue,
        base: str,
        headers: dict[str, str],
        body: bytes,
        seq: int,
        expires: int,
        priority: int,
        persistent: bool | None,
        producer: int | None,
    ) -> int | None:
        """Local queue, forward queue, or held for a decision (hold id)."""
        cluster = self.grouping
        gid = group_of(q, headers)
        if gid is None or q.name.startswith("$"):
            node = cluster.node
            mode = cluster.load_balancing  # C9; ON_DEMAND with local consumers: local
            if gid is None and (mode == "STRICT" or (mode == "ON_DEMAND" and not q.consumers)):
                if not q.name.startswith("$"):
                    node = cluster.balance(q.name, False)
            if node == cluster.node:
                self.accept_local(
                    q, base, headers, body, seq, expires, priority, persistent, producer
                )
            else:
                self.forward(
                    node, q, base, headers, body, seq, expires, priority, persistent, producer
                )
            return None
        key = (q.name, gid)
        node = cluster.bindings.get(key)
        if node is not None and cluster.moving:
            if node == cluster.node:
                cluster.last_use[key] = self.broker.now_ms
            elif cluster.group_timeout_ms > 0:
                lease = cluster.lease(key, self.broker.now_ms)
                if lease == 1:
                    self.broker.effects.append(TouchBinding(q.name, gid))
                elif lease == 2:
                    node = None  # C5: the lease ran out; ask again before using it
        if node is not None and key in cluster.pending:
            # earlier messages of the group wait for a decision (a forwarded
            # message taught this node the binding meanwhile): behind them
            node = None
        if node is None:
            return self.hold(
                q, gid, base, headers, body, seq, expires, priority, persistent, producer
            )
        if node == cluster.node:
            self.accept_local(q, base, headers, body, seq, expires, priority, persistent, producer)
        else:
            self.forward(node, q, base, headers, body, seq, expires, priority, persistent, producer)
        return None

    def hold(
        self,
        q: Queue,
        gid: str,
        base: str,
        headers: dict[str, str],
        body: bytes,
        seq: int,
        expires: int,
        priority: int,
        persistent: bool | None,
        producer: int | None,
        source: Any = None,
    ) -> int:
        """Hold a message of a group without a usable binding; one proposal."""
        cluster = self.grouping
        key = (q.name, gid)
        hold_id: int = cluster.next_hold_id()
        held = HeldSend(
            producer or 0, hold_id, q, base, headers, body, seq, expires, priority, persistent
        )
        held.source = source
        pending = cluster.is_pending(key)
        proposal = None if pending else cluster.propose(q.name, bool(q.consumers))
        if cluster.hold(key, held, proposal, self.broker.now_ms):
            self.broker.effects.append(ProposeBinding(q.name, gid, proposal))  # type: ignore[arg-type]
        return hold_id

    def accept_local(
        self,
        q: Queue,
        base: str,
        headers: dict[str, str],
        body: bytes,
        seq: int,
        expires: int,
        priority: int,
        persistent: bool | None,
        producer: int | None,
        delivery_count: int = 0,
    ) -> None:
        i = self.broker.next_message_id
        self.broker.next_message_id = i + 1
        q.accept(
            i,
            base,
            headers,
            body,
            seq,
            expires,
            priority,
            persistent,
            self.broker.now_ms,
            producer,
            delivery_count,
        )

    def forward(
        self,
        node: str,
        q: Queue,
        base: str,
        headers: dict[str, str],
        body: bytes,
        seq: int,
        expires: int,
        priority: int,
        persistent: bool | None,
        producer: int | None,
    ) -> None:
        """C4: into the store-and-forward queue of ``node``; its link sends it
        on in order and acks it once the target's RECEIPT came back. The
        entry's id is the origin message id the target deduplicates by."""
        fq: Queue | None = self.broker.queues.get(forward_queue(node))  # type: ignore[assignment]  # forward queues are classic
        if fq is None:
            fq = make_forward_queue(self.broker.addresses, node)
        headers = dict(headers)
        headers[DESTINATION] = base
        headers[ORIGIN_EPOCH] = self.grouping.epoch
        if persistent is None:
            persistent = q.settings.default_persistent
        self.grouping.forwarded += 1
        self.accept_local(
            fq, "/queue/" + fq.name, headers, body, seq, expires, priority, persistent, producer
        )

    def binding_decided(self, queue: str, group: str, node: str, now: float) -> None:
        """The grouping handler's answer (C2): route what waited, in order."""
        self.broker.set_clock(now)
        cluster = self.grouping
        old = cluster.bindings.get((queue, group))
        pending = cluster.decided((queue, group), node, self.broker.now_ms)
        if pending is not None:
            self.release(pending, node)
        if old is not None and old != node and old != cluster.node:
            self.take_back(old, queue, group)  # a refresh found it moved
        self.broker.dispatch_touched()

    def release(self, pending: Pending, node: str) -> None:
        local = node == self.grouping.node
        for h in pending.held:
            q = h.queue
            if h.source is not None:  # a forward-queue entry taken back (C6)
                fq, m = h.source
                fq.removed(m)  # journaled with its new entry: a crash loses neither
            if q.deleted:
                self.broker.effects.append(SendDecided(h.conn_id, h.hold_id, None))
                self.broker.warn(
                    h.conn_id,
                    f"queue {q.name!r} was deleted while a message of it "
                    "waited for its group's binding; the message was dropped",
                )
                continue
            if local:
                self.accept_local(
                    q,
                    h.base,
                    h.headers,
                    h.body,
                    h.seq,
                    h.expires,
                    h.priority,
                    h.persistent,
                    h.conn_id,
                    0 if h.source is None else _resent_count(h.headers),
                )
            else:
                self.forward(
                    node,
                    q,
                    h.base,
                    h.headers,
                    h.body,
                    h.seq,
                    h.expires,
                    h.priority,
                    h.persistent,
                    h.conn_id,
                )
            if h.conn_id:
                self.broker.effects.append(SendDecided(h.conn_id, h.hold_id, None))

    def expire(self) -> None:
        """C3: refuse the SENDs whose group got no decision in time. Entries
        taken back from a forward queue (C6) are never refused: they were
        accepted long ago; they wait for the next try."""
        cluster = self.grouping
        timeout = cluster.timeout_ms
        for (queue, group), pending in cluster.expired(self.broker.now_ms):
            text = (
                f"no grouping decision for group {group!r} of queue {queue!r} within "
                f"timeout {timeout} ms (cluster.grouping.timeout); the message was not "
                "routed"
            )
            kept = [h for h in pending.held if h.source is not None]
            for h in pending.held:
                if h.source is None:
                    self.broker.effects.append(SendDecided(h.conn_id, h.hold_id, text))
            if kept:
                pending.held = kept
                pending.deadline_ms = self.broker.now_ms + timeout
                if not pending.proposal:
                    pending.proposal = cluster.propose(queue, bool(kept[0].queue.consumers))
                cluster.pending[(queue, group)] = pending
                self.broker.effects.append(ProposeBinding(queue, group, pending.proposal))

    # ----------------------------------------------- bindings that move (C5-C7)

    def binding_moved(self, queue: str, group: str, node: str | None, now: float) -> None:
        """A binding this node cached changed (``node``) or went (None): a
        ZooKeeper watch fired, or a lease refresh found it gone. Entries of
        the group still waiting in the forward queue to its old node are
        taken back and routed through the new binding (or a fresh decision)
        first, in order, before any later message of the group."""
        self.broker.set_clock(now)
        cluster = self.grouping
        key = (queue, group)
        old = cluster.moved(key)
        if node is not None:
            pending = cluster.decided(key, node, self.broker.now_ms)
            if pending is not None:
                self.release(pending, node)
        if old is not None and old != cluster.node and old != node:
            self.take_back(old, queue, group)
        elif old == cluster.node and node is not None and node != old:
            self.send_stranded(queue, group)  # else parked when unfenced
        self.broker.dispatch_touched()

    def take_back(self, old: str, queue: str, group: str) -> None:
        fq: Queue | None = self.broker.queues.get(forward_queue(old))  # type: ignore[assignment]
        q = self.broker.queues.get(queue)
        if fq is None or q is None or q.__class__ is not Queue or q.deleted:
            return
        destination = "/queue/" + queue
        for m in fq.pending_messages():
            h = m.headers
            if m.body is None or h.get(DESTINATION) != destination:
                continue  # paged entries stay queued to their node (docs/cluster.md)
            if group_of(q, h) != group:
                continue
            headers = {k: v for k, v in h.items() if k != DESTINATION and k != ORIGIN_EPOCH}
            if m.delivery_count or m.id < self.grouping.resend_below:
                # the old node's link had it (or may have, before this node's
                # crash): it may have reached a consumer there (a RECEIPT lost
                # in a partition or a crash), so its new holder delivers it
                # flagged redelivered, never a second unflagged copy
                headers[RESENT] = "true"
            self.grouping.rerouted += 1
            self.route_entry(q, group, headers, m, fq)

    def send_stranded(self, queue: str, group: str) -> bool:
        """The group is bound elsewhere now: its messages pending here (stored
        while fenced, or arrived in a race with the move) are routed through
        the new binding, in order, each leaving this queue once routed, so
        any later message of the group follows them. False when it cannot be
        done safely (a message of the group out to a consumer here, which may
        come back, or one paged out): then they stay."""
        q = self.broker.queues.get(queue)
        if q is None or q.__class__ is not Queue:
            return False
        g = q.groups.get(group)
        if g is None or not g.backlog or g.in_flight:
            return g is not None and not g.backlog and not g.in_flight
        stranded = [m for m in q.pending_messages() if m.grp is g]
        if any(m.body is None for m in stranded):
            return False
        for m in stranded:
            h = m.headers
            headers = {k: v for k, v in h.items() if k != DESTINATION and k != ORIGIN_EPOCH}
            if m.delivery_count:
                headers[RESENT] = "true"  # it was out to a consumer here once
            self.grouping.stranded_sent += 1
            self.route_entry(q, group, headers, m, q)
        return True

    def route_entry(
        self, q: Queue, group: str, headers: dict[str, str], m: Message, fq: Queue
    ) -> None:
        cluster = self.grouping
        key = (q.name, group)
        node = cluster.bindings.get(key)
        body = m.body or b""
        if node is None or key in cluster.pending:
            # Out of the forward queue now, so its link cannot send it to the
            # old node while the decision is out; the removal is journaled
            # only when it is routed anew (a crash meanwhile recovers it there)
            fq.withdraw(m, journal=False)
            self.hold(
                q,
                group,
                "/queue/" + q.name,
                headers,
                body,
                m.group_seq,
                m.expires,
                m.priority,
                m.persistent,
                None,
                (fq, m),
            )
            return
        fq.withdraw(m)
        if node == cluster.node:
            self.accept_local(
                q,
                "/queue/" + q.name,
                headers,
                body,
                m.group_seq,
                m.expires,
                m.priority,
                m.persistent,
                None,
                _resent_count(headers),
            )
        else:
            self.forward(
                node,
                q,
                "/queue/" + q.name,
                headers,
                body,
                m.group_seq,
                m.expires,
                m.priority,
                m.persistent,
                None,
            )

    def binding_released(self, queue: str, group: str, released: bool, now: float) -> None:
        """The answer to this node's ``ReleaseBinding``: messages of the group
        that came meanwhile waited; they get a fresh decision, or stay here
        when the binding was used meanwhile and is still ours."""
        self.broker.set_clock(now)
        cluster = self.grouping
        key = (queue, group)
        cluster.release_answered(key, released, self.broker.now_ms)
        pending = cluster.pending.get(key)
        if pending is not None:
            if not released:
                del cluster.pending[key]
                self.release(pending, cluster.node)
            elif not pending.proposal:
                pending.proposal = cluster.propose(queue, bool(pending.held[0].queue.consumers))
                self.broker.effects.append(ProposeBinding(queue, group, pending.proposal))
        self.broker.dispatch_touched()

    def group_drained(self, queue: str, group: str) -> bool:
        """Nothing of the group pending or in flight on this node."""
        q = self.broker.queues.get(queue)
        if q is None or q.__class__ is not Queue:
            return True
        g = q.groups.get(q.groups.key_for_name(group))
        return g is None or (not g.backlog and not g.in_flight)

    def rebalance(self, queue: str, moves: dict[str, str], now: float) -> int:
        """Cluster rebalance (C7): a plan (group -> node) for ``queue``; this
        node releases the bindings it holds of those groups, each once it is
        drained here, naming the target as the next holder. How many of the
        plan's groups are this node's."""
        self.broker.set_clock(now)
        mine: int = self.grouping.plan_moves(queue, moves, self.broker.now_ms)
        self.start_moves(self.group_drained)
        self.broker.dispatch_touched()
        return mine

    def start_moves(self, drained: Any) -> None:
        for (queue, group), target in self.grouping.due_moves(self.broker.now_ms, drained):
            self.broker.effects.append(ReleaseBinding(queue, group, 0, target))

    def reap(self) -> None:
        """The reaper (C5, C7) and the lease refreshes for entries still queued
        towards another node (so their binding is not reaped under them)."""
        cluster = self.grouping
        now_ms = self.broker.now_ms
        queues = self.broker.queues

        drained = self.group_drained

        def has_consumers(queue: str) -> bool:
            q = queues.get(queue)
            return q is not None and q.__class__ is Queue and bool(q.consumers)

        for (queue, group), idle in cluster.reap(now_ms, drained, has_consumers):
            self.broker.effects.append(ReleaseBinding(queue, group, idle))
        self.start_moves(drained)
        if cluster.group_timeout_ms <= 0:
            return
        for name, fq in list(queues.items()):
            if not name.startswith(FORWARD_PREFIX) or fq.__class__ is not Queue:
                continue
            assert isinstance(fq, Queue)
            if not (fq.depth or fq.in_flight):
                continue
            node = name[len(FORWARD_PREFIX) :]
            seen: set[tuple[str, str]] = set()
            for m in fq.pending_messages() + fq.in_flight_messages():
                dest = m.headers.get(DESTINATION, "")
                q = queues.get(dest[len("/queue/") :])
                if q is None or q.__class__ is not Queue:
                    continue
                gid = group_of(q, m.headers)
                if gid is None:
                    continue
                key = (q.name, gid)
                if key in seen or cluster.bindings.get(key) != node:
                    continue
                seen.add(key)
                if cluster.refresh_due(key, now_ms):
                    self.broker.effects.append(TouchBinding(q.name, gid))

    def send_forwarded(
        self,
        conn_id: int,
        destination: str,
        headers: dict[str, str],
        body: bytes,
        now: float,
    ) -> bool:
        """A message another node forwarded here over the cluster link: its
        group is bound to this node. False if it was a duplicate (C4)."""
        conn = self.broker.connections.get(conn_id)
        if conn is None:
            raise NotFound(f"no connection {conn_id}")
        self.broker.set_clock(now)
        origin = headers.get(ORIGIN_NODE, "")
        try:
            origin_id = int(headers.get(ORIGIN_ID, ""))
        except ValueError:
            raise InvalidHeader(ORIGIN_ID, headers.get(ORIGIN_ID, ""), "not an integer") from None
        key = watermark_key(origin, headers.get(ORIGIN_EPOCH, ""))
        if origin_id <= self.broker.sink_batches.get(key, -1):
            self.grouping.duplicates += 1
            return False
        seq, expires, priority, persistent = parse_message_headers(headers)
        hit = self.broker.addresses.send_cache.get(destination)
        target, base = (
            hit if hit is not None else self.broker.addresses.send_target(conn, destination)
        )
        if target.__class__ is not Queue:
            raise InvalidHeader("destination", destination, "forwarding goes to queues only")
        self.broker.sink_batches[key] = origin_id
        resent = headers.pop(RESENT, None) is not None
        gid = group_of(target, headers)
        if gid is not None:
            cluster = self.grouping
            bkey = (target.name, gid)
            if bkey not in cluster.bindings and not cluster.is_pending(bkey):
                # Ask the handler, proposing this node: arms the watch on the
                # binding and, if a reaper released it under an entry that was
                # still on its way, takes it back here (docs/cluster.md)
                self.broker.effects.append(ProposeBinding(target.name, gid, cluster.node))
            cluster.learn(bkey, cluster.node)
            if cluster.moving and cluster.bindings[bkey] == cluster.node:
                cluster.last_use[bkey] = self.broker.now_ms
        conn.sent += 1
        i = self.broker.next_message_id
        self.broker.next_message_id = i + 1
        # a resent copy may have reached a consumer before this node crashed
        m = target.accept(
            i,
            base,
            headers,
            body,
            seq,
            expires,
            priority,
            persistent,
            self.broker.now_ms,
            conn_id,
            1 if resent else 0,
        )
        if m.persistent:
            # Journaled right after the message, in the same append: on disk
            # the watermark never runs ahead of the message it covers. A
            # message that is not journaled needs no journaled watermark: a
            # crash loses it here, and the origin's resend brings it back.
            self.broker.records.append(SinkBatchPublished(key, origin_id))
        self.broker.dispatch_touched()
        return True

    # --- fencing (docs/cluster.md "Partitions and fencing") -------------------
    # A node that may have lost its ZooKeeper session may have lost its
    # groups to another node (a binding moves only once the holder's session
    # is gone): it delivers none of them until it has re-checked its bindings
    # in a live session. SENDs are still accepted and stored, ungrouped
    # messages and the forward queues flow.

    def fenceable(self, q: Any) -> bool:
        """The queues whose groups are bound cluster-wide (``route``'s)."""
        return q.__class__ is Queue and q.routing == "anycast" and not q.name.startswith("$")

    def fenceable_queues(self) -> list[Queue]:
        return [q for q in self.broker.queues.values() if self.fenceable(q)]  # type: ignore[misc]

    def fence(self, now: float) -> None:
        """Stop delivering this node's groups (in-flight messages stay out)."""
        self.broker.set_clock(now)
        cluster = self.grouping
        if cluster.fenced:
            return
        cluster.fenced = True
        cluster.fences += 1
        for q in self.fenceable_queues():
            q.set_fenced(True)

    def recheck_keys(self) -> list[tuple[str, str]]:
        """The (queue, group)s whose binding must be read before unfencing:
        those cached as this node's, and those with messages here (a
        restarted node knows its groups only from its journal)."""
        me = self.grouping.node
        keys = {k for k, node in self.grouping.bindings.items() if node == me}
        for q in self.fenceable_queues():
            if q.groups.buckets < 0:  # a bucket is no group name
                keys.update((q.name, g.name) for g in q.groups.values() if g.backlog)
        return sorted(keys)

    def unfence(self, now: float, view: dict[tuple[str, str], str | None]) -> list[tuple[str, str]]:
        """Deliver again. ``view``: ZooKeeper's binding of each re-checked group
        (None: unbound), cached. A group that is no longer this node's but has
        messages here is never consumed here: its pending messages go to its
        new holder, in order, ahead of any later message of the group (C6:
        they lose order only against what the new holder consumed meanwhile).
        A group that also has messages out to a consumer here, or paged out,
        is parked instead; the parked groups are returned (``shoal groups
        resume`` delivers them here)."""
        self.broker.set_clock(now)
        cluster = self.grouping
        me = cluster.node
        parked = []
        for key, node in sorted(view.items()):
            if cluster.bindings.get(key) != node:
                self.binding_moved(key[0], key[1], node, now)  # cached, entries taken back
            if node == me:
                continue
            if self.send_stranded(key[0], key[1]):
                continue
            q = self.broker.queues.get(key[0])
            g = None if q is None or q.__class__ is not Queue else q.groups.get(key[1])
            if g is not None and (g.backlog or g.in_flight):
                park(q, key[1], record=True)  # type: ignore[arg-type]
                parked.append(key)
                self.broker.warn(
                    None,
                    f"group {key[1]!r} of queue {key[0]!r} is bound to "
                    f"{node or 'no node'} since this node was fenced; its messages "
                    "here are parked (shoal groups resume delivers them here)",
                )
        cluster.fenced = False
        for q in self.fenceable_queues():
            q.set_fenced(False)
        self.broker.dispatch_touched()
        return parked
