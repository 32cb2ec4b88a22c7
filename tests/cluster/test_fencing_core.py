"""Fencing in the pure core and its clock (docs/cluster.md "Partitions and fencing")."""

from __future__ import annotations

from tests.cluster.test_grouping_core import Node

from shoal.broker.effects import Deliver
from shoal.cluster.grouping import FENCE_MARGIN_MS, RESENT, FenceClock


def delivered(n: Node) -> list[bytes]:
    n.effects += n.b.take_effects()
    return [d.message.body for d in n.take(Deliver)]


def bound_node_with_consumer() -> Node:
    n = Node()
    n.b.subscribe(1, "s", "/queue/q", "auto", {}, n.now)
    n.send("a")
    n.decide("g", "n1")
    assert delivered(n) == [b"a"]
    return n


def test_a_fenced_node_stores_its_groups_messages_and_delivers_them_in_order_after():
    n = bound_node_with_consumer()
    n.b.cluster_fence(n.now)
    assert n.send("b") is None and n.send("c") is None  # accepted, stored
    n.send("u1", group=None)  # ungrouped messages are no group's: they flow
    assert delivered(n) == [b"u1"]
    assert n.depth("q") == 2
    n.b.subscribe(1, "s2", "/queue/q", "auto", {}, n.now)  # a new consumer changes nothing
    assert delivered(n) == []
    assert n.b.cluster_unfence(n.now, {("q", "g"): "n1"}) == []
    assert delivered(n) == [b"b", b"c"]
    assert n.b.cluster.fences == 1 and not n.b.cluster.fenced


def test_a_queue_made_while_fenced_is_fenced_and_forward_queues_are_not():
    n = Node()
    n.b.cluster_fence(n.now)
    n.b.subscribe(1, "s", "/queue/other", "auto", {}, n.now)
    assert n.b.queues["other"].fenced
    n.b.ensure_forward_queue("n2")
    assert not n.b.queues["$cluster.forward.n2"].fenced


def test_a_group_bound_elsewhere_meanwhile_goes_to_its_new_holder_in_order():
    n = bound_node_with_consumer()
    n.send("x", group="h")
    n.decide("h", "n1")
    assert delivered(n) == [b"x"]
    n.b.cluster_fence(n.now)
    n.send("b")
    n.send("c")
    n.send("y", group="h")
    assert sorted(n.b.cluster_recheck_keys()) == [("q", "g"), ("q", "h")]
    # while fenced, another node was given group g (its session was gone)
    parked = n.b.cluster_unfence(n.now, {("q", "g"): "n2", ("q", "h"): "n1"})
    assert parked == []
    assert delivered(n) == [b"y"]  # h flows; g is never consumed here and on n2
    assert n.b.cluster.route_of("q", "g") == "n2"
    fq = n.b.queues["$cluster.forward.n2"]
    assert [m.body for m in fq.pending_messages()] == [b"b", b"c"]  # in order, to n2
    assert n.b.queues["q"].depth == 0
    n.send("d")  # a later message of g follows them
    assert [m.body for m in fq.pending_messages()] == [b"b", b"c", b"d"]
    assert n.b.cluster.stranded_sent == 2


def test_a_group_bound_elsewhere_with_a_message_out_here_is_parked():
    n = Node()
    n.b.subscribe(1, "s", "/queue/q", "client-individual", {}, n.now)
    n.send("a")
    n.decide("g", "n1")
    assert delivered(n) == [b"a"]  # out to the consumer, not acked
    n.b.cluster_fence(n.now)
    n.send("b")
    parked = n.b.cluster_unfence(n.now, {("q", "g"): "n2"})
    assert parked == [("q", "g")]  # "a" may come back: g stays here, parked
    assert any("'g'" in text and "n2" in text for _c, text in n.b.take_warnings())
    n.b.resume_group("q", "g", n.now)  # the operator's choice
    assert delivered(n) == [b"b"]


def test_a_restarted_node_rechecks_the_groups_it_has_messages_of():
    n = Node()
    n.send("a")
    n.decide("g", "n1")
    n.b.cluster.bindings.clear()  # a restart knows its groups only from its journal
    assert n.b.cluster_recheck_keys() == [("q", "g")]


def test_fence_clock_fences_before_zookeeper_may_expire_the_session():
    clock = FenceClock(6000)
    assert clock.must_fence(0)  # no checked session yet
    assert clock.needs_check(7)
    clock.checked(1000, 7)
    assert not clock.needs_check(7)
    assert not clock.must_fence(1000 + 6000 - FENCE_MARGIN_MS - 1)
    assert clock.must_fence(1000 + 6000 - FENCE_MARGIN_MS)  # before the earliest expiry
    clock.answered(5000, 7)  # a later answered request moves it on
    assert not clock.must_fence(7000)
    clock.answered(9000, 8)  # another session's answer proves nothing for ours
    assert clock.must_fence(5000 + 6000 - FENCE_MARGIN_MS)
    assert clock.needs_check(8)
    clock.lost()
    assert clock.must_fence(5001) and clock.needs_check(7)


def test_a_taken_back_entry_the_old_node_may_have_delivered_is_flagged_redelivered():
    """A partition: the link sent a1 to n2, n2 delivered it, its RECEIPT was
    cut off; the link drops and a1 returns. n2 is forgotten (rebind-after):
    a1 is taken back and delivered by its new holder, flagged, never a
    second unflagged copy. a2, never sent, is not flagged."""
    n = Node()
    n.send("a1")
    n.decide("g", "n2")
    n.b.connect(9, n.now)
    n.b.subscribe(
        9, "link", "/queue/$cluster.forward.n2", "client-individual", {"prefetch-count": "1"}, n.now
    )
    n.b.take_effects()  # a1 is on the wire to n2
    n.b.disconnect(9, n.now)  # the link dropped: a1 is back in the forward queue
    n.send("a2")
    n.b.subscribe(1, "s", "/queue/q", "auto", {}, n.now)
    n.b.binding_moved("q", "g", None, n.now)  # n2 forgotten
    n.effects += n.b.take_effects()
    n.decide("g", "n1")  # the new holder: this node
    n.effects += n.b.take_effects()
    got = [(d.message.body, d.redelivered) for d in n.take(Deliver)]
    assert got == [(b"a1", True), (b"a2", False)]


def test_a_taken_back_entry_forwarded_to_a_new_holder_is_marked_resent():
    n = Node()
    n.send("a1")
    n.decide("g", "n2")
    n.b.connect(9, n.now)
    n.b.subscribe(
        9, "link", "/queue/$cluster.forward.n2", "client-individual", {"prefetch-count": "1"}, n.now
    )
    n.b.take_effects()
    n.b.disconnect(9, n.now)
    n.b.binding_moved("q", "g", "n3", n.now)
    [m] = n.b.queues["$cluster.forward.n3"].pending_messages()
    assert m.headers.get(RESENT) == "true"  # the target gives it delivery count 1
