"""Clustered grouping in the pure core: holds, decisions, forwarding, dedup (no I/O)."""

from __future__ import annotations

import pytest

from shoal.broker.core import Broker
from shoal.broker.effects import (
    Deliver,
    ProposeBinding,
    ReleaseBinding,
    SendDecided,
    TouchBinding,
)
from shoal.broker.settings import AddressSettings
from shoal.cluster.grouping import (
    DESTINATION,
    ORIGIN_EPOCH,
    ORIGIN_ID,
    ORIGIN_NODE,
    RESENT,
    ClusterGrouping,
    rebalance_plan,
)
from shoal.errors import InvalidHeader
from shoal.records import MessageRemoved, SinkBatchPublished

T0 = 1_700_000_000.0


class Node:
    def __init__(self, node: str = "n1", timeout_ms: int = 5000, **moving: int) -> None:
        self.now = T0
        self.b = Broker(AddressSettings(), self.now)
        self.b.cluster = ClusterGrouping(node, timeout_ms, **moving)
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


# --- bindings that move (C5, C6, C7) -----------------------------------------


def forward_bodies(n: Node, node: str = "n2") -> list[bytes]:
    q = n.b.queues.get("$cluster.forward." + node)
    return [] if q is None else [m.body for m in q.pending_messages()]


def test_a_lease_on_another_nodes_binding_is_refreshed_then_asked_again_when_old():
    n = Node(group_timeout_ms=1000)
    n.send("a")
    n.take(ProposeBinding)
    n.decide("g", "n2")
    n.advance(0.1)
    assert n.send("b") is None and n.take(TouchBinding) == []  # fresh: just used
    n.advance(0.2)  # past group-timeout/4: used and refreshed, not held
    assert n.send("c") is None
    assert [(t.queue, t.group) for t in n.take(TouchBinding)] == [("q", "g")]
    assert n.send("d") is None and n.take(TouchBinding) == []  # one refresh at a time
    n.advance(0.3)  # past group-timeout/2 without an answer: asked again first
    assert n.send("e") is not None
    [ask] = n.take(ProposeBinding)
    assert (ask.queue, ask.group) == ("q", "g")
    n.decide("g", "n2")
    assert forward_bodies(n) == [b"a", b"b", b"c", b"d", b"e"]


def test_reaper_releases_an_unused_drained_binding_and_the_next_message_is_decided_anew():
    n = Node(group_timeout_ms=1000, reaper_period_ms=100)
    n.send("a")
    n.take(ProposeBinding)
    n.decide("g", "n1")
    n.advance(1.5)
    assert n.take(ReleaseBinding) == []  # "a" still waits here: not drained
    n.b.subscribe(1, "s", "/queue/q", "client-individual", {}, n.now)
    [d] = [e for e in n.b.take_effects() if isinstance(e, Deliver)]
    n.advance(1.5)
    assert n.take(ReleaseBinding) == []  # in flight: not drained either
    n.send("a2")  # a use: routed through the binding (and delivered to the owner)
    [d2] = n.take(Deliver)
    n.b.ack(1, d.ack_id, n.now)
    n.b.ack(1, d2.ack_id, n.now)
    n.advance(0.5)
    assert n.take(ReleaseBinding) == []  # drained, but used 0.5 s ago
    n.advance(0.6)
    [release] = n.take(ReleaseBinding)
    assert (release.queue, release.group, release.idle_ms) == ("q", "g", 1000)
    assert n.b.cluster.route_of("q", "g") is None
    hold = n.send("b")  # held; no proposal until the release is answered
    assert hold is not None and n.take(ProposeBinding) == []
    n.b.binding_released("q", "g", True, n.now)
    n.effects += n.b.take_effects()
    [ask] = n.take(ProposeBinding)
    assert ask.group == "g"
    n.decide("g", "n2")
    assert forward_bodies(n) == [b"b"]
    assert n.b.cluster.released == 1


def test_a_release_refused_because_another_node_used_the_binding_keeps_it_here():
    n = Node(group_timeout_ms=1000, reaper_period_ms=100)
    n.send("a")
    n.decide("g", "n1")
    n.take(ProposeBinding)
    n.b.subscribe(1, "s", "/queue/q", "auto", {}, n.now)
    n.b.take_effects()
    n.advance(1.2)
    assert len(n.take(ReleaseBinding)) == 1
    n.send("b")
    n.b.binding_released("q", "g", False, n.now)
    n.effects += n.b.take_effects()
    assert [d.message.body for d in n.take(Deliver)] == [b"b"]
    assert n.b.cluster.route_of("q", "g") == "n1" and n.take(ProposeBinding) == []


def test_a_moved_binding_takes_back_queued_entries_and_routes_them_first_in_order():
    n = Node()
    for body, group in (("a1", "a"), ("b1", "b"), ("a2", "a")):
        n.send(body, group=group, persistent="true")
        n.decide(group, "n2")
    n.take(SendDecided)
    n.take(ProposeBinding)
    assert forward_bodies(n) == [b"a1", b"b1", b"a2"]
    n.b.binding_moved("q", "a", None, n.now)  # forgotten: a fresh decision, in order
    n.effects += n.b.take_effects()
    [ask] = n.take(ProposeBinding)
    assert ask.group == "a"
    n.send("a3", group="a")  # a later message waits behind the taken-back ones
    # out of the queue at once, so the link cannot send them to n2 meanwhile ...
    assert forward_bodies(n) == [b"b1"]
    # ... but their removal is journaled only when they are routed anew
    assert not [r for r in n.b.take_records() if isinstance(r, MessageRemoved)]
    n.decide("a", "n3")
    removed = [r.queue for r in n.b.take_records() if isinstance(r, MessageRemoved)]
    assert removed == ["$cluster.forward.n2"] * 2  # journaled: they moved, not copied
    assert forward_bodies(n) == [b"b1"]
    assert forward_bodies(n, "n3") == [b"a1", b"a2", b"a3"]
    assert n.take(SendDecided) != []  # a3's producer hears; the taken-back have none
    assert n.b.cluster.rerouted == 2
    fq3 = n.b.queues["$cluster.forward.n3"]
    assert all(m.headers[ORIGIN_EPOCH] == n.b.cluster.epoch for m in fq3.pending_messages())


def test_taken_back_entries_are_never_refused_when_the_new_decision_times_out():
    n = Node(timeout_ms=1000)
    n.send("a1", group="a")
    n.decide("a", "n2")
    n.take(SendDecided)
    n.take(ProposeBinding)
    n.b.binding_moved("q", "a", None, n.now)
    n.send("late", group="a")
    n.advance(1.5)
    [refused] = n.take(SendDecided)  # the producer of the new message is told
    assert refused.error is not None and "'a'" in refused.error
    assert len(n.take(ProposeBinding)) == 2  # asked again for the taken-back entry
    n.decide("a", "n1")
    assert n.depth("q") == 1 and forward_bodies(n) == []  # a1 arrived, once


def test_a_binding_moved_to_another_node_routes_queued_entries_there():
    n = Node()
    n.send("a1")
    n.decide("g", "n2")
    n.b.binding_moved("q", "g", "n3", n.now)
    n.effects += n.b.take_effects()
    n.send("a2")
    assert forward_bodies(n) == [] and forward_bodies(n, "n3") == [b"a1", b"a2"]


def test_entries_already_sent_to_the_old_node_are_left_to_it():
    n = Node()
    n.send("a1")
    n.decide("g", "n2")
    n.b.connect(9, n.now)
    n.b.subscribe(
        9,
        "link",
        "/queue/$cluster.forward.n2",
        "client-individual",
        {"prefetch-count": "1"},
        n.now,
    )
    n.b.take_effects()  # a1 is on the wire to n2
    n.send("a2")
    n.b.binding_moved("q", "g", None, n.now)
    n.decide("g", "n3")
    assert forward_bodies(n, "n3") == [b"a2"]


def test_consumerless_queue_releases_its_drained_groups_when_another_node_has_consumers():
    n = Node(consumerless_ms=500, reaper_period_ms=100)
    n.b.subscribe(1, "s", "/queue/q", "client-individual", {}, n.now)
    n.send("a")
    n.decide("g", "n1")
    [d] = [e for e in n.effects if isinstance(e, Deliver)]
    n.b.ack(1, d.ack_id, n.now)
    n.send("b", group="h")
    n.decide("h", "n1")
    n.b.unsubscribe(1, "s", n.now)  # "b" returns: group h is not drained
    n.advance(1.0)
    assert n.take(ReleaseBinding) == []  # no other node has consumers
    n.b.cluster.set_members({"n1": frozenset(), "n2": frozenset({"q"})})
    n.advance(0.2)
    assert n.take(ReleaseBinding) == []  # consumerless since the first pass only
    n.advance(0.5)
    assert [(r.group, r.idle_ms) for r in n.take(ReleaseBinding)] == [("g", 0)]


def test_a_forward_for_a_group_this_node_has_not_cached_asks_for_its_binding():
    n = Node("n2")
    h = {"JMSXGroupID": "g", ORIGIN_NODE: "n1", ORIGIN_EPOCH: "1", ORIGIN_ID: "1"}
    n.b.send_forwarded(1, "/queue/q", dict(h), b"a", n.now)
    [ask] = [e for e in n.b.take_effects() if isinstance(e, ProposeBinding)]
    assert (ask.group, ask.proposal) == ("g", "n2")  # re-claims it if it was reaped
    n.b.send_forwarded(1, "/queue/q", {**h, ORIGIN_ID: "2"}, b"b", n.now)
    assert not any(isinstance(e, ProposeBinding) for e in n.b.take_effects())


def test_entries_queued_towards_a_node_keep_their_lease_refreshed_while_they_wait():
    n = Node(group_timeout_ms=1000, reaper_period_ms=30_000)
    n.send("a")
    n.decide("g", "n2")  # the link to n2 is down: "a" waits in the forward queue
    n.advance(0.3)
    assert [(t.queue, t.group) for t in n.take(TouchBinding)] == [("q", "g")]
    n.advance(0.1)
    assert n.take(TouchBinding) == []  # one refresh per group-timeout/4
    n.b.binding_decided("q", "g", "n2", n.now)  # the refresh answered
    n.advance(0.3)
    assert len(n.take(TouchBinding)) == 1


# --- C9: ungrouped messages balanced over nodes with consumers -----------------


def test_on_demand_keeps_ungrouped_messages_local_while_the_local_queue_has_consumers():
    n = Node()
    n.b.cluster.set_members({"n1": frozenset(), "n2": frozenset({"q"})})
    n.b.subscribe(1, "s", "/queue/q", "auto", {}, n.now)
    n.send("u", group=None)
    assert [d.message.body for d in n.take(Deliver)] == [b"u"]
    assert forward_bodies(n) == [] and n.take(ProposeBinding) == []


def test_on_demand_round_robins_ungrouped_messages_over_nodes_with_consumers():
    n = Node()
    n.b.cluster.set_members(
        {"n1": frozenset(), "n2": frozenset({"q"}), "n3": frozenset({"q"}), "n4": frozenset()}
    )
    for i in range(6):
        assert n.send(f"u{i}", group=None) is None  # never held: no decision needed
    assert n.take(ProposeBinding) == [] and n.depth("q") == 0
    assert forward_bodies(n, "n2") + forward_bodies(n, "n3") != []
    assert sorted(forward_bodies(n, "n2") + forward_bodies(n, "n3")) == [
        f"u{i}".encode() for i in range(6)
    ]
    assert len(forward_bodies(n, "n2")) == len(forward_bodies(n, "n3")) == 3
    assert forward_bodies(n, "n4") == []  # no consumers there
    fq = n.b.queues["$cluster.forward.n2"]
    assert all(m.headers[DESTINATION] == "/queue/q" for m in fq.pending_messages())
    assert n.b.cluster.balanced == 6
    # a queue with consumers nowhere keeps its messages here
    n.send("r", group=None, dest="/queue/r")
    assert n.depth("r") == 1


def test_strict_round_robins_over_every_member_whatever_its_consumers():
    n = Node()
    n.b.cluster.load_balancing = "STRICT"
    n.b.cluster.set_members({"n1": frozenset(), "n2": frozenset(), "n3": frozenset()})
    n.b.subscribe(1, "s", "/queue/q", "auto", {}, n.now)
    for i in range(6):
        n.send(f"u{i}", group=None)
    assert len(n.take(Deliver)) == 2
    assert len(forward_bodies(n, "n2")) == len(forward_bodies(n, "n3")) == 2


def test_off_keeps_ungrouped_messages_on_the_receiving_node():
    n = Node()
    n.b.cluster.load_balancing = "OFF"
    n.b.cluster.set_members({"n1": frozenset(), "n2": frozenset({"q"})})
    n.send("u", group=None)
    assert n.depth("q") == 1 and forward_bodies(n) == []


def test_grouped_messages_and_internal_queues_are_not_balanced():
    n = Node()
    n.b.cluster.set_members({"n1": frozenset(), "n2": frozenset({"q", "DLQ"})})
    n.send("g1")
    [ask] = n.take(ProposeBinding)
    assert ask.proposal == "n2"  # C2's rule, not C9's
    n.decide("g", "n1")
    assert n.depth("q") == 1 and forward_bodies(n) == []


def test_an_ungrouped_message_forwarded_here_stays_here():
    n = Node("n2")
    n.b.cluster.set_members({"n1": frozenset({"q"}), "n2": frozenset(), "n3": frozenset({"q"})})
    headers = {ORIGIN_NODE: "n1", ORIGIN_ID: "7", ORIGIN_EPOCH: "1"}
    assert n.b.send_forwarded(1, "/queue/q", headers, b"u", n.now)
    assert n.depth("q") == 1 and forward_bodies(n, "n1") == forward_bodies(n, "n3") == []
    assert n.b.take_effects() == []


def test_a_committed_transaction_balances_its_ungrouped_messages():
    n = Node()
    n.b.cluster.set_members({"n1": frozenset(), "n2": frozenset({"q"})})
    n.b.begin(1, "tx", n.now)
    n.b.send(1, "/queue/q", {}, b"u", n.now, transaction="tx")
    assert forward_bodies(n) == []
    n.b.commit(1, "tx", n.now)
    assert forward_bodies(n) == [b"u"] and n.depth("q") == 0


# --- cluster rebalance (C7) -------------------------------------------------


def test_rebalance_plan_evens_counts_over_nodes_with_consumers():
    holders = {f"g{i}": "n1" for i in range(6)}
    moves = rebalance_plan(holders, ["n1", "n2", "n3"])
    assert moves == {"g5": "n2", "g4": "n3", "g3": "n2", "g2": "n3"}
    # groups on a node without consumers all move; the rest stay balanced
    holders = {"a": "n1", "b": "n1", "c": "n9", "d": "n2"}
    moves = rebalance_plan(holders, ["n1", "n2"])
    assert moves == {"c": "n2"}
    counts = {"n1": 0, "n2": 0}
    for group, node in holders.items():
        counts[moves.get(group, node)] += 1
    assert counts == {"n1": 2, "n2": 2}
    assert rebalance_plan({"a": "n1", "b": "n2"}, ["n1", "n2"]) == {}  # balanced already
    assert rebalance_plan(holders, []) == {}


def test_rebalance_releases_drained_groups_now_and_busy_ones_once_drained():
    n = Node()
    for g in ("busy", "idle", "other"):
        n.send(f"{g}-1", group=g)
        n.decide(g, "n1")
    n.take(ProposeBinding)
    n.b.subscribe(1, "s", "/queue/q", "client-individual", {"activemq.prefetchSize": "1"}, n.now)
    n.effects += n.b.take_effects()
    [d] = n.take(Deliver)  # "busy-1" in flight; the others wait behind the prefetch
    assert d.message.body == b"busy-1"
    n.b.ack(1, d.ack_id, n.now)
    n.effects += n.b.take_effects()
    [d] = n.take(Deliver)
    n.b.ack(1, d.ack_id, n.now)
    n.effects += n.b.take_effects()
    [d] = n.take(Deliver)
    n.b.ack(1, d.ack_id, n.now)
    n.send("busy-2", group="busy")
    [busy] = n.take(Deliver)  # in flight: "busy" is not drained
    mine = n.b.cluster_rebalance("q", {"busy": "n2", "idle": "n2", "elsewhere": "n3"}, n.now)
    n.effects += n.b.take_effects()
    assert mine == 2  # "elsewhere" is not held here
    [release] = n.take(ReleaseBinding)
    assert (release.group, release.idle_ms, release.to) == ("idle", 0, "n2")
    assert n.b.cluster.route_of("q", "idle") is None
    hold = n.send("idle-2", group="idle")  # waits for the release's answer
    assert hold is not None and n.take(ProposeBinding) == []
    n.b.binding_released("q", "idle", True, n.now)
    n.effects += n.b.take_effects()
    [ask] = n.take(ProposeBinding)
    n.decide("idle", "n2")  # the release bound n2 first: the proposal reads it
    assert forward_bodies(n) == [b"idle-2"]
    n.advance(1.0)
    assert n.take(ReleaseBinding) == []  # "busy-2" still in flight
    n.send("busy-3", group="busy")  # stays with its holder meanwhile, in order
    assert n.b.cluster.route_of("q", "busy") == "n1"
    n.b.ack(1, busy.ack_id, n.now)
    n.effects += n.b.take_effects()
    [d] = n.take(Deliver)
    assert d.message.body == b"busy-3"
    n.b.ack(1, d.ack_id, n.now)
    n.advance(0.3)
    [release] = n.take(ReleaseBinding)
    assert (release.group, release.to) == ("busy", "n2")
    assert n.b.cluster.moves == {} and n.b.cluster.moved_out == 1
    # the release is refused (another node refreshed the binding meanwhile):
    # the group stays here and the move is tried again on a later pass
    n.b.binding_released("q", "busy", False, n.now)
    assert n.b.cluster.route_of("q", "busy") == "n1"
    n.advance(0.3)
    [release] = n.take(ReleaseBinding)
    assert (release.group, release.to) == ("busy", "n2")
    n.b.binding_released("q", "busy", True, n.now)
    assert n.b.cluster.moved_out == 2 and n.b.cluster.released == 0


def test_a_planned_move_is_dropped_when_the_binding_moves_first():
    n = Node()
    n.send("a")
    n.decide("g", "n1")
    n.b.subscribe(1, "s", "/queue/q", "client-individual", {}, n.now)
    n.effects += n.b.take_effects()
    assert n.b.cluster_rebalance("q", {"g": "n2"}, n.now) == 1
    n.b.binding_moved("q", "g", "n3", n.now)  # e.g. forgotten and decided elsewhere
    n.advance(0.5)
    assert n.take(ReleaseBinding) == [] and n.b.cluster.moves == {}
