"""Selectors meet groups, and queue priority (DESIGN "Selectors, priority and WebSocket")."""

from __future__ import annotations

import pytest

from shoal.errors import InvalidSelector


def sel(h, conn, sub, selector, **kw):
    return h.sub(conn, sub, selector=selector, **kw)


# -- subscribing ------------------------------------------------------------------------


def test_invalid_selector_creates_no_subscription(h):
    h.connect(2)
    with pytest.raises(InvalidSelector, match="selector"):
        h.sub(2, "a", dest="/queue/fresh", selector="price >")
    assert "a" not in h.b.connection(2).subs
    assert "fresh" not in h.b.queues  # nothing was created
    h.send("0", dest="/queue/fresh")
    h.sub(2, "a", dest="/queue/fresh")  # the id is still free
    assert h.got(2, "a") == ["0"]


def test_numeric_header_compares_numerically(h):
    sel(h, 2, "a", "price > 10")
    h.send("cheap", price="9")
    h.send("dear", price="100")
    assert h.got(2, "a") == ["dear"]
    assert h.b.queue("q").depth == 1  # 'cheap' waits for a consumer that accepts it
    h.sub(3, "b")
    assert h.got(3, "b") == ["cheap"]


# -- ungrouped messages --------------------------------------------------------------------


def test_ungrouped_round_robin_among_accepting_consumers(h):
    sel(h, 2, "a", "color = 'red'")
    sel(h, 3, "b", "color = 'red'")
    sel(h, 4, "c", "color = 'blue'")
    for i in range(6):
        h.send(f"r{i}", color="red")
    h.send("b0", color="blue")
    assert h.got(2, "a") == ["r0", "r2", "r4"]
    assert h.got(3, "b") == ["r1", "r3", "r5"]
    assert h.got(4, "c") == ["b0"]


def test_rejected_ungrouped_message_blocks_no_one(h):
    sel(h, 2, "a", "kind = 'x'")
    h.send("nobody", kind="y")
    for i in range(3):
        h.send(f"x{i}", kind="x")
    assert h.got(2, "a") == ["x0", "x1", "x2"]
    # the one nobody accepts waits, set aside; a matching consumer gets it
    sel(h, 3, "b", "kind = 'y'")
    assert h.got(3, "b") == ["nobody"]
    assert h.b.queue("q").depth == 0


def test_ungrouped_waits_for_the_credit_of_its_acceptor(h):
    sel(h, 2, "a", "kind = 'x'", prefetch_count=1)
    h.sub(3, "b", selector="kind = 'y'")
    h.send("x0", kind="x")
    h.send("x1", kind="x")  # a is full: x1 waits for a, though b has credit
    h.send("y0", kind="y")
    assert h.got(2, "a") == ["x0"]
    assert h.got(3, "b") == ["y0"]
    h.ack(h.by_sub[(2, "a")][0])
    assert h.got(2, "a") == ["x0", "x1"]
    assert h.got(3, "b") == ["y0"]


# -- groups ------------------------------------------------------------------------------


def test_new_group_goes_only_to_an_accepting_consumer(h):
    sel(h, 2, "a", "region = 'eu'")
    sel(h, 3, "b", "region = 'us'")
    for i in range(4):
        h.send(f"g{i}", group=f"g{i}", region="us")
    assert h.got(2, "a") == []
    assert h.got(3, "b") == ["g0", "g1", "g2", "g3"]
    assert {info["owner"] for info in h.groups().values()} == {"3/b"}


def test_owner_rejecting_next_message_holds_only_its_group(h):
    sel(h, 2, "a", "ok = 'yes'", ack="auto")
    h.sub(3, "b", selector="ok = 'yes'", ack="auto")
    h.send("a0", group="A", ok="yes")  # A -> 2/a (fewest groups, first)
    h.send("b0", group="B", ok="yes")  # B -> 3/b
    owner_a = h.groups()["A"]["owner"]
    h.send("a1", group="A", ok="no")  # A's owner rejects its next message: A waits
    h.send("a2", group="A", ok="yes")  # behind a1, in order: waits too
    h.send("b1", group="B", ok="yes")  # other groups flow
    h.send("c0", group="C", ok="yes")
    got = h.got(2, "a") + h.got(3, "b")
    assert "a1" not in got and "a2" not in got
    assert {"a0", "b0", "b1", "c0"} <= set(got)
    assert h.groups()["A"]["owner"] == owner_a and h.groups()["A"]["backlog"] == 2
    # a consumer that accepts a1 does not take A from its owner (sticky, as ActiveMQ)
    h.sub(4, "c")
    assert h.got(4, "c") == []
    # once the owner goes, A moves to a consumer that accepts its next message
    conn, _ = owner_a.split("/")
    h.disconnect(int(conn))
    assert h.got(4, "c") == ["a1", "a2"]


def test_group_whose_head_nobody_accepts_waits_for_a_matching_consumer(h):
    sel(h, 2, "a", "v < 5")
    h.send("n0", group="N", v="9")
    h.send("n1", group="N", v="1")  # behind n0: never overtakes it (G2)
    h.send("m0", group="M", v="1")
    assert h.got(2, "a") == ["m0"]
    assert h.groups()["N"]["owner"] is None and h.groups()["N"]["backlog"] == 2
    sel(h, 3, "b", "v > 5")
    assert h.got(3, "b") == ["n0"]
    assert h.groups()["N"]["owner"] == "3/b"
    # n1 is rejected by N's owner: the group waits for it, as its owner
    assert h.got(2, "a") == ["m0"]


def test_group_head_change_is_examined_again(h):
    """A return puts an accepted message back at the head of a waiting group."""
    sel(h, 2, "a", "ok = 'yes'", prefetch_count=1)
    h.send("g0", group="G", ok="yes")
    h.send("g1", group="G", ok="no")
    [d] = h.got(2, "a") and h.by_sub[(2, "a")]
    h.nack(d)  # g0 goes back to the head, ahead of g1
    assert h.got(2, "a") == ["g0", "g0"]


def test_no_head_of_line_blocking_with_many_waiting_groups(h):
    sel(h, 2, "a", "ok = 'yes'", ack="auto")
    for i in range(200):
        h.send(f"w{i}", group=f"w{i}", ok="no")
    for i in range(50):
        h.send(f"f{i}", group=f"f{i % 5}", ok="yes")
    assert h.got(2, "a") == [f"f{i}" for i in range(50)]
    q = h.b.queue("q")
    assert len(q.wait_sel) == 200 and not q.ready


def test_consumer_leaving_releases_what_waited_for_it(h):
    sel(h, 2, "a", "k = 1", prefetch_count=1)
    sel(h, 3, "b", "k = 2")
    h.send("one", k="1")
    h.send("two", k="1")  # waits for a's credit
    h.unsub(2, "a")  # 'one' returns; both now have no acceptor
    sel(h, 4, "c", "k = 1")
    assert h.got(4, "c") == ["one", "two"]
    assert h.got(3, "b") == []


def test_last_selector_leaving_restores_plain_dispatch(h):
    sel(h, 2, "a", "k = 1")
    h.send("x", k="2")
    h.send("y", k="2", group="G")
    h.unsub(2, "a")
    q = h.b.queue("q")
    assert q.consumers.with_selector == 0 and not q.groups.singles and not q.wait_sel
    h.sub(3, "b")
    assert sorted(h.got(3, "b")) == ["x", "y"]


def test_selectors_and_rebalance_never_move_a_group_to_a_rejecting_consumer(make):
    h = make({"q": {"group-rebalance": True}})
    h.sub(2, "a", prefetch_count=4)
    for g in "AB":
        h.send(f"{g}0", group=g, k="1")
        h.send(f"{g}1", group=g, k="1")
    for g in "AB":
        h.send(f"{g}2", group=g, k="1")  # a is full: backlog behind its own groups
    assert {info["owner"] for info in h.groups().values()} == {"2/a"}
    sel(h, 3, "b", "k = 2")  # rebalance would move a group to b, which rejects its head
    assert {info["owner"] for info in h.groups().values()} == {"2/a"}
    sel(h, 4, "c", "k = 1")  # c accepts: it gets its share
    assert sorted(info["owner"] for info in h.groups().values()) == ["2/a", "4/c"]


def test_exclusive_consumer_with_selector(h):
    dest = "/queue/q?exclusive=true"
    h.sub(2, "a", dest=dest, selector="k = 1", ack="auto")
    h.sub(3, "b", dest=dest)
    h.send("1", dest=dest, k="1")
    h.send("2", dest=dest, k="2")  # the exclusive consumer rejects it: it waits
    assert h.got(2, "a") == ["1"]
    assert h.got(3, "b") == []
    h.unsub(2, "a")
    assert h.got(3, "b") == ["2"]


def test_expired_head_unblocks_a_group_its_owner_rejected(h):
    sel(h, 2, "a", "ok = 'yes'")
    h.send("g0", group="G", ok="yes")
    h.send("g1", group="G", ok="no", expires=int(h.now * 1000) + 1000)
    h.send("g2", group="G", ok="yes")
    assert h.got(2, "a") == ["g0"]
    h.advance(2)
    assert h.got(2, "a") == ["g0", "g2"]


def test_purge_and_browse_see_set_aside_messages(h):
    sel(h, 2, "a", "k = 1")
    h.send("x", k="2")
    h.send("y", k="1")
    assert [m.body for m in h.b.browse("q")] == [b"x"]
    assert h.b.purge_queue("q") == 1
    q = h.b.queue("q")
    assert q.depth == 0 and not q.groups.singles


# -- priority ------------------------------------------------------------------------------


def test_priority_orders_heads_higher_first_fifo_within(make):
    h = make({"q": {"priority": True}})
    for body, p in [("l0", 1), ("h0", 9), ("m0", 4), ("h1", 9), ("l1", 1), ("d0", None)]:
        if p is None:
            h.send(body)
        else:
            h.send(body, priority=p)
    h.sub(2, "a")
    assert h.got(2, "a") == ["h0", "h1", "m0", "d0", "l0", "l1"]


def test_priority_never_reorders_within_a_group(make):
    h = make({"q": {"priority": True}})
    h.send("a0", group="A", priority=1)
    h.send("a1", group="A", priority=9)
    h.send("b0", group="B", priority=5)
    h.send("u0", priority=7)
    h.sub(2, "a")
    # heads: A (a0, p1), B (p5), ungrouped u0 (p7); a1 stays behind a0
    assert h.got(2, "a") == ["u0", "b0", "a0", "a1"]


def test_priority_off_keeps_arrival_order(h):
    h.send("l0", priority=1)
    h.send("h0", priority=9)
    h.send("g0", group="G", priority=9)
    h.sub(2, "a")
    assert h.got(2, "a") == ["l0", "h0", "g0"]


def test_priority_as_destination_parameter_and_returns(h):
    dest = "/queue/p?priority=true"
    h.send("first", dest=dest, priority=0)
    h.send("low", dest=dest, priority=0)
    h.send("high", dest=dest, priority=8)
    h.sub(2, "a", dest=dest)
    assert h.got(2, "a") == ["high", "first", "low"]
    for d in list(h.by_sub[(2, "a")]):
        if d.message.body != b"high":
            h.nack(d)  # returns go back to their FIFO at their place by arrival
    assert h.got(2, "a")[3:] == ["first", "low"]
    assert h.b.queue("p").settings.priority is True


def test_priority_header_out_of_range_is_clamped(make):
    h = make({"q": {"priority": True}})
    h.send("a", priority=-3)
    h.send("b", priority=42)
    h.sub(2, "a")
    assert h.got(2, "a") == ["b", "a"]


# -- a random walk over both ------------------------------------------------------------

SELECTORS = [None, "k = 0", "k <> 0", "k IN ('1', '2')", "k > 1", "k < 0"]


@pytest.mark.parametrize("seed", range(int(__import__("os").environ.get("SEL_SEEDS", "12"))))
def test_random_walk_keeps_the_contract(make, seed):
    """Consumers with selectors come and go, ack, nack; then a catch-all drains.

    Every delivery is accepted by its consumer's selector, a group never has
    messages unsettled at two consumers, order within a group holds for each
    consumer, and in the end every message is settled exactly once.
    """
    import random

    from shoal.broker.selector import compile_selector

    rnd = random.Random(seed)
    prio = seed % 2 == 0
    h = make({"q": {"priority": prio}}) if prio else make()
    subs: dict[tuple[int, str], str | None] = {}
    held: dict[tuple[int, str], list] = {}
    settled: set[int] = set()
    sent: dict[str, list[int]] = {}
    n_sent = 0
    seen = 0

    def check_new():
        nonlocal seen
        for d in h.delivered[seen:]:
            key = (d.conn_id, d.sub_id)
            s = subs.get(key)
            hdrs = d.message.headers
            assert s is None or compile_selector(s).matches(hdrs), (s, hdrs)
            if key in subs:  # (the final auto-ack consumer holds nothing)
                held.setdefault(key, []).append(d)
        seen = len(h.delivered)
        owners: dict[str, tuple[int, str]] = {}
        for key, ds in held.items():
            for d in ds:
                g = d.message.group
                if g is not None:
                    assert owners.setdefault(g, key) == key, f"group {g} at two consumers"

    conn = 10
    for _ in range(300):
        op = rnd.random()
        if op < 0.45:
            n_sent += 1
            g = rnd.choice([None, "A", "B", "C", "D"])
            kw = {"k": str(rnd.randrange(-1, 4)), "priority": rnd.randrange(10)}
            h.send(f"m{n_sent}", group=g, **kw)
            if g is not None:
                sent.setdefault(g, []).append(n_sent)
        elif op < 0.55 and len(subs) < 4:
            conn += 1
            s = rnd.choice(SELECTORS)
            kw = {"prefetch_count": rnd.choice([1, 2, 5])}
            if s is not None:
                kw["selector"] = s
            subs[(conn, "s")] = s
            h.sub(conn, "s", **kw)
        elif op < 0.62 and subs:
            key = rnd.choice(sorted(subs))
            del subs[key]
            held.pop(key, None)
            h.disconnect(key[0])
        elif op < 0.9:
            keys = [k for k, ds in held.items() if ds]
            if keys:
                key = rnd.choice(keys)
                d = held[key].pop(0)
                if rnd.random() < 0.8:
                    settled.add(d.message.id)
                    h.ack(d)
                else:
                    h.nack(d)
        check_new()
    for key in list(subs):
        del subs[key]
        held.pop(key, None)
        h.disconnect(key[0])
    check_new()
    conn += 1
    h.sub(conn, "all", ack="auto")
    check_new()
    final = h.by_sub[(conn, "all")]
    for d in final:
        settled.add(d.message.id)
    q = h.b.queue("q")
    assert q.depth == 0 and q.in_flight == 0
    assert len(settled) + q.dead_lettered == n_sent  # (nacked 10 times: dead-lettered)
    # order within each group, for the last consumer
    last: dict[str, int] = {}
    for d in final:
        g = d.message.group
        if g is not None:
            n = int(d.message.body[1:])
            assert n > last.get(g, 0)
            last[g] = n


# -- topics --------------------------------------------------------------------------------


def test_non_durable_topic_subscriber_never_keeps_what_it_rejects(h):
    sel(h, 2, "a", "k = 1", dest="/topic/t", ack="auto")
    h.sub(3, "b", dest="/topic/t", ack="auto")
    for i in range(5):
        h.send(f"m{i}", dest="/topic/t", k=str(i % 2))
    assert h.got(2, "a") == ["m1", "m3"]
    assert h.got(3, "b") == [f"m{i}" for i in range(5)]
    assert all(q.depth == 0 for q in h.b.queues.values())  # nothing waits for 'a'


def test_durable_subscription_consumers_filter_like_queue_consumers(h):
    dest = "/topic/d"
    sel(h, 2, "a", "k = 1", dest=dest, ack="auto", durable_subscription_name="n")
    h.send("m0", dest=dest, k="0")
    h.send("m1", dest=dest, k="1")
    assert h.got(2, "a") == ["m1"]
    h.sub(3, "b", dest=dest, ack="auto", durable_subscription_name="n")
    assert h.got(3, "b") == ["m0"]  # kept for the subscription, as a queue keeps it


def test_consumer_info_shows_the_selector(h):
    sel(h, 2, "a", "k = 1")
    h.sub(3, "b")
    infos = {c["id"]: c["selector"] for c in h.b.consumer_infos()}
    assert infos == {"2/a": "k = 1", "3/b": None}


def test_priority_orders_what_waited_for_credit(make):
    h = make({"q": {"priority": True}})
    h.sub(2, "a", prefetch_count=1)
    h.send("first", priority=0)  # delivered at once
    h.send("low", priority=0)
    h.send("g-low", group="G", priority=2)
    h.send("high", priority=8)
    h.send("g-high", group="H", priority=9)
    for _ in range(4):
        h.ack(h.by_sub[(2, "a")][-1])
    assert h.got(2, "a") == ["first", "g-high", "high", "g-low", "low"]


def test_single_consumer_with_selector_gets_queue_order(h):
    """G16 with a selector: what the consumer accepts arrives in queue order."""
    sel(h, 2, "a", "k <> 'x'", prefetch_count=1)
    h.send("0", group="A", k="a")
    h.send("skip", group="B", k="x")
    h.send("1", group="B", k="b")  # behind 'skip' in B: waits with B
    h.send("2", k="u")
    h.send("3", group="A", k="a")
    h.send("4", group="C", k="c")
    got = []
    for _ in range(6):
        ds = h.by_sub[(2, "a")]
        if len(ds) > len(got):
            got.append(ds[-1].message.body.decode())
            h.ack(ds[-1])
    assert got == ["0", "2", "3", "4"]
