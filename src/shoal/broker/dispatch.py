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

Priority (queue setting ``priority``): the heap key is the head's id minus
``priority * PRIO_STEP``, so heads of higher priority go first and equal
priorities keep arrival order; ungrouped messages sit in one FIFO per
priority (``Queue.uprio``). Within a group nothing is reordered.

Selectors (SUBSCRIBE ``selector``). While no consumer of the queue has one
(``nsel == 0``) none of what follows runs. Otherwise ``_dispatch_ready_sel``
checks each message against the consumer it would go to:

* a bound group whose owner rejects its next message waits, bound, out of
  every structure (``POS_NONE``): only a new head (a new message into an
  empty group, a return, an expiry) or its owner leaving or a reset places
  it again, so it costs nothing while it waits and holds back nobody else;
* an unbound group (or ungrouped message) goes only to a consumer with
  credit whose selector accepts its head (G6/G10 among those). If only
  consumers without credit accept it, it waits in each of their ``selwait``
  deques (``POS_SEL_WAIT``) and the first of them to regain credit takes it
  back to the heap; if no consumer accepts it, it waits in ``wait_sel``
  (``POS_SEL_NONE``) until a consumer joins;
* an ungrouped message that the consumers with credit reject is split off
  the ungrouped FIFO into a one-message pseudo-group (``Queue.singles``) that
  waits as above, so the FIFO behind it flows on.

Each wait costs O(consumers) selector evaluations once, like the choice of a
consumer; stale ``selwait`` entries are skipped, and compacted when a deque
doubles.
"""

from __future__ import annotations

from collections import deque
from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any

from shoal.broker.effects import Deliver
from shoal.broker.groups import (
    F_CLOSING,
    F_FIFO,
    F_FIRST,
    F_PARKED,
    F_RELEASE,
    POS_ANY,
    POS_HEAP,
    POS_NONE,
    POS_OWNER,
    POS_SEL_NONE,
    POS_SEL_WAIT,
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

# Heap keys with priority: id - priority * PRIO_STEP (ids stay far below it).
PRIO_STEP = 1 << 60


class DispatchMixin:
    """Dispatch methods of Queue (attributes are declared on Queue)."""

    __slots__ = ()

    ready: list[tuple[int, Group]]
    wait_any: deque[Group]
    wait_sel: list[Group]
    selwaiters: dict[Consumer, None]
    singles: dict[Group, None]
    ungrouped: Group
    pstep: int
    nsel: int
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
        h = g.head
        heappush(self.ready, (h.id - h.priority * self.pstep, g))

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
        if c.selwait:
            left = self.selwait_ready(c, k) or left
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
        if self.nsel:
            self._dispatch_ready_sel()
            return
        ready = self.ready
        now_ms = self.broker.now_ms
        pstep = self.pstep
        pop_head = self.pop_head
        deliver = self.deliver
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
                    or (ready and ready[0][0] < g.head.id - g.head.priority * pstep)
                ):
                    break
            if g.backlog:
                if g.pos == POS_NONE:
                    self.place(g)
            elif not g.in_flight:
                self.retire(g)  # type: ignore[attr-defined]

    def _dispatch_ungrouped(self, u: Group, now_ms: int) -> None:
        ready = self.ready
        pstep = self.pstep
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
            if ready and ready[0][0] < u.head.id - u.head.priority * pstep:
                break
        self.place(u)

    # -- selectors (see the module docstring) -------------------------------------

    def pick_accepting(self, headers: dict[str, str], *, grouped: bool) -> Consumer | bool | None:
        """The consumer with credit whose selector accepts ``headers`` (G6 or G10 among those).

        False: some consumer has credit but none of those accepts; None: none has credit.
        """
        act = self.active
        n = len(act)
        i = self.gcursor if grouped else self.rr
        best: Consumer | None = None
        best_n = 1 << 62
        best_i = 0
        some_ready = False
        for _ in range(n):
            if i >= n:
                i = 0
            c = act[i]
            i += 1
            if not c.ready or (grouped and c.nbound >= best_n):
                some_ready = some_ready or c.ready
                continue
            some_ready = True
            acc = c.accepts
            if acc is None or acc(headers):
                if not grouped:
                    self.rr = i
                    return c
                best = c
                best_n = c.nbound
                best_i = i
        if best is not None:
            self.gcursor = best_i
            return best
        return False if some_ready else None

    def wait_for_acceptor(self, g: Group, m: Message) -> None:
        """No consumer with credit accepts ``m``, the head of unbound ``g``: ``g`` waits."""
        h = m.headers
        found = False
        for c in self.active:
            acc = c.accepts
            if acc is None or acc(h):
                found = True
                sw = c.selwait
                if not sw:
                    if sw is None:
                        sw = c.selwait = deque()
                    self.selwaiters[c] = None
                sw.append(g)
                if len(sw) > c.selwait_max:
                    self._compact_selwait(c)
        if found:
            g.pos = POS_SEL_WAIT
        else:
            g.pos = POS_SEL_NONE
            self.wait_sel.append(g)

    @staticmethod
    def _compact_selwait(c: Consumer) -> None:
        live = dict.fromkeys(g for g in c.selwait or () if g.pos == POS_SEL_WAIT)
        c.selwait = deque(live)
        c.selwait_max = max(64, 2 * len(live))

    def selwait_ready(self, c: Consumer, k: int) -> bool:
        """``c`` regained credit: up to ``k`` groups it was waited for go back to the heap."""
        sw = c.selwait
        moved = 0
        while sw and moved < k:
            g = sw.popleft()
            if g.pos != POS_SEL_WAIT:
                continue  # stale: another acceptor took it, or it waits elsewhere now
            g.pos = POS_NONE
            if g.backlog:
                self.place(g)
                moved += 1
        return bool(sw)

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
                    pending.extend(w.selwait)
                    w.selwait.clear()
            self.selwaiters = {}
        elif c.selwait:
            pending.extend(c.selwait)
            c.selwait.clear()
            self.selwaiters.pop(c, None)
        for g in pending:
            if g.pos in (POS_SEL_WAIT, POS_SEL_NONE):
                g.pos = POS_NONE
                if g.backlog:
                    self.place(g)
        if pending:
            self.touch()  # type: ignore[attr-defined]

    def peek_head(self, g: Group, now_ms: int) -> Message | None:
        """``g``'s first pending, unexpired message, left in place (dead ones are dropped)."""
        m = self.pop_head(g, now_ms)
        if m is not None:
            m.link = g.head
            g.head = m
            if g.tail is None:
                g.tail = m
        return m

    def _dispatch_ready_sel(self) -> None:
        """``_dispatch_ready`` when some consumer has a selector."""
        ready = self.ready
        now_ms = self.broker.now_ms
        pstep = self.pstep
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
            if flags & F_PARKED:
                continue
            if g.in_flight and (flags & F_RELEASE or g.holder is not g.owner):
                continue
            c = g.owner
            if c is not None and not c.ready:
                g.pos = POS_OWNER
                c.waiting.append(g)
                continue
            rejected = False
            while True:
                m = self.peek_head(g, now_ms)
                if m is None:
                    break
                if c is None:
                    c = self.pick_accepting(m.headers, grouped=True)  # type: ignore[assignment]
                    if not c:
                        self.wait_for_acceptor(g, m)
                        break
                    self.bind(g, c)  # type: ignore[attr-defined]
                elif c.accepts is not None and not c.accepts(m.headers):
                    rejected = True  # sticky: it waits for its owner
                    break
                self.pop_head(g, now_ms)
                self.deliver(m, g, c)
                if (
                    not g.backlog
                    or not c.ready
                    or g.owner is not c
                    or g.flags & F_RELEASE
                    or (ready and ready[0][0] < g.head.id - g.head.priority * pstep)
                ):
                    break
            if g.backlog:
                if g.pos == POS_NONE and not rejected:
                    self.place(g)
            elif not g.in_flight:
                self.retire(g)  # type: ignore[attr-defined]

    def _dispatch_ungrouped_sel(self, u: Group, now_ms: int) -> None:
        """An ungrouped FIFO, or one message set aside (``singles``), with selectors."""
        ready = self.ready
        pstep = self.pstep
        single = not u.flags & F_FIFO
        while True:
            m = self.peek_head(u, now_ms)
            if m is None:
                if single:
                    self.drop_group(u)  # type: ignore[attr-defined]
                return
            c = self.pick_accepting(m.headers, grouped=False)
            if not c:
                if single:
                    self.wait_for_acceptor(u, m)
                elif c is None:  # nobody has credit: the FIFO waits, as without selectors
                    u.pos = POS_ANY
                    self.wait_any.append(u)
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
            self.pop_head(u, now_ms)
            if single:
                m.grp = None  # in flight it is an ordinary ungrouped message
            self.deliver(m, u, c)  # type: ignore[arg-type]
            if not u.backlog:
                if single:
                    self.drop_group(u)  # type: ignore[attr-defined]
                return
            if ready and ready[0][0] < u.head.id - u.head.priority * pstep:
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
