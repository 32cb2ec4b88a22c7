"""Clustered grouping in the pure core: holds, decisions, forwarding, dedup (no I/O)."""

from __future__ import annotations

import pytest

from shoal.broker.core import Broker
from shoal.broker.effects import Deliver, ProposeBinding, SendDecided
from shoal.broker.settings import AddressSettings
from shoal.cluster.grouping import (
    DESTINATION,
    ORIGIN_EPOCH,
    ORIGIN_ID,
    ORIGIN_NODE,
    RESENT,
    ClusterGrouping,
)
from shoal.errors import InvalidHeader
from shoal.records import SinkBatchPublished

T0 = 1_700_000_000.0


class Node:
    def __init__(self, node: str = "n1", timeout_ms: int = 5000) -> None:
        self.now = T0
        self.b = Broker(AddressSettings(), self.now)
        self.b.cluster = ClusterGrouping(node, timeout_ms)
        self.b.connect(1, self.now)
        self.effects: list = []

    def send(
        self,
        body: str,
        group: str | None = "g",
        dest: str = "/queue/q",
        conn: int = 1,
        **headers: str,
    ) -> int | None:
        h = dict(headers)
        if group is not None:
            h["JMSXGroupID"] = group
        hold = self.b.send(conn, dest, h, body.encode(), self.now)
        self.effects += self.b.take_effects()
        return hold

    def take(self, kind: type) -> list:
        out = [e for e in self.effects if isinstance(e, kind)]
        self.effects = [e for e in self.effects if not isinstance(e, kind)]
        return out

    def decide(self, group: str, node: str, queue: str = "q") -> None:
        self.b.binding_decided(queue, group, node, self.now)
        self.effects += self.b.take_effects()

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.b.tick(self.now)
        self.effects += self.b.take_effects()

    def depth(self, queue: str) -> int:
        q = self.b.queues.get(queue)
        return 0 if q is None else q.depth


def test_first_message_of_a_group_is_held_until_decided_then_routed_in_order():
    n = Node()
    h1 = n.send("a")
    h2 = n.send("b")
    assert h1 is not None and h2 is not None and h1 != h2
    [propose] = n.take(ProposeBinding)  # one proposal for the group, not one per message
    assert (propose.queue, propose.group, propose.proposal) == ("q", "g", "n1")
    assert n.depth("q") == 0
    n.decide("g", "n1")
    assert [(d.hold_id, d.error) for d in n.take(SendDecided)] == [(h1, None), (h2, None)]
    assert n.depth("q") == 2
    assert n.send("c") is None  # bound now: routed at once, no new proposal
    assert n.take(ProposeBinding) == [] and n.depth("q") == 3
    n.b.subscribe(1, "s", "/queue/q", "auto", {}, n.now)
    bodies = [e.message.body for e in n.b.take_effects() if isinstance(e, Deliver)]
    assert bodies == [b"a", b"b", b"c"]


def test_group_bound_elsewhere_goes_to_that_nodes_forward_queue_with_its_destination():
    n = Node()
    n.send("a", persistent="true")
    n.decide("g", "n2")
    n.take(SendDecided)
    n.send("b")
    assert n.depth("q") == 0
    assert n.depth("$cluster.forward.n2") == 2
    n.b.subscribe(1, "link", "/queue/$cluster.forward.n2", "client-individual", {}, n.now)
    msgs = [e.message for e in n.b.take_effects() if isinstance(e, Deliver)]
    assert [m.body for m in msgs] == [b"a", b"b"]
    assert all(m.headers[DESTINATION] == "/queue/q" for m in msgs)
    assert msgs[0].persistent and not msgs[1].persistent
    assert n.b.cluster.forwarded == 2


def test_no_decision_in_time_refuses_every_held_send_naming_group_and_timeout():
    n = Node(timeout_ms=2000)
    h1 = n.send("a", group="new")
    n.send("x", group="bound-later")
    n.take(ProposeBinding)
    n.decide("bound-later", "n1")  # another group bound meanwhile keeps flowing
    n.advance(1.0)
    assert [d.error for d in n.take(SendDecided)] == [None]
    n.advance(1.5)
    [refused] = n.take(SendDecided)
    assert refused.hold_id == h1
    assert "'new'" in refused.error and "2000 ms" in refused.error
    assert n.depth("q") == 1  # only the bound group's message: never routed ungrouped
    assert n.send("y", group="bound-later") is None and n.depth("q") == 2
    # a late answer for the refused group still caches its binding
    n.decide("new", "n1")
    assert n.take(SendDecided) == []
    assert n.send("b", group="new") is None and n.depth("q") == 3


def test_next_deadline_includes_pending_decisions():
    n = Node(timeout_ms=3000)
    assert n.b.next_deadline() is None
    n.send("a")
    assert n.b.next_deadline() == pytest.approx(T0 + 3.0)


def test_ungrouped_messages_stay_local_without_a_decision():
    n = Node()
    assert n.send("u", group=None) is None
    assert n.take(ProposeBinding) == [] and n.depth("q") == 1


def test_proposal_prefers_own_consumers_then_round_robin_over_nodes_with_consumers():
    g = ClusterGrouping("n1", 5000)
    assert g.propose("q", local_has_consumers=True) == "n1"
    assert g.propose("q", local_has_consumers=False) == "n1"  # nobody has consumers: own
    g.set_members({"n1": frozenset(), "n2": frozenset({"q"}), "n3": frozenset({"q", "r"})})
    picks = {g.propose("q", local_has_consumers=False) for _ in range(4)}
    assert picks == {"n2", "n3"}
    assert g.propose("r", local_has_consumers=False) == "n3"
    assert g.propose("q", local_has_consumers=True) == "n1"


def test_forwarded_message_is_routed_locally_once_per_origin_id():
    n = Node("n2")
    h = {"JMSXGroupID": "g", ORIGIN_NODE: "n1", ORIGIN_EPOCH: "1", ORIGIN_ID: "7"}
    assert n.b.send_forwarded(1, "/queue/q", dict(h), b"a", n.now) is True
    assert n.b.send_forwarded(1, "/queue/q", dict(h), b"a", n.now) is False  # resent: dropped
    assert n.b.send_forwarded(1, "/queue/q", {**h, ORIGIN_NODE: "n3"}, b"c", n.now) is True
    assert n.depth("q") == 2
    assert n.b.cluster.route_of("q", "g") == "n2"  # learnt: its own messages stay here
    assert n.send("b") is None and n.depth("q") == 3
    with pytest.raises(InvalidHeader, match=ORIGIN_ID):
        n.b.send_forwarded(1, "/queue/q", {**h, ORIGIN_ID: "x"}, b"a", n.now)


def test_dedup_watermark_is_journaled_with_the_message_and_survives_a_restart(tmp_path):
    from shoal.store.journal import JournalStore

    def boot():
        store = JournalStore(tmp_path / "journal")
        n = Node("n2")
        n.b.restore(store.open(), n.now)
        return n, store

    n, store = boot()
    h = {"JMSXGroupID": "g", ORIGIN_NODE: "n1", ORIGIN_EPOCH: "100", "persistent": "true"}
    assert n.b.send_forwarded(1, "/queue/q", {**h, ORIGIN_ID: "4"}, b"a", n.now) is True
    records = n.b.take_records()
    assert any(isinstance(r, SinkBatchPublished) for r in records)
    store.append(records)
    store.sync()
    store.close()
    n, store = boot()  # a crash before the RECEIPT reached n1: n1 sends 4 again
    assert n.b.send_forwarded(1, "/queue/q", {**h, ORIGIN_ID: "4"}, b"a", n.now) is False
    assert n.b.send_forwarded(1, "/queue/q", {**h, ORIGIN_ID: "5"}, b"b", n.now) is True
    # a new incarnation of n1 starts its ids again: not mistaken for duplicates
    assert (
        n.b.send_forwarded(1, "/queue/q", {**h, ORIGIN_EPOCH: "200", ORIGIN_ID: "1"}, b"c", n.now)
        is True
    )
    store.close()


def test_forward_queue_resends_unacked_entries_in_id_order_after_a_link_drop():
    n = Node()
    for i in range(3):
        n.send(f"x{i}", group=f"g{i}")
        n.decide(f"g{i}", "n2")
    n.b.connect(9, n.now)
    n.b.subscribe(
        9,
        "link",
        "/queue/$cluster.forward.n2",
        "client-individual",
        {"prefetch-count": "10"},
        n.now,
    )
    first = [e for e in n.b.take_effects() if isinstance(e, Deliver)]
    assert all(e.message.headers[ORIGIN_EPOCH] == n.b.cluster.epoch for e in first)
    n.b.ack(9, first[1].ack_id, n.now)  # the middle one got its RECEIPT
    n.b.disconnect(9, n.now)
    n.send("x3", group="g0")
    n.b.take_effects()
    n.b.connect(10, n.now)
    n.b.subscribe(
        10,
        "link",
        "/queue/$cluster.forward.n2",
        "client-individual",
        {"prefetch-count": "10"},
        n.now,
    )
    again = [e.message for e in n.b.take_effects() if isinstance(e, Deliver) and e.conn_id == 10]
    assert [m.body for m in again] == [b"x0", b"x2", b"x3"]
    ids = [m.id for m in again]
    assert ids == sorted(ids)


def test_commit_returns_the_holds_its_receipt_must_wait_for():
    n = Node()
    n.b.begin(1, "tx", n.now)
    n.b.send(1, "/queue/q", {"JMSXGroupID": "a"}, b"1", n.now, transaction="tx")
    n.b.send(1, "/queue/q", {"JMSXGroupID": "b"}, b"2", n.now, transaction="tx")
    holds = n.b.commit(1, "tx", n.now)
    assert len(holds) == 2
    n.effects += n.b.take_effects()
    assert {p.group for p in n.take(ProposeBinding)} == {"a", "b"}
    n.decide("a", "n1")
    n.decide("b", "n1")
    assert sorted(d.hold_id for d in n.take(SendDecided)) == sorted(holds)
    n.b.begin(1, "tx2", n.now)
    n.b.send(1, "/queue/q", {"JMSXGroupID": "a"}, b"3", n.now, transaction="tx2")
    assert n.b.commit(1, "tx2", n.now) == []  # bound: nothing to wait for
    assert n.depth("q") == 3


def test_a_resent_forward_accepted_after_a_target_crash_is_delivered_redelivered():
    n = Node("n2")
    h = {"JMSXGroupID": "g", ORIGIN_NODE: "n1", ORIGIN_EPOCH: "1"}
    n.b.send_forwarded(1, "/queue/q", {**h, ORIGIN_ID: "1"}, b"first", n.now)
    n.b.send_forwarded(1, "/queue/q", {**h, ORIGIN_ID: "2", RESENT: "true"}, b"again", n.now)
    n.b.take_effects()
    n.b.subscribe(1, "s", "/queue/q", "auto", {}, n.now)
    delivered = [e for e in n.b.take_effects() if isinstance(e, Deliver)]
    assert [(e.message.body, e.redelivered) for e in delivered] == [
        (b"first", False),
        (b"again", True),
    ]
    assert all(RESENT not in e.message.headers for e in delivered)


def test_a_forwarded_message_not_journaled_journals_no_watermark_but_is_still_deduplicated():
    n = Node("n2")
    h = {"JMSXGroupID": "g", ORIGIN_NODE: "n1", ORIGIN_EPOCH: "1"}
    assert n.b.send_forwarded(1, "/queue/q", {**h, ORIGIN_ID: "1"}, b"a", n.now) is True
    assert not any(isinstance(r, SinkBatchPublished) for r in n.b.take_records())
    assert n.b.send_forwarded(1, "/queue/q", {**h, ORIGIN_ID: "1"}, b"a", n.now) is False
    persistent = {**h, ORIGIN_ID: "2", "persistent": "true"}
    assert n.b.send_forwarded(1, "/queue/q", persistent, b"b", n.now) is True
    kinds = [type(r).__name__ for r in n.b.take_records()]
    assert kinds == ["MessageStored", "SinkBatchPublished"]  # never ahead of its message
