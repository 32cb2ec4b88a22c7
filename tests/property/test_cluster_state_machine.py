"""Clustered grouping over a simulated network: three pure cores, no I/O.

Messages between the nodes are data: a dict plays ZooKeeper (the first
proposal for a group wins), and each link is a FIFO of SEND frames; as in
``cluster/link.py``, only the last SEND of each run the origin writes asks
for a RECEIPT, which acks every entry up to it (cumulative ``client`` acks). The
machine interleaves sends on every node, decisions, link deliveries,
receipts and link drops. Invariants: a group is consumed on one node only,
in order per producer, each message once (the target drops a link's
resends), and once everything is drained nothing is lost. Node crashes are
covered by the e2e tests, not here.
"""

from __future__ import annotations

from collections import defaultdict, deque

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from shoal.broker.core import Broker
from shoal.broker.effects import Deliver, ProposeBinding, SendDecided
from shoal.broker.settings import AddressSettings
from shoal.cluster.grouping import (
    DESTINATION,
    ORIGIN_ID,
    ORIGIN_NODE,
    RESENT,
    ClusterGrouping,
    forward_queue,
)

NODES = ("n1", "n2", "n3")
GROUPS = ("a", "b", "c", "d")
T0 = 1_700_000_000.0
PRODUCER, CONSUMER, LINK_IN = 1, 2, 3  # conn ids on every node; link-out conns from 100


class Link:
    """origin -> target: the origin's forward-queue consumer and the wire."""

    def __init__(self, origin: str, target: str) -> None:
        self.origin, self.target = origin, target
        self.conn = 0  # the origin's core connection, 0 while down
        # SENDs in flight: destination, headers, body, receipt asked for (or None)
        self.wire: deque[tuple[str, dict[str, str], bytes, str | None]] = deque()
        self.receipts: deque[str] = deque()  # ack ids whose RECEIPT is on its way back


class Cluster(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.brokers: dict[str, Broker] = {}
        for node in NODES:
            b = Broker(AddressSettings(), self.now)
            b.cluster = ClusterGrouping(node, timeout_ms=10**9, epoch=1)
            for conn in (PRODUCER, CONSUMER, LINK_IN):
                b.connect(conn, self.now)
            b.subscribe(CONSUMER, "s", "/queue/q", "auto", {}, self.now)
            self.brokers[node] = b
        self.zookeeper: dict[tuple[str, str], str] = {}
        self.proposals: deque[tuple[str, ProposeBinding]] = deque()
        self.links = {(o, t): Link(o, t) for o in NODES for t in NODES if o != t}
        self._conn_ids = 100
        self.consumed: list[tuple[str, dict[str, str], bytes, bool]] = []
        self.sent: dict[tuple[str, str], int] = defaultdict(int)  # (node, group) -> count
        self.refused = 0
        for link in self.links.values():
            self._connect(link)
        self._pump()

    # --- plumbing -------------------------------------------------------------

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

    def _pump(self) -> None:
        for node, b in self.brokers.items():
            runs: dict[Link, list[tuple[str, dict[str, str], bytes, str]]] = {}
            for e in b.take_effects():
                if isinstance(e, Deliver):
                    if e.conn_id == CONSUMER:
                        self.consumed.append(
                            (node, e.message.headers, e.message.body, e.redelivered)
                        )
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
                    m = e.message
                    headers = dict(m.headers)
                    dest = headers.pop(DESTINATION)
                    headers[ORIGIN_NODE] = node
                    headers[ORIGIN_ID] = str(m.id)
                    if e.redelivered:
                        headers[RESENT] = "true"
                    runs.setdefault(link, []).append((dest, headers, m.body, e.ack_id))
                elif isinstance(e, ProposeBinding):
                    self.proposals.append((node, e))
                elif isinstance(e, SendDecided):
                    assert e.error is None
            b.take_records()
            for link, run in runs.items():  # only a run's last SEND asks for a RECEIPT
                for k, (dest, headers, body, ack_id) in enumerate(run):
                    link.wire.append((dest, headers, body, ack_id if k == len(run) - 1 else None))

    # --- rules ------------------------------------------------------------------

    @rule(node=st.sampled_from(NODES), group=st.sampled_from(GROUPS))
    def send(self, node: str, group: str) -> None:
        k = self.sent[(node, group)]
        self.sent[(node, group)] = k + 1
        self.brokers[node].send(
            PRODUCER, "/queue/q", {"JMSXGroupID": group}, f"{node}:{group}:{k}".encode(), self.now
        )
        self._pump()

    @precondition(lambda self: self.proposals)
    @rule(last=st.booleans())
    def decide(self, last: bool) -> None:
        """ZooKeeper answers one proposal (not necessarily the oldest)."""
        node, p = self.proposals.pop() if last else self.proposals.popleft()
        key = (p.queue, p.group)
        winner = self.zookeeper.setdefault(key, p.proposal)
        self.brokers[node].binding_decided(p.queue, p.group, winner, self.now)
        self._pump()

    @rule(pair=st.sampled_from([(o, t) for o in NODES for t in NODES if o != t]))
    def carry(self, pair: tuple[str, str]) -> None:
        """One SEND crosses the link; the target journals it and answers."""
        link = self.links[pair]
        if not link.wire:
            return
        dest, headers, body, receipt = link.wire.popleft()
        self.brokers[link.target].send_forwarded(LINK_IN, dest, headers, body, self.now)
        if receipt is not None:
            link.receipts.append(receipt)
        self._pump()

    @rule(pair=st.sampled_from([(o, t) for o in NODES for t in NODES if o != t]))
    def receipt(self, pair: tuple[str, str]) -> None:
        """A RECEIPT comes back: it acks every entry sent up to it."""
        link = self.links[pair]
        if link.receipts and link.conn:
            self.brokers[link.origin].ack(link.conn, link.receipts.popleft(), self.now)
            self._pump()

    @rule(pair=st.sampled_from([(o, t) for o in NODES for t in NODES if o != t]))
    def drop_link(self, pair: tuple[str, str]) -> None:
        """The TCP connection breaks: frames in flight both ways are lost,
        the origin takes back its unacked entries and reconnects."""
        link = self.links[pair]
        link.wire.clear()
        link.receipts.clear()
        self.brokers[link.origin].disconnect(link.conn, self.now)
        self._connect(link)
        self._pump()

    # --- invariants ---------------------------------------------------------

    @invariant()
    def one_node_per_group_and_order_per_producer(self) -> None:
        nodes_of: dict[str, set[str]] = defaultdict(set)
        last: dict[tuple[str, str], int] = {}
        seen: set[bytes] = set()
        for node, headers, body, redelivered in self.consumed:
            producer, group, k = body.decode().split(":")
            assert headers["JMSXGroupID"] == group
            nodes_of[group].add(node)
            assert len(nodes_of[group]) == 1, (group, nodes_of[group])
            # no node crashes in this model: a link's resends must all be
            # dropped at the target (dedup), so nothing is consumed twice
            assert body not in seen, (body, redelivered)
            seen.add(body)
            assert last.get((producer, group), -1) < int(k), (producer, group, k)
            last[(producer, group)] = int(k)

    def teardown(self) -> None:
        # drain: decide everything, carry every frame, until quiet; then nothing is lost
        for _ in range(10_000):
            if self.proposals:
                self.decide(False)
                continue
            busy = [p for p, lk in self.links.items() if lk.wire or lk.receipts]
            if not busy:
                break
            self.carry(busy[0])
            self.receipt(busy[0])
        self.one_node_per_group_and_order_per_producer()
        got = {body for _n, _h, body, _r in self.consumed}
        expected = {f"{n}:{g}:{k}".encode() for (n, g), c in self.sent.items() for k in range(c)}
        assert got == expected


TestCluster = Cluster.TestCase
TestCluster.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
