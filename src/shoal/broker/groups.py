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

The mixin below holds the group-table methods of :class:`~shoal.broker.queue.Queue`;
the attributes it uses are declared in the Queue's ``__slots__``.

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

from mypy_extensions import trait

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
from shoal.broker.queue_context import QueueCore
from shoal.records import GroupParked

if TYPE_CHECKING:
    from shoal.broker.model import Consumer


@trait
class GroupTableMixin(QueueCore):
    """Group-table methods of Queue; QueueCore declares what they use of it."""

    # -- keys -------------------------------------------------------------

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
        self.groups[key] = g
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
        self.turns += 1  # G6 ties: c was given a group last
        c.turn = self.turns
        if c.active:
            self.push_pick(c)

    def unbind(self, g: Group) -> None:
        """Forget ``g``'s owner. The caller places or retires the group."""
        c = g.owner
        if c is None:
            return
        c.nbound -= 1
        if c.pick_entry is not None:
            self.push_pick(c)  # fewer groups: earlier in line
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
        out = []
        g = c.ghead
        while g is not None:
            out.append(g)
            g = g.cnext
        return out

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
        for g in self.groups.values():
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
        if len(self.groups) > self.bindings_max:
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
        groups = self.groups
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
        elif self.groups.get(key) is g:
            del self.groups[key]
        g.flags |= F_GONE

    # -- parking (G11 poison policy "park", operator park/resume) ----------

    def park(self, g: Group, *, record: bool = True) -> None:
        if g.flags & F_PARKED:
            return
        if g.flags & F_IN_LRU:
            self.lru_unlink(g)
        g.flags |= F_PARKED
        if record:
            self.broker.records.append(GroupParked(self.name, g.name))
