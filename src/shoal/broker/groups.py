"""Group bindings: ownership, draining, rebalance, buckets, eviction (G3, G4, G8, G9).

A :class:`Group` is the per-group state of one queue: its FIFO of pending
messages (an intrusive singly linked list through ``Message.link``), its
owner (the consumer its next message goes to), its holder (the consumer that
holds its unsettled messages; G2 says there is at most one) and a few flags.
It is kept small (``__slots__``, no per-group dicts or deques) because a
queue may track millions of them: bound groups sit on an intrusive doubly
linked list of their owner (``cprev``/``cnext``), and bound *idle* groups
(nothing pending or in flight) on the queue's LRU list (``iprev``/``inext``)
from which bindings are evicted past ``group-bindings-max``. Evicting an
idle binding only forgets stickiness; it can never reorder anything. The LRU
is kept only once the table has outgrown the bound (``lru_start``): below it
nothing can be evicted, and the hot path skips the bookkeeping.

:class:`GroupTable` is one queue's table of groups: by key, the ones set
aside by selectors (``singles``), the LRU and the bindings. The queue holds
it as ``Queue.groups``; the consumers it binds groups to are the queue's
:class:`~shoal.broker.consumers.ConsumerSet`, whose fewest-groups choice it
keeps in step.

An operator reset keeps the group, unbound, even when it is idle (on the
same LRU), so that its ``reassigned`` count and the reset stay visible.

Invariants (checked by tests/property):

* ``holder`` is not None iff ``in_flight > 0`` (grouped messages only);
* a group's next message goes to ``owner`` only when ``holder`` is None or
  ``owner`` (G2), and never while ``F_CLOSING``/``F_RESET`` wait for the
  holder to settle (G3 draining);
* ``owner.nbound`` counts the groups whose ``owner`` it is, draining ones
  included ("fewest groups", G6).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shoal.broker.consumers import groups_of
from shoal.broker.hashing import bucket_of
from shoal.broker.model import (
    F_FIFO,
    F_FIRST,
    F_GONE,
    F_IN_LRU,
    F_PARKED,
    F_RELEASE,
    POS_NONE,
    POS_OWNER,
    Group,
)

if TYPE_CHECKING:
    from collections.abc import ValuesView

    from shoal.broker.consumers import ConsumerSet
    from shoal.broker.model import Consumer


class GroupTable:
    """One queue's groups: by key, set aside by selectors, idle (LRU), bound."""

    __slots__ = (
        "by_key",
        "buckets",
        "bindings_max",
        "singles",
        "lru_head",
        "lru_tail",
        "lru_on",
        "consumers",
    )

    def __init__(self, consumers: ConsumerSet, *, buckets: int = -1, bindings_max: int = 1) -> None:
        self.by_key: dict[Any, Group] = {}
        # group-buckets: < 0 keys are group ids, 0 no groups, > 0 bucket numbers
        self.buckets = buckets
        self.bindings_max = bindings_max if bindings_max > 0 else 1
        self.singles: dict[Group, None] = {}  # ungrouped messages set aside by selectors
        self.lru_head: Group | None = None
        self.lru_tail: Group | None = None
        self.lru_on = False  # see lru_start
        self.consumers = consumers

    # -- the table as a mapping (management, views) ------------------------

    def __len__(self) -> int:
        return len(self.by_key)

    def __contains__(self, key: object) -> bool:
        return key in self.by_key

    def get(self, key: Any) -> Group | None:
        return self.by_key.get(key)

    def values(self) -> ValuesView[Group]:
        return self.by_key.values()

    # -- keys -------------------------------------------------------------

    def key_of(self, gid: str) -> Any:
        """The table key of group id ``gid``: the id, its bucket, or None
        (no groups: the message is ungrouped)."""
        b = self.buckets
        return gid if b < 0 else (None if b == 0 else bucket_of(gid, b))

    def key_for_name(self, name: str) -> Any:
        """Management names: the group id, or '#N' for bucket N."""
        b = self.buckets
        if b > 0:
            if name.startswith("#") and name[1:].isdigit():
                return int(name[1:]) % b
            return bucket_of(name, b)
        return name

    def new_group(self, key: Any) -> Group:
        g = Group(key)
        self.by_key[key] = g
        return g

    def group_for_message(self, key: Any) -> Group:
        """The group a message of ``key`` joins: created if new (evicting idle
        bindings past the bound), or taken off the LRU."""
        groups = self.by_key
        g = groups.get(key)
        if g is None:
            g = Group(key)
            groups[key] = g
            if len(groups) > self.bindings_max:
                if not self.lru_on:
                    self.lru_start(g)
                if self.lru_head is not None:
                    self.evict()
        elif g.flags & F_IN_LRU:
            self.lru_unlink(g)
        return g

    # -- binding ----------------------------------------------------------

    def bind(self, g: Group, c: Consumer) -> None:
        """Make ``c`` the owner of unbound ``g`` (its next message goes to c)."""
        g.owner = c
        c.nbound += 1
        tail = c.gtail
        g.cprev = tail
        g.cnext = None
        if tail is None:
            c.ghead = g
        else:
            tail.cnext = g
        c.gtail = g
        g.flags |= F_FIRST
        g.binds += 1
        self.consumers.gave_group(c)

    def unbind(self, g: Group) -> None:
        """Forget ``g``'s owner. The caller places or retires the group."""
        c = g.owner
        if c is None:
            return
        c.nbound -= 1
        if c.pick_entry is not None:
            self.consumers.push_pick(c)  # fewer groups: earlier in line
        p, n = g.cprev, g.cnext
        if p is None:
            c.ghead = n
        else:
            p.cnext = n
        if n is None:
            c.gtail = p
        else:
            n.cprev = p
        g.cprev = g.cnext = None
        g.owner = None
        if g.flags & F_IN_LRU:
            self.lru_unlink(g)  # the LRU holds bound idle groups only
        g.flags &= ~(F_FIRST | F_RELEASE)
        if g.pos == POS_OWNER:
            g.pos = POS_NONE  # its entry in the old owner's deque goes stale

    def groups_of(self, c: Consumer) -> list[Group]:
        return groups_of(c)

    # -- idle groups and eviction (G9) -------------------------------------

    def retire(self, g: Group) -> None:
        """``g`` has nothing pending or in flight: drop it, or keep its binding."""
        if g.flags & (F_PARKED | F_GONE | F_IN_LRU | F_FIFO):
            return
        if g.owner is None:
            self.drop_group(g)
            return
        if self.lru_on:
            self.lru_append(g)

    def keep_idle(self, g: Group) -> None:
        """Keep idle ``g`` (the LRU: newest at the tail) until it is evicted.

        Bound idle groups keep their binding (stickiness). An operator reset
        also keeps the unbound idle group, so its history (``reassigned``)
        stays visible; either way eviction past ``group-bindings-max`` only
        forgets, it never reorders.
        """
        if g.flags & (F_PARKED | F_GONE | F_IN_LRU):
            return
        if self.lru_on:
            self.lru_append(g)

    def lru_start(self, new: Group) -> None:
        """The table outgrew ``group-bindings-max`` for the first time.

        Until then idle groups are not linked anywhere (no eviction can be
        needed, and the hot path saves the LRU bookkeeping); now every idle
        group but ``new`` (just created, its message not queued yet) goes on
        the LRU in table order, and from here on the LRU is kept as usual.
        """
        self.lru_on = True
        tail = self.lru_tail
        for g in self.by_key.values():
            if g is new or g.backlog or g.in_flight or g.flags & (F_PARKED | F_GONE | F_IN_LRU):
                continue
            g.flags |= F_IN_LRU
            g.iprev = tail
            g.inext = None
            if tail is None:
                self.lru_head = g
            else:
                tail.inext = g
            tail = g
        self.lru_tail = tail

    def lru_append(self, g: Group) -> None:
        g.flags |= F_IN_LRU
        tail = self.lru_tail
        g.iprev = tail
        g.inext = None
        if tail is None:
            self.lru_head = g
        else:
            tail.inext = g
        self.lru_tail = g
        if len(self.by_key) > self.bindings_max:
            self.evict()

    def lru_unlink(self, g: Group) -> None:
        p, n = g.iprev, g.inext
        if p is None:
            self.lru_head = n
        else:
            p.inext = n
        if n is None:
            self.lru_tail = p
        else:
            n.iprev = p
        g.iprev = g.inext = None
        g.flags &= ~F_IN_LRU

    def evict(self) -> None:
        """Forget the least recently idle bindings until under the bound."""
        groups = self.by_key
        limit = self.bindings_max
        while len(groups) > limit:
            g = self.lru_head
            if g is None:
                return  # every tracked group is busy: memory follows the backlog
            self.lru_unlink(g)
            self.unbind(g)
            self.drop_group(g)

    def drop_group(self, g: Group) -> None:
        if g.flags & F_IN_LRU:
            self.lru_unlink(g)
        key = g.key
        if key is None:
            self.singles.pop(g, None)  # an ungrouped message set aside by selectors
        elif self.by_key.get(key) is g:
            del self.by_key[key]
        g.flags |= F_GONE

    # -- parking (G11 poison policy "park", operator park/resume) ----------

    def park(self, g: Group) -> bool:
        """Stop delivering ``g`` until resumed; False if it was parked already."""
        if g.flags & F_PARKED:
            return False
        if g.flags & F_IN_LRU:
            self.lru_unlink(g)
        g.flags |= F_PARKED
        return True

    def unpark(self, g: Group) -> bool:
        """Deliver ``g`` again; False if it was not parked."""
        if not g.flags & F_PARKED:
            return False
        g.flags &= ~F_PARKED
        return True
