"""Which message goes to which consumer next (G5, G6, G10, G13, G16).

No scanning, no head-of-line blocking. A queue keeps

* a FIFO per group (``Group.head``..``tail``) and one for ungrouped
  messages (the pseudo-group ``Queue.ungrouped``);
* ``ready``: a heap of groups that may dispatch now, keyed by the id of their
  head message;
* per consumer, ``waiting``: bound groups whose owner has no credit;
* ``wait_any``: unbound groups (and the ungrouped FIFO) that found no
  consumer with credit.

``waiting`` and ``wait_any`` are heaps keyed like ``ready``. A group sits in
at most one of those (``Group.pos``); blocked groups (draining, parked,
idle) sit in none and are placed again by whatever unblocks them. Entries
that went stale are recognised by ``pos``/``owner`` and skipped, never
searched for. A returned message that becomes its group's head enters the
group again under the earlier key (``reposition``).

G16, queue order per consumer: before a message goes to consumer ``c`` it
is checked against the earliest key of ``ready``, of ``c.waiting`` and of
``wait_any``; if one of those is earlier, that group is moved to ``ready``
(``pull_earlier``) and the message waits its turn. So every consumer gets
the earliest message it may take, and a single or exclusive consumer gets
everything in queue order. When a consumer regains credit it moves at most
that many groups (the earliest) from its ``waiting`` heap and from
``wait_any`` to ``ready``; anything it may take that is earlier is pulled
as above. So the cost of dispatching a message is O(log n) in the groups
waiting, independent of backlog depth and of how many groups are blocked.

Consumers (G6, G10, G13): ``lineup`` lists the consumers that may receive
in subscription order, for the ungrouped round-robin cursor ``rr``; a
consumer that left stays there (closed, never ready) until the list is
compacted, so joining and leaving cost O(1) amortised. ``pickable`` is a
heap of (bound groups, turn, consumer) over the active consumers with
credit, each consumer with one live entry (``Consumer.pick_entry``, others
are stale): a new group goes to its top, the consumer with the fewest
groups, ties to the one that was given a group least recently (``turn``;
initially subscription order), in O(log consumers).
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush
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
    wait_any: list[tuple[int, Group]]
    refill: list[Consumer]
    ungrouped: Group
    lineup: list[Consumer]
    nactive: int
    pickable: list[tuple[int, int, Consumer]]
    turns: int
    held: bool
    deleted: bool
    rr: int
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
            heappush(o.waiting, (g.head.id, g))
            return
        g.pos = POS_HEAP
        heappush(self.ready, (g.head.id, g))

    def reposition(self, g: Group) -> None:
        """``g``'s head became earlier (a returned message) while it waits: enter
        it again under the new key; the old entry is skipped or moves it early,
        which the G16 check makes harmless."""
        e = (g.head.id, g)
        pos = g.pos
        if pos == POS_HEAP:
            heappush(self.ready, e)
        elif pos == POS_OWNER:
            heappush(g.owner.waiting, e)  # type: ignore[union-attr]
        elif pos == POS_ANY:
            heappush(self.wait_any, e)

    def consumer_ready(self, c: Consumer) -> None:
        """``c`` regained credit: give back at most that many waiting groups, earliest first.

        Each group given back delivers at least one message to ``c`` or goes
        back to waiting because ``c`` filled up, so the work is bounded by the
        credit. If entries are left while ``c`` still has credit after the
        next pass, ``dispatch`` asks again (``refill``).
        """
        k = c.credit
        moved = self._unwait(c.waiting, k, c)
        left = moved < 0
        if c.active:
            if c.pick_entry is None:
                self.push_pick(c)
            if self.wait_any:
                left = self._unwait(self.wait_any, k, None) < 0 or left
        if left:
            self.refill.append(c)

    def _unwait(self, heap: list[tuple[int, Group]], k: int, owner: Consumer | None) -> int:
        """Move up to ``k`` valid groups from a waiting heap (``owner``'s, or
        ``wait_any`` for None) to ``ready``: the number moved, -1 if entries are left."""
        pos = POS_ANY if owner is None else POS_OWNER
        moved = 0
        while heap and moved < k:
            g = heappop(heap)[1]
            if g.pos != pos or g.owner is not owner:
                continue  # stale entry
            g.pos = POS_NONE
            if g.backlog:
                self.place(g)
                if g.pos == POS_HEAP:
                    moved += 1
        return -1 if heap else moved

    def pull_earlier(self, c: Consumer, mid: int) -> bool:
        """G16: is there a group ``c`` may take, waiting with a head before ``mid``?

        The earliest such group moves to ``ready`` (True); stale entries met
        on the way are dropped. Only called while ``c`` has credit.
        """
        w = c.waiting
        while w and w[0][0] < mid:
            g = heappop(w)[1]
            if g.pos == POS_OWNER and g.owner is c:
                g.pos = POS_NONE
                if g.backlog:
                    self.place(g)
                    if g.pos == POS_HEAP:
                        return True
        wa = self.wait_any
        while wa and wa[0][0] < mid:
            g = heappop(wa)[1]
            if g.pos == POS_ANY:
                g.pos = POS_NONE
                if g.backlog:
                    self.place(g)
                    if g.pos == POS_HEAP:
                        return True
        return False

    # -- choosing a consumer ------------------------------------------------

    def push_pick(self, c: Consumer) -> None:
        """Give active ``c`` a fresh entry in ``pickable`` (its old one goes stale)."""
        e = (c.nbound, c.turn, c)
        c.pick_entry = e
        heap = self.pickable
        heappush(heap, e)
        if len(heap) > 2 * self.nactive + 32:
            self.compact_pickable()

    def compact_pickable(self) -> None:
        """Drop stale entries (amortised: the heap is at least twice the live ones)."""
        heap = [c.pick_entry for c in self.lineup if c.active and c.pick_entry is not None]
        heapify(heap)
        self.pickable = heap  # type: ignore[assignment]

    def pick_for_group(self) -> Consumer | None:
        """G6: fewest bound groups among consumers with credit; ties to the one
        given a group least recently. Looks only: ``bind`` commits the choice."""
        heap = self.pickable
        while heap:
            e = heap[0]
            c = e[2]
            if e is not c.pick_entry:
                heappop(heap)
            elif not c.ready:
                heappop(heap)
                c.pick_entry = None  # back with its next ready edge (consumer_ready)
            else:
                return c
        return None

    def next_round_robin(self) -> Consumer | None:
        """G10: the next consumer with credit; a cursor of its own."""
        act = self.lineup
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
        if self.held or not self.nactive or self.deleted:
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
        wa = self.wait_any
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
                    heappush(wa, (g.head.id, g))
                    continue
            elif not c.ready:
                g.pos = POS_OWNER
                heappush(c.waiting, (g.head.id, g))
                continue
            m = pop_head(g, now_ms)
            while m is not None:
                mid = m.id
                if (ready and ready[0][0] < mid) or (
                    (c.waiting or wa) and self.pull_earlier(c, mid)
                ):
                    # G16: something c may take is earlier; m waits its turn
                    m.link = g.head
                    g.head = m
                    if g.tail is None:
                        g.tail = m
                    break
                if g.owner is None:
                    self.bind(g, c)  # type: ignore[attr-defined]
                deliver(m, g, c)
                if not g.backlog or not c.ready or g.owner is not c or g.flags & F_RELEASE:
                    break
                m = pop_head(g, now_ms)
            if g.backlog:
                if g.pos == POS_NONE:
                    self.place(g)
            elif not g.in_flight:
                self.retire(g)  # type: ignore[attr-defined]

    def _dispatch_ungrouped(self, now_ms: int) -> None:
        u = self.ungrouped
        ready = self.ready
        wa = self.wait_any
        while True:
            rr = self.rr
            c = self.next_round_robin()
            if c is None:
                u.pos = POS_ANY
                heappush(wa, (u.head.id, u))
                return
            m = self.pop_head(u, now_ms)
            if m is None:
                return
            mid = m.id
            if (ready and ready[0][0] < mid) or ((c.waiting or wa) and self.pull_earlier(c, mid)):
                m.link = u.head  # G16, as in _dispatch_ready; c keeps its turn
                u.head = m
                if u.tail is None:
                    u.tail = m
                self.rr = rr
                break
            self.deliver(m, u, c)
            if not u.backlog:
                return
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
