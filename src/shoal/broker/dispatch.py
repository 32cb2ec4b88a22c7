"""Which message goes to which consumer next (G5, G6, G10, G13, G16).

No scanning, no head-of-line blocking. A queue keeps

* a FIFO per group (``Group.head``..``tail``) and one for ungrouped
  messages (the pseudo-group ``Queue.ungrouped``);
* ``ready``: a heap of groups that may dispatch now, keyed by the id of their
  head message;
* per consumer, ``awaiting_credit``: bound groups whose owner has no credit;
* ``wait_any``: unbound groups (and the ungrouped FIFO) that found no
  consumer with credit.

``awaiting_credit`` and ``wait_any`` are heaps keyed like ``ready``. A group sits in
at most one of those (``Group.pos``); blocked groups (draining, parked,
idle) sit in none and are placed again by whatever unblocks them. Entries
that went stale are recognised by ``pos``/``owner`` and skipped, never
searched for. A returned message that becomes its group's head enters the
group again under the earlier key (``reposition``).

G16, queue order per consumer: before a message goes to consumer ``c`` it
is checked against the earliest key of ``ready``, of ``c.awaiting_credit`` and of
``wait_any``; if one of those is earlier, that group is moved to ``ready``
(``pull_earlier``) and the message waits its turn. So every consumer gets
the earliest message it may take, and a single or exclusive consumer gets
everything in queue order. When a consumer regains credit it moves at most
that many groups (the earliest) from its ``awaiting_credit`` heap and from
``wait_any`` to ``ready``; anything it may take that is earlier is pulled
as above. So the cost of dispatching a message is O(log n) in the groups
waiting, independent of backlog depth and of how many groups are blocked.

Consumers (G6, G10, G13): ``lineup`` lists the consumers that may receive
in subscription order, for the ungrouped round-robin cursor ``round_robin_at``; a
consumer that left stays there (closed, never ready) until the list is
compacted, so joining and leaving cost O(1) amortised. ``pickable`` is a
heap of (bound groups, turn, consumer) over the active consumers with
credit, each consumer with one live entry (``Consumer.pick_entry``, others
are stale): a new group goes to its top, the consumer with the fewest
groups, ties to the one that was given a group least recently (``turn``;
initially subscription order), in O(log consumers).

Priority (queue setting ``priority``): every key above is the head's id
minus ``priority * PRIO_STEP`` (``key``), so heads of higher priority go
first and equal priorities keep arrival order; ungrouped messages sit in
one FIFO per priority (``Queue.ungrouped_by_priority``). Within a group nothing is reordered.

Selectors (SUBSCRIBE ``selector``). While no consumer of the queue has one
(``selector_consumers == 0``) none of what follows runs. Otherwise ``_dispatch_ready_sel``
checks each message against the consumer it would go to:

* a bound group whose owner rejects its next message waits, bound, out of
  every structure (``POS_NONE``): only a new head (a message into the empty
  group, a return, an expiry), its owner leaving or a reset places it again,
  so it costs nothing while it waits and holds back nobody else;
* an unbound group (or ungrouped message) goes only to a consumer with
  credit whose selector accepts its head (G6/G10 among those). If only
  consumers without credit accept it, it waits in each of their ``selwait``
  heaps (``POS_SEL_WAIT``) and the first of them to regain credit takes it
  back to the heap; if no consumer accepts it, it waits in ``wait_sel``
  (``POS_SEL_NONE``) until a consumer joins;
* an ungrouped message that the consumers with credit reject is split off
  the ungrouped FIFO into a one-message pseudo-group (``Queue.singles``) that
  waits as above, so the FIFO behind it flows on.

Each wait costs O(consumers) selector evaluations once, like the choice of a
consumer; stale ``selwait`` entries are skipped, and compacted when a heap
doubles. G16 holds for what a consumer accepts (``selwait`` is checked too).
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush
from typing import TYPE_CHECKING, Literal

from mypy_extensions import trait

from shoal.broker.effects import Deliver
from shoal.broker.model import (
    DONE,
    F_CLOSING,
    F_FIFO,
    F_FIRST,
    F_PARKED,
    F_RELEASE,
    IN_FLIGHT,
    PENDING,
    POS_ANY,
    POS_HEAP,
    POS_NONE,
    POS_OWNER,
    POS_SEL_NONE,
    POS_SEL_WAIT,
    Consumer,
    Group,
)
from shoal.broker.queue_context import QueueCore
from shoal.records import DeliveryCounted, MessageRemoved

if TYPE_CHECKING:
    from shoal.broker.model import Message, PickEntry


# Keys with priority: id - priority * PRIO_STEP (ids stay far below it).
PRIO_STEP = 1 << 60


@trait
class DispatchMixin(QueueCore):
    """Dispatch methods of Queue; QueueCore declares what they use of it."""

    # -- placement --------------------------------------------------------

    def place(self, g: Group) -> None:
        """Put a group with backlog (``pos == POS_NONE``) where it belongs."""
        flags = g.flags
        if flags & F_PARKED or (self.fenced and g.key is not None):
            return  # ``unfence`` places the fenced ones again
        if g.in_flight and (flags & F_RELEASE or g.holder is not g.owner):
            return  # draining: ``drained`` places it when the holder settled
        o = g.owner
        h: Message = g.head  # type: ignore[assignment]  # a group with a backlog has a head
        k = h.id - h.priority * self.priority_step
        if o is not None and not o.ready:
            g.pos = POS_OWNER
            heappush(o.awaiting_credit, (k, g))
            return
        g.pos = POS_HEAP
        heappush(self.ready, (k, g))

    def reposition(self, g: Group) -> None:
        """``g``'s head became earlier (a returned message) while it waits: enter
        it again under the new key; the old entry is skipped or moves it early,
        which the G16 check makes harmless."""
        h: Message = g.head  # type: ignore[assignment]  # a group with a backlog has a head
        e = (h.id - h.priority * self.priority_step, g)
        pos = g.pos
        if pos == POS_HEAP:
            heappush(self.ready, e)
        elif pos == POS_OWNER:
            heappush(g.owner.awaiting_credit, e)  # type: ignore[union-attr]
        elif pos == POS_ANY:
            heappush(self.wait_any, e)
        elif pos in (POS_SEL_WAIT, POS_SEL_NONE):
            self.selwait_requeue(g)

    def consumer_ready(self, c: Consumer) -> None:
        """``c`` regained credit: give back at most that many waiting groups, earliest first.

        Each group given back delivers at least one message to ``c`` or goes
        back to waiting because ``c`` filled up, so the work is bounded by the
        credit. If entries are left while ``c`` still has credit after the
        next pass, ``dispatch`` asks again (``refill``).
        """
        k = c.credit
        moved = self._unwait(c.awaiting_credit, k, c)
        left = moved < 0
        if c.active:
            if c.pick_entry is None:
                self.push_pick(c)
            if self.wait_any:
                left = self._unwait(self.wait_any, k, None) < 0 or left
        if c.selwait:
            left = self.selwait_ready(c, k) or left
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
        w = c.awaiting_credit
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
        # A list, not a tuple: liveness is identity, and compiled code boxes a
        # tuple anew wherever it passes one on.
        e: PickEntry = [c.nbound, c.turn, c]
        c.pick_entry = e
        heap = self.pickable
        heappush(heap, e)
        if len(heap) > 2 * self.nactive + 32:
            self.compact_pickable()

    def compact_pickable(self) -> None:
        """Drop stale entries (amortised: the heap is at least twice the live ones)."""
        heap = [c.pick_entry for c in self.lineup if c.active and c.pick_entry is not None]
        heapify(heap)
        self.pickable = heap

    def pick_for_group(self) -> Consumer | None:
        """G6: fewest bound groups among consumers with credit; ties to the one
        given a group least recently. Looks only: ``bind`` commits the choice."""
        heap = self.pickable
        while heap:
            e = heap[0]
            c: Consumer = e[2]
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
        i = self.round_robin_at
        for _ in range(n):
            if i >= n:
                i = 0
            c = act[i]
            i += 1
            if c.ready:
                self.round_robin_at = i
                return c
        return None

    # -- the loop ------------------------------------------------------------

    def dispatch(self) -> None:
        if self.dispatch_held or not self.nactive or self.deleted:
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
        if self.selector_consumers:
            self._dispatch_ready_sel()
            return
        ready = self.ready
        wa = self.wait_any
        now_ms = self.broker.now_ms
        pstep = self.priority_step
        while ready:
            g = heappop(ready)[1]
            if g.pos != POS_HEAP:
                continue
            g.pos = POS_NONE
            if not g.backlog:
                continue
            if g.key is None:  # an ungrouped FIFO
                self._dispatch_ungrouped(g, now_ms)
                continue
            flags = g.flags
            if flags & F_PARKED or self.fenced:
                continue
            if g.in_flight and (flags & F_RELEASE or g.holder is not g.owner):
                continue
            c = g.owner
            if c is None:
                c = self.pick_for_group()
                if c is None:
                    g.pos = POS_ANY
                    h: Message = g.head  # type: ignore[assignment]  # a group with a backlog has a head
                    heappush(wa, (h.id - h.priority * pstep, g))
                    continue
            elif not c.ready:
                g.pos = POS_OWNER
                h = g.head  # type: ignore[assignment]  # a group with a backlog has a head
                heappush(c.awaiting_credit, (h.id - h.priority * pstep, g))
                continue
            m = self.pop_head(g, now_ms)
            while m is not None:
                mid = m.id - m.priority * pstep
                if (ready and ready[0][0] < mid) or (
                    (c.awaiting_credit or wa) and self.pull_earlier(c, mid)
                ):
                    # G16: something c may take is earlier; m waits its turn
                    m.link = g.head
                    g.head = m
                    if g.tail is None:
                        g.tail = m
                    break
                if g.owner is None:
                    self.bind(g, c)
                self.deliver(m, g, c)
                if not g.backlog or not c.ready or g.owner is not c or g.flags & F_RELEASE:
                    break
                m = self.pop_head(g, now_ms)
            if g.backlog:
                if g.pos == POS_NONE:
                    self.place(g)
            elif not g.in_flight:
                self.retire(g)

    def _dispatch_ungrouped(self, u: Group, now_ms: int) -> None:
        ready = self.ready
        wa = self.wait_any
        pstep = self.priority_step
        while True:
            rr = self.round_robin_at
            c = self.next_round_robin()
            if c is None:
                u.pos = POS_ANY
                h: Message = u.head  # type: ignore[assignment]  # a group with a backlog has a head
                heappush(wa, (h.id - h.priority * pstep, u))
                return
            m = self.pop_head(u, now_ms)
            if m is None:
                return
            mid = m.id - m.priority * pstep
            if (ready and ready[0][0] < mid) or (
                (c.awaiting_credit or wa) and self.pull_earlier(c, mid)
            ):
                m.link = u.head  # G16, as in _dispatch_ready; c keeps its turn
                u.head = m
                if u.tail is None:
                    u.tail = m
                self.round_robin_at = rr
                break
            self.deliver(m, u, c)
            if not u.backlog:
                return
        self.place(u)

    # -- selectors (see the module docstring) -------------------------------------

    def pick_accepting(
        self, headers: dict[str, str], *, grouped: bool
    ) -> Consumer | Literal[False] | None:
        """A consumer with credit whose selector accepts ``headers``. Looks only.

        For a group the one with the fewest groups, ties to the one given a
        group least recently (G6); otherwise the next in round-robin (G10).
        False: some consumer has credit but none of those accepts; None: none has credit.
        """
        act = self.lineup
        n = len(act)
        i = self.round_robin_at
        best: Consumer | None = None
        best_key = (1 << 62, 0)
        some_ready = False
        for _ in range(n):
            if i >= n:
                i = 0
            c = act[i]
            i += 1
            if not c.ready or not c.active:
                continue
            some_ready = True
            if grouped and (c.nbound, c.turn) >= best_key:
                continue
            acc = c.accepts
            if acc is None or acc(headers):
                if not grouped:
                    self.round_robin_at = i
                    return c
                best = c
                best_key = (c.nbound, c.turn)
        if best is not None:
            return best
        return False if some_ready else None

    def wait_for_acceptor(self, g: Group, m: Message) -> None:
        """No consumer with credit accepts ``m``, the head of unbound ``g``: ``g`` waits."""
        h = m.headers
        e = (m.id - m.priority * self.priority_step, g)
        found = False
        for c in self.lineup:
            if not c.active:
                continue
            acc = c.accepts
            if acc is None or acc(h):
                found = True
                sw = c.selwait
                if not sw:
                    if sw is None:
                        sw = c.selwait = []
                    self.selwaiters[c] = None
                heappush(sw, e)
                if len(sw) > c.selwait_max:
                    self._compact_selwait(c)
        if found:
            g.pos = POS_SEL_WAIT
        else:
            g.pos = POS_SEL_NONE
            self.wait_sel.append(g)

    @staticmethod
    def _compact_selwait(c: Consumer) -> None:
        live: dict[Group, int] = {}
        for k, g in c.selwait or ():
            if g.pos == POS_SEL_WAIT and k < live.get(g, k + 1):
                live[g] = k
        heap = [(k, g) for g, k in live.items()]
        heapify(heap)
        c.selwait = heap
        c.selwait_max = max(64, 2 * len(heap))

    def selwait_requeue(self, g: Group) -> None:
        """``g`` waits on selectors and its head changed: examine it again."""
        g.pos = POS_NONE
        self.place(g)
        self.touch()

    def selwait_ready(self, c: Consumer, k: int) -> bool:
        """``c`` regained credit: up to ``k`` groups it was waited for go to ``ready``."""
        sw = c.selwait
        moved = 0
        while sw and moved < k:
            g = heappop(sw)[1]
            if g.pos != POS_SEL_WAIT:
                continue  # stale: another acceptor took it, or it waits elsewhere now
            g.pos = POS_NONE
            if g.backlog:
                self.place(g)
                moved += 1
        return bool(sw)

    def pull_selwait(self, c: Consumer, mid: int) -> bool:
        """G16 for what waits on ``c``'s selector: like ``pull_earlier``."""
        sw = c.selwait
        while sw and sw[0][0] < mid:
            g = heappop(sw)[1]
            if g.pos == POS_SEL_WAIT:
                g.pos = POS_NONE
                if g.backlog:
                    self.place(g)
                    return True
        return False

    def release_selector_waits(self, c: Consumer | None = None) -> None:
        """Heads waiting on selectors are examined again.

        With ``c`` (it leaves): the groups that waited for ``c``'s credit.
        Without (a consumer joined, or the last selector left): every one.
        """
        pending: list[Group] = []
        if c is None:
            pending.extend(self.wait_sel)
            self.wait_sel = []
            for w in self.selwaiters:
                if w.selwait:
                    pending.extend(g for _, g in w.selwait)
                    w.selwait = []
            self.selwaiters = {}
        elif c.selwait:
            pending.extend(g for _, g in c.selwait)
            c.selwait = []
            self.selwaiters.pop(c, None)
        for g in pending:
            if g.pos in (POS_SEL_WAIT, POS_SEL_NONE):
                g.pos = POS_NONE
                if g.backlog:
                    self.place(g)
        if pending:
            self.touch()

    def peek_head(self, g: Group, now_ms: int) -> Message | None:
        """``g``'s first pending, unexpired message, left in place (dead ones are dropped)."""
        m = self.pop_head(g, now_ms)
        if m is not None:
            m.link = g.head
            g.head = m
            if g.tail is None:
                g.tail = m
        return m

    def earlier_for(self, c: Consumer, mid: int) -> bool:
        """G16 with selectors: something ``c`` may take waits with a key before ``mid``."""
        ready = self.ready
        if ready and ready[0][0] < mid:
            return True
        if (c.awaiting_credit or self.wait_any) and self.pull_earlier(c, mid):
            return True
        return bool(c.selwait) and self.pull_selwait(c, mid)

    def _dispatch_ready_sel(self) -> None:
        """``_dispatch_ready`` when some consumer has a selector."""
        ready = self.ready
        now_ms = self.broker.now_ms
        pstep = self.priority_step
        while ready:
            g = heappop(ready)[1]
            if g.pos != POS_HEAP:
                continue
            g.pos = POS_NONE
            if not g.backlog:
                continue
            if g.key is None:
                self._dispatch_ungrouped_sel(g, now_ms)
                continue
            flags = g.flags
            if flags & F_PARKED or self.fenced:
                continue
            if g.in_flight and (flags & F_RELEASE or g.holder is not g.owner):
                continue
            c: Consumer | None = g.owner
            if c is not None and not c.ready:
                g.pos = POS_OWNER
                h: Message = g.head  # type: ignore[assignment]  # a group with a backlog has a head
                heappush(c.awaiting_credit, (h.id - h.priority * pstep, g))
                continue
            rejected = False
            while True:
                m = self.peek_head(g, now_ms)
                if m is None:
                    break
                if c is None:
                    picked = self.pick_accepting(m.headers, grouped=True)
                    if not isinstance(picked, Consumer):  # None or False
                        self.wait_for_acceptor(g, m)
                        break
                    c = picked
                elif c.accepts is not None and not c.accepts(m.headers):
                    rejected = True  # sticky: it waits for its owner
                    break
                if self.earlier_for(c, m.id - m.priority * pstep):
                    break  # G16: m waits its turn
                self.pop_head(g, now_ms)
                if g.owner is None:
                    self.bind(g, c)
                self.deliver(m, g, c)
                if not g.backlog or not c.ready or g.owner is not c or g.flags & F_RELEASE:
                    break
            if g.backlog:
                if g.pos == POS_NONE and not rejected:
                    self.place(g)
            elif not g.in_flight:
                self.retire(g)

    def _dispatch_ungrouped_sel(self, u: Group, now_ms: int) -> None:
        """An ungrouped FIFO, or one message set aside (``singles``), with selectors."""
        pstep = self.priority_step
        single = not u.flags & F_FIFO
        while True:
            m = self.peek_head(u, now_ms)
            if m is None:
                if single:
                    self.drop_group(u)
                return
            rr = self.round_robin_at
            c = self.pick_accepting(m.headers, grouped=False)
            if not c:
                if single:
                    self.wait_for_acceptor(u, m)
                elif c is None:  # nobody has credit: the FIFO waits, as without selectors
                    u.pos = POS_ANY
                    heappush(self.wait_any, (m.id - m.priority * pstep, u))
                else:  # only the consumers with credit reject m: set it aside
                    self.pop_head(u, now_ms)
                    s = Group(None)
                    s.head = s.tail = m
                    s.backlog = 1
                    u.backlog -= 1
                    m.grp = s
                    self.singles[s] = None
                    self.wait_for_acceptor(s, m)
                    if u.backlog:
                        continue
                return
            if self.earlier_for(c, m.id - m.priority * pstep):
                self.round_robin_at = rr  # G16, as in _dispatch_ready; c keeps its turn
                break
            self.pop_head(u, now_ms)
            if single:
                m.grp = None  # in flight it is an ordinary ungrouped message
            self.deliver(m, u, c)
            if not u.backlog:
                if single:
                    self.drop_group(u)
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
                    self.expire_done(m)
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
                self.broker.sent_removals.append(MessageRemoved(self.name, m.id))
            self.broker.effects.append(d)
            if m.grp is not None and g.owner is not None and (m.group_seq < 0 or self.shared):
                self.unbind(g)
            if self.blocked and self.bytes < self.max_bytes:
                self.unblock_producers()
            return
        m.state = IN_FLIGHT
        m.holder = c
        self.in_flight += 1
        if self.persist_delivery_count and m.persistent:
            self.broker.records.append(DeliveryCounted(self.name, m.id, dc + 1))
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
        self.broker.effects.append(d)
