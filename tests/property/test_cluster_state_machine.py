"""Clustered grouping over a simulated network: three pure cores, no I/O.

Messages between the nodes are data. Decisions come from a dict playing
ZooKeeper (the first proposal for a group wins) or, in the ``local``
variant, from node n1's ``LocalDecisions``, journaled in n1's store and
answered only once synced (cluster/local_handler.py). Each link is a FIFO
of SEND frames; as in ``server/cluster/link.py``, only the last SEND of each run
the origin writes asks for a RECEIPT, which (sent once the target synced
it and everything before it) acks every entry up to it (cumulative
``client`` acks).

Each node keeps a MemoryStore: its core's records are appended after every
step and made durable by a ``sync`` rule. A ``crash`` rule is kill -9 and
restart: unsynced records are lost, the core is rebuilt from the store
(``Broker.restore``; n1's decisions from ``Recovered.bindings``), messages
recovered after the crash are flagged as the server flags them (ids below
its ``redelivered_below``), links to and from the node drop, and its sends held for
a decision are gone (never receipted).

Bindings move (C5, C6): with ``group-timeout`` on, a ``tick`` rule moves
the clock by group-timeout/4 and runs every node's reaper and lease
refreshes; the handler (the dict, or n1's ``LocalDecisions``) answers
touches and releases, and tells the other nodes of each release (ZooKeeper's
watches; the local node's "moved" notices, sent once synced), all through a
per-node queue of notices delivered by a rule of its own. The handler sees a
touch or a release when it is made (modelling that they reach it within
group-timeout/4, which the lease arithmetic assumes); only the answers lag.
``forget`` is a node lost (kill -9) and forgotten while it is away (its
bindings released, every node told before it is back): C6's documented limit
applies to the messages stranded on it, and only to them (see
``forget``).

Invariants: a group is consumed on one node at a time (a delivery finds no
delivery of its group in flight on another node), and a group whose binding
never moved on one node only, ever; per producer and group,
first deliveries come in send order; a message consumed again is flagged
redelivered; after draining, every receipted message (its records synced)
was consumed, and nothing consumed was never sent.
"""

from __future__ import annotations

from collections import defaultdict, deque
from typing import Any

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from shoal.broker.core import Broker
from shoal.broker.effects import Deliver, ProposeBinding, ReleaseBinding, SendDecided, TouchBinding
from shoal.broker.settings import AddressSettings
from shoal.cluster.grouping import (
    DESTINATION,
    ORIGIN_ID,
    ORIGIN_NODE,
    RESENT,
    ClusterGrouping,
    forward_queue,
)
from shoal.cluster.local_handler import LocalDecisions
from shoal.records import Recovered
from shoal.store.memory import MemoryStore

NODES = ("n1", "n2", "n3")
LOCAL = "n1"  # the local grouping handler's node in the "local" variant
CONSUMING = ("n1", "n2")  # n3 has producers only: its groups are forwarded (C2)
GROUPS = ("a", "b", "c", "d")
PAIRS = [(o, t) for o in NODES for t in NODES if o != t]
T0 = 1_700_000_000.0
PRODUCER, CONSUMER, LINK_IN = 1, 2, 3  # conn ids on every node; link-out conns from 100
GROUP_TIMEOUT_MS = 4000  # C5; the tick rule moves the clock by a quarter of it


def _event(text: str) -> None:
    """Hypothesis' statistics (``--hypothesis-show-statistics``); not in scenarios."""
    try:
        event(text)
    except InvalidArgument:
        pass


class Link:
    """origin -> target: the origin's forward-queue consumer and the wire."""

    def __init__(self, origin: str, target: str) -> None:
        self.origin, self.target = origin, target
        self.conn = 0  # the origin's core connection, 0 while down
        # SENDs in flight: destination, headers, body, receipt asked for (or None)
        self.wire: deque[tuple[str, dict[str, str], bytes, str | None]] = deque()
        # RECEIPTs on their way back: (ack id, the target's append they wait for)
        self.receipts: deque[tuple[str, int]] = deque()


class Cluster(RuleBasedStateMachine):
    handler = "zookeeper"

    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.stores = {n: MemoryStore() for n in NODES}
        self.appended = dict.fromkeys(NODES, 0)  # appends to each store, and how many synced
        self.synced = dict.fromkeys(NODES, 0)
        self.epochs = dict.fromkeys(NODES, 1)
        self.redelivered_below = dict.fromkeys(
            NODES, 0
        )  # ids below it were recovered after a crash
        self.brokers: dict[str, Broker] = {}
        self.zookeeper: dict[tuple[str, str], str] = {}
        self.local = LocalDecisions()
        self.proposals: deque[tuple[str, ProposeBinding]] = deque()
        self.links = {(o, t): Link(o, t) for o, t in PAIRS}
        self._conn_ids = 100
        self.consumed: list[tuple[str, dict[str, str], bytes, bool]] = []
        self.sent: dict[tuple[str, str], int] = defaultdict(int)  # (node, group) -> count
        self.sent_bodies: set[bytes] = set()
        self.holds: dict[tuple[str, int], bytes] = {}  # (node, hold id) -> body
        self.unsynced: dict[str, list[bytes]] = {n: [] for n in NODES}  # routed, not durable
        self.receipted: set[bytes] = set()
        # the consumer's (ack id, group), per node: its deliveries in flight
        self.unacked: dict[str, deque[tuple[str, str, bytes]]] = {}
        self.released_groups: set[str] = set()  # a binding of theirs moved once
        self.crashes = 0
        self.consuming = set(CONSUMING)  # nodes whose consumer is subscribed (C7)
        # strays: messages that reached a node the handler no longer names for
        # their group (docs/cluster.md, "A forward for a group the target no
        # longer holds"); allowed only as documented: on their way during a
        # C7 release (no lease), or queued by a node that crashed since
        self.c7_groups: set[str] = set()
        self.orphaned: set[bytes] = set()
        self.strays: set[bytes] = set()
        # bindings that move: ZooKeeper's mtime per binding (last use cluster-wide)
        self.zk_used: dict[tuple[str, str], int] = {}
        # per node: the handler's answers and release notices, in order:
        # (kind, queue, group, node, n1's append they wait for in the local variant)
        self.notices: dict[str, deque[tuple[str, str, str, Any, int]]] = {n: deque() for n in NODES}
        # the local handler's answers waiting for its sync: (n1's append, queue, group);
        # each counts as a use of the binding when it goes out (LocalDecisions.answered)
        self.answers_out: deque[tuple[int, str, str]] = deque()
        # C6's limit: group -> forgotten nodes whose stranded messages may
        # break C1 and order for that group; the stranded messages themselves
        self.exempt: dict[str, set[str]] = defaultdict(set)
        self.stranded: set[bytes] = set()
        # per node: its reaper's releases waiting for its sync (effect, append)
        self.releases: dict[str, list[tuple[ReleaseBinding, int]]] = {n: [] for n in NODES}
        for node in NODES:
            self.stores[node].open()
            self._boot(node, None)
        for link in self.links.values():
            self._connect(link)
        self._pump()
        for node in NODES:
            self.sync(node)

    # --- plumbing -------------------------------------------------------------

    def _boot(self, node: str, recovered: Recovered | None) -> None:
        b = Broker(AddressSettings(), self.now)
        b.cluster = ClusterGrouping(
            node,
            timeout_ms=10**9,
            epoch=self.epochs[node],
            group_timeout_ms=GROUP_TIMEOUT_MS,
            reaper_period_ms=GROUP_TIMEOUT_MS // 4,
            consumerless_ms=GROUP_TIMEOUT_MS // 2,
        )
        if recovered is not None:
            b.restore(recovered, self.now)
            if self.handler == "local" and node == LOCAL:
                self.local = LocalDecisions(recovered.bindings, self.now_ms)
                b.cluster.bindings.update(recovered.bindings)
        b.cluster.set_members({n: frozenset({"q"}) for n in self.consuming})
        for conn in (PRODUCER, CONSUMER, LINK_IN):
            b.connect(conn, self.now)
        if node in self.consuming:
            # acks are a rule of their own: a message may be delivered, its
            # ack not yet synced, when the node crashes
            b.subscribe(
                CONSUMER, "s", "/queue/q", "client-individual", {"prefetch-count": "2"}, self.now
            )
        self.brokers[node] = b
        self.unacked[node] = deque()

    def _connect(self, link: Link) -> None:
        self._conn_ids += 1
        link.conn = self._conn_ids
        b = self.brokers[link.origin]
        b.connect(link.conn, self.now)
        b.ensure_forward_queue(link.target)
        b.subscribe(
            link.conn,
            "fwd",
            "/queue/" + forward_queue(link.target),
            "client",
            {"prefetch-count": "3"},
            self.now,
        )

    def _append(self, node: str, records: list[Any]) -> None:
        if records:
            self.stores[node].append(records)
            self.appended[node] += 1

    def _pump(self) -> None:
        for node, b in self.brokers.items():
            redelivered_below = self.redelivered_below[node]
            runs: dict[Link, list[tuple[str, dict[str, str], bytes, str]]] = {}
            for e in b.take_effects():
                if isinstance(e, Deliver):
                    m = e.message
                    suspect = e.redelivered or m.id < redelivered_below  # as server/app.py flags
                    if e.conn_id == CONSUMER:
                        group = m.headers["JMSXGroupID"]
                        self._one_holder(node, group, m.body)
                        self.consumed.append((node, m.headers, m.body, suspect))
                        self.unacked[node].append((e.ack_id, group, m.body))
                        continue
                    link = next(
                        (
                            lk
                            for lk in self.links.values()
                            if lk.origin == node and lk.conn == e.conn_id
                        ),
                        None,
                    )
                    if link is None:
                        continue  # a delivery to a link connection already dropped
                    headers = dict(m.headers)
                    dest = headers.pop(DESTINATION)
                    headers[ORIGIN_NODE] = node
                    headers[ORIGIN_ID] = str(m.id)
                    if suspect:  # as LinkClient.forward
                        headers[RESENT] = "true"
                    runs.setdefault(link, []).append((dest, headers, m.body, e.ack_id))
                elif isinstance(e, ProposeBinding):
                    self.proposals.append((node, e))
                elif isinstance(e, TouchBinding):
                    self._touch(node, e.queue, e.group)
                elif isinstance(e, ReleaseBinding):
                    # ClusterNode releases once what drained the group is synced
                    self._append(node, b.take_records())
                    self.releases[node].append((e, self.appended[node]))
                elif isinstance(e, SendDecided):
                    assert e.error is None
                    self.unsynced[node].append(self.holds.pop((node, e.hold_id)))
            self._append(node, b.take_records())
            for link, run in runs.items():  # only a run's last SEND asks for a RECEIPT
                for k, (dest, headers, body, ack_id) in enumerate(run):
                    link.wire.append((dest, headers, body, ack_id if k == len(run) - 1 else None))

    def _one_holder(self, node: str, group: str, body: bytes) -> None:
        """C1 at the moment of a delivery: no other node has a delivery of the
        group in flight (a move waits until the group is drained, C5-C7),
        but for C6's limit (a forgotten node's stranded messages) and strays."""
        if body in self.strays:
            return
        for other in NODES:
            if other == node or {node, other} & self.exempt[group]:
                continue
            busy = [b for _a, g, b in self.unacked[other] if g == group and b not in self.strays]
            assert not busy, (group, node, other, busy)

    @property
    def now_ms(self) -> int:
        return int(self.now * 1000)

    def _touch(self, node: str, queue: str, group: str) -> None:
        key = (queue, group)
        if self.handler == "zookeeper":
            bound = self.zookeeper.get(key, "")
            if bound:
                self.zk_used[key] = self.now_ms
            self.notices[node].append(("touched", queue, group, bound, 0))
            return
        bound = self.local.touch(queue, group, self.now_ms)
        self.notices[node].append(("touched", queue, group, bound, self.appended[LOCAL]))
        self.answers_out.append((self.appended[LOCAL], queue, group))

    def _release_binding(self, holder: str, queue: str, group: str, idle_ms: int) -> None:
        key = (queue, group)
        if self.handler == "zookeeper":
            released, gone = True, False
            if self.zookeeper.get(key) == holder:
                if self.now_ms - self.zk_used.get(key, self.now_ms) < idle_ms:
                    released = False
                else:
                    del self.zookeeper[key]
                    gone = True
            self.notices[holder].append(("released", queue, group, released, 0))
        else:
            released, record = self.local.release_idle(queue, group, holder, idle_ms, self.now_ms)
            self._append(LOCAL, [record] if record is not None else [])
            gone = record is not None
            self.notices[holder].append(("released", queue, group, released, self.appended[LOCAL]))
        if gone:
            _event("a reaper released a binding" if idle_ms else "C7 released a binding")
            if not idle_ms:
                self.c7_groups.add(group)
            self.released_groups.add(group)
            self._tell_others(holder, queue, group)

    def _tell_others(self, old: str, queue: str, group: str) -> None:
        needs = 0 if self.handler == "zookeeper" else self.appended[LOCAL]
        for other in NODES:
            if other != old:
                self.notices[other].append(("moved", queue, group, old, needs))

    def _apply_notice(self, node: str, notice: tuple[str, str, str, Any, int]) -> None:
        """As ClusterNode does with an answer or notice of its handler."""
        kind, queue, group, value, _needs = notice
        b = self.brokers[node]
        cached = b.cluster.bindings.get((queue, group))
        if kind == "decided":
            b.binding_decided(queue, group, value, self.now)
        elif kind == "touched":
            if value and value == cached:
                b.binding_decided(queue, group, value, self.now)
            else:
                b.binding_moved(queue, group, value or None, self.now)
        elif kind == "released":
            b.binding_released(queue, group, value, self.now)
        elif cached == value:  # moved: a release of ``value``'s binding
            b.binding_moved(queue, group, None, self.now)
        self._pump()

    # --- rules ------------------------------------------------------------------

    @rule(node=st.sampled_from(NODES), group=st.sampled_from(GROUPS))
    def send(self, node: str, group: str) -> None:
        k = self.sent[(node, group)]
        self.sent[(node, group)] = k + 1
        body = f"{node}:{group}:{k}".encode()
        self.sent_bodies.add(body)
        headers = {"JMSXGroupID": group, "persistent": "true"}
        hold = self.brokers[node].send(PRODUCER, "/queue/q", headers, body, self.now)
        if hold is None:
            self.unsynced[node].append(body)
        else:
            self.holds[(node, hold)] = body
        self._pump()

    @precondition(lambda self: self.proposals)
    @rule(last=st.booleans())
    def decide(self, last: bool) -> None:
        """The handler takes one proposal (not necessarily the oldest)."""
        node, p = self.proposals.pop() if last else self.proposals.popleft()
        if self.handler == "zookeeper":
            key = (p.queue, p.group)
            if key not in self.zookeeper:
                self.zk_used[key] = self.now_ms  # created
            winner = self.zookeeper.setdefault(key, p.proposal)
            if winner != node:  # ClusterNode touches another node's binding it learns
                self.zk_used[key] = self.now_ms
            self.brokers[node].binding_decided(p.queue, p.group, winner, self.now)
            self._pump()
            return
        winner, record = self.local.decide(p.queue, p.group, p.proposal, self.now_ms)
        if record is not None:
            self._append(LOCAL, [record])
        # answered once synced, on the asking node's connection, in order
        self.notices[node].append(("decided", p.queue, p.group, winner, self.appended[LOCAL]))
        self.answers_out.append((self.appended[LOCAL], p.queue, p.group))

    @rule(node=st.sampled_from(NODES))
    def notify(self, node: str) -> None:
        """The node hears its handler's oldest answer or notice (the local
        node's go out once synced, in order, on the node's one connection)."""
        queue = self.notices[node]
        if queue and queue[0][4] <= self.synced[LOCAL]:
            self._apply_notice(node, queue.popleft())

    @rule()
    def handler_round(self) -> None:
        """The handler catches up: n1 syncs (local variant) and every node
        hears everything it has been told so far; the walk moves on faster."""
        if self.handler == "local":
            self.sync(LOCAL)
        for node in NODES:
            while self.notices[node] and self.notices[node][0][4] <= self.synced[LOCAL]:
                self.notify(node)

    @rule(quarters=st.integers(1, 6))
    def tick(self, quarters: int) -> None:
        """Time passes, group-timeout/4 at a time: at each step every node's
        reaper and lease refreshes run."""
        for _ in range(quarters):
            self.now += GROUP_TIMEOUT_MS / 4000
            for b in self.brokers.values():
                b.tick(self.now)
            self._pump()

    @rule(pair=st.sampled_from(PAIRS))
    def carry(self, pair: tuple[str, str]) -> None:
        """One SEND crosses the link; the target journals it and answers once synced."""
        link = self.links[pair]
        if not link.wire:
            return
        dest, headers, body, receipt = link.wire.popleft()
        key = ("q", headers["JMSXGroupID"])
        holder = (
            self.zookeeper.get(key) if self.handler == "zookeeper" else self.local.bindings.get(key)
        )
        documented = key[1] in self.c7_groups or body in self.orphaned
        if holder not in (None, link.target):
            assert documented, (body, holder, link.target)
            _event("a stray forward")
            self.strays.add(body)
        elif holder is None and documented:
            # the target asks for the group, proposing itself, and may lose
            # to another node's proposal: a stray as well (docs/cluster.md)
            self.strays.add(body)
        self.brokers[link.target].send_forwarded(LINK_IN, dest, headers, body, self.now)
        self._pump()
        if receipt is not None:
            link.receipts.append((receipt, self.appended[link.target]))

    @rule(pair=st.sampled_from(PAIRS))
    def receipt(self, pair: tuple[str, str]) -> None:
        """A RECEIPT comes back: it acks every entry sent up to it."""
        link = self.links[pair]
        if link.receipts and link.conn and link.receipts[0][1] <= self.synced[link.target]:
            self.brokers[link.origin].ack(link.conn, link.receipts.popleft()[0], self.now)
            self._pump()

    @rule(node=st.sampled_from(NODES))
    def ack(self, node: str) -> None:
        """The node's consumer acks its oldest unacked message."""
        if self.unacked[node]:
            self.brokers[node].ack(CONSUMER, self.unacked[node].popleft()[0], self.now)
            self._pump()

    @rule(node=st.sampled_from(NODES))
    def sync(self, node: str) -> None:
        """The node's fsync: what it appended is durable; those SENDs get their RECEIPT."""
        self.stores[node].sync()
        self.synced[node] = self.appended[node]
        self.receipted.update(self.unsynced[node])
        self.unsynced[node].clear()
        while self.answers_out and self.answers_out[0][0] <= self.synced[LOCAL]:
            _needs, queue, group = self.answers_out.popleft()
            self.local.answered(queue, group, self.now_ms)
        releases, self.releases[node] = self.releases[node], []
        for e, _needs in releases:
            self._release_binding(node, e.queue, e.group, e.idle_ms)

    @rule(pair=st.sampled_from(PAIRS))
    def drop_link(self, pair: tuple[str, str]) -> None:
        """The TCP connection breaks: frames in flight both ways are lost,
        the origin takes back its unacked entries and reconnects."""
        link = self.links[pair]
        link.wire.clear()
        link.receipts.clear()
        self.brokers[link.origin].disconnect(link.conn, self.now)
        self._connect(link)
        self._pump()

    @rule(node=st.sampled_from(NODES))
    def crash(self, node: str) -> None:
        """kill -9 and restart: the core comes back from what its store synced."""
        self._crash(node)

    def _crash(self, node: str, while_down: Any = None) -> None:
        """``while_down()`` runs after the links to and from the node dropped,
        before they reconnect."""
        self.crashes += 1
        store = self.stores[node]
        store.crash()
        recovered = store.open()
        self.appended[node] = self.synced[node]
        self.unsynced[node].clear()  # never receipted
        self.holds = {k: v for k, v in self.holds.items() if k[0] != node}
        self.notices[node].clear()  # its connection to the handler died with it
        self.releases[node].clear()  # never asked
        if self.handler == "local" and node == LOCAL:
            # answers and notices not yet on disk never went out; the holders
            # ask again for the releases still out when their link is back
            for other in NODES:
                kept = [n for n in self.notices[other] if n[4] <= self.synced[LOCAL]]
                self.notices[other] = deque(kept)
            # the remote nodes ask again what they still wait for once their
            # link is back up
            for other, b in self.brokers.items():
                for (queue, group), p in b.cluster.pending.items():
                    if other != LOCAL:
                        self.proposals.append((other, ProposeBinding(queue, group, p.proposal)))
            self.local = LocalDecisions(recovered.bindings, self.now_ms)
            self.answers_out.clear()  # never went out
            for other, b in self.brokers.items():
                answered = {(n[1], n[2]) for n in self.notices[other] if n[0] == "released"}
                for queue, group in b.cluster.releasing - answered:
                    if other != LOCAL:
                        self._release_binding(other, queue, group, GROUP_TIMEOUT_MS)
        self.epochs[node] += 1
        live = sum(len(m) for m in recovered.messages.values())
        self.redelivered_below[node] = recovered.next_message_id if live else 0
        self._boot(node, recovered)
        for name, fq in self.brokers[node].queues.items():
            if name.startswith("$cluster.forward."):  # queued, its binding no longer cached
                self.orphaned.update(m.body for m in fq.pending_messages())
        touching = [lk for lk in self.links.values() if node in (lk.origin, lk.target)]
        for link in touching:
            link.wire.clear()
            link.receipts.clear()
            if link.origin != node:  # its old connection died with the old core
                self.brokers[link.origin].disconnect(link.conn, self.now)
        self._pump()
        if while_down is not None:
            while_down()
        for link in touching:
            self._connect(link)
        self._pump()

    @rule(node=st.sampled_from(CONSUMING))
    def consumer(self, node: str) -> None:
        """The node's consumer leaves (its unacked messages return) or comes
        back; membership tells every node at once (C7)."""
        b = self.brokers[node]
        if node in self.consuming:
            self.consuming.discard(node)
            b.unsubscribe(CONSUMER, "s", self.now)
            self.unacked[node].clear()
        else:
            self.consuming.add(node)
            b.subscribe(
                CONSUMER, "s", "/queue/q", "client-individual", {"prefetch-count": "2"}, self.now
            )
        for other in self.brokers.values():
            other.cluster.set_members({n: frozenset({"q"}) for n in self.consuming})
        self._pump()

    @rule(node=st.sampled_from(NODES))
    def forget(self, node: str) -> None:
        """C6: the node is lost (kill -9) and ``shoal cluster forget`` releases
        its bindings while it is away: every other node hears of it before it
        is back (it is out of membership for the ZooKeeper session timeout,
        far longer than a watch takes). What it journaled of a group it held
        is stranded there: served when it is back, possibly while the group
        is served elsewhere, which is the one place C6 allows a group on two
        nodes and out of order (docs/cluster.md). The local node is never
        forgotten (forget runs on it)."""
        if self.handler == "local" and node == LOCAL:
            return
        self._crash(node, lambda: self._forget(node))

    def _forget(self, node: str) -> None:
        b = self.brokers[node]
        q = b.queues.get("q")
        for m in [] if q is None else q.pending_messages() + q.in_flight_messages():
            group = m.headers["JMSXGroupID"]
            self.exempt[group].add(node)
            self.stranded.add(m.body)
        if self.handler == "zookeeper":
            gone = [k for k, n in self.zookeeper.items() if n == node]
            for key in gone:
                del self.zookeeper[key]
        else:
            records = self.local.forget(node)
            self._append(LOCAL, list(records))
            self.sync(LOCAL)
            gone = [(r.queue, r.group) for r in records]
        self.released_groups.update(g for _q, g in gone)
        if gone:
            _event("forget released a binding")
        for other in NODES:
            if other == node:
                continue
            while self.notices[other] and self.notices[other][0][4] <= self.synced[LOCAL]:
                self.notify(other)  # what the handler said before goes first
            for queue, group in gone:
                self._apply_notice(other, ("moved", queue, group, node, 0))

    # --- invariants ---------------------------------------------------------

    @invariant()
    def one_node_per_group_and_order_per_producer(self) -> None:
        nodes_of: dict[str, set[str]] = defaultdict(set)
        last: dict[tuple[str, str], int] = {}
        seen: set[bytes] = set()
        for node, headers, body, flagged in self.consumed:
            producer, group, k = body.decode().split(":")
            assert headers["JMSXGroupID"] == group
            nodes_of[group].add(node)
            if group not in self.released_groups:  # never moved: one node, ever
                assert len(nodes_of[group]) == 1, (group, nodes_of[group])
            if body in seen:  # only a crash may repeat a message, and it says so
                assert flagged, body
                continue
            seen.add(body)
            if body in self.stranded or body in self.strays:
                continue
            assert last.get((producer, group), -1) < int(k), (producer, group, k)
            last[(producer, group)] = int(k)

    def teardown(self) -> None:
        # drain: decide, answer, carry and sync everything until quiet
        # consumers everywhere: a group whose messages wait on a node without
        # one stays there (C7 moves only drained groups, docs/cluster.md)
        for node in sorted(set(NODES) - self.consuming):
            self.consumer(node)
        for _ in range(10_000):
            for node in NODES:
                self.sync(node)
            if self.proposals:
                self.decide(False)
                continue
            waiting = [n for n in NODES if self.notices[n]]
            if waiting:
                self.notify(waiting[0])
                continue
            acking = [n for n in NODES if self.unacked[n]]
            if acking:
                self.ack(acking[0])
                continue
            busy = [p for p, lk in self.links.items() if lk.wire or lk.receipts]
            if not busy:
                break
            self.carry(busy[0])
            self.sync(busy[0][1])
            self.receipt(busy[0])
        self.one_node_per_group_and_order_per_producer()
        assert not self.holds and not any(self.unsynced.values())
        got = {body for _n, _h, body, _r in self.consumed}
        assert self.receipted <= got, sorted(self.receipted - got)  # nothing receipted lost
        assert got <= self.sent_bodies
        if not self.crashes:
            assert got == self.sent_bodies


class LocalHandlerCluster(Cluster):
    handler = "local"


TestCluster = Cluster.TestCase
TestLocalHandlerCluster = LocalHandlerCluster.TestCase
TestCluster.settings = settings(max_examples=150, stateful_step_count=50, deadline=None)
TestLocalHandlerCluster.settings = TestCluster.settings


# Crash paths too deep for the random walk to find often, played as scenarios.


def test_an_origin_that_crashed_forwards_reused_ids_under_a_new_epoch():
    c = Cluster()
    c.send("n3", "a")
    c.decide(False)
    target = c.zookeeper[("q", "a")]
    c.carry(("n3", target))
    c.sync(target)  # the target's watermark is on disk, the origin's entry is not
    c.crash("n3")
    c.send("n3", "a")  # the next message takes the same id on n3
    c.decide(False)
    c.sync("n3")
    c.teardown()
    assert b"n3:a:1" in {body for _n, _h, body, _f in c.consumed}


def test_a_target_that_crashed_before_its_sync_delivers_the_resend_flagged():
    c = Cluster()
    c.send("n3", "a")
    c.decide(False)
    target = c.zookeeper[("q", "a")]
    c.sync("n3")
    c.carry(("n3", target))  # consumed on the target, not synced there
    c.crash(target)
    c.teardown()
    assert [(b, f) for _n, _h, b, f in c.consumed] == [(b"n3:a:0", False), (b"n3:a:0", True)]


def test_a_decision_the_local_node_never_synced_is_asked_again_and_binds_once():
    c = LocalHandlerCluster()
    c.send("n3", "a")  # proposes n1 or n2
    c.decide(False)  # n1 decides, journals, has not synced: no answer yet
    c.crash("n1")  # the decision is lost with it; n3 asks again
    c.send("n2", "a")  # n2 proposes itself
    c.decide(True)  # n2's proposal comes first this time
    c.teardown()
    assert {n for n, _h, _b, _f in c.consumed} == {"n2"}
    assert c.local.bindings == {("q", "a"): "n2"}


def test_an_entry_taken_back_is_not_sent_to_its_old_node_while_its_decision_is_out():
    c = Cluster()
    c.send("n3", "a")
    c.decide(False)
    old = c.zookeeper[("q", "a")]
    c.sync("n3")
    c.forget(old)  # n3 takes its entry back and asks again; its link to old is back up
    assert not c.links[("n3", old)].wire  # it stays here until decided
    c.send("n3", "a")
    c.decide(False)
    c.teardown()
    new = c.zookeeper[("q", "a")]
    assert new != old
    assert [(n, b) for n, _h, b, _f in c.consumed] == [(new, b"n3:a:0"), (new, b"n3:a:1")]


def test_an_entry_its_lost_node_had_is_taken_back_and_delivered_flagged():
    c = Cluster()
    c.send("n3", "a")
    c.decide(False)
    old = c.zookeeper[("q", "a")]
    c.sync("n3")
    c.carry(("n3", old))  # consumed there, not synced, no RECEIPT yet
    c.forget(old)  # lost with it; n3's link returns the entry, which is taken back
    c.teardown()
    new = c.zookeeper[("q", "a")]
    assert [(n, b, f) for n, _h, b, f in c.consumed] == [
        (old, b"n3:a:0", False),
        (new, b"n3:a:0", True),
    ]


def test_a_reaper_releases_only_once_the_acks_that_drained_the_group_are_synced():
    c = Cluster()
    c.send("n1", "a")  # n1 has a consumer: bound to n1
    c.decide(False)
    c.sync("n1")
    c.send("n2", "a")  # n2 asks too (its proposal waits)
    c.ack("n1")  # drained on n1, the ack not synced yet
    c.consumer("n2")
    c.tick(4)  # unused for group-timeout: the reaper wants it released
    assert c.zookeeper == {("q", "a"): "n1"}  # not before the ack is on disk
    c.crash("n1")  # the ack is lost: n1:a:0 comes back on n1, still its holder
    c.decide(False)
    assert c.zookeeper == {("q", "a"): "n1"}
    c.consumer("n2")
    c.teardown()
    assert {n for n, _h, _b, _f in c.consumed} == {"n1"}


def test_a_message_on_its_way_during_a_c7_move_is_the_documented_stray():
    c = Cluster()
    c.send("n3", "a")
    c.decide(False)
    old = c.zookeeper[("q", "a")]
    c.carry(("n3", old))
    c.ack(old)
    c.consumer(old)  # the holder's consumer leaves; the group is drained there
    c.tick(3)  # consumerless for consumerless-rebind-after: C7 wants it moved
    c.sync(old)  # released once the ack is on disk
    assert ("q", "a") not in c.zookeeper
    while c.notices["n3"][0][0] == "touched":
        c.notify("n3")  # its lease refreshes came back (C7 needs no lease to move)
    c.send("n3", "a")  # n3 has not heard of the move yet: it forwards to the old holder
    new = next(n for n in CONSUMING if n != old)
    c.send(new, "a")  # meanwhile the group is bound afresh, to the node with a consumer
    c.decide(True)
    assert c.zookeeper == {("q", "a"): new}
    c.carry(("n3", old))  # arrives after the release: a stray (docs/cluster.md)
    assert b"n3:a:1" in c.strays
    c.teardown()
    assert sorted((n, b) for n, _h, b, _f in c.consumed) == sorted(
        [(old, b"n3:a:0"), (new, f"{new}:a:0".encode()), (old, b"n3:a:1")]
    )


def test_a_binding_learnt_from_a_forward_does_not_overtake_held_messages():
    c = Cluster()
    c.send("n3", "a")
    c.decide(False)
    assert c.zookeeper == {("q", "a"): "n2"}
    c.send("n2", "a")  # n2 has not cached it: held, asked
    c.carry(("n3", "n2"))  # n2 learns the binding from n3's forward
    c.send("n2", "a")  # must wait behind n2:a:0
    c.teardown()
    assert [b for n, _h, b, _f in c.consumed if b.startswith(b"n2")] == [b"n2:a:0", b"n2:a:1"]


def test_an_answer_waiting_a_whole_group_timeout_for_its_sync_keeps_the_binding():
    """Found by the random walk: n1 answered n2 "bound to n1" but had not synced
    for a group-timeout; its reaper then released the binding, and n2, hearing
    the answer only afterwards, forwarded to n1 a message it no longer held."""
    c = LocalHandlerCluster()
    c.send("n1", "a")
    c.decide(False)
    c.handler_round()
    c.ack("n1")
    c.send("n2", "a")  # held on n2, asked
    c.decide(False)  # n1 answers "n1" once synced
    c.tick(4)  # one whole group-timeout: n1's reaper asks to release
    c.send("n3", "a")
    c.teardown()
    assert c.local.bindings == {("q", "a"): "n1"}  # the answer going out was a use
    assert {n for n, _h, _b, _f in c.consumed} == {"n1"}
    assert not c.strays
