"""Which message goes to which consumer next (G5, G6, G10, G13).

No scanning, no head-of-line blocking. A queue keeps

* a FIFO per group (``Group.head``..``tail``) and one for ungrouped
  messages (the pseudo-group ``Queue.ungrouped``);
* ``ready``: a heap of groups that may dispatch now, keyed by the id of their
  head message, so that across groups messages still leave roughly in
  arrival order (exactly, with a single consumer);
* per consumer, ``waiting``: bound groups whose owner has no credit;
* ``wait_any``: unbound groups (and the ungrouped FIFO) that found no
  consumer with credit.

A group sits in at most one of those (``Group.pos``); blocked groups
(draining, parked, idle) sit in none and are placed again by whatever
unblocks them. Entries that went stale are recognised by ``pos``/``owner``
and skipped, never searched for. When a consumer regains credit it moves at
most that many groups from its ``waiting`` deque and from ``wait_any`` back
to the heap. So the cost of dispatching a message is O(log ready groups),
independent of backlog depth, of the number of groups and of how many are
blocked; choosing a consumer for a new group or an ungrouped message is
O(consumers).
"""

from __future__ import annotations

from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any

from shoal.broker.effects import Deliver
from shoal.broker.groups import (
    F_CLOSING,
    F_FIRST,
    F_PARKED,
    F_RELEASE,
    POS_ANY,
    POS_HEAP,
    POS_NONE,
    POS_OWNER,
    Group,
)
from shoal.store.records import DeliveryCounted, MessageRemoved

if TYPE_CHECKING:
    from collections import deque

    from shoal.broker.consumer import Consumer
    from shoal.broker.message import Message

# Message.state values.
PENDING = 0
IN_FLIGHT = 1
DONE = 2


class DispatchMixin:
    """Dispatch methods of Queue (attributes are declared on Queue)."""

    __slots__ = ()

    ready: list[tuple[int, Group]]
    wait_any: deque[Group]
    ungrouped: Group
    active: list[Consumer]
    held: bool
    deleted: bool
    rr: int
    gcursor: int
    depth: int
    in_flight: int
    bytes: int
    delivered: int
    redelivered: int
    acked: int
    expired: int
    first_key: str | None
    shared: bool
    persist_dc: bool
    effects: list[Any]
    records: list[Any]
    name: str
    broker: Any
    blocked: dict[int, None]
    max_bytes: int
    paged: int
    paged_bytes: int

    # -- placement --------------------------------------------------------

    def place(self, g: Group) -> None:
        """Put a group with backlog (``pos == POS_NONE``) where it belongs."""
        flags = g.flags
        if flags & F_PARKED:
            return
        if g.in_flight and (flags & F_RELEASE or g.holder is not g.owner):
            return  # draining: ``drained`` places it when the holder settled
        o = g.owner
        if o is not None and not o.ready:
            g.pos = POS_OWNER
            o.waiting.append(g)
            return
        g.pos = POS_HEAP
        heappush(self.ready, (g.head.id, g))

    def consumer_ready(self, c: Consumer) -> None:
        """``c`` regained credit: give back at most that many waiting groups.

        Each group given back delivers at least one message to ``c`` or goes
        back to waiting because ``c`` filled up, so the work is bounded by the
        credit. If entries are left while ``c`` still has credit after the
        next pass, ``dispatch`` asks again (``refill``).
        """
        k = c.credit
        w = c.waiting
        moved = 0
        while w and moved < k:
            g = w.popleft()
            if g.pos != POS_OWNER or g.owner is not c:
                continue  # stale entry
            g.pos = POS_NONE
            if g.backlog:
                self.place(g)
                if g.pos == POS_HEAP:
                    moved += 1
        left = bool(w)
        wa = self.wait_any
        if wa and c in self.active:
            moved = 0
            while wa and moved < k:
                g = wa.popleft()
                if g.pos != POS_ANY:
                    continue
                g.pos = POS_NONE
                if g.backlog:
                    self.place(g)
                    if g.pos == POS_HEAP:
                        moved += 1
            left = left or bool(wa)
        if left:
            self.refill.append(c)

    def release_waiting(self) -> None:
        """Eligibility changed: every waiting group goes back to the heap."""
        wa = self.wait_any
        while wa:
            g = wa.popleft()
            if g.pos == POS_ANY:
                g.pos = POS_NONE
                if g.backlog:
                    self.place(g)

    # -- choosing a consumer ------------------------------------------------

    def pick_for_group(self) -> Consumer | None:
        """G6: fewest bound groups among consumers with credit; ties round-robin."""
        act = self.active
        n = len(act)
        if n == 1:
            c = act[0]
            return c if c.ready else None
        best = None
        best_n = 1 << 62
        best_i = 0
        i = self.gcursor
        for _ in range(n):
            if i >= n:
                i = 0
            c = act[i]
            if c.ready and c.nbound < best_n:
                best = c
                best_n = c.nbound
                best_i = i
            i += 1
        if best is not None:
            self.gcursor = best_i + 1
        return best

    def next_round_robin(self) -> Consumer | None:
        """G10: the next consumer with credit; a cursor of its own."""
        act = self.active
        n = len(act)
        i = self.rr
        for _ in range(n):
            if i >= n:
                i = 0
            c = act[i]
            i += 1
            if c.ready:
                self.rr = i
                return c
        return None

    # -- the loop ------------------------------------------------------------

    def dispatch(self) -> None:
        if self.held or not self.active or self.deleted:
            return
        while True:
            if self.ready:
                self._dispatch_ready()
            if not self.refill:
                return
            refill = self.refill
            self.refill = []
            for c in refill:
                if c.ready and not c.closed:
                    self.consumer_ready(c)
            if not self.ready:
                return

    def _dispatch_ready(self) -> None:
        ready = self.ready
        now_ms = self.broker.now_ms
        u = self.ungrouped
        pop_head = self.pop_head
        deliver = self.deliver
        while ready:
            g = heappop(ready)[1]
            if g.pos != POS_HEAP:
                continue
            g.pos = POS_NONE
            if not g.backlog:
                continue
            if g is u:
                self._dispatch_ungrouped(now_ms)
                continue
            flags = g.flags
            if flags & F_PARKED:
                continue
            if g.in_flight and (flags & F_RELEASE or g.holder is not g.owner):
                continue
            c = g.owner
            if c is None:
                c = self.pick_for_group()
                if c is None:
                    g.pos = POS_ANY
                    self.wait_any.append(g)
                    continue
                self.bind(g, c)  # type: ignore[attr-defined]
            elif not c.ready:
                g.pos = POS_OWNER
                c.waiting.append(g)
                continue
            while True:
                m = pop_head(g, now_ms)
                if m is None:
                    break
                deliver(m, g, c)
                if (
                    not g.backlog
                    or not c.ready
                    or g.owner is not c
                    or g.flags & F_RELEASE
                    or (ready and ready[0][0] < g.head.id)
                ):
                    break
            if g.backlog:
                if g.pos == POS_NONE:
                    self.place(g)
            elif not g.in_flight:
                self.retire(g)  # type: ignore[attr-defined]

    def _dispatch_ungrouped(self, now_ms: int) -> None:
        u = self.ungrouped
        ready = self.ready
        while True:
            c = self.next_round_robin()
            if c is None:
                u.pos = POS_ANY
                self.wait_any.append(u)
                return
            m = self.pop_head(u, now_ms)
            if m is None:
                return
            self.deliver(m, u, c)
            if not u.backlog:
                return
            if ready and ready[0][0] < u.head.id:
                break
        self.place(u)

    def pop_head(self, g: Group, now_ms: int) -> Message | None:
        """Unlink and return ``g``'s first pending, unexpired message."""
        m = g.head
        while m is not None:
            nxt = m.link
            m.link = None
            g.head = nxt
            if nxt is None:
                g.tail = None
            if m.state == PENDING:
                exp = m.expires
                if exp and exp <= now_ms:
                    g.backlog -= 1
                    self.depth -= 1
                    self.expire_done(m)  # type: ignore[attr-defined]
                else:
                    return m
            m = nxt
        return None

    def deliver(self, m: Message, g: Group, c: Consumer) -> None:
        """Hand ``m`` (already unlinked) to ``c``: one Deliver effect."""
        g.backlog -= 1
        self.depth -= 1
        self.delivered += 1
        c.delivered += 1
        dc = m.delivery_count
        if dc:
            self.redelivered += 1
        first = None
        if g.flags & F_FIRST:
            g.flags &= ~F_FIRST
            first = self.first_key
        b = c.burst - 1
        c.burst = b
        if b <= 0:
            c.ready = False
            self.broker.capped.append(c)
        if c.auto:
            m.state = DONE
            self.acked += 1
            c.acked += 1
            d = Deliver(c.conn_id, c.sub_id, str(m.id), m, dc > 0, first)
            if m.body is None:
                self.paged -= 1
                self.paged_bytes -= m.size
                self.broker.page_ins.append(d)
            else:
                self.bytes -= m.size
                self.broker.total_bytes -= m.size
            if m.persistent:
                self.records.append(MessageRemoved(self.name, m.id))
            self.effects.append(d)
            if m.grp is not None and g.owner is not None and (m.group_seq < 0 or self.shared):
                self.unbind(g)  # type: ignore[attr-defined]
            if self.blocked and self.bytes < self.max_bytes:
                self.unblock_producers()  # type: ignore[attr-defined]
            return
        m.state = IN_FLIGHT
        m.holder = c
        self.in_flight += 1
        if self.persist_dc and m.persistent:
            self.records.append(DeliveryCounted(self.name, m.id, dc + 1))
        gg = m.grp
        if gg is not None:
            gg.in_flight += 1
            gg.holder = c
            if m.group_seq < 0:
                gg.flags |= F_CLOSING
        c.credit -= 1
        c.window -= m.size
        if c.credit <= 0 or c.window <= 0:
            c.ready = False
        c.conn.acks[m.id] = m
        un = c.unsettled
        if un is not None:
            un.append(m)
        d = Deliver(c.conn_id, c.sub_id, str(m.id), m, dc > 0, first)
        if m.body is None:
            self.broker.page_ins.append(d)
        self.effects.append(d)
