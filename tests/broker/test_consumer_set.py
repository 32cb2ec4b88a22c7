"""ConsumerSet on its own: admission, who may receive (G13), the round-robin
cursor (G10), the fewest-groups choice (G6) and the G8 rebalance choice."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.broker.conftest import ConsumerMaker as Maker

from shoal.broker.consumers import ConsumerSet, groups_of
from shoal.broker.groups import GroupTable
from shoal.broker.model import F_PARKED


def test_admission_and_counts() -> None:
    new = Maker()
    cs = ConsumerSet()
    a, b = new(), new()
    cs.add(a)
    cs.add(b)
    assert len(cs) == 2 and list(cs) == [a, b] and a in cs
    cs.remove(a)
    cs.remove(a)  # leaving twice is harmless
    assert list(cs) == [b] and a not in cs


def test_selector_members_are_counted() -> None:
    new = Maker()
    cs = ConsumerSet()
    c = new()
    c.accepts = lambda headers: True
    cs.add(c)
    assert cs.with_selector == 1
    cs.remove(c)
    assert cs.with_selector == 0


def test_sole_consumer_g13() -> None:
    new = Maker()
    cs = ConsumerSet()
    a, b, x = new(), new(), new(exclusive=True)
    cs.add(a)
    cs.add(b)
    assert cs.sole_consumer() is None  # everyone may receive
    cs.add(x)
    assert cs.sole_consumer() is x  # one asked to be exclusive
    cs.remove(x)
    assert cs.sole_consumer() is None
    queue_exclusive = ConsumerSet(exclusive=True)
    queue_exclusive.add(a)
    queue_exclusive.add(b)
    assert queue_exclusive.sole_consumer() is a  # the first subscriber


def test_clear_lineup_stops_every_active_consumer() -> None:
    new = Maker()
    cs = ConsumerSet()
    cons = [new() for _ in range(3)]
    for c in cons:
        cs.add(c)
        cs.enter_lineup(c)
    assert cs.nactive == 3 and cs.active_consumers() == cons
    assert cs.clear_lineup() == cons
    assert cs.nactive == 0 and not cs.lineup and not any(c.active for c in cons)


def test_round_robin_skips_consumers_without_credit() -> None:
    new = Maker()
    cs = ConsumerSet()
    a, b, c = new(), new(), new()
    for x in (a, b, c):
        cs.add(x)
        cs.enter_lineup(x)
    b.ready = False
    assert [cs.next_round_robin() for _ in range(4)] == [a, c, a, c]
    a.ready = c.ready = False
    assert cs.next_round_robin() is None


def test_pick_for_group_fewest_groups_then_least_recent() -> None:
    new = Maker()
    cs = ConsumerSet()
    table = GroupTable(cs)
    a, b = new(), new()
    for c in (a, b):
        cs.add(c)
        cs.enter_lineup(c)
        cs.push_pick(c)
    assert cs.pick_for_group() is a  # a tie: subscription order
    table.bind(table.new_group("g1"), a)
    assert cs.pick_for_group() is b  # fewer groups
    table.bind(table.new_group("g2"), b)
    assert cs.pick_for_group() is a  # a tie again: a got a group least recently
    a.ready = False
    assert cs.pick_for_group() is b  # no credit: skipped (back with consumer_ready)
    assert a.pick_entry is None


def test_pick_accepting() -> None:
    new = Maker()
    cs = ConsumerSet()
    a, b = new(), new()
    a.accepts = lambda h: h.get("k") == "a"
    for c in (a, b):
        cs.add(c)
        cs.enter_lineup(c)
    assert cs.pick_accepting({"k": "a"}, grouped=True) is a
    assert cs.pick_accepting({"k": "z"}, grouped=True) is b
    b.accepts = lambda h: False
    assert cs.pick_accepting({"k": "z"}, grouped=False) is False  # ready, none accepts
    a.ready = b.ready = False
    assert cs.pick_accepting({"k": "a"}, grouped=False) is None  # nobody has credit


def test_rebalance_moves_from_the_most_loaded() -> None:
    new = Maker()
    cs = ConsumerSet()
    table = GroupTable(cs)
    a = new()
    cs.add(a)
    cs.enter_lineup(a)
    for i in range(6):
        table.bind(table.new_group(f"g{i}"), a)
    table.by_key["g0"].flags |= F_PARKED  # a parked group stays
    n = new()
    cs.add(n)
    cs.enter_lineup(n)
    moved = []
    for g in cs.rebalance_moves(n, lambda c, g: True):
        table.unbind(g)
        table.bind(g, n)
        moved.append(g.key)
    assert moved == ["g1", "g2", "g3"] and a.nbound == n.nbound == 3


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["add", "add_x", "remove", "enter", "leave", "clear"]),
            st.integers(0, 5),
        ),
        max_size=60,
    )
)
def test_property_lineup_and_choice(ops: list[tuple[str, int]]) -> None:
    """After any sequence of joins, leaves and exclusive choices: ``nactive``
    counts the active consumers of the lineup, each active one once; the sole
    consumer is a member; a pick is active, ready and has the fewest groups."""
    new = Maker()
    cs = ConsumerSet()
    table = GroupTable(cs)
    pool = [new() for _ in range(3)] + [new(exclusive=True) for _ in range(3)]
    for op, i in ops:
        c = pool[i]
        if op in ("add", "add_x") and c not in cs and not c.closed:
            cs.add(c)
        elif op == "remove" and c in cs:
            cs.remove(c)
            if c.active:
                cs.leave_lineup(c)
            c.closed = True
            c.ready = False
            for g in groups_of(c):
                table.unbind(g)
        elif op == "enter" and c in cs and not c.active and not c.closed:
            cs.enter_lineup(c)
            cs.push_pick(c)
            g = table.new_group(f"g{len(table)}")
            p = cs.pick_for_group()
            if p is not None:
                table.bind(g, p)
        elif op == "leave" and c.active:
            # leave_lineup is for a consumer that is closing: it never enters again
            # (a stopped one comes back through clear_lineup, which empties the lineup)
            c.closed = True
            cs.leave_lineup(c)
        elif op == "clear":
            cs.clear_lineup()
        active = [x for x in cs.lineup if x.active]
        assert cs.nactive == len(active) == len(set(active))
        assert all(x in cs for x in active)
        sole = cs.sole_consumer()
        assert sole is None or sole in cs
        p = cs.pick_for_group()
        if p is not None:
            assert p.active and p.ready
            ready = [x for x in active if x.ready and x.pick_entry is not None]
            assert p.nbound == min(x.nbound for x in ready)
