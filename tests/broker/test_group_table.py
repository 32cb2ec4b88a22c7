"""GroupTable on its own: keys and buckets, bindings (the owner's intrusive
list), idle groups and eviction past group-bindings-max (G9), parking."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.broker.conftest import ConsumerMaker as Maker

from shoal.broker.consumers import ConsumerSet, groups_of
from shoal.broker.groups import GroupTable
from shoal.broker.hashing import bucket_of
from shoal.broker.model import F_FIRST, F_GONE, F_IN_LRU, F_PARKED, Consumer, Group


def test_keys_and_buckets() -> None:
    cs = ConsumerSet()
    named = GroupTable(cs)
    assert named.key_of("g") == "g" and named.key_for_name("g") == "g"
    assert GroupTable(cs, buckets=0).key_of("g") is None  # no groups: ungrouped
    bucketed = GroupTable(cs, buckets=8)
    assert bucketed.key_of("g") == bucket_of("g", 8) == bucketed.key_for_name("g")
    assert bucketed.key_for_name("#11") == 3


def test_mapping_view() -> None:
    t = GroupTable(ConsumerSet())
    g = t.new_group("a")
    assert len(t) == 1 and "a" in t and t.get("a") is g and list(t.values()) == [g]
    assert t.get("b") is None


def test_bind_and_unbind_keep_the_owner_list() -> None:
    new = Maker()
    cs = ConsumerSet()
    t = GroupTable(cs)
    c = new()
    gs = [t.new_group(k) for k in "abc"]
    for g in gs:
        t.bind(g, c)
    assert groups_of(c) == gs and c.nbound == 3 and all(g.owner is c for g in gs)
    assert gs[0].flags & F_FIRST and gs[0].binds == 1
    t.unbind(gs[1])
    assert groups_of(c) == [gs[0], gs[2]] and c.nbound == 2 and gs[1].owner is None
    t.unbind(gs[1])  # unbound already: nothing happens
    assert c.nbound == 2


def test_group_for_message_creates_then_finds() -> None:
    t = GroupTable(ConsumerSet(), bindings_max=10)
    g = t.group_for_message("a")
    assert t.group_for_message("a") is g and len(t) == 1


def test_unbound_idle_group_is_dropped() -> None:
    t = GroupTable(ConsumerSet())
    g = t.new_group("a")
    t.retire(g)
    assert "a" not in t and g.flags & F_GONE


def test_eviction_past_bindings_max_forgets_idle_bindings_oldest_first() -> None:
    new = Maker()
    cs = ConsumerSet()
    t = GroupTable(cs, bindings_max=2)
    c = new()
    for k in "ab":
        g = t.group_for_message(k)
        t.bind(g, c)
    t.group_for_message("c")  # outgrows the bound: the LRU starts with a, b
    assert t.lru_on and len(t) == 2 and "a" not in t and "b" in t
    assert c.nbound == 1  # a's binding was forgotten


def test_busy_groups_are_never_evicted() -> None:
    t = GroupTable(ConsumerSet(), bindings_max=1)
    for k in "abc":
        t.group_for_message(k).backlog = 1
    assert len(t) == 3  # memory follows the backlog


def test_park_and_unpark() -> None:
    t = GroupTable(ConsumerSet())
    g = t.new_group("a")
    assert t.park(g) and not t.park(g)
    t.retire(g)
    assert "a" in t  # a parked group stays until resumed
    assert t.unpark(g) and not t.unpark(g)
    assert not g.flags & F_PARKED


def _check(t: GroupTable, cons: list[Consumer]) -> None:
    lru = []
    g = t.lru_head
    while g is not None:
        lru.append(g)
        g = g.inext
    assert all(g.flags & F_IN_LRU for g in lru) and len(lru) == len(set(lru))
    assert all(g.owner is not None and not g.backlog for g in lru)  # bound idle groups only
    assert all(t.get(g.key) is g for g in lru)
    for c in cons:
        assert c.nbound == len(groups_of(c))
        assert all(g.owner is c and t.get(g.key) is g for g in groups_of(c))
    n_lru = sum(1 for g in t.values() if g.flags & F_IN_LRU)
    assert n_lru == len(lru)
    if t.lru_on and lru:
        assert len(t) <= t.bindings_max


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 4),
    st.lists(
        st.tuples(
            st.sampled_from(["msg", "bind", "unbind", "idle", "park", "resume"]),
            st.integers(0, 7),
            st.integers(0, 2),
        ),
        max_size=80,
    ),
)
def test_property_table_invariants(bound: int, ops: list[tuple[str, int, int]]) -> None:
    """Any mix of arrivals, bindings, groups going idle and parking keeps the
    owner lists, ``nbound`` and the LRU consistent, and the table within
    ``group-bindings-max`` whenever an idle binding could have gone."""
    new = Maker()
    cs = ConsumerSet()
    t = GroupTable(cs, bindings_max=bound)
    cons = [new() for _ in range(3)]
    for op, k, ci in ops:
        key = f"g{k}"
        g: Group | None = t.get(key)
        if op == "msg":
            t.group_for_message(key).backlog += 1
        elif g is None:
            continue
        elif op == "bind" and g.owner is None:
            t.bind(g, cons[ci])
        elif op == "unbind" and g.owner is not None:
            t.unbind(g)
            if not g.backlog:
                t.retire(g)
        elif op == "idle" and g.backlog:
            g.backlog = 0
            t.retire(g)
        elif op == "park":
            t.park(g)
        elif op == "resume" and t.unpark(g) and not g.backlog:
            t.retire(g)
        _check(t, cons)
