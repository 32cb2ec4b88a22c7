"""The message-group contract G1-G15 (DESIGN.md), one rule at a time."""

from __future__ import annotations

import pytest

from shoal.errors import Conflict, InvalidHeader, NotFound


def owners(h, queue="q"):
    return {g: info["owner"] for g, info in h.groups(queue).items()}


# -- G1 group id -----------------------------------------------------------------


def test_g1_group_header_and_amq_alias(h):
    h.sub(2, "a")
    h.sub(3, "b")
    h.send("0", group="g")
    h.send("1", _AMQ_GROUP_ID="g")
    assert h.got(2, "a") == ["0", "1"]
    assert set(h.groups()) == {"g"}


def test_g1_custom_group_header(h):
    dest = "/queue/q?group-header=tenant"
    h.sub(2, "a", dest=dest)
    h.sub(3, "b", dest=dest)
    h.send("0", dest=dest, tenant="t1")
    h.send("1", dest=dest, tenant="t1")
    h.send("2", dest=dest, group="ignored")
    h.send("3", dest=dest, _AMQ_GROUP_ID="ignored")
    assert set(h.groups()) == {"t1"}
    assert h.got(2, "a")[:2] == ["0", "1"]


def test_g1_headers_are_case_sensitive(h):
    h.sub(2, "a")
    h.send("0", jmsxgroupid="g")
    assert h.groups() == {}


# -- G3 sticky groups and closing --------------------------------------------------


def test_g3_group_sticks_to_its_consumer(h):
    h.sub(2, "a")
    h.sub(3, "b")
    for i in range(6):
        h.send(f"A{i}", group="A")
        h.send(f"B{i}", group="B")
    assert h.got(2, "a") == [f"A{i}" for i in range(6)]
    assert h.got(3, "b") == [f"B{i}" for i in range(6)]


def test_g3_binding_survives_idle(h):
    h.sub(2, "a")
    h.sub(3, "b")
    [d] = h.send("A0", group="A")
    h.ack(d)
    h.send("B0", group="B")  # fewest groups: b
    h.send("A1", group="A")  # still a
    assert h.got(2, "a") == ["A0", "A1"]
    assert h.got(3, "b") == ["B0"]


def test_g3_seq_one_has_no_special_meaning(h):
    h.sub(2, "a")
    h.sub(3, "b")
    h.send("x", group="other")  # a owns 'other'
    h.send("0", group="g", seq=1)  # b (fewest)
    h.send("1", group="g", seq=1)
    h.send("2", group="g", seq=1)
    assert h.got(3, "b") == ["0", "1", "2"]


def test_g3_negative_seq_closes_after_owner_settles(h):
    h.sub(2, "a")
    h.sub(3, "b")
    h.send("x", group="other")  # a gets 'other': b has fewer groups next
    d0 = h.send("0", group="g")[0]
    dclose = h.send("close", group="g", seq=-1)[0]
    assert (d0.sub_id, dclose.sub_id) == ("b", "b")  # closing message goes to the owner
    h.send("next", group="g")
    assert h.got(3, "b") == ["0", "close"]  # 'next' waits: owner has not settled
    assert h.groups()["g"]["state"] == "draining"
    h.ack(d0)
    assert h.got(2, "a") == ["x"] and h.got(3, "b") == ["0", "close"]
    h.ack(dclose)
    # now assigned afresh: fewest groups -> b (0 groups) vs a (1 group): b again
    assert h.got(3, "b") == ["0", "close", "next"]
    assert h.groups()["g"]["reassigned"] == 1


def test_g3_closed_group_may_go_elsewhere(h):
    h.sub(2, "a")
    h.sub(3, "b")
    dclose = h.send("close", group="g", seq=-5)[0]  # no owner: like a first message
    assert dclose.sub_id == "a"
    h.ack(dclose)
    assert "g" not in h.groups()  # stays unbound
    h.send("y", group="h")  # a and b tie at 0: round-robin -> b
    h.send("z", group="g")  # a (fewest)
    assert h.got(3, "b") == ["y"]
    assert h.got(2, "a") == ["close", "z"]


def test_g3_nacked_closing_message_goes_back_to_the_owner(h):
    h.sub(2, "a")
    h.sub(3, "b")
    dclose = h.send("close", group="g", seq=-1)[0]
    h.send("x", group="other")  # b
    [again] = h.nack(dclose)
    assert again.sub_id == "a" and again.redelivered


def test_g3_auto_ack_closing_unbinds_at_once(h):
    h.sub(2, "a", ack="auto")
    h.sub(3, "b", ack="auto")
    h.send("0", group="g", seq=-1)
    assert "g" not in h.groups()


# -- G4 shared groups -------------------------------------------------------------------


def test_g4_shared_group_owned_only_while_unsettled(h):
    dest = "/queue/q?group-mode=shared"
    h.sub(2, "a", dest=dest)
    h.sub(3, "b", dest=dest)
    d0 = h.send("0", dest=dest, group="g")[0]
    h.send("1", dest=dest, group="g")
    assert [d0.sub_id] == ["a"] and h.got(2, "a") == ["0", "1"]  # owner keeps taking
    h.ack(h.by_sub[(2, "a")][0])
    h.ack(h.by_sub[(2, "a")][1])
    assert h.groups() == {}  # free again
    h.send("x", dest=dest, group="other")  # a and b tie: round-robin
    h.send("2", dest=dest, group="g")
    assert sorted(h.got(2, "a") + h.got(3, "b")) == ["0", "1", "2", "x"]


def test_g4_shared_group_waits_for_holder(h):
    dest = "/queue/q?group-mode=shared"
    h.sub(2, "a", dest=dest, prefetch_count=1)
    h.sub(3, "b", dest=dest)
    h.send("0", dest=dest, group="g")
    h.send("1", dest=dest, group="g")
    assert h.got(2, "a") == ["0"] and h.got(3, "b") == []  # never to b while a holds 0
    h.ack(h.by_sub[(2, "a")][0])
    assert h.got(2, "a") + h.got(3, "b") == ["0", "1"]


# -- G5 no head-of-line blocking -------------------------------------------------------


def test_g5_busy_owner_does_not_block_other_groups(h):
    h.sub(2, "a", prefetch_count=1)
    h.sub(3, "b", prefetch_count=100)
    for i in range(50):
        h.send(f"A{i}", group="A")  # a gets A, fills up after one
    h.send("B0", group="B")
    h.send("u0")
    h.send("B1", group="B")
    assert h.got(2, "a") == ["A0"]
    assert h.got(3, "b") == ["B0", "u0", "B1"]
    assert h.groups()["A"]["backlog"] == 49


def test_g5_ungrouped_flow_past_blocked_groups(h):
    h.sub(2, "a", prefetch_count=1)
    h.sub(3, "b", prefetch_count=1)
    for g in range(100):
        h.send(f"{g}", group=f"g{g}")
    assert len(h.delivered) == 2
    h.sub(4, "c", prefetch_count=1000)  # a newcomer takes new groups and ungrouped work
    h.send("u")
    assert "u" in h.got(4, "c")


def test_g5_group_with_owner_credit_goes_even_when_others_block(h):
    h.sub(2, "a", prefetch_count=2)
    h.sub(3, "b", prefetch_count=2)
    h.send("A0", group="A")  # a
    h.send("B0", group="B")  # b
    h.send("A1", group="A")
    h.send("B1", group="B")
    h.send("A2", group="A")  # a full
    h.send("B2", group="B")  # b full
    h.ack(h.by_sub[(3, "b")][0])
    assert h.got(3, "b") == ["B0", "B1", "B2"]
    assert h.got(2, "a") == ["A0", "A1"]


def test_g5_single_consumer_gets_arrival_order_across_groups(h):
    for i in range(20):
        h.send(str(i), group=f"g{i % 3}" if i % 4 else None)
    h.sub(2, "a")
    assert h.got(2, "a") == [str(i) for i in range(20)]


# -- G6 assignment -----------------------------------------------------------------------


def test_g6_new_group_goes_to_fewest_groups(h):
    h.sub(2, "a")
    h.sub(3, "b")
    h.sub(4, "c")
    for g in "ABCDEF":
        h.send(g, group=g)
    counts = {sub: len(h.got(conn, sub)) for conn, sub in [(2, "a"), (3, "b"), (4, "c")]}
    assert counts == {"a": 2, "b": 2, "c": 2}
    assert h.got(2, "a") == ["A", "D"]


def test_g6_fewest_groups_among_consumers_with_credit(h):
    h.sub(2, "a", prefetch_count=1)
    h.sub(3, "b", prefetch_count=10)
    h.send("A", group="A")  # a (tie, first)
    h.send("B", group="B")  # b
    h.send("C", group="C")  # a has no credit: b
    assert h.got(3, "b") == ["B", "C"]


def test_g6_draining_groups_count(h):
    h.sub(2, "a")
    h.sub(3, "b")
    da = h.send("A0", group="A")[0]  # a
    h.send("B0", group="B")  # b
    h.b.reset_groups("q", "A", h.now)  # draining at a, still counted for a
    assert h.groups()["A"]["state"] == "draining"
    h.send("C0", group="C")  # tie 1/1: round-robin cursor -> a
    h.send("D0", group="D")  # a has 2 (A draining + C), b 1 -> b
    assert h.got(3, "b") == ["B0", "D0"]
    h.ack(da)


def test_g6_ungrouped_cursor_is_separate(h):
    h.sub(2, "a")
    h.sub(3, "b")
    h.send("u0")  # a
    h.send("A", group="A")  # a (tie -> first)
    h.send("u1")  # b: grouped deliveries do not use up a's turn
    h.send("u2")  # a
    assert h.got(2, "a") == ["u0", "A", "u2"]
    assert h.got(3, "b") == ["u1"]


# -- G6 dispatch delay ------------------------------------------------------------------


def test_g6_consumers_before_dispatch_spreads_groups_evenly(h):
    dest = "/queue/q?consumers-before-dispatch=3"
    for i in range(6):
        h.send(str(i), dest=dest, group=f"g{i}")
    h.sub(2, "a", dest=dest)
    h.sub(3, "b", dest=dest)
    assert h.delivered == []
    h.sub(4, "c", dest=dest)
    assert [len(h.got(c, s)) for c, s in [(2, "a"), (3, "b"), (4, "c")]] == [2, 2, 2]


def test_g6_consumers_before_dispatch_waits_at_most_one_second(h):
    dest = "/queue/q?consumers-before-dispatch=3"
    h.send("0", dest=dest, group="g")
    h.sub(2, "a", dest=dest)
    assert h.delivered == []
    deadline = h.b.tick(h.now)
    assert deadline == pytest.approx(h.now + 1.0)
    h.advance(0.5)
    assert h.delivered == []
    h.advance(0.5)
    assert h.got(2, "a") == ["0"]


def test_g6_delay_before_dispatch(h):
    dest = "/queue/q?delay-before-dispatch=2500"
    h.send("0", dest=dest)
    h.sub(2, "a", dest=dest)
    h.sub(3, "b", dest=dest)
    h.advance(2.0)
    assert h.delivered == []
    h.advance(0.5)
    assert len(h.delivered) == 1


def test_g6_both_whichever_first(h):
    dest = "/queue/q?delay-before-dispatch=5000&consumers-before-dispatch=2"
    h.send("0", dest=dest)
    h.sub(2, "a", dest=dest)
    h.advance(1.5)  # not the 1 s rule: the delay is set
    assert h.delivered == []
    h.sub(3, "b", dest=dest)
    assert len(h.delivered) == 1


def test_g6_delay_applies_again_after_last_consumer_left(h):
    dest = "/queue/q?delay-before-dispatch=1000"
    h.sub(2, "a", dest=dest)
    h.advance(1.0)
    h.send("0", dest=dest)
    assert h.got(2, "a") == ["0"]
    h.unsub(2, "a")
    h.send("1", dest=dest)
    h.sub(2, "b", dest=dest)
    assert h.got(2, "b") == []
    h.advance(1.0)
    assert h.got(2, "b") == ["0", "1"]


# -- G7 group-first-key -------------------------------------------------------------------


def test_g7_first_key_on_first_message_of_new_assignment(h):
    dest = "/queue/q?group-first-key=JMSXGroupFirstForConsumer"
    h.sub(2, "a", dest=dest)
    ds = [h.send(str(i), dest=dest, group="g")[0] for i in range(3)]
    assert [d.first_key for d in ds] == ["JMSXGroupFirstForConsumer", None, None]
    assert "JMSXGroupFirstForConsumer" not in ds[0].message.headers  # the server adds it
    for d in ds:
        h.ack(d)
    h.unsub(2, "a")
    h.sub(3, "b", dest=dest)
    [d] = h.send("3", dest=dest, group="g")
    assert d.first_key == "JMSXGroupFirstForConsumer"


def test_g7_unset_by_default(h):
    h.sub(2, "a")
    [d] = h.send("0", group="g")
    assert d.first_key is None


# -- G8 rebalance and reset -------------------------------------------------------------------


def test_g8_rebalance_on_join_moves_idle_groups_at_once(h):
    dest = "/queue/q?group-rebalance=true"
    h.sub(2, "a", dest=dest)
    for i in range(6):
        h.ack(h.send(str(i), dest=dest, group=f"g{i}")[0])
    h.sub(3, "b", dest=dest)
    o = owners(h)
    assert sorted(o.values()).count("2/a") == 3 and sorted(o.values()).count("3/b") == 3
    assert sum(g["reassigned"] for g in h.groups().values()) == 3


def test_g8_rebalance_spreads_to_within_one(h):
    dest = "/queue/q?group-rebalance=true"
    h.sub(2, "a", dest=dest)
    h.sub(3, "b", dest=dest)
    for i in range(11):
        h.send(str(i), dest=dest, group=f"g{i}")
    h.sub(4, "c", dest=dest)
    counts = {}
    for o in owners(h).values():
        counts[o] = counts.get(o, 0) + 1
    assert max(counts.values()) - min(counts.values()) <= 1
    assert set(counts) == {"2/a", "3/b", "4/c"}


def test_g8_rebalance_drains_busy_groups_first(h):
    dest = "/queue/q?group-rebalance=true"
    h.sub(2, "a", dest=dest)
    d0 = h.send("0", dest=dest, group="g")[0]
    h.send("x0", dest=dest, group="x")
    h.send("y0", dest=dest, group="y")
    h.sub(3, "b", dest=dest)  # a: 3 groups, b: 0 -> one moves (idle first; all busy)
    moved = [g for g, o in owners(h).items() if o == "3/b"]
    assert len(moved) == 1
    # the moved group's next message waits for a to settle (G2)
    mg = moved[0]
    h.send(f"{mg}-next", dest=dest, group=mg)
    assert h.got(3, "b") == []
    assert h.groups()[mg]["state"] == "draining"
    first = {"g": d0}.get(mg) or next(d for d in h.by_sub[(2, "a")] if d.message.group == mg)
    h.ack(first)
    assert h.got(3, "b") == [f"{mg}-next"]


def test_g8_no_rebalance_by_default(h):
    h.sub(2, "a")
    for i in range(4):
        h.send(str(i), group=f"g{i}")
    h.sub(3, "b")
    assert set(owners(h).values()) == {"2/a"}


def test_g8_reset_one_group_waits_for_draining(h):
    h.sub(2, "a")
    h.sub(3, "b")
    d0 = h.send("0", group="g")[0]  # a
    h.send("x", group="x")  # b
    assert h.b.reset_groups("q", "g", h.now) == 1
    h.send("1", group="g")
    assert h.got(2, "a") == ["0"] and h.got(3, "b") == ["x"]
    assert h.groups()["g"]["state"] == "draining"
    h.ack(d0)
    assert h.groups()["g"]["reassigned"] == 1
    assert len(h.got(2, "a") + h.got(3, "b")) == 3


def test_g8_reset_all(h):
    h.sub(2, "a")
    for i in range(3):
        h.ack(h.send(str(i), group=f"g{i}")[0])
    assert h.b.reset_groups("q", None, h.now) == 3
    # Reset idle groups stay listed, unbound, so the reset is visible ...
    assert {g: (i["owner"], i["state"]) for g, i in h.groups().items()} == {
        f"g{i}": (None, "ready") for i in range(3)
    }
    assert h.b.reset_groups("q", None, h.now) == 0  # nothing bound any more
    # ... and their next binding counts as a reassignment.
    h.sub(3, "b")
    h.send("again", group="g1")
    assert h.groups()["g1"]["reassigned"] == 1


def test_reset_of_an_idle_group_keeps_its_reassigned_count(h):
    h.sub(2, "a")
    h.sub(3, "b")
    for _ in range(2):  # two resets with a delivery after each: reassigned twice
        h.ack(h.send("m", group="g")[0])
        assert h.b.reset_groups("q", "g", h.now) == 1
    h.ack(h.send("m", group="g")[0])
    assert h.groups()["g"]["reassigned"] == 2
    assert h.b.reset_groups("q", "g", h.now) == 1
    assert h.groups()["g"] == {**h.groups()["g"], "owner": None, "state": "ready", "reassigned": 2}


def test_reset_drained_group_stays_listed(h):
    h.sub(2, "a")
    d = h.send("0", group="g")[0]
    assert h.b.reset_groups("q", "g", h.now) == 1
    assert h.groups()["g"]["state"] == "draining"
    h.ack(d)
    assert h.groups()["g"]["state"] == "ready" and h.groups()["g"]["owner"] is None


def test_reset_unknown_group_is_a_no_op_unknown_queue_is_not_found(h):
    h.sub(2, "a")
    assert h.b.reset_groups("q", "nope", h.now) == 0
    assert "nope" not in h.groups()
    with pytest.raises(NotFound):
        h.b.reset_groups("nope", None, h.now)


# -- G9 buckets and memory ------------------------------------------------------------------------


def test_g9_buckets_hash_groups(h):
    dest = "/queue/q?group-buckets=2"
    h.sub(2, "a", dest=dest)
    h.sub(3, "b", dest=dest)
    for i in range(20):
        h.send(str(i), dest=dest, group=f"g{i}")
    assert set(h.groups()) <= {"#0", "#1"}
    from shoal.broker.hashing import bucket_of

    owner_of = owners(h)  # '#0' / '#1' -> the consumer bound to that bucket
    assert sorted(owner_of.values()) == ["2/a", "3/b"]  # G6: one bucket each
    assert len(h.delivered) == 20
    for d in h.delivered:
        bucket = f"#{bucket_of(d.message.group, 2)}"
        assert f"{d.conn_id}/{d.sub_id}" == owner_of[bucket], (d.message.group, bucket)


def test_g9_reset_by_group_id_in_bucket_mode(h):
    dest = "/queue/q?group-buckets=4"
    h.sub(2, "a", dest=dest)
    h.ack(h.send("0", dest=dest, group="order-7")[0])
    assert h.b.reset_groups("q", "order-7", h.now) == 1


def test_g9_zero_buckets_turns_grouping_off(h):
    dest = "/queue/q?group-buckets=0"
    h.sub(2, "a", dest=dest)
    h.sub(3, "b", dest=dest)
    for i in range(4):
        h.send(str(i), dest=dest, group="g")
    assert h.got(2, "a") == ["0", "2"] and h.got(3, "b") == ["1", "3"]
    assert h.groups() == {}


def test_g9_idle_bindings_evicted_past_bound_never_busy_ones(h):
    dest = "/queue/q?group-bindings-max=3"
    h.sub(2, "a", dest=dest, prefetch_count=100)
    busy = [h.send(f"busy{i}", dest=dest, group=f"busy{i}")[0] for i in range(2)]
    for i in range(10):
        h.ack(h.send(f"idle{i}", dest=dest, group=f"idle{i}")[0])
    gs = h.groups()
    assert len(gs) <= 3
    assert "busy0" in gs and "busy1" in gs  # in flight: never evicted
    assert gs["busy0"]["in_flight"] == 1
    for d in busy:
        h.ack(d)


def test_g9_eviction_never_loses_order(h):
    dest = "/queue/q?group-bindings-max=1"
    h.sub(2, "a", dest=dest, prefetch_count=1)
    h.sub(3, "b", dest=dest, prefetch_count=100)
    h.send("A0", dest=dest, group="A")  # a, full
    for i in range(5):
        h.send(f"A{i + 1}", dest=dest, group="A")
    for i in range(5):
        h.ack(h.send(f"z{i}", dest=dest, group=f"z{i}")[0])
    h.ack(h.by_sub[(2, "a")][0])
    assert h.got(2, "a")[:2] == ["A0", "A1"]
    while len(h.got(2, "a")) < 6:
        h.ack(h.by_sub[(2, "a")][-1])
    assert h.got(2, "a") == [f"A{i}" for i in range(6)]


def test_g9_idle_unbound_groups_are_forgotten(h):
    dest = "/queue/q?group-mode=shared"
    h.sub(2, "a", dest=dest)
    for i in range(100):
        h.ack(h.send(str(i), dest=dest, group=f"g{i}")[0])
    assert len(h.b.queue("q").groups) == 0


# -- G10 ungrouped and default-group ----------------------------------------------------------------


def test_g10_default_group_makes_ungrouped_one_group(h):
    dest = "/queue/q?default-group=qpid.no-group"
    h.sub(2, "a", dest=dest)
    h.sub(3, "b", dest=dest)
    for i in range(4):
        h.send(str(i), dest=dest)
    assert h.got(2, "a") == ["0", "1", "2", "3"]
    assert set(h.groups()) == {"qpid.no-group"}


def test_g10_empty_group_id_is_ungrouped(h):
    h.sub(2, "a")
    h.sub(3, "b")
    h.send("0", group="")
    h.send("1", group="")
    assert h.got(2, "a") == ["0"] and h.got(3, "b") == ["1"]


# -- G11 failure keeps order -------------------------------------------------------------------------


def test_g11_nack_returns_to_head_of_its_group_and_owner(h):
    h.sub(2, "a", prefetch_count=2)
    h.sub(3, "b")
    d0 = h.send("0", group="g")[0]
    h.send("1", group="g")
    h.send("2", group="g")
    [again] = h.nack(d0)
    assert again.message.body == b"0" and again.sub_id == "a" and again.redelivered
    assert h.got(2, "a") == ["0", "1", "0"]


def test_g11_consumer_close_moves_group_in_order(h):
    h.sub(2, "a", prefetch_count=2)
    h.sub(3, "b")
    h.send("x", group="x")  # a
    for i in range(5):
        h.send(str(i), group="g")  # b
    h.unsub(3, "b")  # 0..4 return to the head of g; a takes g over as credit allows
    acked = 0
    while acked < len(h.by_sub[(2, "a")]):
        h.ack(h.by_sub[(2, "a")][acked])
        acked += 1
    got = [d.message.body.decode() for d in h.by_sub[(2, "a")]]
    assert got == ["x", "0", "1", "2", "3", "4"]
    assert all(d.redelivered for d in h.by_sub[(2, "a")][1:])


def test_g11_poison_dead_letters_and_group_goes_on(h):
    dest = "/queue/q?max-delivery-attempts=2"
    h.sub(2, "a", dest=dest)
    d = h.send("bad", dest=dest, group="g")[0]
    h.send("good", dest=dest, group="g")
    # with prefetch, "good" is already out; nack "bad" twice
    [again] = h.nack(d)
    assert again.message.body == b"bad"
    h.nack(again)
    assert h.got(2, "a") == ["bad", "good", "bad"]
    info = {i["name"]: i for i in h.b.queue_infos()}
    assert info["DLQ"]["depth"] == 1 and info["q"]["dead_lettered"] == 1
    [dl] = h.b.browse("DLQ", 10)
    assert dl.headers["original-destination"] == "/queue/q"
    assert dl.body == b"bad"


def test_g11_poison_park_holds_group_until_resume(h):
    dest = "/queue/q?max-delivery-attempts=1&poison-policy=park"
    h.sub(2, "a", dest=dest, prefetch_count=1)
    d = h.send("bad", dest=dest, group="g")[0]
    h.send("next", dest=dest, group="g")
    h.send("other", dest=dest, group="o")
    h.nack(d)
    assert h.groups()["g"]["state"] == "parked"
    assert h.got(2, "a") == ["bad", "other"]
    h.ack(h.by_sub[(2, "a")][-1])
    assert h.got(2, "a") == ["bad", "other"]
    h.b.resume_group("q", "g", h.now)
    h.pump()
    assert h.got(2, "a") == ["bad", "other", "bad"]
    assert h.by_sub[(2, "a")][-1].redelivered


def test_park_and_resume_by_operator(h):
    h.sub(2, "a")
    h.b.park_group("q", "g", h.now)
    h.send("0", group="g")
    h.send("u")
    assert h.got(2, "a") == ["u"]
    assert h.groups()["g"]["state"] == "parked"
    h.b.resume_group("q", "g", h.now)
    h.pump()
    assert h.got(2, "a") == ["u", "0"]
    with pytest.raises(Conflict):
        h.b.resume_group("q", "g", h.now)  # not parked any more
    with pytest.raises(Conflict):  # an untracked group is not parked either
        h.b.resume_group("q", "never-seen", h.now)


# -- G13 exclusive consumer -------------------------------------------------------------------------


def test_g13_exclusive_queue_one_consumer_gets_all(h):
    dest = "/queue/q?exclusive=true"
    h.sub(2, "a", dest=dest, prefetch_count=2)
    h.sub(3, "b", dest=dest)
    for i in range(4):
        h.send(str(i), dest=dest, group=f"g{i % 2}")
    assert h.got(2, "a") == ["0", "1"] and h.got(3, "b") == []
    h.unsub(2, "a")
    assert h.got(3, "b") == ["0", "1", "2", "3"]


def test_g13_exclusive_subscribe_header(h):
    h.sub(2, "a")
    h.sub(3, "b", **{"activemq.exclusive": "true"})
    for i in range(3):
        h.send(str(i))
    assert h.got(3, "b") == ["0", "1", "2"] and h.got(2, "a") == []


def test_g13_exclusive_consumer_comes_and_goes_among_many(h):
    subs = [(2, f"s{i}") for i in range(300)]
    for conn, sub in subs:
        h.sub(conn, sub)
    h.send("A0", group="A")  # bound to s0
    h.sub(3, "x", **{"activemq.exclusive": "true"})
    h.sub(3, "y", **{"activemq.exclusive": "true"})  # next in line
    q = h.b.queue("q")
    assert [c.cid for c in q.active_consumers()] == ["3/x"]
    assert h.groups()["A"]["state"] == "draining"  # at s0 until settled
    h.send("A1", group="A")
    h.send("u0")
    assert h.got(3, "x") == ["u0"]
    h.ack(h.by_sub[(2, "s0")][0])
    assert h.got(3, "x") == ["u0", "A1"]
    h.unsub(3, "x")  # y takes over, with what x held
    assert [c.cid for c in q.active_consumers()] == ["3/y"]
    assert h.got(3, "y") == ["A1", "u0"]
    h.unsub(3, "y")  # nobody exclusive: all 300 receive again
    assert len(q.active_consumers()) == 300
    for i in range(600):
        h.send(f"v{i}")
    assert all(len(h.got(conn, sub)) >= 2 for conn, sub in subs)


# -- G14 topics -----------------------------------------------------------------------------------


def test_g14_each_subscription_applies_its_own_group_settings(h):
    h.sub(2, "grouped", dest="/topic/t?group-buckets=-1")
    h.sub(3, "g1", dest="/topic/t", durable_subscription_name="shared")
    h.sub(4, "g2", dest="/topic/t", durable_subscription_name="shared")
    h.sub(5, "off1", dest="/topic/t?group-buckets=0", durable_subscription_name="nogroups")
    h.sub(6, "off2", dest="/topic/t", durable_subscription_name="nogroups")
    for i in range(4):
        h.send(str(i), dest="/topic/t", group="g")
    assert h.got(2, "grouped") == ["0", "1", "2", "3"]
    assert h.got(3, "g1") == ["0", "1", "2", "3"] and h.got(4, "g2") == []
    assert h.got(5, "off1") == ["0", "2"] and h.got(6, "off2") == ["1", "3"]


# -- G15 visibility --------------------------------------------------------------------------------


def test_g15_group_infos_shape(h):
    h.sub(2, "a", prefetch_count=1)
    h.send("0", group="g")
    h.now += 2.0
    h.send("1", group="g")
    [info] = h.b.group_infos("q", h.now + 1.0)
    assert set(info) == {
        "group",
        "owner",
        "backlog",
        "in_flight",
        "oldest_age_ms",
        "state",
        "reassigned",
    }
    assert info["group"] == "g" and info["owner"] == "2/a"
    assert info["backlog"] == 1 and info["in_flight"] == 1
    assert info["oldest_age_ms"] == 3000 and info["state"] == "owned"


def test_group_infos_unknown_queue(h):
    with pytest.raises(NotFound):
        h.b.group_infos("nope", h.now)


# -- G2 across everything ----------------------------------------------------------------------------


def test_g2_never_two_holders_after_nack_and_close(h):
    h.sub(2, "a", prefetch_count=3)
    h.sub(3, "b", prefetch_count=3)
    for i in range(6):
        h.send(str(i), group="g")
    a = h.by_sub[(2, "a")]
    h.nack(a[1])  # a still holds 0 and 2; 1 goes back to the head, to a
    assert h.got(3, "b") == []
    h.unsub(2, "a")  # everything returns; b takes over in order
    seen = [d.message.body.decode() for d in h.by_sub[(3, "b")]]
    assert seen == ["0", "1", "2"]


def test_invalid_seq_in_topic_send_loses_nothing(h):
    h.sub(2, "a", dest="/topic/t")
    with pytest.raises(InvalidHeader):
        h.send("x", dest="/topic/t", seq="x")
    assert h.delivered == []


# -- G16 queue order per consumer ----------------------------------------------------------


def drain(h, conn, sub, batch=1):
    """Ack what ``conn/sub`` holds, ``batch`` at a time in delivery order, until
    nothing more comes; the bodies in the order they were delivered."""
    held = list(h.by_sub[(conn, sub)])
    order = []
    while held:
        take, held = held[:batch], held[batch:]
        order += h.bodies(take)
        for d in take:
            held += [n for n in h.ack(d) if (n.conn_id, n.sub_id) == (conn, sub)]
    return order


@pytest.mark.parametrize("batch", [1, 3, 10])
def test_g16_prefetch_ten_two_groups_alternating(h, batch):
    for i in range(100):
        h.send(str(i), group="AB"[i % 2])
    h.sub(2, "a", prefetch_count=10)
    assert drain(h, 2, "a", batch) == [str(i) for i in range(100)]


def test_g16_exclusive_consumer_mixed_grouped_and_ungrouped(h):
    dest = "/queue/q?exclusive=true"
    h.sub(2, "a", dest=dest, prefetch_count=10)
    h.sub(3, "b", dest=dest, prefetch_count=10)  # waits its turn (G13)
    for i in range(60):  # odd ones ungrouped, even ones A, B, A, B...
        h.send(str(i), dest=dest, group=None if i % 2 else "AB"[i // 2 % 2])
    assert drain(h, 2, "a") == [str(i) for i in range(60)]
    assert h.got(3, "b") == []


def test_g16_nacked_message_comes_back_before_later_ones(h):
    for i in range(6):
        h.send(str(i), group="AB"[i % 2])
    h.sub(2, "a", prefetch_count=2)
    a0, b1 = h.by_sub[(2, "a")]
    assert h.bodies(h.nack(b1)) == ["1"]  # not "2": 1 is back at the head of B
    assert h.bodies(h.ack(a0)) == ["2"]


def test_g16_returned_message_moves_its_waiting_group_ahead(h):
    for i in range(4):
        h.send(str(i), group="AB"[i % 2])
    h.sub(2, "a", prefetch_count=2)  # gets 0 (A) and 1 (B); A and B wait, at 2 and 3
    a0, b1 = h.by_sub[(2, "a")]
    h.b.nack(b1.conn_id, b1.ack_id, h.now)  # B's head is 1 again
    h.b.ack(a0.conn_id, a0.ack_id, h.now)
    assert h.bodies(h.pump()) == ["1", "2"]


def test_g16_expired_head_does_not_let_a_later_message_jump(h):
    expires = str(int(h.now * 1000) + 1000)
    h.send("0", group="A", expires=expires)
    h.send("1", group="B")
    h.send("2", group="A")
    h.advance(2.0)  # 0 expires; A's FIFO still starts with its node
    h.sub(2, "a", prefetch_count=10)
    assert h.got(2, "a") == ["1", "2"]


def test_g16_several_consumers_each_in_queue_order(h):
    for i in range(90):
        h.send(str(i), group="ABC"[i % 3] if i % 4 else None)
    h.sub(2, "a", prefetch_count=4)
    h.sub(3, "b", prefetch_count=3)
    got_a = drain(h, 2, "a", 2)
    got_b = drain(h, 3, "b")
    assert sorted(got_a + got_b, key=int) == [str(i) for i in range(90)]
    for got in (got_a, got_b):
        assert [int(x) for x in got] == sorted(int(x) for x in got)


# -- many consumers on one queue -------------------------------------------------------------


def test_two_thousand_consumers_join_take_groups_and_leave(h):
    n = 2000
    subs = [(100 + i // 500, f"s{i}") for i in range(n)]
    for conn, sub in subs:
        h.sub(conn, sub, prefetch_count=1)
    q = h.b.queue("q")
    assert len(q.consumers) == n and q.consumers.nactive == n
    for i in range(n):
        h.send(str(i), group=f"g{i}")
    # G6: one group each, in subscription order; the next tie goes to the
    # consumer given a group least recently, the first one
    assert [h.got(conn, sub) for conn, sub in subs] == [[str(i)] for i in range(n)]
    h.send("x", group="gx")  # nobody has credit: it waits
    h.ack(h.by_sub[subs[7]][0])
    assert h.got(*subs[7]) == ["7", "x"]
    for conn, sub in subs[1::2] + subs[0::2]:
        h.unsub(conn, sub)
    assert not q.consumers and q.consumers.nactive == 0
    assert len(q.consumers.lineup) <= 16 and len(q.consumers.pickable) <= 32
    assert q.depth == n  # every unacked message came back, none lost
    h.sub(9, "late", prefetch_count=n)
    assert len(h.got(9, "late")) == n


def broker_lines(fn) -> int:
    """Python lines run inside shoal.broker while ``fn()`` runs (a cost that
    does not depend on the machine's speed)."""
    count = 0

    def local(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return local

    def on_call(frame, event, arg):
        return local if "shoal/broker/" in frame.f_code.co_filename else None

    import sys

    before = sys.gettrace()
    sys.settrace(on_call)
    try:
        fn()
    finally:
        sys.settrace(before)
    return count


def test_joining_leaving_and_assigning_groups_do_not_grow_with_consumers(make):
    def costs(n):
        h = make()
        for i in range(n):
            h.sub(100 + i // 500, f"s{i}", prefetch_count=1)

        def join():
            for i in range(20):
                h.sub(50, f"new{i}", prefetch_count=1)

        def assign():
            for i in range(20):
                h.send(str(i), group=f"g{i}")

        def leave():
            for i in range(0, 40, 2):
                h.unsub(100, f"s{i}")

        return broker_lines(join), broker_lines(assign), broker_lines(leave)

    small, large = costs(100), costs(2000)
    for what, s, big in zip(("subscribe", "new group", "unsubscribe"), small, large, strict=True):
        assert big <= 1.5 * s + 100, f"{what}: {s} lines with 100 consumers, {big} with 2,000"
