"""Which message goes to which consumer next (G5, G6, G10, G13, G16): the
dispatch loop, as functions over a :class:`~shoal.broker.queue.Queue`.

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

Where a group waits is the queue's (``Queue.place``, ``reposition``,
``consumer_ready``); which consumer a group or an ungrouped message goes to
is the queue's :class:`~shoal.broker.consumers.ConsumerSet` (G6, G10, G13);
this module runs the loop that pops ``ready`` and applies G16.

Priority (queue setting ``priority``): every key above is the head's id
minus ``priority * PRIO_STEP`` (``queue.PRIO_STEP``), so heads of higher priority go
first and equal priorities keep arrival order; ungrouped messages sit in
one FIFO per priority (``Queue.ungrouped_by_priority``). Within a group nothing is reordered.

Selectors (SUBSCRIBE ``selector``). While no consumer of the queue has one
(``ConsumerSet.with_selector == 0``) none of what follows runs. Otherwise ``_dispatch_ready_sel``
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
from typing import TYPE_CHECKING

from shoal.broker.model import (
    F_FIFO,
    F_PARKED,
    F_RELEASE,
    POS_ANY,
    POS_HEAP,
    POS_NONE,
    POS_OWNER,
    POS_SEL_NONE,
    POS_SEL_WAIT,
    Consumer,
    Group,
)

if TYPE_CHECKING:
    from shoal.broker.model import Message
    from shoal.broker.queue import Queue


def dispatch(q: Queue) -> None:
    """Deliver what ``q`` can deliver now (the broker calls it for each dirty queue)."""
    if q.dispatch_held or not q.consumers.nactive or q.deleted:
        return
    while True:
        if q.ready:
            if q.consumers.with_selector:
                _dispatch_ready_sel(q)
            else:
                _dispatch_ready(q)
        if not q.refill:
            return
        refill = q.refill
        q.refill = []
        for c in refill:
            if c.ready and not c.closed:
                q.consumer_ready(c)
        if not q.ready:
            return


def pull_earlier(q: Queue, c: Consumer, mid: int) -> bool:
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
                q.place(g)
                if g.pos == POS_HEAP:
                    return True
    wa = q.wait_any
    while wa and wa[0][0] < mid:
        g = heappop(wa)[1]
        if g.pos == POS_ANY:
            g.pos = POS_NONE
            if g.backlog:
                q.place(g)
                if g.pos == POS_HEAP:
                    return True
    return False


def _dispatch_ready(q: Queue) -> None:
    ready = q.ready
    wa = q.wait_any
    now_ms = q.broker.now_ms
    pstep = q.priority_step
    table = q.groups
    cs = q.consumers
    while ready:
        g = heappop(ready)[1]
        if g.pos != POS_HEAP:
            continue
        g.pos = POS_NONE
        if not g.backlog:
            continue
        if g.key is None:  # an ungrouped FIFO
            _dispatch_ungrouped(q, g, now_ms)
            continue
        flags = g.flags
        if flags & F_PARKED or q.fenced:
            continue
        if g.in_flight and (flags & F_RELEASE or g.holder is not g.owner):
            continue
        c = g.owner
        if c is None:
            c = cs.pick_for_group()
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
        m = q.pop_head(g, now_ms)
        while m is not None:
            mid = m.id - m.priority * pstep
            if (ready and ready[0][0] < mid) or (
                (c.awaiting_credit or wa) and pull_earlier(q, c, mid)
            ):
                # G16: something c may take is earlier; m waits its turn
                m.link = g.head
                g.head = m
                if g.tail is None:
                    g.tail = m
                break
            if g.owner is None:
                table.bind(g, c)
            q.deliver(m, g, c)
            if not g.backlog or not c.ready or g.owner is not c or g.flags & F_RELEASE:
                break
            m = q.pop_head(g, now_ms)
        if g.backlog:
            if g.pos == POS_NONE:
                q.place(g)
        elif not g.in_flight:
            table.retire(g)


def _dispatch_ungrouped(q: Queue, u: Group, now_ms: int) -> None:
    ready = q.ready
    wa = q.wait_any
    pstep = q.priority_step
    cs = q.consumers
    while True:
        rr = cs.round_robin_at
        c = cs.next_round_robin()
        if c is None:
            u.pos = POS_ANY
            h: Message = u.head  # type: ignore[assignment]  # a group with a backlog has a head
            heappush(wa, (h.id - h.priority * pstep, u))
            return
        m = q.pop_head(u, now_ms)
        if m is None:
            return
        mid = m.id - m.priority * pstep
        if (ready and ready[0][0] < mid) or ((c.awaiting_credit or wa) and pull_earlier(q, c, mid)):
            m.link = u.head  # G16, as in _dispatch_ready; c keeps its turn
            u.head = m
            if u.tail is None:
                u.tail = m
            cs.round_robin_at = rr
            break
        q.deliver(m, u, c)
        if not u.backlog:
            return
    q.place(u)


# -- selectors (see the module docstring) -------------------------------------


def wait_for_acceptor(q: Queue, g: Group, m: Message) -> None:
    """No consumer with credit accepts ``m``, the head of unbound ``g``: ``g`` waits."""
    h = m.headers
    e = (m.id - m.priority * q.priority_step, g)
    found = False
    for c in q.consumers.lineup:
        if not c.active:
            continue
        acc = c.accepts
        if acc is None or acc(h):
            found = True
            sw = c.selwait
            if not sw:
                if sw is None:
                    sw = c.selwait = []
                q.selwaiters[c] = None
            heappush(sw, e)
            if len(sw) > c.selwait_max:
                compact_selwait(c)
    if found:
        g.pos = POS_SEL_WAIT
    else:
        g.pos = POS_SEL_NONE
        q.wait_sel.append(g)


def compact_selwait(c: Consumer) -> None:
    """Drop the stale entries of ``c``'s ``selwait`` heap (it doubled)."""
    live: dict[Group, int] = {}
    for k, g in c.selwait or ():
        if g.pos == POS_SEL_WAIT and k < live.get(g, k + 1):
            live[g] = k
    heap = [(k, g) for g, k in live.items()]
    heapify(heap)
    c.selwait = heap
    c.selwait_max = max(64, 2 * len(heap))


def pull_selwait(q: Queue, c: Consumer, mid: int) -> bool:
    """G16 for what waits on ``c``'s selector: like ``pull_earlier``."""
    sw = c.selwait
    while sw and sw[0][0] < mid:
        g = heappop(sw)[1]
        if g.pos == POS_SEL_WAIT:
            g.pos = POS_NONE
            if g.backlog:
                q.place(g)
                return True
    return False


def earlier_for(q: Queue, c: Consumer, mid: int) -> bool:
    """G16 with selectors: something ``c`` may take waits with a key before ``mid``."""
    ready = q.ready
    if ready and ready[0][0] < mid:
        return True
    if (c.awaiting_credit or q.wait_any) and pull_earlier(q, c, mid):
        return True
    return bool(c.selwait) and pull_selwait(q, c, mid)


def _dispatch_ready_sel(q: Queue) -> None:
    """``_dispatch_ready`` when some consumer has a selector."""
    ready = q.ready
    now_ms = q.broker.now_ms
    pstep = q.priority_step
    table = q.groups
    while ready:
        g = heappop(ready)[1]
        if g.pos != POS_HEAP:
            continue
        g.pos = POS_NONE
        if not g.backlog:
            continue
        if g.key is None:
            _dispatch_ungrouped_sel(q, g, now_ms)
            continue
        flags = g.flags
        if flags & F_PARKED or q.fenced:
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
            m = q.peek_head(g, now_ms)
            if m is None:
                break
            if c is None:
                picked = q.consumers.pick_accepting(m.headers, grouped=True)
                if not isinstance(picked, Consumer):  # None or False
                    wait_for_acceptor(q, g, m)
                    break
                c = picked
            elif c.accepts is not None and not c.accepts(m.headers):
                rejected = True  # sticky: it waits for its owner
                break
            if earlier_for(q, c, m.id - m.priority * pstep):
                break  # G16: m waits its turn
            q.pop_head(g, now_ms)
            if g.owner is None:
                table.bind(g, c)
            q.deliver(m, g, c)
            if not g.backlog or not c.ready or g.owner is not c or g.flags & F_RELEASE:
                break
        if g.backlog:
            if g.pos == POS_NONE and not rejected:
                q.place(g)
        elif not g.in_flight:
            table.retire(g)


def _dispatch_ungrouped_sel(q: Queue, u: Group, now_ms: int) -> None:
    """An ungrouped FIFO, or one message set aside (``GroupTable.singles``), with selectors."""
    pstep = q.priority_step
    single = not u.flags & F_FIFO
    cs = q.consumers
    table = q.groups
    while True:
        m = q.peek_head(u, now_ms)
        if m is None:
            if single:
                table.drop_group(u)
            return
        rr = cs.round_robin_at
        c = cs.pick_accepting(m.headers, grouped=False)
        if not c:
            if single:
                wait_for_acceptor(q, u, m)
            elif c is None:  # nobody has credit: the FIFO waits, as without selectors
                u.pos = POS_ANY
                heappush(q.wait_any, (m.id - m.priority * pstep, u))
            else:  # only the consumers with credit reject m: set it aside
                q.pop_head(u, now_ms)
                s = Group(None)
                s.head = s.tail = m
                s.backlog = 1
                u.backlog -= 1
                m.grp = s
                table.singles[s] = None
                wait_for_acceptor(q, s, m)
                if u.backlog:
                    continue
            return
        if earlier_for(q, c, m.id - m.priority * pstep):
            cs.round_robin_at = rr  # G16, as in _dispatch_ready; c keeps its turn
            break
        q.pop_head(u, now_ms)
        if single:
            m.grp = None  # in flight it is an ordinary ungrouped message
        q.deliver(m, u, c)
        if not u.backlog:
            if single:
                table.drop_group(u)
            return
    q.place(u)
